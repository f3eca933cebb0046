"""The offline target's own 4-bit weights, multiplied as 4-bit numbers on a CPU (opt-in: SPECDEC_INT4=1).

The offline target ships as a Q4_1 GGUF. Every linear layer's weight is stored in blocks of 32 numbers along
its input, each number one of sixteen levels of its block: w = d·q + m, q in 0..15, with one float16 pair
(d, m) per block. The loader turns them into float32 and the project multiplies them in bfloat16 or float32,
so a pass streams 2 or 4 bytes per weight where the file holds half a byte. PyTorch's CPU int4 kernel
(`torch._weight_int4pack_mm_for_cpu`) multiplies such blocks as they are, reading w = (q - 8)·scale + zero per
group of 32: with scale = d and zero = m + 8d that is the same weight. In bfloat16 the kernel holds scale and
zero in bfloat16, which rounds them about as much as casting the weights to bfloat16 rounds the weights. Its
float32 path matches the float32 weights to rounding but is a slow reference (on a 2-core AMD EPYC of
family 26, 181 ms a token against 28 for oneDNN's float32 product), so the loader attaches the copies to a
bfloat16 target only.

* `codes_of` recovers q, d and m from a float32 weight, exactly or not at all (a weight that is not Q4_1,
  such as the Q8_0 embedding the output layer shares, keeps its oneDNN product).
* `Int4Weight` keeps the kernel's copy of one weight, or of a fused group's stacked weights.
* `attach` gives the copies to a prepacked model's layers (`kernels.PrepackedLinear`, `FusedProjections`),
  which use them while their weights are still the ones the codes came from; a changed weight, autograd,
  `kernels.plain_path()`, a graph being compiled or exported, or `without_int4()` takes oneDNN's path.

Not the default: a faster target pass also shrinks the ratio speculative decoding gains over it (the README,
"Measured"; `scripts/int4_target.py` measures both ways side by side).
"""
from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

import torch
from torch import nn

from .kernels import PrepackedLinear, unpackable, version_key

GROUP = 32  # Q4_1's block: 32 weights along the input share one (d, m)
_off = False  # True inside `without_int4()`


class Codes(NamedTuple):
    """A weight in Q4_1 form: weight[n, j] = step[n, j // 32] · codes[n, j] + low[n, j // 32]."""
    codes: torch.Tensor  # [N, K] int32, 0..15
    step: torch.Tensor  # [N, K / 32] float32 (d, a float16 number)
    low: torch.Tensor  # [N, K / 32] float32 (m, the block's smallest weight)


def available() -> bool:
    """This torch has the CPU int4 kernel."""
    kernels = ("_weight_int4pack_mm_for_cpu", "_convert_weight_to_int4pack_for_cpu")
    return all(hasattr(torch, name) for name in kernels)


def wanted(int4: bool | None = None) -> bool:
    """int4=None follows SPECDEC_INT4 (1 turns it on; off by default)."""
    return (os.environ.get("SPECDEC_INT4", "0") == "1" if int4 is None else int4) and available()


def codes_of(weight: torch.Tensor) -> Codes | None:  # [N, K] float32 -> Codes, or None
    """The Q4_1 blocks a float32 weight was dequantised from, or None if it was not dequantised from any.

    Q4_1 puts each block's smallest weight at level 0 and its largest at 15, so m is the block's minimum and
    d its range / 15 (rounded to float16, as the file stores it); the codes must then rebuild every weight
    exactly.
    """
    if weight.dtype != torch.float32 or weight.ndim != 2 or weight.shape[1] % GROUP:
        return None
    n, k = weight.shape
    blocks = weight.detach().reshape(n, k // GROUP, GROUP)  # [N, K/32, 32]
    low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)  # [N, K/32, 1]
    step = ((high - low) / 15).half().float()
    if not bool(torch.isfinite(step).all()):
        return None
    codes = ((blocks - low) / torch.where(step > 0, step, 1.0)).round().clamp(0, 15)  # [N, K/32, 32]
    if not torch.equal(step * codes + low, blocks):
        return None
    return Codes(codes.to(torch.int32).reshape(n, k), step.squeeze(-1), low.squeeze(-1))


def codes_by_layer(model: nn.Module) -> dict[str, Codes]:
    """The Q4_1 codes of every nn.Linear of a float32 model whose weight has them, by module name."""
    found = {}
    for name, module in model.named_modules():
        if type(module) is nn.Linear:
            codes = codes_of(module.weight)
            if codes is not None:
                found[name] = codes
    return found


class Int4Weight:
    """The int4 kernel's copy of one weight matrix (or of several stacked along the output), valid for the
    weights it was made from: `product` checks their dtype, storage and version counter on every call."""

    def __init__(self, codes: Codes, weights: list[torch.Tensor]):
        self.packed = torch._convert_weight_to_int4pack_for_cpu(codes.codes, 1)  # [N, K] -> kernel layout
        scale_zero = torch.stack([codes.step, codes.low + 8 * codes.step], -1)  # [N, K/32, 2]
        self.scale_zero = scale_zero.transpose(0, 1).contiguous()  # [K/32, N, 2] float32
        self.by_dtype: dict[torch.dtype, torch.Tensor] = {}  # scale_zero in each activation dtype
        self.keys = [version_key(w) for w in weights]

    def product(self, x: torch.Tensor, weights: list[torch.Tensor],
                bias: torch.Tensor | None) -> torch.Tensor | None:  # [..., K] -> [..., N], or None
        """x W^T + b from the 4-bit copy, or None where it cannot stand for these weights."""
        if (_off or x.dtype not in (torch.float32, torch.bfloat16) or x.dtype != weights[0].dtype
                or any(unpackable(w) for w in weights) or torch.compiler.is_compiling()
                or torch.compiler.is_exporting() or [version_key(w) for w in weights] != self.keys):
            return None
        scale_zero = self.by_dtype.get(x.dtype)
        if scale_zero is None:
            scale_zero = self.by_dtype[x.dtype] = self.scale_zero.to(x.dtype)
        out = torch._weight_int4pack_mm_for_cpu(x.reshape(-1, x.shape[-1]), self.packed, GROUP, scale_zero)
        out = out.reshape(*x.shape[:-1], out.shape[-1])  # [rows, N] -> [..., N]
        return out if bias is None else out + bias


def attach(model: nn.Module, codes: dict[str, Codes]) -> int:
    """Give every prepacked layer (and fused group) of the model whose codes are known its 4-bit copy, made
    from its weights as they are now; return how many layers got one."""
    layers = {name: m for name, m in model.named_modules() if isinstance(m, PrepackedLinear)}
    names = {m: name for name, m in layers.items()}
    n = 0
    for name, m in layers.items():
        if name not in codes:
            continue
        if m.fused is None:
            m.int4 = Int4Weight(codes[name], [m.weight])
            n += 1
            continue
        group = m.fused[0]
        members = [codes.get(names.get(layer, "")) for layer in group.layers]
        if group.int4 is None and all(c is not None for c in members):
            stacked = Codes(*(torch.cat(parts) for parts in zip(*members)))  # along the output
            group.int4 = Int4Weight(stacked, [layer.weight for layer in group.layers])
            n += len(members)
    return n


@contextlib.contextmanager
def without_int4():
    """Inside the block, every 4-bit copy steps aside and oneDNN multiplies the weights as loaded (bfloat16 or
    float32): to compare the two ways on one model."""
    global _off
    before, _off = _off, True
    try:
        yield
    finally:
        _off = before

"""Weights laid out once for the CPU's matrix kernel, so that scoring k tokens streams them once.

On a CPU, `F.linear` hands a [k, d] x [d, n] product to oneDNN, which re-packs the weight matrix into its
blocked layout on *every* call when k is small. For one token that is a few extra passes over memory; for
k = 2..16 it can cost nearly twice a one-token pass, and the memory-bound physics the book teaches
(scoring k tokens costs about as much as one) disappears behind the kernel. llama.cpp repacks its CPU
weights at load time for the same reason. `prepack_for_cpu` does the same for a PyTorch model: every
`nn.Linear` is swapped for a `PrepackedLinear` whose weight oneDNN packed once, at load time.

Nothing changes on other devices, and `SPECDEC_PREPACK=0` (or `prepack=False` in the loaders) opts out.
"""
from __future__ import annotations

import contextlib
import copy
import itertools
import os

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..cache import compiled_pass

_plain = False  # True inside `plain_path()`: every PrepackedLinear takes F.linear


def prepack_available(device: torch.device | str = "cpu") -> bool:
    """oneDNN's prepacked linear exists for this device (CPU builds of torch with mkldnn)."""
    return (torch.device(device).type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def packed_linear(x: torch.Tensor, packed: torch.Tensor,
                  bias: torch.Tensor | None) -> torch.Tensor:  # [..., in] -> [..., out]
    """y = x W^T + b with W already in oneDNN's layout (from `torch.ops.mkldnn._reorder_linear_weight`)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedWeight:
    """oneDNN's copy of one weight matrix, re-made whenever the weight changes dtype, device or values.

    Not a parameter or buffer: it never enters state_dict, and `model.to(...)` cannot convert it element by
    element (that would scramble the blocked layout). `get` checks the weight's version counter, so an
    in-place update of a tied embedding is seen at the next call.
    """

    def __init__(self, batch_hint: int = 8):
        self.batch_hint, self.packed, self.key = batch_hint, None, None

    def __deepcopy__(self, memo) -> PackedWeight:  # oneDNN's tensor cannot be copied: the copy packs afresh
        return PackedWeight(self.batch_hint)

    def __getstate__(self) -> dict:
        return {"batch_hint": self.batch_hint, "packed": None, "key": None}

    def get(self, weight: torch.Tensor) -> torch.Tensor | None:  # [out, in] -> packed, or None off the CPU
        """The packed copy, re-made if the weight changed. Called once per linear layer per pass, so it does
        no more than compare a key (a `torch.no_grad` decorator here cost ~15 µs a call, ~3 ms a tree
        step)."""
        if unpackable(weight):
            return None
        key = version_key(weight)
        if key != self.key:
            self.packed, self.key = pack(weight, self.batch_hint), key
        return self.packed


def unpackable(weight: torch.Tensor) -> bool:
    """plain_path(), training, or another device: the caller takes the plain path."""
    return _plain or weight.device.type != "cpu" or (weight.requires_grad and torch.is_grad_enabled())


def version_key(weight: torch.Tensor) -> tuple:
    """What a packed copy of this weight depends on: dtype, storage, and its version counter (an inference
    tensor has none)."""
    return weight.dtype, weight.data_ptr(), -1 if weight.is_inference() else weight._version


def pack(weight: torch.Tensor, batch_hint: int) -> torch.Tensor | None:  # [out, in] -> oneDNN's layout
    """oneDNN's packed copy of a weight, or None where it cannot pack (e.g. bfloat16 on a CPU without native
    bfloat16: the plain path)."""
    try:
        with torch.no_grad():
            return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), batch_hint)
    except RuntimeError:
        return None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
           packed: PackedWeight | None) -> torch.Tensor:  # [..., in] -> [..., out]
    """x W^T + b through oneDNN's packed copy of W where there is one, else through F.linear."""
    w = packed.get(weight) if packed is not None else None
    if w is None or x.dtype != weight.dtype:
        return nn.functional.linear(x, weight, bias)
    return packed_linear(x, w, bias)


class PrepackedLinear(nn.Module):
    """An `nn.Linear` whose weight oneDNN re-laid out once; the same y = x W^T + b.

    `weight` and `bias` are the original parameters: a tied embedding stays tied, and state_dict is unchanged.
    Several layers that read one input (q, k, v) may share one product (`fused`, set by `fuse_projections`).
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = PackedWeight()
        self.fused: tuple[FusedProjections, int] | None = None  # (the shared product, this layer's place)
        self.int4 = None  # an int4.Int4Weight: the GGUF's own 4-bit weights (`int4.attach`, opt-in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        if self.fused is not None:
            out = self.fused[0].output(self.fused[1], x)
            if out is not None:
                return out
        if self.int4 is not None:
            out = self.int4.product(x, [self.weight], self.bias)
            if out is not None:
                return out
        return linear(x, self.weight, self.bias, self.packed)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, prepacked for oneDNN"


class FusedProjections:
    """One oneDNN product for linear layers that read the same input: q, k and v, or gate and up.

    The first of them called on a tensor x computes x [W_q; W_k; W_v]^T once, and each returns its columns
    (the others, called next on the same x, find it ready; once every layer has taken its columns, or one asks
    again, the next call computes afresh). Four products a decoder layer instead of seven:
    fewer, wider GEMMs, and fewer calls, each with its fixed cost. The layers keep their own weights
    (state_dict unchanged); oneDNN's copy of the stacked matrix is made from them, and again when one
    changes. Where that copy cannot serve (plain_path, training, a dtype it was not packed for, a graph being
    compiled or exported), `output` returns None and each layer computes its own product.
    """

    def __init__(self, layers: list[PrepackedLinear], batch_hint: int = 8):
        self.layers, self.batch_hint = layers, batch_hint
        ends = list(itertools.accumulate(m.out_features for m in layers))
        self.spans = [(end - m.out_features, end) for m, end in zip(layers, ends)]
        self.packed, self.bias, self.key = None, None, None
        self.last: tuple = (None, None, set())  # (x, its product [..., sum of outs], the layers served)
        self.int4 = None  # an int4.Int4Weight of the stacked weights (`int4.attach`, opt-in)

    def __deepcopy__(self, memo) -> FusedProjections:  # as PackedWeight's: the copy packs afresh
        new = memo[id(self)] = copy.copy(self)  # the layers may be half-copied yet: read nothing from them
        new.layers = [copy.deepcopy(m, memo) for m in self.layers]
        new.packed, new.bias, new.key, new.last = None, None, None, (None, None, set())
        return new

    def __getstate__(self) -> dict:
        return {**self.__dict__, "packed": None, "bias": None, "key": None, "last": (None, None, set())}

    def get(self) -> torch.Tensor | None:  # the packed stacked weight, or None where it cannot serve
        weights = [m.weight for m in self.layers]
        if (any(unpackable(w) for w in weights) or torch.compiler.is_compiling()
                or torch.compiler.is_exporting()):
            return None
        key = tuple(version_key(w) for m in self.layers for w in (m.weight, m.bias) if w is not None)
        if key != self.key:
            with torch.no_grad():
                stacked = torch.cat([w.detach() for w in weights])  # [sum of outs, in]
                self.packed = pack(stacked, self.batch_hint)
                biases = [m.bias for m in self.layers]
                self.bias = None if all(b is None for b in biases) else torch.cat(
                    [w.new_zeros(w.shape[0]) if b is None else b.detach() for b, w in zip(biases, weights)])
            self.key, self.last = key, (None, None, set())
        return self.packed

    def product(self, x: torch.Tensor) -> torch.Tensor | None:  # [..., in] -> [..., sum of outs], or None
        """x [W_1; W_2; ...]^T + b: from the 4-bit copy where it stands, else oneDNN's; None where neither
        can serve."""
        packed = self.get()
        if packed is None or x.dtype != self.layers[0].weight.dtype:
            return None
        if self.int4 is not None:
            out = self.int4.product(x, [m.weight for m in self.layers], self.bias)
            if out is not None:
                return out
        return packed_linear(x, packed, self.bias)

    def output(self, i: int, x: torch.Tensor) -> torch.Tensor | None:  # [..., in] -> [..., out_i] or None
        """Layer i's product for x: the shared one, computed on the first call for this x."""
        if self.last[0] is not x or i in self.last[2]:
            product = self.product(x)
            if product is None:
                return None
            self.last = (x, product, set())
        _, out, served = self.last
        served.add(i)
        if len(served) == len(self.layers):  # every layer has its columns: hold on to nothing
            self.last = (None, None, set())
        start, end = self.spans[i]
        return out[..., start:end]


def fused_groups(model: nn.Module) -> dict[PrepackedLinear, tuple[FusedProjections, int]]:
    """Every layer of the model that shares a product, with its (group, place)."""
    return {m: m.fused for m in model.modules() if isinstance(m, PrepackedLinear) and m.fused is not None}


def n_fused_groups(model: nn.Module) -> int:
    """How many groups of the model's projections share a product."""
    return len({id(group) for group, _ in fused_groups(model).values()})


@contextlib.contextmanager
def separate_products(model: nn.Module):
    """Inside the block, every fused projection of the model computes its own product again: to compare the
    two ways on one model."""
    groups = fused_groups(model)
    for m in groups:
        m.fused = None
    try:
        yield
    finally:
        for m, place in groups.items():
            m.fused = place


FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # Llama, Qwen2, Mistral, ...


def fuse_projections(model: nn.Module, enabled: bool | None = None) -> int:
    """Give every group of prepacked projections that read one input (`FUSED_GROUPS`) one shared product
    (`FusedProjections`); return how many groups. enabled=None follows SPECDEC_FUSE (0 turns it off)."""
    enabled = os.environ.get("SPECDEC_FUSE", "1") != "0" if enabled is None else enabled
    n = 0
    for module in model.modules() if enabled else ():
        for names in FUSED_GROUPS:
            layers = [getattr(module, name, None) for name in names]
            if (all(isinstance(m, PrepackedLinear) for m in layers)
                    and len({(m.in_features, m.weight.dtype) for m in layers}) == 1):
                shared = FusedProjections(layers)
                for i, m in enumerate(layers):
                    m.fused = (shared, i)
                n += 1
    return n


@contextlib.contextmanager
def plain_path():
    """Inside the block, prepacked layers compute through F.linear on their own weights (the same numbers):
    for code that watches which weight tensors a pass touches (`lab.timing.weights_used`)."""
    global _plain
    before, _plain = _plain, True
    try:
        yield
    finally:
        _plain = before


def grouped_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                      is_causal=None, **kwargs):  # query [b, H, q, d], key and value [b, H_kv, n, d]
    """SDPA that reads each key/value head once for all the query heads that share it, for q > 1 rows.

    Hugging Face's SDPA path copies the cache's keys and values H / H_kv times (`repeat_kv`) before
    attention whenever a pass has a mask and more than one new row: every chain and tree pass of
    speculative decoding. SmolLM2-135M has 9 query heads on 3 key heads; on 2 cores of an AMD EPYC Zen 5 in
    bfloat16 the copy and the wider attention made a 4-row pass 3-5% slower than this (`enable_gqa`), with
    bit-identical logits. One row, no mask, dropout, or a graph being compiled or exported: Hugging Face's
    own.
    """
    groups = query.shape[1] // key.shape[1]
    if (query.shape[2] == 1 or groups == 1 or attention_mask is None or dropout
            or kwargs.get("position_bias") is not None or torch.compiler.is_compiling()
            or torch.compiler.is_exporting()):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    out = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                     scale=scaling, enable_gqa=True)  # [b, H, q, d]
    return out.transpose(1, 2).contiguous(), None  # [b, q, H, d], as Hugging Face's


GROUPED = "specdec_grouped_sdpa"
AttentionInterface.register(GROUPED, grouped_attention)
AttentionMaskInterface.register(GROUPED, sdpa_mask)  # the same masks as "sdpa"


@contextlib.contextmanager
def attention_implementation(model: nn.Module, name: str):
    """Run the block with every Hugging Face model inside `model` (itself, or a head's body) attending by
    `name`; afterwards each gets back the implementation it had."""
    saved = [(m, m.config._attn_implementation) for m in model.modules()
             if hasattr(m, "set_attn_implementation") and hasattr(m, "config")]
    try:
        for m, _ in saved:
            m.set_attn_implementation(name)
        yield
    finally:
        for m, before in saved:
            m.set_attn_implementation(before)


def group_attention_for_cpu(model: nn.Module) -> nn.Module:
    """Every Hugging Face model in a CPU model (itself, or a drafter's body) that runs SDPA over grouped key
    heads gets `grouped_attention`; return the model."""
    params = next(model.parameters(), None)
    if params is None or params.device.type != "cpu":
        return model
    for module in model.modules():
        config = getattr(module, "config", None)
        kv_heads = getattr(config, "num_key_value_heads", None)
        sdpa = getattr(config, "_attn_implementation", None) == "sdpa"
        if (hasattr(module, "set_attn_implementation") and sdpa
                and kv_heads not in (None, getattr(config, "num_attention_heads", 0))):
            try:
                module.set_attn_implementation(GROUPED)  # its submodules share the config
            except (ValueError, KeyError, NotImplementedError):  # a class that allows only its own kernels
                pass
    return model


def prepack_for_cpu(model: nn.Module, enabled: bool | None = None, fuse: bool | None = None) -> nn.Module:
    """Swap every nn.Linear of a CPU model for a PrepackedLinear, in place; return the model.

    Projections that read one input share one product (`fuse_projections`; fuse=None follows SPECDEC_FUSE).
    Its attention, if Hugging Face's SDPA over grouped key heads, reads each key head once for several rows
    (`grouped_attention`). enabled=None follows the environment (SPECDEC_PREPACK=0 turns all three off). A
    model on any other device, or a torch without oneDNN, is returned unchanged.
    """
    enabled = os.environ.get("SPECDEC_PREPACK", "1") != "0" if enabled is None else enabled
    params = next(model.parameters(), None)
    if not enabled or params is None or not prepack_available(params.device):
        return model
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PrepackedLinear(child))
        if hasattr(module, "prepack_weights"):  # a module that multiplies a weight itself (ReducedHead)
            module.prepack_weights()
    fuse_projections(model, fuse)
    return group_attention_for_cpu(model)


def prepack_like(model: nn.Module, target: nn.Module) -> nn.Module:
    """`prepack_for_cpu` a draft where its target's linear layers are prepacked: both on one kernel path."""
    return prepack_for_cpu(model, any(isinstance(m, PrepackedLinear) for m in target.modules()))


def unpack(model: nn.Module) -> nn.Module:
    """Undo `prepack_for_cpu` in place (for code that looks for nn.Linear, e.g. quantisation); return the
    model."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, PrepackedLinear):
                plain = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                  device="meta")
                plain.weight, plain.bias = child.weight, child.bias
                setattr(module, name, plain)
        if getattr(module, "packed", None) is not None and isinstance(module.packed, PackedWeight):
            module.packed = None
        if getattr(getattr(module, "config", None), "_attn_implementation", None) == GROUPED:
            module.set_attn_implementation("sdpa")
    return model


def n_int4(model: nn.Module) -> int:
    """How many of the model's layers have a 4-bit copy (`int4.attach`) that still stands for their
    weights."""
    n = 0
    for m in model.modules():
        if isinstance(m, PrepackedLinear):
            owner = m.fused[0] if m.fused else m
            weights = [x.weight for x in m.fused[0].layers] if m.fused else [m.weight]
            n += owner.int4 is not None and [version_key(w) for w in weights] == owner.int4.keys
    return n


def kernel_path(model: nn.Module) -> str:
    """Which matrix kernel the model's linear layers use, in words (for diagnose and the CLI)."""
    compiled = compiled_pass(model)
    if compiled is not None:  # models.aot: the loops run the model through its compiled pass
        return f"Inductor's compiled pass (AOTInductor package {compiled.path.name}; SPECDEC_AOT=0 opts out)"
    params = next(model.parameters(), None)
    device = params.device.type if params is not None else "cpu"
    # a weight oneDNN cannot pack (bfloat16 without native support) counts as plain
    with torch.inference_mode():
        # a fused layer's own copy is never made: ask its group's
        n_packed = sum(isinstance(m, PrepackedLinear)
                       and (m.fused[0].get() if m.fused else m.packed.get(m.weight)) is not None
                       for m in model.modules())
    n_plain = sum(isinstance(m, (nn.Linear, PrepackedLinear)) for m in model.modules()) - n_packed
    n_fused = n_fused_groups(model)
    fused = f", {n_fused} groups of projections fused (SPECDEC_FUSE=0 opts out)" if n_fused else ""
    n_4 = n_int4(model)
    fused += f", {n_4} multiplied as the GGUF's own 4-bit weights (int4=True, SPECDEC_INT4=1)" if n_4 else ""
    if n_packed and not n_plain:
        return f"oneDNN prepacked linears ({n_packed} layers, {params.dtype}, {device}{fused})"
    if n_packed:
        return f"mixed: {n_packed} prepacked, {n_plain} plain linears ({device}{fused})"
    return f"plain F.linear ({params.dtype if params is not None else '?'}, {device}{fused})"

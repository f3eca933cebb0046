"""A feature head's whole chain of γ drafts in one compiled call (AOTInductor), greedy or sampled.

With the head's pass compiled (`models.aot_head`), a chain of γ = 2 still made about 35 small tensor
operations a proposal between and around its two package calls: positions, masks and views for each pass, the
draw (a softmax, a cumulative sum, a uniform, a binary search), the token's id, and the rows spread over the
vocabulary at the end. Right after a target pass each of those costs tens of microseconds (the appendix on CPU
kernels, "The loop's bookkeeping, paid from memory"), and together they were most of the loop's own work at
T = 1 (`scripts/loop_phases.py`).

`HeadChain` is the proposal itself, traced once for a given γ: the head's pass over the pairs not fed yet
(q rows), then γ - 1 passes of one row, each fed the token just drafted and the head's own output features,
every draw inside. A draw is the loop's own rule (`sampling.draw`): softmax of the head's logits times
`scale` (its sharpness over the temperature), in float32, inverted at one uniform through a float64
cumulative sum; greedy, the first of the largest logits. The uniforms come in (one `torch.rand` call), so the
generator's draws stay the caller's, and the rows the tokens were drawn from come out over the whole
vocabulary (one-hot rows when greedy), as `FeatureDrafter.propose` returns them. One package serves both
(`greedy` is an input), every q up to `MAX_QUERY` and every buffer length. `build_chain` compiles it for
one γ (one to two minutes on 2 cores), `python -m specdec_ref compile` for `CHAIN_GAMMAS`;
`CompiledChains.draft` runs it where the package exists (`FeatureDrafter.propose` asks a compiled head's
`chains` first), and everything else (trees, top-k or top-p sampling, a confidence stop, a first feed longer
than a pass) stays with the per-pass package. The default method's calibration then times these chains, and
the choice weighs no other (`models.method.calibration_methods`, `choosable`).

Measured on a 2-core AMD EPYC Zen 4 in bfloat16, chains of 2 on six held-out prompts, with and without it
alternating in one process: 1.3-3.6% less time per iteration at T = 1, 1.7-1.9% greedy, the same acceptance;
the loop's own work, the draws now inside the draft's package, went from 0.18 to 0.09-0.10 t(1) at T = 1 and
from 0.08 to 0.05-0.06 greedy (`scripts/loop_overhead.py`; the measurement log's nineteenth session).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..sampling import SamplingConfig
from .aot import (BLOCK, COMPILED_ATTENTION, MAX_BLOCKS, MAX_QUERY, MIN_BLOCKS, _compile, _dims, package_path)
from .aot_head import CompiledHead, HeadKV, HeadPackages, HeadStep, head_example_inputs, head_supported
from .kernels import attention_implementation

CHAIN_FORMAT = "chain-2"  # the chain packages' inputs and outputs; a change rebuilds (2: mask made inside)
CHAIN_GAMMAS = (2,)  # the chains `python -m specdec_ref compile` builds a package for (2: every calibration
# so far chose a chain of 2 when sampling; any other γ is `build_chain(head, γ)` away)


def chain_package_path(head, gamma: int) -> Path:
    """Where this machine's package for a chain of γ drafts by this head is, or would be, kept."""
    return package_path(head, f"{CHAIN_FORMAT}-g{int(gamma)}")


class HeadChain(nn.Module):
    """A chain of γ drafts by a `FeatureHead`, for torch.export:

        (tokens [1, q], table [V, d], features [1, q, d], positions [1, q + γ - 1], write [] long,
         columns [write + q + γ - 1] (0, 1, ...), uniforms [γ] float64, scale [] float32, greedy [] bool,
         k_0, v_0, ...)
        -> (the drafted tokens [γ], vocabulary ids; the rows they were drawn from [γ, V] float32)

    Pass 0 feeds the q pairs (feature, token) not fed yet, at positions write..write+q-1, and drafts from its
    last row; pass j > 0 feeds the token drafted before it with that row's output features, at position
    write + q + j - 1. positions hold every pass's rows, and the causal mask over the columns is made
    inside (`causal_inside`): pass j reads its own rows, and the mask's columns up to its own position. Every
    pass writes its keys and values into the buffers; the caller keeps the first write + q (`HeadKV.length`)
    and leaves the guesses' positions to be overwritten.
    """

    def __init__(self, head, gamma: int):
        super().__init__()
        if not (isinstance(gamma, int) and gamma >= 1):
            raise ValueError(f"a chain drafts gamma >= 1 tokens, got {gamma!r}")
        self.step, self.gamma = HeadStep(head), gamma

    def forward(self, tokens, table, features, positions, write, columns, uniforms, scale, greedy, *kv):
        head, gamma = self.step.head, self.gamma
        self.step.bind(kv, write)
        mask = causal_inside(columns, positions, table.dtype)  # [1, 1, q + γ - 1, write + q + γ - 1]
        keep = head.head.keep_ids  # [K] ascending vocabulary ids
        q, width = tokens.shape[1], mask.shape[3] - (gamma - 1)  # pass 0 sees write + q positions
        ks = torch.arange(keep.shape[0], device=keep.device)  # [K] the columns of the reduced logits
        x, f, rows, drafted, dists = tokens, features, slice(0, q), [], []
        for j in range(gamma):
            out = self.step.run(x, table, f, positions[:, rows], mask[:, :, rows, :width + j])  # [1, n, d]
            f = out[:, -1:]  # [1, 1, d] the head's guess of the next feature
            logits = head.head.reduced_logits(f[0])  # [1, K]
            # [1, K] in float32 (float64 for a float64 head), as `logits_to_probs` at temperature 1 / scale
            probs = (logits.to(torch.promote_types(logits.dtype, torch.float32)) * scale).softmax(-1)
            cdf = probs.double().cumsum(-1)  # [1, K], as `sampling.sample`
            k = torch.searchsorted(cdf, uniforms[j].view(1, 1) * cdf[:, -1:], right=True)  # [1, 1]
            # rounding can put u * total at the total itself: then the last token with any mass (`sample`)
            k = torch.minimum(k, torch.where(probs > 0, ks, -1).amax(-1, keepdim=True))
            k = torch.where(greedy, logits.argmax(-1, keepdim=True), k)  # [1, 1] a column of the K
            dists.append(torch.where(greedy, (ks == k).to(probs.dtype), probs))  # [1, K]
            drafted.append(keep[k[:, 0]])  # [1]
            x, rows = drafted[-1][None], slice(q + j, q + j + 1)
        spread = torch.zeros(gamma, head.vocab_size, dtype=probs.dtype, device=keep.device)  # [γ, V]
        return torch.cat(drafted), spread.index_copy_(1, keep, torch.cat(dists))


def causal_inside(columns: torch.Tensor, positions: torch.Tensor,
                  dtype: torch.dtype) -> torch.Tensor:  # [end], [1, n] -> [1, 1, n, end]
    """The causal mask a package's passes read, made inside it: the row at buffer position p sees columns
    0..p. Outside, `aot.causal_mask` cost 45-50 us a proposal right after a target pass (a new tensor); the
    columns come in as a view (`kv.Counter.columns`), which also gives the package the mask's width."""
    allowed = columns[None, :] <= positions[0][:, None]
    return torch.where(allowed, 0.0, torch.finfo(dtype).min).to(dtype)[None, None]


@contextmanager
def shared_constants():
    """While compiling, Inductor keeps one copy of constants that are equal, not only of the same tensor.

    Its C++ GEMM template lays each frozen weight out for its micro-GEMM once per product that uses it, as a
    new constant; a chain's passes multiply by the same weights, so each layer's weights were kept twice (the
    package of a chain of 2 held 36 MB of them instead of 18), and a chain's second pass read its own copy
    from memory instead of the copy its first pass had just brought into the cache."""
    from torch._inductor.graph import GraphLowering
    allocate = GraphLowering.allocate_non_dup_const_name

    def deduplicated(self, name, data):
        for known, value in self.constants.items():
            try:
                if (value.dtype == data.dtype and value.shape == data.shape and value.device == data.device
                        and value.stride() == data.stride() and torch.equal(value, data)):
                    return known
            except RuntimeError:  # a tensor without data (fake or meta): not compared
                continue
        return allocate(self, name, data)

    GraphLowering.allocate_non_dup_const_name = deduplicated
    try:
        yield
    finally:
        GraphLowering.allocate_non_dup_const_name = allocate


def chain_example_inputs(head, gamma: int, q: int = 3, length: int = MIN_BLOCKS * BLOCK,
                         start: int = 5) -> tuple:
    device, n = head.fc.weight.device, q + gamma - 1
    return head_example_inputs(head, q, length, start, rows=n, extra=(
        torch.arange(start + n, device=device), torch.rand(gamma, dtype=torch.float64, device=device),
        torch.tensor(1.0, device=device), torch.tensor(False, device=device)))


def build_chain(head, gamma: int, path: Path | None = None, *, options: dict | None = None,
                verbose: bool = True) -> Path:
    """`build` for a chain of γ drafts by a feature head (`HeadChain`): about a minute on a 2-core CPU."""
    problem = head_supported(head)
    if problem is not None:
        raise ValueError(f"cannot compile this head's chain: {problem}")
    inputs = chain_example_inputs(head, gamma)
    q, length, _ = _dims()
    rows = q + (gamma - 1) if gamma > 1 else q
    # a chain sees at least one cached position, then one fed pair and γ - 1 guesses
    end = torch.export.Dim("end", min=gamma + 1, max=MAX_BLOCKS * BLOCK)
    shapes = ({1: q}, None, {1: q}, {1: rows}, None, {0: end}, None, None, None,
              tuple({2: length} for _ in range(len(inputs) - 9)))
    # while exported and compiled
    with attention_implementation(head, COMPILED_ATTENTION), shared_constants():
        return _compile(HeadChain(head, gamma).eval(), inputs, shapes,
                        Path(path or chain_package_path(head, gamma)), options,
                        f"the feature head's chain of {gamma}" if verbose else "")



class CompiledChains(HeadPackages):
    """This machine's chain packages for one feature head, by γ, loaded on first use; `draft` runs one.
    `loading` gives a `CompiledHead` one as its `chains`, which `FeatureDrafter.propose` asks first."""
    KEYS = CHAIN_GAMMAS

    def __init__(self, head):
        super().__init__(head)
        self.flags = {g: torch.tensor(g, device=head.fc.weight.device) for g in (False, True)}
        self.scales, self.zeros = {}, {}  # 0-d scale tensors and greedy's unused uniforms, kept

    def path(self, gamma: int) -> Path:
        return chain_package_path(self.head, gamma)

    def draft(self, hidden: torch.Tensor, tokens: torch.Tensor, cache, gamma: int, sampling: SamplingConfig,
              generator: torch.Generator | None, sharpness: float = 1.0,
              ) -> tuple[torch.Tensor, torch.Tensor] | None:  # [q, d], [q] -> ([γ], [γ, V]), or None
        """Feed the pairs (hidden, tokens) into a `HeadKV` cache and draft γ tokens after them, in one call:
        what `FeatureDrafter.propose` does with a compiled head and no confidence stop. None where this
        machine has no package for γ, the draw is not a plain one (top-k, top-p), or there are more than
        MAX_QUERY pairs (the first proposal after a long prompt); the caller then drafts pass by pass."""
        q = tokens.shape[0]
        if (sampling.top_k is not None or sampling.top_p not in (None, 1) or not 1 <= q <= MAX_QUERY
                or not isinstance(cache, HeadKV) or self.runner(gamma) is None):
            return None
        w = self.head.fc.weight
        device, start, n = w.device, cache.length, q + gamma - 1
        cache.make_room(start + n)
        if sampling.greedy:
            if gamma not in self.zeros:  # made once: unused when greedy, but the package takes them
                self.zeros[gamma] = torch.zeros(gamma, dtype=torch.float64, device=device)
            uniforms = self.zeros[gamma]
        else:
            uniforms = torch.rand(gamma, generator=generator, dtype=torch.float64, device=device)  # [γ]
        scale = 1.0 if sampling.greedy else sharpness / sampling.temperature
        if scale not in self.scales:
            self.scales[scale] = torch.tensor(scale, dtype=torch.float32, device=device)
        out, rows = self.runner(gamma)(tokens[None], self.head.embed.weight, hidden[None].to(w.dtype),
                                       cache.counter.positions(start, n), cache.counter.scalar(start),
                                       cache.counter.columns(start + n), uniforms, self.scales[scale],
                                       self.flags[sampling.greedy], *cache.kv)
        cache.length = start + q  # the pairs fed stay; the guesses' positions are left to be overwritten
        return out, rows


def attach_chains(head) -> None:
    """Give a `CompiledHead` this machine's chain packages (`CompiledChains`, loaded when first asked)."""
    if isinstance(head, CompiledHead):
        head.__dict__["chains"] = CompiledChains(head.inner)

"""The sampled loop's own arithmetic in compiled calls (AOTInductor): plain decoding's draw, and a chain's
verdict.

At temperature T > 0, after each target pass the loop turns logits into probabilities and draws from them:
plain decoding a token (`sampling.logits_to_probs`, then `sampling.sample`), a chain the γ tests, then a
replacement from the residual or a bonus token (`verify.verify`). Those are a dozen small tensor operations
over rows of 49,152 entries, and right after a target pass each costs tens of microseconds more than it does
warm (the appendix on CPU kernels, "The loop's bookkeeping, paid from memory"): on a 2-core AMD EPYC Zen 4,
0.65 of the 1.13 ms an iteration of a chain of 2 spent outside the packages at T = 1
(`scripts/loop_phases.py --temperature 1`).

Two weightless programs do the same arithmetic in one call each, compiled once per machine (about ten seconds
each) by `python -m specdec_ref compile`:

* `Draw` (logits [1, V], uniform [1], temperature) -> the token [1]: `sample(logits_to_probs(...))`.
* `ChainVerdict` (logits [γ+1, V], uniforms [γ+1], temperature, the drafted tokens [γ], the rows they were
  drawn from [γ, V]) -> (the number accepted, the next token) [2]: `verify` after `logits_to_probs`.
  γ is dynamic: one program serves every chain.

They read the logits once for each row's log-normaliser (`logsumexp`), take the probabilities they need from
it (the γ tested tokens', and one whole row: the residual's or the bonus's), and invert the cumulative sum in
two levels (`inverse_cdf`): blocks of `BLOCK` tokens, then one block. The uniforms come in from one
`torch.rand` call of the caller's generator, as `verify` and `sample` draw them, so with and without the
packages a seeded generation gives the same tokens (different rounding could move a draw that falls within
about 1e-7 of a boundary; the tests compare thousands). They serve plain temperature sampling only: top-k and
top-p, block verification, trees, and a loop whose `verify` or `logits_to_probs` a chapter or `lab.broken`
swapped run the Python rules, as does everything where SPECDEC_AOT=0 or no package was built.

Measured on that machine, with and without them alternating prompt by prompt (8 held-out prompts, 64 tokens,
T = 1, the same tokens both ways): a chain of 2 ran at 121.1 against 117.9 tokens/s, plain decoding at 87.5
against 86.9; the loop's own work at T = 1 fell from 0.089-0.099 t(1) to 0.066 for the chain
(`scripts/loop_overhead.py --temperature 1`; the measurement log's twenty-first session).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..cache import SAMPLED_PACKAGES, vocab_size
from ..device import build_key, cache_dir
from ..sampling import SamplingConfig
from .aot import _compile, load_package, switched_on

VERDICT_FORMAT = "verdict-2"  # the programs' inputs, outputs and settings; a change rebuilds them
BLOCK = 256  # tokens per block of the two-level inverse CDF
MAX_GAMMA = 32  # the longest chain a verdict program judges
# Inductor's settings for them: its buffers planned into one allocation per call (5-10% less time a call right
# after the caches were swept, on a 2-core AMD EPYC Zen 4)
OPTIONS = dict(memory_planning=True)


def last_positive(x: torch.Tensor) -> torch.Tensor:  # [n] -> [1]
    """The index of the last entry with any mass (-1 if none)."""
    ks = torch.arange(x.shape[0], device=x.device)
    return torch.where(x > 0, ks, -1).amax(0, keepdim=True)


def inverse_cdf(r: torch.Tensor, u: torch.Tensor) -> torch.Tensor:  # [V] >= 0, [1] float64 -> [1] long
    """The first token whose cumulative mass exceeds u * total, as `sampling.sample` finds it, in two levels:
    the block of BLOCK tokens where the cumulative sum crosses it, then the token inside that block. Two
    short sequential sums (V / BLOCK blocks, then BLOCK tokens) instead of one of V, with the same sums in
    float64; where rounding puts u * total at the total itself, the last block and token with any mass, as
    `sample` does."""
    V = r.shape[0]
    blocks = -(-V // BLOCK)
    padded = (F.pad(r, (0, blocks * BLOCK - V)) if V % BLOCK else r).view(blocks, BLOCK)  # zeros past V
    mass = padded.double().sum(-1)  # [B]
    totals = mass.cumsum(0)  # [B]
    target = u * totals[-1:]  # [1]
    b = torch.minimum(torch.searchsorted(totals, target, right=True), last_positive(mass))  # [1]
    before = torch.cat([totals.new_zeros(1), totals]).index_select(0, b)  # [1] the mass of the blocks before
    block = padded.index_select(0, b)[0]  # [BLOCK]
    k = torch.searchsorted(block.double().cumsum(0), target - before, right=True)  # [1]
    return b * BLOCK + torch.minimum(k, last_positive(block))


def chunked_logsumexp(x: torch.Tensor, chunks: int = 8) -> torch.Tensor:  # [n, V] -> [n]
    """Each row's logsumexp, from `chunks` pieces of it: Inductor shares a reduction's loop among threads by
    rows, so the few rows of a chain (3 for γ = 2) on 2 threads left one idle for a row's time."""
    n, V = x.shape
    if V % chunks:
        return x.logsumexp(-1)
    return x.view(n, chunks, V // chunks).logsumexp(-1).logsumexp(-1)


class Draw(nn.Module):
    """(logits [1, V], uniforms [1] float64, temperature [] float32) -> (the token [1],): `sampling.draw` at a
    plain temperature, from one uniform."""

    def forward(self, logits, uniforms, temperature):
        x = logits[0].float() / temperature  # [V], as `logits_to_probs`
        probs = (x - x.logsumexp(0)).exp()  # [V]
        return (inverse_cdf(probs, uniforms),)  # a tuple: a flat output list (`aot.FlatRunner`)


class ChainVerdict(nn.Module):
    """(logits [γ+1, V], uniforms [γ+1] float64, temperature [] float32, drafted [γ], rows [γ, V] float32)
    -> ((n accepted, next token) [2],): `verify(drafted, rows, logits_to_probs(logits), ...)` at the uniforms.

    Token i is kept while u_i p_draft(x_i) < p_target(x_i); the first that fails is replaced by a draw from
    normalise(max(p_target - p_draft, 0)) (p_target where that has no mass), and if none fails the last row
    gives a bonus token (its residual against a draft row of zeros: p_target itself)."""

    def forward(self, logits, uniforms, temperature, drafted, rows):
        g = drafted.shape[0]
        x = logits.float() / temperature  # [γ+1, V]
        lse = chunked_logsumexp(x)  # [γ+1]
        p_target = (x[:g].gather(1, drafted[:, None])[:, 0] - lse[:g]).exp()  # [γ]
        p_draft = rows.gather(1, drafted[:, None])[:, 0]  # [γ]
        n = (uniforms[:g] * p_draft < p_target).long().cumprod(0).sum(0, keepdim=True)  # [1] up to a failure
        target_n = (x.index_select(0, n)[0] - lse.index_select(0, n)).exp()  # [V]
        # [V] the draft's row n, zeros past the last (no copy of the rows: `cat` would write them all again)
        draft_n = torch.where(n < g, rows.index_select(0, n.clamp(max=g - 1))[0], 0.0)
        r = (target_n - draft_n).clamp(min=0)
        r = torch.where(r.sum() > 0, r, target_n)  # as `verify.residual`: no mass has probability zero
        return (torch.cat([n, inverse_cdf(r, uniforms[g:])]),)


def verdict_path(kind: str, vocab_size: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> Path:
    """Where this machine's `kind` ("draw" or "verdict") program for logits of vocab_size in dtype is, or
    would be, kept: keyed by the processor, torch's threads, torch, the package's version and the format."""
    key = build_key(device, VERDICT_FORMAT, torch.device(device).type, kind, str(vocab_size), str(dtype))
    return cache_dir() / "aot" / f"{key}.pt2"


def example_inputs(kind: str, vocab_size: int, dtype: torch.dtype, gamma: int = 2) -> tuple:
    g = 0 if kind == "draw" else gamma
    logits = torch.randn(g + 1, vocab_size).to(dtype)
    common = (logits, torch.rand(g + 1, dtype=torch.float64), torch.tensor(1.0))
    if kind == "draw":
        return common
    return common + (torch.randint(0, vocab_size, (g,)), torch.rand(g, vocab_size).softmax(-1))


def verdict_shapes() -> tuple:
    """`ChainVerdict`'s dynamic dimension: γ, 1 to MAX_GAMMA, on its inputs."""
    g = torch.export.Dim("drafted", min=1, max=MAX_GAMMA)  # ("gamma" would be sympy's function)
    return {0: g + 1}, {0: g + 1}, None, {0: g}, {0: g}


def build_verdict(kind: str, vocab: int, dtype: torch.dtype, path: Path | None = None, *,
                  verbose: bool = True) -> Path:
    """Compile the `Draw` (kind "draw") or `ChainVerdict` ("verdict") program for logits of `vocab` tokens in
    dtype into an AOTInductor package (about ten seconds on 2 cores)."""
    if kind not in ("draw", "verdict"):
        raise ValueError(f"kind must be 'draw' or 'verdict', got {kind!r}")
    if not (isinstance(vocab, int) and vocab >= 2):
        raise ValueError(f"the vocabulary must hold an integer >= 2 tokens, got {vocab!r}")
    module, shapes = (Draw(), None) if kind == "draw" else (ChainVerdict(), verdict_shapes())
    inputs = example_inputs(kind, vocab, dtype)
    what = f"the sampled {'draw' if kind == 'draw' else 'chain verdict'}" if verbose else ""
    return _compile(module.eval(), inputs, shapes, Path(path or verdict_path(kind, vocab, dtype)), OPTIONS,
                    what)


class SampledPackages:
    """This machine's draw and verdict programs for one model's logits, loaded on first use. `loading` puts
    one on the offline target (`attach`); `CachedModel.packaged_sampling` hands it to the loops, which call
    `draw` and `judge` and take the Python rules wherever these return None."""

    def __init__(self, vocab_size: int, dtype: torch.dtype):
        self.vocab_size, self.dtype = vocab_size, dtype
        self.runners: dict[str, object] = {}
        self.temperatures: dict[float, torch.Tensor] = {}  # 0-d float32 tensors, made once

    def runner(self, kind: str):
        if kind not in self.runners:
            path = verdict_path(kind, self.vocab_size, self.dtype)
            self.runners[kind] = load_package(path) if path.exists() else None
        return self.runners[kind]

    def _serves(self, logits: torch.Tensor, sampling: SamplingConfig) -> bool:
        return (not sampling.greedy and sampling.top_k is None and sampling.top_p in (None, 1)
                and logits.device.type == "cpu" and logits.dtype == self.dtype
                and logits.shape[-1] == self.vocab_size)

    def _temperature(self, sampling: SamplingConfig) -> torch.Tensor:
        t = float(sampling.temperature)
        if t not in self.temperatures:
            self.temperatures[t] = torch.tensor(t, dtype=torch.float32)
        return self.temperatures[t]

    def draw(self, logits: torch.Tensor, sampling: SamplingConfig,
             generator: torch.Generator | None) -> torch.Tensor | None:  # [1, V] -> [1]
        """`sample(logits_to_probs(logits[0], sampling), generator)` in one call; None where not served."""
        if logits.shape[0] != 1 or not self._serves(logits, sampling) or self.runner("draw") is None:
            return None
        u = torch.rand(1, generator=generator, dtype=torch.float64)  # [1], as `sample` draws it
        return self.runner("draw")(logits, u, self._temperature(sampling))[0]

    def judge(self, drafted: torch.Tensor, rows: torch.Tensor | None, logits: torch.Tensor,
              sampling: SamplingConfig, generator: torch.Generator | None,
              ) -> tuple[int, torch.Tensor] | None:  # [γ], [γ, V], [γ+1, V] -> (n, [1])
        """`verify(drafted, rows, logits_to_probs(logits, sampling), generator)` in one call (γ = 0: `draw`);
        None where not served (rows not float32 [γ, V], a chain longer than MAX_GAMMA, no package)."""
        g = drafted.shape[0]
        if g == 0:
            token = self.draw(logits, sampling, generator)
            return None if token is None else (0, token)
        if (rows is None or rows.dtype != torch.float32 or tuple(rows.shape) != (g, self.vocab_size)
                or drafted.dtype != torch.long or g > MAX_GAMMA or logits.shape[0] != g + 1
                or not self._serves(logits, sampling) or self.runner("verdict") is None):
            return None
        u = torch.rand(g + 1, generator=generator, dtype=torch.float64)  # [γ+1], as `verify` draws them
        out = self.runner("verdict")(logits, u, self._temperature(sampling), drafted, rows)[0]  # [2]
        return int(out[0]), out[1:]


def attach(model, *, enabled: bool | None = None) -> SampledPackages | None:
    """Give a CPU model the draw and verdict programs for its logits (`SampledPackages`, loaded when first
    used) where this machine has built either; None where it has neither, or SPECDEC_AOT=0 or enabled=False
    opts out."""
    model.__dict__.pop(SAMPLED_PACKAGES, None)
    enabled = switched_on() if enabled is None else enabled
    params = next(model.parameters(), None)
    if not enabled or params is None or params.device.type != "cpu":
        return None
    V, dtype = vocab_size(model), params.dtype
    if not any(verdict_path(k, V, dtype).exists() for k in ("draw", "verdict")):
        return None
    model.__dict__[SAMPLED_PACKAGES] = packages = SampledPackages(V, dtype)
    return packages

"""Turning logits into probabilities, and drawing tokens from them.

One helper, `logits_to_probs`, serves the draft and the target alike. If the two
models' logits went through different processing (say, temperature on one but not
the other), the accept/reject rule would compare two distributions that are not
the ones being sampled, and exactness would silently break.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0  # 0 means greedy (argmax); otherwise logits are divided by it
    top_k: int | None = None  # keep only the k most likely tokens (None: keep all)
    top_p: float | None = None  # keep the smallest set of top tokens with mass >= top_p (HF semantics)

    def __post_init__(self):
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0 (0 means greedy), got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k must be None or an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None and not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be None or in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _float_dtype(dtype: torch.dtype) -> torch.dtype:
    # Softmax in at least float32 (fp16/bf16 logits lose too much), but keep float64 toys exact.
    return torch.promote_types(dtype, torch.float32)


def logits_to_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:  # [..., V] -> [..., V]
    """Apply temperature, then top-k, then top-p, and normalise."""
    if sampling.greedy:  # a one-hot distribution on the argmax (first index wins ties)
        return point_masses(argmax(logits), logits.shape[-1], logits.dtype)
    if sampling.temperature == 1 and sampling.top_k is None and sampling.top_p in (None, 1):
        # nothing to apply: softmax converts to float32 as it reads (the same numbers as converting first,
        # one pass over the rows instead of two)
        return logits.softmax(-1, dtype=_float_dtype(logits.dtype))
    logits = logits.to(_float_dtype(logits.dtype))
    if sampling.temperature != 1:  # dividing by 1 changes nothing: skip a pass over every row
        logits = logits / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p is not None and sampling.top_p < 1:
        # Hugging Face's rule: sort ascending, drop the low tail whose total mass is <= 1 - top_p,
        # always keeping the most likely token.
        sorted_logits, order = torch.sort(logits, dim=-1)  # ascending, [..., V]
        tail_mass = sorted_logits.softmax(-1).cumsum(-1)  # [..., V]
        drop = tail_mass <= 1 - sampling.top_p
        drop[..., -1] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits.softmax(-1)


def argmax(logits: torch.Tensor) -> torch.Tensor:  # [..., V] -> [...]
    """The index of each row's largest logit, the first one on ties (as `torch.argmax`).

    Through `max`, which gives the same indices: on a CPU, argmax over bfloat16 rows of 49,152 logits is not
    vectorised and takes 2-5 times as long (485 µs against 103 µs for 5 rows, 2 threads, on an Intel Xeon;
    `scripts/greedy_walk.py`), more than the rest of a greedy iteration's bookkeeping."""
    return logits.max(-1).indices


def point_masses(tokens: torch.Tensor, vocab_size: int,
                 logits_dtype: torch.dtype) -> torch.Tensor:  # [...] -> [..., V]
    """One-hot rows on these tokens, as `logits_to_probs` makes them when greedy from logits of this dtype."""
    out = torch.zeros(*tokens.shape, vocab_size, dtype=_float_dtype(logits_dtype), device=tokens.device)
    return out.scatter_(-1, tokens[..., None], 1.0)


def draw(logits: torch.Tensor, sampling: SamplingConfig,
         generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # [V] -> ([1], [V])
    """`logits_to_probs` then `sample`: a token and the distribution it was drawn from. Greedy takes the
    argmax straight away, the token `sample` would draw from the one-hot row, without its cumulative sum."""
    if sampling.greedy:
        token = argmax(logits)[None]  # [1]
        return token, point_masses(token[0], logits.shape[-1], logits.dtype)
    probs = logits_to_probs(logits, sampling)
    return sample(probs, generator), probs


def draw_among(logits: torch.Tensor, ids: torch.Tensor, vocab_size: int, sampling: SamplingConfig,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`draw` from logits given only for the tokens `ids` (ascending), every other token's logit being -inf,
    as a draft with a reduced output layer makes them: [K], [K] -> (token [1], its distribution [V]).

    The other tokens get probability 0 either way, so the work is done over K entries instead of V and the
    row is scattered out once at the end. `ids` ascending keeps the cumulative sum in vocabulary order, so
    one uniform draws the same token as `draw` over the full row would."""
    token, probs = draw(logits, sampling, generator)  # [1], [K]
    return ids[token], spread(probs, ids, vocab_size)


def spread(probs: torch.Tensor, ids: torch.Tensor,
           vocab_size: int) -> torch.Tensor:  # [..., K], [K] -> [..., V]
    """Rows over the K tokens `ids` as rows over the whole vocabulary, zero for every other token. A draft
    that draws several tokens over the same K spreads their rows once, at the end (one pass, not one a
    row)."""
    return probs.new_zeros(*probs.shape[:-1], vocab_size).index_copy_(-1, ids, probs)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None,
           otherwise: torch.Tensor | None = None,
           uniform: torch.Tensor | None = None) -> torch.Tensor:  # [V] -> [1]
    """Draw one token id from a probability vector, by inverting its cumulative distribution.

    One uniform u, a cumulative sum and a binary search: the token is the first whose cumulative mass exceeds
    u * total. (torch.multinomial gives the same distribution, but costs about 30 times as much on a
    50k-token vocabulary, several times per iteration of the loop.) Since u is scaled by the total, probs
    may be any non-negative multiple of a distribution: normalising first changes nothing. otherwise: the
    row to draw from instead where probs has no mass at all (a residual of two equal rows, `verify_block`).
    uniform: u itself, [1] float64 in [0, 1), drawn by the caller with other uniforms in one call (`verify`);
    None draws it here.
    """
    cdf = probs.cumsum(-1, dtype=torch.float64)  # [V], float64 so that tiny probabilities keep their share
    if uniform is None:
        uniform = torch.rand(1, generator=generator, device=probs.device, dtype=torch.float64)  # [1]
    u = uniform * cdf[-1]  # [1]
    token = torch.searchsorted(cdf, u, right=True)  # [1]; the found token has p > 0 whenever u < total
    if int(token) == probs.shape[-1]:  # rounding put u at the total: take the last token with p > 0
        positive = (probs > 0).nonzero()
        if otherwise is not None and positive.numel() == 0 and bool(torch.isfinite(cdf[-1])):
            return sample(otherwise, generator)
        if not bool(torch.isfinite(cdf[-1])) or positive.numel() == 0:
            raise ValueError("cannot sample: the probabilities hold NaN or inf, or no positive mass; "
                             "the logits they came from were not finite "
                             "(a float16 overflow? load the model in torch.bfloat16 or torch.float32)")
        token = positive[-1]
    return token


class Ranked(NamedTuple):
    """Each expanded node's most likely children under the draft, best first: all that a greedy tree's growth
    reads of a draft pass. A draft may bring them ready-made (a compiled head's package ranks the rows it
    makes), which saves the loop a pass over every row's logits; `ranked` makes them from logits."""
    logp: torch.Tensor  # [n, w] float32: their log-probabilities (log-softmax over the draft's vocabulary)
    tokens: torch.Tensor  # [n, w] their token ids


def ranked(logits: torch.Tensor, ids: torch.Tensor | None,
           w: int) -> Ranked:  # [..., V] or [..., K] -> [..., w] twice
    """The w most likely tokens of each row, best first; ids [K] maps the columns of reduced logits to token
    ids (None: the columns are the ids)."""
    top = logits.topk(w, dim=-1)
    # the log-softmax of the top w only: a float32 log_softmax kernel and a gather (logsumexp instead takes
    # about ten small steps, twice the time)
    logp = logits.log_softmax(-1, dtype=torch.float32).gather(-1, top.indices)
    return Ranked(logp, top.indices if ids is None else ids[top.indices])

"""Things that propose draft tokens, and a model wrapper that owns a KV cache.

A drafter is anything with

  propose(context_ids [T], gamma, sampling, generator) -> (draft_tokens [γ], draft_probs [γ, V])
  rollback(n_tokens)   # forget everything after the first n_tokens of the context

`ModelDrafter` wraps a Hugging Face causal LM; `NgramDrafter` is prompt lookup
(copy what followed the last occurrence of the current n-gram), whose draft_probs
are one-hot. Both plug into the same `speculative_generate` loop.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from .cache import CachedModel, vocab_size
from .sampling import SamplingConfig, logits_to_probs, sample


@runtime_checkable
class Drafter(Protocol):
    def propose(self, context_ids: torch.Tensor, gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]: ...

    def rollback(self, n_tokens: int) -> None: ...


class ModelDrafter:
    """A small causal LM that drafts γ tokens one at a time, the ordinary (slow, but cheap) way."""

    def __init__(self, model):
        self.lm = CachedModel(model)
        self.vocab_size = vocab_size(model)

    @property
    def calls(self) -> int:
        return self.lm.calls

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([γ], [γ, V])
        tokens, probs = [], []
        for _ in range(gamma):
            logits = self.lm.logits(torch.cat([context_ids, *tokens]))[-1]  # [V]
            p = logits_to_probs(logits, sampling)  # [V], the same helper the target uses
            tokens.append(sample(p, generator))  # [1]
            probs.append(p)
        if gamma == 0:
            return context_ids.new_empty(0), torch.empty(0, self.vocab_size, device=context_ids.device)
        return torch.cat(tokens), torch.stack(probs)  # [γ], [γ, V]

    def rollback(self, n_tokens: int) -> None:
        self.lm.rollback(n_tokens)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the last n tokens and propose what followed.

    Its draft "distribution" is one-hot on the proposed token, so the target accepts a
    token with probability p_target(x) and otherwise resamples from p_target minus that
    token: still exact. With nothing to copy, it proposes nothing and the step reduces to
    one plain target step.
    """

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.vocab_size, self.max_ngram, self.min_ngram = vocab_size, max_ngram, min_ngram
        self.calls = 0

    def lookup(self, context_ids: torch.Tensor, gamma: int) -> torch.Tensor:  # [T] -> [≤γ]
        ids = context_ids.tolist()
        for n in range(min(self.max_ngram, len(ids) - 1), self.min_ngram - 1, -1):
            tail, best = ids[-n:], context_ids[:0]
            for start in range(len(ids) - n - 1, -1, -1):  # latest match first, excluding the tail itself
                if ids[start:start + n] == tail:
                    follow = context_ids[start + n:start + n + gamma]
                    if follow.shape[0] == gamma:  # the latest match with a full continuation wins
                        return follow
                    best = follow if follow.shape[0] > best.shape[0] else best
            if best.shape[0]:
                return best
        return context_ids[:0]

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        self.calls += 1
        tokens = self.lookup(context_ids, gamma)
        probs = torch.zeros(tokens.shape[0], self.vocab_size, device=context_ids.device)
        return tokens, probs.scatter_(1, tokens[:, None], 1.0)  # one-hot rows

    def rollback(self, n_tokens: int) -> None:
        pass  # stateless: it rereads the context every time

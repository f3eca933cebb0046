"""Things that propose draft tokens, and a model wrapper that owns a KV cache.

A drafter is anything with

  propose(context_ids [T], gamma, sampling, generator) -> (draft_tokens [γ], draft_probs [γ, V])
  rollback(n_tokens)   # forget everything after the first n_tokens of the context

`ModelDrafter` wraps a Hugging Face causal LM; `NgramDrafter` is prompt lookup
(copy what followed the last occurrence of the current n-gram), whose draft_probs
are one-hot. Both plug into the same `speculative_generate` loop.

Adaptive draft length (chapter 4) lives here too, outside the loop: a drafter may propose fewer than
γ tokens. `ModelDrafter(model, confidence_stop=0.4)` stops when it is unsure, and `ScheduledDrafter`
wraps any drafter in Hugging Face's +2/-1 schedule. Either way the loop, and its exactness, are unchanged:
how many tokens are proposed depends only on the draft's side, never on the target's random draws.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from transformers import DynamicCache

from .cache import CachedModel, vocab_size
from .sampling import SamplingConfig, logits_to_probs, sample


@runtime_checkable
class Drafter(Protocol):
    def propose(self, context_ids: torch.Tensor, gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]: ...  # [T] -> ([≤γ], [≤γ, V])

    def rollback(self, n_tokens: int) -> None: ...


class ModelDrafter:
    """A small causal LM that drafts γ tokens one at a time, the ordinary (slow, but cheap) way.

    confidence_stop: stop early, after proposing a token at a position where the draft's top
    probability (softmax of its raw logits, whatever the sampling) is below this (Hugging Face's
    `assistant_confidence_threshold` rule); None drafts all γ.
    """

    def __init__(self, model, *, confidence_stop: float | None = None):
        if confidence_stop is not None and not 0 <= confidence_stop <= 1:
            raise ValueError(f"confidence_stop must be a probability in [0, 1] (or None), got {confidence_stop}")
        self.lm = CachedModel(model)
        self.vocab_size = vocab_size(model)
        self.confidence_stop = confidence_stop

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
            if self.confidence_stop is not None and logits.softmax(-1).max() < self.confidence_stop:
                break  # the draft's own (T=1) confidence is low here, even when greedy: stop drafting
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


class ScheduledDrafter:
    """Any drafter, with Hugging Face's "heuristic" schedule for the number of draft tokens.

    Start at `start` tokens; after an iteration that accepted every proposed token, propose
    `grow` more next time, otherwise `shrink` fewer (never fewer than 1). The loop's γ caps it.
    It learns how many were accepted from `rollback`, which the loop calls with the surviving length.
    """

    def __init__(self, drafter: Drafter, *, start: int = 4, grow: int = 2, shrink: int = 1):
        if start < 1 or grow < 0 or shrink < 0:
            raise ValueError(f"need start >= 1, grow >= 0, shrink >= 0, got {start}, {grow}, {shrink}")
        self.drafter, self.start, self.grow, self.shrink = drafter, start, grow, shrink
        self.num_tokens = start  # draft tokens to propose next iteration
        self.history: list[int] = []  # num_tokens used by each iteration, for plots
        self._proposed = (0, 0)  # (context length, tokens proposed) of the last proposal

    def __getattr__(self, name):  # vocab_size, lm, calls, ...: those of the wrapped drafter
        if name == "drafter":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.drafter, name)

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        n = min(self.num_tokens, gamma)
        self.history.append(n)
        tokens, probs = self.drafter.propose(context_ids, n, sampling, generator)
        self._proposed = (context_ids.shape[0], tokens.shape[0])
        return tokens, probs

    def rollback(self, n_tokens: int) -> None:
        if n_tokens == 0:  # a new generation: start the schedule afresh
            self.num_tokens, self.history = self.start, []
        else:
            context_len, proposed = self._proposed
            all_accepted = n_tokens - context_len == proposed  # the loop keeps context + accepted
            self.num_tokens = self.num_tokens + self.grow if all_accepted else max(1, self.num_tokens - self.shrink)
        self.drafter.rollback(n_tokens)


class FeatureDrafter:
    """EAGLE-style drafting from the target's own hidden states (a `models.feature_draft.FeatureHead`).

    The loop hands it, after every verification, the target's final hidden states of all kept tokens
    (`observe`). Position j of its small cache pairs the target's feature h_j with token x_{j+1}; only pairs
    built from real target features stay cached, the guesses made while drafting are cropped at once
    (EAGLE's "stable" cache). Before the target has run at all there are no features, so the first
    iteration proposes nothing: it is the target's prefill.
    """
    reads_target_features = True  # speculative_generate keeps the target's hidden states for this drafter

    def __init__(self, head, default_gamma: int = 3, *, confidence_stop: float | None = None):
        if confidence_stop is not None and not 0 <= confidence_stop <= 1:
            raise ValueError(f"confidence_stop must be a probability in [0, 1] (or None), got {confidence_stop}")
        self.head, self.default_gamma, self.confidence_stop = head, default_gamma, confidence_stop
        self.vocab_size = head.vocab_size
        self.cache, self.n_fed, self.features, self.calls = None, 0, None, 0

    def observe(self, hidden: torch.Tensor) -> None:  # [n, d] target features of the kept tokens but the newest
        self.features = hidden

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        T = context_ids.shape[0]
        if self.features is None or gamma == 0:
            return context_ids[:0], torch.empty(0, self.vocab_size, device=context_ids.device)
        self.cache = self.cache if self.cache is not None else DynamicCache()
        h, x = self.features[self.n_fed:T - 1], context_ids[self.n_fed + 1:T]  # pairs (h_j, x_{j+1}) not yet fed
        f = self.head(h[None], x[None], self.cache)[0, -1:]  # [1, d] a guess of the newest token's feature
        self.n_fed = T - 1
        tokens, probs = [], []
        while True:
            logits = self.head.logits(f)[0]  # [V]
            p = logits_to_probs(logits, sampling)  # [V], the same helper the target uses
            tokens.append(sample(p, generator))  # [1]
            probs.append(p)
            unsure = self.confidence_stop is not None and logits.softmax(-1).max() < self.confidence_stop
            if len(tokens) == gamma or unsure:
                break
            f = self.head(f[None], tokens[-1][None], self.cache)[0]  # feed the guess back in: [1, d]
        if len(tokens) > 1:
            self.cache.crop(-(len(tokens) - 1))  # drop the guessed positions: only real target features stay
        self.calls += len(tokens)
        return torch.cat(tokens), torch.stack(probs)  # [≤γ], [≤γ, V]

    def rollback(self, n_tokens: int) -> None:
        if n_tokens == 0:
            self.cache, self.n_fed, self.features = None, 0, None
        elif n_tokens - 1 < self.n_fed:
            self.cache.crop(-(self.n_fed - (n_tokens - 1)))
            self.n_fed = n_tokens - 1


class FallbackDrafter:
    """Several drafters in order of preference: the first that proposes anything drafts this iteration.

    `FallbackDrafter(NgramDrafter(V), ModelDrafter(draft))` copies from the context when it can (free) and asks
    the model draft only when lookup finds nothing. Which drafter speaks depends on the context alone, never on
    the target's random draws, so verification stays exact. Every drafter is rolled back each iteration, so a
    model draft that sat idle catches up on the tokens it missed the next time it is asked.
    """

    def __init__(self, *drafters: Drafter):
        if not drafters:
            raise ValueError("FallbackDrafter needs at least one drafter, e.g. FallbackDrafter(NgramDrafter(V), model)")
        self.drafters = [d if isinstance(d, Drafter) else ModelDrafter(d) for d in drafters]  # a bare HF model works
        self.vocab_size = getattr(self.drafters[0], "vocab_size", None)
        self.used: list[int] = []  # index of the drafter that proposed, per iteration, over all runs

    @property
    def calls(self) -> int:
        return sum(getattr(d, "calls", 0) for d in self.drafters)

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        for i, drafter in enumerate(self.drafters):
            tokens, probs = drafter.propose(context_ids, gamma, sampling, generator)
            if tokens.shape[0] or i == len(self.drafters) - 1:
                self.used.append(i)
                return tokens, probs

    def rollback(self, n_tokens: int) -> None:
        for drafter in self.drafters:
            drafter.rollback(n_tokens)

"""Deliberately wrong samplers, kept so that the tests (and chapter 3) can show they have power.

Each one is a small, plausible-looking mistake. A statistical test that cannot tell these
apart from `verify` proves nothing about `verify`.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

from ..sampling import SamplingConfig, logits_to_probs, sample
# the package's step, whatever `using_step` swaps in
from ..generate import speculative_step as reference_step
from ..verify import residual


def verify_without_residual(draft_tokens, draft_probs, target_probs, generator=None):
    """Bug: after a rejection, resample from p_target instead of the residual (double-counts accepted
    mass)."""
    for i in range(draft_tokens.shape[0]):
        x = draft_tokens[i]
        u = torch.rand((), generator=generator, device=target_probs.device, dtype=target_probs.dtype)
        if u * draft_probs[i, x] < target_probs[i, x]:
            continue
        return i, sample(target_probs[i], generator)
    return draft_tokens.shape[0], sample(target_probs[-1], generator)


def verify_argmax(draft_tokens, draft_probs, target_probs, generator=None):
    """Bug: accept a sampled draft token only if it is the target's argmax, else take the argmax.

    Correct for greedy decoding; wrong for sampling (it collapses the output towards the mode).
    """
    for i in range(draft_tokens.shape[0]):
        best = target_probs[i].argmax()
        if draft_tokens[i] != best:
            return i, best[None]
    return draft_tokens.shape[0], sample(target_probs[-1], generator)


def verify_target_off_by_one(draft_tokens, draft_probs, target_probs, generator=None):
    """Bug: compare draft token i with the target row i + 1 (the distribution one position too late)."""
    shifted = torch.cat([target_probs[1:], target_probs[-1:]])  # [γ+1, V], rows moved up by one
    for i in range(draft_tokens.shape[0]):
        x = draft_tokens[i]
        u = torch.rand((), generator=generator, device=target_probs.device, dtype=target_probs.dtype)
        if u * draft_probs[i, x] < shifted[i, x]:
            continue
        return i, sample(residual(shifted[i], draft_probs[i]), generator)
    return draft_tokens.shape[0], sample(target_probs[-1], generator)


class DraftProcessedDifferently:
    """Bug: the draft samples from one processing of its logits, but verify is told another.

    Wraps a ModelDrafter-like drafter: it proposes with `actual` sampling (e.g. temperature 1, no top-p)
    while the loop believes the draft used the same SamplingConfig as the target.
    """

    def __init__(self, drafter, actual: SamplingConfig):
        self.drafter, self.actual = drafter, actual
        self.vocab_size, self.default_gamma = drafter.vocab_size, drafter.default_gamma
        self.wants_target_hidden = False

    @property
    def calls(self):
        return self.drafter.calls

    @property
    def n_cached(self):
        return self.drafter.n_cached

    def propose(self, context_ids, gamma, sampling, generator=None):
        tokens, _ = self.drafter.propose(context_ids, gamma, self.actual, generator)
        if gamma == 0:
            return tokens, _
        # recompute the probabilities the loop will see with the *loop's* config: the mismatch is the bug
        logits = self.drafter.lm.model(input_ids=torch.cat([context_ids, tokens])[None]).logits[0]
        return tokens, logits_to_probs(logits[-gamma - 1:-1], sampling)

    def sync(self, n_kept, target_hidden=None):
        self.drafter.sync(n_kept, target_hidden)


def draft_greedy_while_target_samples(drafter) -> DraftProcessedDifferently:
    """Bug: the draft proposes its argmax while the target samples, and verify is told the distribution the
    draft would have sampled from.

    Reported in Hugging Face transformers issue #32867 (https://github.com/huggingface/transformers/issues/32867):
    assisted generation forced the assistant to decode greedily, for more matches, while the acceptance ratio
    still divided by the assistant's sampling probabilities; PR #33534 made the assistant sample whenever the
    main model samples. A special case of `DraftProcessedDifferently`: greedy is the processing the draft
    really used.
    """
    return DraftProcessedDifferently(drafter, actual=SamplingConfig(temperature=0))


def verify_draft_prob_one(draft_tokens, draft_probs, target_probs,
                          generator=None):  # [γ], [γ, V], [γ+1, V] -> (n, [1])
    """Bug: accept a sampled draft token x with probability p_target(x), as if the draft had proposed it with
    probability q(x) = 1, while a rejection still draws from the residual of the real p_draft.

    EAGLE's verification code writes q(x) = 1, which a reader questioned in SafeAILab/EAGLE issue #183
    (https://github.com/SafeAILab/EAGLE/issues/183). There it is meant: EAGLE chooses its draft tokens by
    top-k, deterministically, and after a rejection resamples from p_target with the rejected token removed.
    With a draft that samples x ~ p_draft and the residual max(p_target - p_draft, 0), the same q(x) = 1
    delivers p_draft(x) * p_target(x) on the accepted path instead of min(p_target, p_draft)(x), and the
    residual no longer makes up the difference: the output is wrong.
    """
    for i in range(draft_tokens.shape[0]):
        x = draft_tokens[i]
        u = torch.rand((), generator=generator, device=target_probs.device, dtype=target_probs.dtype)
        if u * 1.0 < target_probs[i, x]:  # the bug: 1.0 where verify has draft_probs[i, x]
            continue
        return i, sample(residual(target_probs[i], draft_probs[i]), generator)
    return draft_tokens.shape[0], sample(target_probs[-1], generator)


@contextlib.contextmanager
def swapped(name: str, fn: Callable):
    """Replace `specdec_ref.generate.<name>` by fn inside the block (tests, chapter 3 and the checkers
    only)."""
    from .. import generate
    original = getattr(generate, name)
    setattr(generate, name, fn)
    try:
        yield
    finally:
        setattr(generate, name, original)


@contextlib.contextmanager
def using_verify(fn: Callable):
    """Run `speculative_generate` with a different verify function inside the block, greedy included (the
    loop's argmax shortcut, `verify_greedy`, is switched off, so fn judges every chain)."""
    with swapped("verify", fn), swapped("verify_greedy", None):
        yield


def verify_late_without_residual(draft_tokens, draft_probs, target_probs, generator=None,
                                 first_wrong: int = 2):
    """Bug that hides at the front: correct for draft positions 0 and 1, no residual from position 2 on.

    A test that only ever drafts one or two tokens cannot see it; the sequence-level tests must.
    """
    for i in range(draft_tokens.shape[0]):
        x = draft_tokens[i]
        u = torch.rand((), generator=generator, device=target_probs.device, dtype=target_probs.dtype)
        if u * draft_probs[i, x] < target_probs[i, x]:
            continue
        wrong = i >= first_wrong
        return i, sample(target_probs[i] if wrong else residual(target_probs[i], draft_probs[i]), generator)
    return draft_tokens.shape[0], sample(target_probs[-1], generator)


def using_step(fn: Callable):
    """Run `speculative_generate` with a different `speculative_step` inside the block (the capstone's
    checker)."""
    return swapped("speculative_step", fn)


def step_with_verify(verify_fn: Callable) -> Callable:
    """The package's `speculative_step` with another verify inside it: a broken step for each broken verify
    above."""
    def step(target_lm, drafter, tokens, gamma, sampling, generator):  # [T] -> ([T + n + 1], Step)
        with using_verify(verify_fn):
            return reference_step(target_lm, drafter, tokens, gamma, sampling, generator)
    step.__name__ = f"step_with_{verify_fn.__name__}"
    return step


def step_target_unprocessed(target_lm, drafter, tokens, gamma, sampling,
                            generator):  # [T] -> ([T + n + 1], Step)
    """Bug: the target's logits go through a plain softmax (no temperature, top-k, top-p) while the draft's
    are processed.

    Reported and fixed in vLLM pull request #10198 (https://github.com/vllm-project/vllm/pull/10198), which
    applies the request's sampling parameters to the target probabilities its rejection sampler compares.
    Verify then tests the draft against a distribution the target is not asked to sample from: at
    temperature 1 with no top-k or top-p nothing changes, at any other setting the output is wrong.
    """
    # [k, V] -> [k, V], ignores `sampling`; greedy too goes through it (the argmax shortcut is off)
    plain_softmax = lambda logits, _sampling: logits.softmax(-1)  # noqa: E731
    with swapped("logits_to_probs", plain_softmax), swapped("verify_greedy", None):
        return reference_step(target_lm, drafter, tokens, gamma, sampling, generator)

"""Checkers for chapter 2, "Draft and verify".

Each `check_*` prints what it verified, or raises AssertionError with a hint. A function that still
raises NotImplementedError is reported as "not attempted yet" instead of failing.
"""
from __future__ import annotations

from typing import Callable

import torch

from ...lab.broken import using_verify
from ...sampling import SamplingConfig, logits_to_probs
from ...lab.stats import SIGNIFICANCE, chi_square_gof, emitted_token_counts
from ...verify import verify
from .common import answered, attempted, direction, random_pairs, toy_exactness_test

GREEDY = SamplingConfig(temperature=0)


def greedy_cases(n: int = 300, vocab: int = 10, seed: int = 0):
    """(draft_tokens [γ], target_logits [γ+1, V]) with drafts that match the target's argmax for a random
    prefix."""
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        gamma = int(torch.randint(1, 6, (), generator=g))
        logits = torch.randn(gamma + 1, vocab, generator=g)
        if i % 7 == 0:
            logits[:, :3] = logits.max()  # ties: the first index of the maximum wins, as in logits_to_probs
        best = logits.argmax(-1)  # [γ+1]
        n_match = int(torch.randint(0, gamma + 1, (), generator=g))
        draft = best[:gamma].clone()
        if n_match < gamma:
            draft[n_match] = (best[n_match] + 1 + int(torch.randint(0, vocab - 1, (), generator=g))) % vocab
            draft[n_match + 1:] = torch.randint(0, vocab, (gamma - n_match - 1,), generator=g)
        yield draft, logits


def check_greedy_verify(fn: Callable) -> None:
    """fn(draft_tokens [γ], target_logits [γ+1, V]) -> (n_accepted, next_token)."""
    d0, l0 = next(greedy_cases(1))
    if not attempted(fn, d0, l0):
        return
    for draft, logits in greedy_cases():
        target_probs = logits_to_probs(logits, GREEDY)  # one-hot rows
        # a greedy draft
        draft_probs = torch.nn.functional.one_hot(draft, logits.shape[-1]).to(target_probs.dtype)
        want_n, want_next = verify(draft, draft_probs, target_probs)
        got_n, got_next = fn(draft, logits)
        assert int(got_n) == want_n, (
            f"draft {draft.tolist()} vs target argmax {logits.argmax(-1).tolist()}: you accepted "
            f"{int(got_n)} tokens, {direction(int(got_n), want_n, 'too many', 'too few')}. Hint: accept "
            "draft tokens while each equals the argmax of the row that predicts it (eq-greedy-accept), and "
            "stop at the first that does not.")
        assert int(torch.as_tensor(got_next).reshape(-1)[0]) == int(want_next), (
            f"draft {draft.tolist()} vs target argmax {logits.argmax(-1).tolist()}: you accepted the right "
            f"number of tokens, {want_n}, but returned next token {got_next}. Hint: the next token is the "
            "target's argmax in the row right after the last accepted draft token.")
    print("Passed: your greedy verify agrees with specdec_ref.verify on 300 random cases "
          "(every accepted length 0..γ, ties included).")


def check_fixed_verify(fn: Callable, n_single: int = 6000, n_sequences: int = 2000) -> None:
    """fn has verify's signature. It must be exact for sampling: one position by Monte Carlo, then
    whole sequences on the toy pair, each with a chi-square test at level SIGNIFICANCE."""
    p0, q0 = next(random_pairs(1))
    if not attempted(fn, torch.tensor([0]), q0[None], torch.stack([p0, p0])):
        return
    p, q = next(random_pairs(1, seed=5))
    counts = emitted_token_counts(fn, p, q, n_single, torch.Generator().manual_seed(0))
    one = chi_square_gof(counts, {i: float(v) for i, v in enumerate(p)})
    print(f"One position, {n_single} draws, chi-square against p_target: {one}, significance level "
          f"{SIGNIFICANCE}")
    assert not one.rejects(SIGNIFICANCE), "the first emitted token is not distributed as p_target"
    with using_verify(fn):
        seq = toy_exactness_test(n_sequences, gamma=4)
    print(f"Five-token sequences on the toy pair (γ = 4): {seq}, significance level {SIGNIFICANCE}")
    assert not seq.rejects(SIGNIFICANCE), "whole sequences are not distributed as the target's"
    print("Passed: neither test can tell your verify from sampling the target.")


def cache_lengths(context_len: int, gamma: int, n_accepted: int) -> tuple[int, int, int, int]:
    """(target before rollback, target after, draft before, draft after) for one iteration of the loop."""
    if not 0 <= n_accepted <= gamma:
        raise ValueError(f"n_accepted must be in [0, γ = {gamma}], got {n_accepted}")
    kept = context_len + n_accepted  # the sequence grows to kept + 1; the newest token is not cached yet
    draft_before = context_len + gamma - 1  # the draft never runs on its own last guess
    return context_len + gamma, kept, draft_before, min(kept, draft_before)


def check_cache_lengths(context_len: int, gamma: int, n_accepted: int, answer) -> None:
    """answer = (target before rollback, target after, draft before, draft after)."""
    if answer is None or answer is NotImplemented:
        print("Not attempted yet: set `answer` to a tuple of four integers.")
        return
    truth = cache_lengths(context_len, gamma, n_accepted)
    names = ["target before rollback", "target after rollback", "draft before rollback",
             "draft after rollback"]
    wrong = [f"{nm}: you said {a}, {direction(int(a), t)}" for nm, a, t in zip(names, answer, truth)
             if int(a) != t]
    assert not wrong, ("\n".join(wrong)
                       + "\nHint: the draft never runs on its own last proposal; after the step "
                       "neither cache holds the token that was just emitted, and rollback only ever shortens "
                       "a cache.")
    print(f"Correct: {dict(zip(names, truth))}")


def perfect_draft_passes(max_new_tokens: int, gamma: int) -> int:
    """Target passes `speculative_generate` makes when every guess is accepted
    (the first one includes the prefill)."""
    if max_new_tokens < 1 or gamma < 1:
        raise ValueError(f"max_new_tokens and gamma must be >= 1, got {max_new_tokens} and {gamma}")
    new = passes = 0
    while new < max_new_tokens:
        g = min(gamma, max_new_tokens - new - 1)  # the loop never drafts past max_new_tokens
        new += g + 1  # g accepted guesses plus the bonus token
        passes += 1
    return passes


def check_perfect_draft_passes(max_new_tokens: int, gamma: int, answer) -> None:
    """answer = target passes for max_new_tokens new tokens when the draft is always right."""
    if not answered(answer, "a number of target passes"):
        return
    truth = perfect_draft_passes(max_new_tokens, gamma)
    assert int(answer) == truth, (
        f"{answer} target passes is {direction(int(answer), truth)}. Hint: with a draft that is always "
        "right, a full iteration yields γ + 1 tokens (eq-tokens-per-pass); count the full "
        "iterations, then ask what the loop does with the tokens left over, given that it never drafts past "
        "max_new_tokens.")
    print(f"Correct: {truth} target passes for {max_new_tokens} tokens with γ = {gamma}, against "
          f"{max_new_tokens} for plain decoding ({max_new_tokens / truth:.1f}x fewer).")

"""What the exercise checkers share: one way to say "not attempted yet", one way to point a wrong answer
the right way without giving the right value away, and the toy exactness test."""
from __future__ import annotations

from typing import Callable

import torch

from ...lab.stats import TestResult, chi_square_gof, speculative_sequence_counts
from ...sampling import SamplingConfig

NOT_ATTEMPTED = "Not attempted yet"  # every checker prints this (and passes) while the exercise is untouched

# The exactness test of tests/test_exactness.py, in miniature: a 3-token float64 Llama and a perturbed
# copy as its draft, the next 5 tokens after PROMPT (3^5 = 243 sequences), chi-square at level SIGNIFICANCE.
PROMPT = [1, 2, 0]
N_TOKENS = 5


def answered(answer, what: str) -> bool:
    """False (and says what to fill in) while a value answer is still None."""
    if answer is None:
        print(f"{NOT_ATTEMPTED}: set the answer to {what} and run the cell again.")
        return False
    return True


def direction(answer: float, truth: float, high: str = "too high", low: str = "too low") -> str:
    """Which way a wrong answer is off, in words (`high` if it is above the truth): never the truth itself.

    Checkers reply to a wrong answer with this, the reader's own value and a pointer to the formula,
    so that `answer = 0` cannot be used as an oracle for the right value.
    """
    return high if answer > truth else low


def attempted(fn: Callable, *args) -> bool:
    """False (and says what to do) while a function answer still raises NotImplementedError."""
    try:
        fn(*args)
    except NotImplementedError:
        print(f"{NOT_ATTEMPTED}: replace the `raise NotImplementedError` with your code and run this cell "
              "again.")
        return False
    return True


def random_pairs(n: int = 200, vocab: int = 6, seed: int = 0):
    """Random (target_probs, draft_probs) pairs in float64, including equal and disjoint ones."""
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        p = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
        q = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
        if i % 10 == 1:
            q = p.clone()  # identical: the residual is never used, but must not be NaN
        if i % 10 == 2:
            p[: vocab // 2], q[vocab // 2:] = 0, 0  # disjoint supports: every draft is rejected
        yield p / p.sum(), q / q.sum()


def toy_exactness_test(n: int = 2000, gamma: int = 4, sampling: SamplingConfig = SamplingConfig(1.0),
                       seed: int = 0) -> TestResult:
    """Speculative samples on the toy pair against the exact 5-token distribution (chi-square).

    Five tokens leave room for γ = 4 draft tokens in one iteration, so every draft position is tested.
    """
    if gamma + 1 > N_TOKENS:
        raise ValueError(f"gamma must be at most {N_TOKENS - 1} so that all γ draft positions are used, got "
                         f"{gamma}")
    from ...models.toy import exact_sequence_distribution, tiny_pair
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the toy's matrices are too small to split: one thread is fastest
    try:
        target, draft = tiny_pair(vocab_size=3, seed=0, noise=0.3)
        exact = exact_sequence_distribution(target, PROMPT, N_TOKENS, sampling)
        counts = speculative_sequence_counts(target, draft, PROMPT, N_TOKENS, gamma, sampling, n,
                                             torch.Generator().manual_seed(seed))
    finally:
        torch.set_num_threads(threads)
    return chi_square_gof(counts, exact)



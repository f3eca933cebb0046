"""Sequence level: speculative decoding samples exactly from the target, and the tests would catch it if not.

Tiny float64 Llamas (vocabulary 6) let us enumerate the exact distribution of the next 3 tokens, and compare
N speculative samples with it by a chi-square goodness-of-fit test at significance ALPHA = 0.001. Seeds are
fixed, so every run draws the same samples: the tests cannot flake.
"""
from collections import Counter

import pytest
import torch

import specdec_ref as sd
from specdec_ref.broken import (DraftProcessedDifferently, using_verify, verify_argmax,
                                verify_without_residual)
from specdec_ref.stats import ALPHA, chi_square_gof
from specdec_ref.toy import exact_sequence_distribution, tiny_llama, tiny_pair

PROMPT = [1, 2, 3]
N_TOKENS = 3
N_SAMPLES = 2500


def speculative_counts(target, draft, gamma, sampling, n=N_SAMPLES, seed=0) -> Counter:
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([PROMPT])
    return Counter(tuple(sd.speculative_generate(target, draft, ids, N_TOKENS, gamma=gamma, sampling=sampling,
                                                 generator=g).tokens.tolist()) for _ in range(n))


CONFIGS = [  # (gamma, SamplingConfig)
    (1, sd.SamplingConfig(1.0)),
    (2, sd.SamplingConfig(1.0)),
    (4, sd.SamplingConfig(1.0)),
    (3, sd.SamplingConfig(0.6)),
    (2, sd.SamplingConfig(1.0, top_k=3)),
    (3, sd.SamplingConfig(0.8, top_p=0.7)),
    (2, sd.SamplingConfig(1.5, top_k=4, top_p=0.9)),
]


@pytest.mark.parametrize("gamma,sampling", CONFIGS)
def test_speculative_sequences_match_exact_target_distribution(toy_pair, gamma, sampling):
    target, draft = toy_pair
    exact = exact_sequence_distribution(target, PROMPT, N_TOKENS, sampling)
    result = chi_square_gof(speculative_counts(target, draft, gamma, sampling), exact)
    assert not result.rejects(ALPHA), f"gamma={gamma} {sampling}: {result}"


def test_ngram_drafter_sequences_match_exact_target_distribution(toy_pair):
    target, _ = toy_pair
    sampling = sd.SamplingConfig(1.0)
    exact = exact_sequence_distribution(target, [1, 2, 1], N_TOKENS, sampling)  # a repeat, so lookups fire
    g = torch.Generator().manual_seed(0)
    counts, drafted = Counter(), 0
    for _ in range(N_SAMPLES):
        out = sd.speculative_generate(target, sd.NgramDrafter(6), torch.tensor([[1, 2, 1]]), N_TOKENS, gamma=3,
                                      sampling=sampling, generator=g)
        counts[tuple(out.tokens.tolist())] += 1
        drafted += sum(out.stats.drafted)
    assert drafted > N_SAMPLES  # the lookup really proposed tokens
    assert not chi_square_gof(counts, exact).rejects(ALPHA)


# --- power: the same test rejects deliberately broken samplers ---------------------------------------------

def test_chi_square_rejects_sampler_without_residual(toy_pair):
    target, draft = toy_pair
    sampling = sd.SamplingConfig(1.0)
    with using_verify(verify_without_residual):
        counts = speculative_counts(target, draft, 2, sampling)
    assert chi_square_gof(counts, exact_sequence_distribution(target, PROMPT, N_TOKENS, sampling)).rejects(ALPHA)


def test_chi_square_rejects_argmax_acceptance(toy_pair):
    target, draft = toy_pair
    sampling = sd.SamplingConfig(1.0)
    with using_verify(verify_argmax):
        counts = speculative_counts(target, draft, 2, sampling)
    assert chi_square_gof(counts, exact_sequence_distribution(target, PROMPT, N_TOKENS, sampling)).rejects(ALPHA)


def test_chi_square_rejects_draft_processed_differently_from_target(toy_pair):
    target, draft = toy_pair
    sampling = sd.SamplingConfig(0.6, top_p=0.8)  # the loop's config; the broken draft samples at T=1 instead
    broken = DraftProcessedDifferently(sd.ModelDrafter(draft), actual=sd.SamplingConfig(1.0))
    g = torch.Generator().manual_seed(0)
    counts = Counter(tuple(sd.speculative_generate(target, broken, torch.tensor([PROMPT]), N_TOKENS, gamma=3,
                                                   sampling=sampling, generator=g).tokens.tolist())
                     for _ in range(N_SAMPLES))
    assert chi_square_gof(counts, exact_sequence_distribution(target, PROMPT, N_TOKENS, sampling)).rejects(ALPHA)


# --- greedy: token for token -------------------------------------------------------------------------------

@pytest.mark.parametrize("gamma", [1, 2, 3, 4, 5, 8, 16])
def test_greedy_speculative_equals_greedy_target(gamma):
    greedy = sd.SamplingConfig(temperature=0)
    for seed in range(3):
        target, draft = tiny_pair(vocab_size=8, seed=seed, noise=0.3, hidden=32, n_layers=2)
        ids = torch.tensor([[seed + 1, 2, 3, 4]])
        plain = sd.autoregressive_generate(target, ids, 40, sampling=greedy)
        spec = sd.speculative_generate(target, draft, ids, 40, gamma=gamma, sampling=greedy)
        assert spec.tokens.tolist() == plain.tokens.tolist()
        assert 0 < spec.stats.acceptance_rate < 1  # both branches of the rule were exercised


def test_greedy_speculative_with_unrelated_draft_and_ngram_drafter_equals_greedy_target():
    greedy = sd.SamplingConfig(temperature=0)
    target, other = tiny_llama(8, seed=0, hidden=32), tiny_llama(8, seed=99, hidden=32)
    ids = torch.tensor([[1, 2, 3, 1, 2]])
    plain = sd.autoregressive_generate(target, ids, 30, sampling=greedy).tokens.tolist()
    assert sd.speculative_generate(target, other, ids, 30, gamma=3, sampling=greedy).tokens.tolist() == plain
    assert sd.speculative_generate(target, sd.NgramDrafter(8), ids, 30, gamma=3, sampling=greedy).tokens.tolist() == plain


def test_greedy_comparison_detects_argmax_bug_free_but_wrong_loop(toy_pair):
    """Power of the greedy test: accepting every draft token (no verification) changes the output."""
    target, draft = tiny_pair(vocab_size=8, seed=0, noise=0.3, hidden=32, n_layers=2)
    greedy = sd.SamplingConfig(temperature=0)
    ids = torch.tensor([[1, 2, 3, 4]])
    plain = sd.autoregressive_generate(target, ids, 40, sampling=greedy).tokens.tolist()
    accept_all = lambda toks, dp, tp, g=None: (toks.shape[0], tp[-1].argmax()[None])  # noqa: E731
    with using_verify(accept_all):
        wrong = sd.speculative_generate(target, draft, ids, 40, gamma=4, sampling=greedy).tokens.tolist()
    assert wrong != plain

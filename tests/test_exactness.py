"""Sequence level: speculative decoding samples exactly from the target, and the tests would catch it if not.

Tiny float64 Llamas with a vocabulary of 3 let us enumerate the exact distribution of the next 5 tokens
(3^5 = 243 sequences), and compare N speculative samples with it by a chi-square goodness-of-fit test at
significance level SIGNIFICANCE = 0.001. Every case generates at least γ + 1 tokens, so the draft really
proposes γ tokens in an iteration and every draft position is tested. Seeds are fixed, so every run
draws the same samples: the tests cannot flake.
"""
from collections import Counter

import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab.broken import (DraftProcessedDifferently, using_verify, verify_argmax,
                                    verify_late_without_residual, verify_without_residual)
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof, speculative_sequence_counts
from specdec_ref.models.toy import exact_sequence_distribution, tiny_llama, tiny_pair

VOCAB, PROMPT, N_TOKENS, N_SAMPLES = 3, [1, 2, 0], 5, 2000
T1 = sd.SamplingConfig(1.0)

pytestmark = pytest.mark.slow  # thousands of generations per test: minutes in all, so outside the fast loop


@pytest.fixture(scope="module")
def pair3():
    """Target and a noisy copy as draft, vocabulary 3; per-token acceptance about 0.5 at T=1."""
    return tiny_pair(vocab_size=VOCAB, seed=0, noise=0.3)


def counts(target, drafter, gamma, sampling, seed=0, prompt=PROMPT) -> Counter:
    return speculative_sequence_counts(target, drafter, prompt, N_TOKENS, gamma, sampling, N_SAMPLES,
                                       torch.Generator().manual_seed(seed))


def exact(target, sampling, prompt=PROMPT) -> dict:
    return exact_sequence_distribution(target, prompt, N_TOKENS, sampling)


CONFIGS = [  # (gamma, SamplingConfig); every gamma <= N_TOKENS - 1
    (1, T1),
    (2, T1),
    (4, T1),
    (3, sd.SamplingConfig(0.6)),
    (2, sd.SamplingConfig(1.0, top_k=2)),
    (3, sd.SamplingConfig(0.8, top_p=0.7)),
    (4, sd.SamplingConfig(1.5, top_k=2, top_p=0.9)),
]


@pytest.mark.parametrize("gamma,sampling", CONFIGS)
def test_speculative_sequences_match_exact_target_distribution(pair3, gamma, sampling):
    target, draft = pair3
    assert gamma + 1 <= N_TOKENS, "the case must be long enough for the draft to use all γ positions"
    result = chi_square_gof(counts(target, draft, gamma, sampling), exact(target, sampling))
    assert not result.rejects(SIGNIFICANCE), f"gamma={gamma} {sampling}: {result}"


def test_ngram_drafter_sequences_match_exact_target_distribution(pair3):
    target, _ = pair3
    prompt = [1, 2, 1, 2, 1]  # a repeat, so lookups fire
    drafter = sd.NgramDrafter(VOCAB)
    c = counts(target, drafter, 3, T1, prompt=prompt)
    assert drafter.calls > N_SAMPLES  # the lookup really ran (and proposed: see the greedy test below)
    assert not chi_square_gof(c, exact(target, T1, prompt)).rejects(SIGNIFICANCE)


def test_every_draft_position_is_reached(pair3):
    """The γ = 4 case really drafts 4 tokens and really accepts all of them sometimes."""
    target, draft = pair3
    steps = []
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        sd.speculative_generate(target, draft, torch.tensor([PROMPT]), N_TOKENS, gamma=4, sampling=T1,
                                generator=g, on_step=steps.append)
    assert max(s.draft_tokens.shape[0] for s in steps) == 4
    assert sum(s.n_accepted >= 3 for s in steps) > 20  # position 4 is examined often


# --- power: the same test rejects deliberately broken samplers ---------------------------------------------

@pytest.mark.parametrize("broken, gamma", [(verify_without_residual, 2), (verify_argmax, 2),
                                           (verify_late_without_residual, 4)])
def test_chi_square_rejects_broken_verify(pair3, broken, gamma):
    """Includes a bug that only shows at draft positions >= 3: a test that drafts 2 tokens could not see
    it."""
    target, draft = pair3
    with using_verify(broken):
        c = counts(target, draft, gamma, T1)
    assert chi_square_gof(c, exact(target, T1)).rejects(SIGNIFICANCE), broken.__name__


def test_late_bug_is_invisible_when_only_two_tokens_are_drafted(pair3):
    """Why every case must reach every position: with γ = 2 the late bug never runs, so the test passes."""
    target, draft = pair3
    with using_verify(verify_late_without_residual):
        c = counts(target, draft, 2, T1)
    assert not chi_square_gof(c, exact(target, T1)).rejects(SIGNIFICANCE)


def test_chi_square_rejects_draft_processed_differently_from_target(pair3):
    target, draft = pair3
    sampling = sd.SamplingConfig(0.4, top_p=0.8)  # the loop's config; the broken draft samples at T=1 instead
    broken = DraftProcessedDifferently(sd.ModelDrafter(draft), actual=T1)
    assert chi_square_gof(counts(target, broken, 3, sampling), exact(target, sampling)).rejects(SIGNIFICANCE)


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
    assert sd.speculative_generate(target, sd.NgramDrafter(8), ids, 30, gamma=3,
                                   sampling=greedy).tokens.tolist() == plain


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

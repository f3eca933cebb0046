"""The statistical helpers: calibrated on correct samples, powerful against wrong ones, exact where they
claim to be.

Every random draw is seeded, so these tests cannot flake; significance level SIGNIFICANCE = 0.001 throughout.
"""
from collections import Counter

import numpy as np
import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab import stats
from specdec_ref.lab.broken import verify_argmax, verify_without_residual
from specdec_ref.lab.stats import SIGNIFICANCE

P = {"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05}


def multinomial_counts(probs: dict, n: int, seed: int) -> Counter:
    rng = np.random.default_rng(seed)
    keys = list(probs)
    draws = rng.choice(len(keys), size=n, p=np.array([probs[k] for k in keys]))
    return Counter(keys[i] for i in draws)


def test_chi_square_gof_does_not_reject_samples_from_the_null():
    for seed in range(5):
        assert not stats.chi_square_gof(multinomial_counts(P, 5000, seed), P).rejects(SIGNIFICANCE)


def test_chi_square_gof_rejects_samples_from_a_shifted_distribution():
    shifted = {"a": 0.45, "b": 0.35, "c": 0.15, "d": 0.05}
    assert stats.chi_square_gof(multinomial_counts(shifted, 5000, 0), P).rejects(SIGNIFICANCE)


def test_chi_square_gof_pools_bins_with_small_expected_counts():
    probs = {i: 0.9 if i == 0 else 0.1 / 999 for i in range(1000)}
    result = stats.chi_square_gof(multinomial_counts(probs, 2000, 0), probs)
    assert result.bins < 1000 and result.dof == result.bins - 1
    assert not result.rejects(SIGNIFICANCE)


def test_chi_square_gof_gives_p_zero_for_a_sample_outside_the_support():
    assert stats.chi_square_gof(Counter({"a": 10, "z": 1}), P).p_value == 0.0


def test_two_sample_chi_square_calibrated_and_powerful():
    same = stats.two_sample_chi_square(multinomial_counts(P, 3000, 1).elements(),
                                       multinomial_counts(P, 3000, 2).elements())
    assert not same.rejects(SIGNIFICANCE)
    other = {"a": 0.4, "b": 0.4, "c": 0.15, "d": 0.05}
    assert stats.two_sample_chi_square(multinomial_counts(P, 3000, 1).elements(),
                                       multinomial_counts(other, 3000, 2).elements()).rejects(SIGNIFICANCE)


def test_tv_distance_of_exact_frequencies():
    assert stats.tv_distance(Counter({"a": 50, "b": 30, "c": 15, "d": 5}), P) == pytest.approx(0.0)
    assert stats.tv_distance(Counter({"a": 100}), P) == pytest.approx(0.5)


def test_tv_upper_bound_covers_the_true_distance_and_shrinks_with_n():
    q = {"a": 0.4, "b": 0.35, "c": 0.2, "d": 0.05}
    true_tv = 0.5 * sum(abs(q[k] - P[k]) for k in P)
    bounds = [stats.tv_upper_bound(multinomial_counts(q, 2000, seed), P) for seed in range(20)]
    assert all(b >= true_tv for b in bounds)
    assert stats.tv_upper_bound(multinomial_counts(P, 50_000, 0), P) < stats.tv_upper_bound(
        multinomial_counts(P, 2000, 0), P) < 1


def test_probs_to_dict_keeps_only_positive_entries():
    assert stats.probs_to_dict(torch.tensor([0.5, 0.0, 0.5])) == {0: 0.5, 2: 0.5}


def _pair(seed=0, vocab=8):
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(vocab, generator=g, dtype=torch.float64).mul(1.5).softmax(-1)
    q = torch.randn(vocab, generator=g, dtype=torch.float64).mul(1.5).softmax(-1)
    return p, q


def test_emitted_token_counts_of_verify_match_target_by_chi_square():
    p, q = _pair()
    counts = stats.emitted_token_counts(sd.verify, p, q, 6000, torch.Generator().manual_seed(0))
    assert sum(counts.values()) == 6000
    assert not stats.chi_square_gof(counts, stats.probs_to_dict(p)).rejects(SIGNIFICANCE)


@pytest.mark.parametrize("broken", [verify_without_residual, verify_argmax])
def test_emitted_token_counts_expose_broken_verify(broken):
    p, q = _pair()
    counts = stats.emitted_token_counts(broken, p, q, 6000, torch.Generator().manual_seed(0))
    assert stats.chi_square_gof(counts, stats.probs_to_dict(p)).rejects(SIGNIFICANCE)


def test_emitted_token_counts_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="same length"):
        stats.emitted_token_counts(sd.verify, torch.ones(3) / 3, torch.ones(4) / 4, 10)


@pytest.mark.parametrize("seed", range(5))
def test_emitted_distribution_of_the_correct_rule_is_exactly_the_target(seed):
    p, q = _pair(seed)
    if seed == 1:
        q[:3] = 0  # the draft never proposes some tokens the target likes
        q /= q.sum()
    if seed == 2:
        p[5:] = 0  # the target forbids tokens the draft proposes
        p /= p.sum()
    torch.testing.assert_close(stats.emitted_distribution(p, q), p, atol=1e-12, rtol=0)


def test_emitted_distribution_predicts_the_no_residual_bug_monte_carlo():
    p, q = _pair(3)
    predicted = stats.emitted_distribution(p, q, resample_from=p)
    assert 0.5 * float((predicted - p).abs().sum()) > 0.02  # the bug really moves the distribution
    counts = stats.emitted_token_counts(verify_without_residual, p, q, 8000, torch.Generator().manual_seed(1))
    assert not stats.chi_square_gof(counts, stats.probs_to_dict(predicted)).rejects(SIGNIFICANCE)


def test_emitted_distribution_predicts_a_draft_that_sampled_from_something_else():
    p, q_claimed = _pair(4)
    q_actual = (q_claimed.log() / 0.5).softmax(-1)
    predicted = stats.emitted_distribution(p, q_claimed, sampled_from=q_actual)
    told = lambda toks, dp, tp, g=None: sd.verify(toks, q_claimed[None], tp, g)  # noqa: E731
    counts = stats.emitted_token_counts(told, p, q_actual, 8000, torch.Generator().manual_seed(2))
    assert not stats.chi_square_gof(counts, stats.probs_to_dict(predicted)).rejects(SIGNIFICANCE)
    assert stats.chi_square_gof(counts, stats.probs_to_dict(p)).rejects(SIGNIFICANCE)


def test_speculative_sequence_counts_returns_n_sequences_of_the_requested_length(toy_pair):
    target, draft = toy_pair
    counts = stats.speculative_sequence_counts(target, draft, [1, 2, 3], 3, 2, sd.SamplingConfig(1.0), 50,
                                               torch.Generator().manual_seed(0))
    assert sum(counts.values()) == 50 and all(len(s) == 3 for s in counts)


def test_target_sequence_counts_match_exact_distribution(toy_pair):
    from specdec_ref.models.toy import exact_sequence_distribution
    target, _ = toy_pair
    sampling = sd.SamplingConfig(0.8, top_k=4)
    exact = exact_sequence_distribution(target, [1, 2, 3], 3, sampling)
    counts = stats.target_sequence_counts(target, [1, 2, 3], 3, sampling, 20_000,
                                          torch.Generator().manual_seed(0), batch_size=7)
    assert sum(counts.values()) == 20_000
    assert not stats.chi_square_gof(counts, exact).rejects(SIGNIFICANCE)
    # power: the same samples are rejected against a different temperature's distribution
    assert stats.chi_square_gof(counts, exact_sequence_distribution(target, [1, 2, 3], 3,
                                                                    sd.SamplingConfig(1.0))).rejects(SIGNIFICANCE)

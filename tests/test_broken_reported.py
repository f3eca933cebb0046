"""The broken samplers from real bug reports (specdec_ref.lab.broken), as chapter 3's gallery runs them:
the chapter's chi-square test of 5-token speculative samples of the toy pair against their exact
distribution rejects each one, and does not reject the correct sampler on the same settings and seed.

Seeds are fixed (SEED); the significance level is stats.SIGNIFICANCE (0.001). N is the chapter's
quick-mode sample size for a bug with a large effect (N_BUG): at it, each bug's p-value is far below the
level (about 1e-20 or less at this seed), so a small change of seed cannot flip these tests.
"""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab import broken, stats
from specdec_ref.models.toy import exact_sequence_distribution, tiny_pair

SIGNIFICANCE = stats.SIGNIFICANCE  # a correct sampler fails one of these tests 1 time in 1000
SEED, N = 0, 300
PROMPT, TOKENS, GAMMA = [1, 2, 0], 5, 3  # γ + 1 <= TOKENS: every draft position is examined
T1 = sd.SamplingConfig(1.0)
PROCESSED = sd.SamplingConfig(0.4, top_p=0.8)  # chapter 3's BUG_SAMPLING: the target's settings matter


@pytest.fixture(scope="module")
def toy():
    torch.set_num_threads(1)
    return tiny_pair(vocab_size=3, seed=0, noise=0.3)


def p_value(toy, sampling, *, verify_fn=sd.verify, drafter=None, step=None) -> float:
    target, draft = toy
    swap = broken.using_step(step) if step is not None else broken.using_verify(verify_fn)
    with swap:
        counts = stats.speculative_sequence_counts(target, drafter if drafter is not None else draft, PROMPT,
                                                   TOKENS, GAMMA, sampling, N,
                                                   torch.Generator().manual_seed(SEED))
    return stats.chi_square_gof(counts, exact_sequence_distribution(target, PROMPT, TOKENS, sampling)).p_value


def test_chi_square_rejects_a_greedy_draft_under_a_sampling_target(toy):  # transformers #32867
    drafter = broken.draft_greedy_while_target_samples(sd.ModelDrafter(toy[1]))
    assert p_value(toy, T1, drafter=drafter) < SIGNIFICANCE


def test_chi_square_rejects_a_target_without_its_sampling_settings(toy):  # vLLM #10198
    assert p_value(toy, PROCESSED, step=broken.step_target_unprocessed) < SIGNIFICANCE


def test_chi_square_rejects_draft_probability_one_for_a_sampled_token(toy):  # EAGLE #183
    assert p_value(toy, T1, verify_fn=broken.verify_draft_prob_one) < SIGNIFICANCE


@pytest.mark.parametrize("sampling", [T1, PROCESSED], ids=["T=1", "T=0.4,top-p=0.8"])
def test_chi_square_passes_the_correct_sampler_on_the_same_settings(toy, sampling):
    assert p_value(toy, sampling) >= SIGNIFICANCE


def test_draft_probability_one_is_wrong_exactly_at_one_position():
    """No sampling: the exact output of the q(x) = 1 rule, p_draft * p_target on the accepted path plus the
    rest from the residual, is not p_target, whereas verify's rule gives p_target."""
    target_probs = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    draft_probs = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    accepted = draft_probs * target_probs  # [V] what `verify_draft_prob_one` accepts
    out = accepted + (1 - accepted.sum()) * sd.residual(target_probs, draft_probs)
    assert float((out - target_probs).abs().max()) > 0.05
    assert torch.allclose(stats.emitted_distribution(target_probs, draft_probs), target_probs)


def test_step_target_unprocessed_changes_nothing_at_temperature_one():
    """Its docstring's claim: a plain softmax is the processing of T = 1 without top-k or top-p."""
    logits = torch.randn(4, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))
    assert torch.allclose(sd.logits_to_probs(logits, T1), logits.softmax(-1))
    assert not torch.allclose(sd.logits_to_probs(logits, PROCESSED), logits.softmax(-1))

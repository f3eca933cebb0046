"""Chapter 6, "In production": each verdict sentence follows its measurements
(flip the numbers, the sentence flips)."""
from specdec_ref.chapters.verdicts.ch6 import overhead_verdict, tree_vs_chain_verdict


def test_tree_vs_chain_verdict_follows_the_numbers():
    assert tree_vs_chain_verdict(1.4, 1.1).startswith("the tree is ahead")
    assert tree_vs_chain_verdict(1.1, 1.4).startswith("the chain is ahead")
    assert "level" in tree_vs_chain_verdict(1.20, 1.21)


def test_overhead_verdict_follows_the_numbers():
    assert "at most" in overhead_verdict(5.0, 7.0)
    assert "more than" in overhead_verdict(9.0, 7.0)


def test_confidence_stop_verdict_says_most_drafts_are_short_only_when_they_are():
    from specdec_ref.chapters.verdicts.ch6 import confidence_stop_verdict
    short = confidence_stop_verdict([1, 2, 1, 20, 2], [20] * 5, hf_passes=3.1)
    long = confidence_stop_verdict([1, 12, 20, 20, 9], [20] * 5)
    assert ("ends most drafts after 2 tokens or fewer" in short and "4 of 5 (80%)" in short
            and "3.1 draft passes" in short)
    assert "most drafts ran longer" in long and "1 of 5 (20%)" in long
    assert "not measured" in confidence_stop_verdict([], [])


def test_greedy_agreement_verdict_follows_the_splits():
    from specdec_ref.chapters.verdicts.ch6 import greedy_agreement_verdict
    assert greedy_agreement_verdict(8, 8, 0, 0).startswith("all 8 greedy runs")
    assert "near-ties that rounding explains" in greedy_agreement_verdict(7, 8, 1, 1)
    assert "suspect a bug" in greedy_agreement_verdict(7, 8, 1, 0)


def test_distribution_verdict_flips_at_the_level():
    from specdec_ref.chapters.verdicts.ch6 import distribution_verdict
    good = distribution_verdict({"a": 0.4, "b": 0.02}, 1e-6, 0.001)
    assert "none of the 2 tests finds a difference" in good and "rejects the broken sampler" in good
    bad = distribution_verdict({"a": 0.4, "b": 0.0001}, 0.3, 0.001)
    assert "reject b" in bad and "does not reject the broken sampler" in bad


def test_lookup_verdict_says_free_only_within_the_margin():
    from specdec_ref.chapters.verdicts.ch6 import lookup_verdict
    assert ("cost almost nothing extra" in lookup_verdict(2.0, 0.98)
            and "it paid" in lookup_verdict(2.0, 0.98))
    assert "safe default" not in lookup_verdict(2.0, 0.98)  # one prompt supports no general advice
    assert "on that one prompt" in lookup_verdict(2.0, 0.98)
    four = lookup_verdict(2.0, 0.98, n_free=4)
    assert "On 4 free-text prompts it ran at 0.98×" in four and "on those prompts" in four
    assert "one" not in four
    assert "cost almost nothing extra" not in lookup_verdict(2.0, 0.8)
    slow = lookup_verdict(0.9, 0.8)
    assert "a cost of 20%" in slow and "not free" in slow and "did not pay" in slow
    assert "found stretches to copy" in lookup_verdict(1.5, 1.3)


def test_roofline_turn_verdict_compares_the_measured_rise_with_the_ridge():
    from specdec_ref.chapters.verdicts.ch6 import roofline_turn_verdict
    assert "sooner than the roofline says" in roofline_turn_verdict(8, 64, 128)
    assert "chapter 1 found" not in roofline_turn_verdict(8, 64, 128)  # a cause is offered, not asserted
    assert "not tested here" in roofline_turn_verdict(8, 64, 128)
    assert "sooner than the roofline says" in roofline_turn_verdict(8, None, 128)
    assert "roofline predicts" in roofline_turn_verdict(64, 32, 128)
    assert "stays nearly free" in roofline_turn_verdict(None, None, 128)


def test_breakeven_verdict_finds_the_crossing_or_says_there_is_none():
    from specdec_ref.chapters.verdicts.ch6 import breakeven_verdict
    assert "falls to 1× or below at B = 8" in breakeven_verdict({1: 1.5, 4: 1.2, 8: 0.9, 16: 0.7})
    assert "stays above 1× up to B = 16" in breakeven_verdict({1: 1.5, 16: 1.1})
    assert "never rises above 1×" in breakeven_verdict({1: 0.9, 16: 0.5})


def test_long_context_verdict_says_pays_again_only_when_the_long_curve_is_ahead():
    from specdec_ref.chapters.verdicts.ch6 import long_context_verdict
    again = long_context_verdict({1: 1.8, 512: 0.97, 1024: 0.85}, {1: 1.8, 512: 1.57}, 512, 8192)
    assert "pays again" in again and "no longer" in again and "B = 512" in again
    less = long_context_verdict({1: 1.8, 64: 1.7}, {1: 1.8, 64: 1.2}, 512, 8192)
    assert "pay less, not more" in less
    assert "hardly changes" in long_context_verdict({1: 1.8}, {1: 1.8}, 512, 8192)


def test_broken_sampler_caught_verdict_flips_at_the_level():
    from specdec_ref.chapters.verdicts.ch6 import broken_sampler_caught_verdict
    assert broken_sampler_caught_verdict(0.001, 0.01).startswith("rejects it")
    missed = broken_sampler_caught_verdict(0.2, 0.01)
    assert missed.startswith("does not reject it") and "power" in missed


def test_second_candidates_verdict_says_helped_only_when_the_tree_keeps_more():
    from specdec_ref.chapters.verdicts.ch6 import second_candidates_verdict
    assert "helped" in second_candidates_verdict(1.4, 1.1)
    assert "did not" in second_candidates_verdict(1.1, 1.4) and "fewer" in second_candidates_verdict(1.1, 1.4)
    level = second_candidates_verdict(1.102, 1.1)
    assert "did not" in level and "as many" in level and "helped" not in level


def test_topk_mass_verdict_follows_beta_and_the_mass():
    from specdec_ref.chapters.verdicts.ch6 import topk_mass_verdict
    assert "keeps less than a sampled chain" in topk_mass_verdict(0.8, 0.5, 3)
    assert "still keeps more" in topk_mass_verdict(0.5, 0.8, 3)
    assert "level" in topk_mass_verdict(0.6, 0.61, 3)


def test_hf_gamma_verdict_reads_the_speed_gap_only_when_hf_drafted_gamma():
    from specdec_ref.chapters.verdicts.ch6 import hf_gamma_verdict as v
    alike = v(2.9, 0.97, 3)
    assert "close to γ = 3" in alike and "did not apply them" in alike
    assert "a reading, not a measurement" in alike
    unlike = v(1.2, 1.1, 3)
    assert "not γ = 3" in unlike and "mix draft length with loop cost" in unlike
    assert "made no difference" in unlike and "beyond the model passes" not in unlike
    compiled = v(2.9, 0.97, 3, same_kernels=False)  # our loops on the compiled pass, Hugging Face's eager
    assert "mixes the two kernels" in compiled and "lies in what each iteration" not in compiled
    assert "mixes the two kernels" not in alike
    unlike_compiled = v(1.2, 1.1, 3, same_kernels=False)
    assert "mix draft length with loop cost and kernels" in unlike_compiled
    assert "compiled pass" in unlike_compiled
    assert "compiled pass" not in unlike


def test_tau_time_verdict_says_whether_the_two_comparisons_agree():
    from specdec_ref.chapters.verdicts.ch6 import tau_time_verdict as v
    assert v(2.0, 1.6, 1.3, 1.1) == "Here the two comparisons agree: the tree is ahead of the chain in both."
    rows = v(2.0, 1.6, 1.0, 1.1)
    assert "disagree" in rows and "ahead of the chain in tokens per target pass but behind it" in rows
    assert "extra rows cost more time" in rows
    noise = v(1.6, 1.6, 1.3, 1.1)
    assert "level with the chain in tokens per target pass but ahead of it" in noise and "noise" in noise


def test_batch_speedup_reduces_to_chapter_4s_generalised_speedup_at_batch_one():
    import pytest

    from specdec_ref.chapters.production import batch_speedup
    from specdec_ref.lab.speedup import generalized_speedup
    costs = {(1, 1): 10.0, (1, 4): 12.0, (8, 1): 14.0, (8, 4): 30.0}
    draft = {(1, 1): 2.0, (8, 1): 3.0}
    want = generalized_speedup(0.7, 3, 0.2, 1.2, 0.3)
    assert batch_speedup(costs, draft, 0.7, 3, 1, overhead=0.3) == pytest.approx(want)
    assert batch_speedup(costs, draft, 0.7, 3, 1) > batch_speedup(costs, draft, 0.7, 3, 1, overhead=0.3)
    at_8 = generalized_speedup(0.7, 3, 3 / 14, 30 / 14)
    assert batch_speedup(costs, draft, 0.7, 3, 8) == pytest.approx(at_8)


def test_tree_prediction_verdict_flips_with_the_measurement_and_refuses_a_bad_guess():
    import pytest

    from specdec_ref.chapters.verdicts.ch6 import tree_prediction_verdict
    assert tree_prediction_verdict(None, 1.3, 1.1) == ""
    assert "and it was faster" in tree_prediction_verdict("tree", 1.3, 1.1)
    assert "but the chain was faster" in tree_prediction_verdict("tree", 1.0, 1.2)
    assert "but the tree was faster" in tree_prediction_verdict("chain", 1.3, 1.1)
    assert "level" in tree_prediction_verdict("chain", 1.20, 1.19)
    with pytest.raises(ValueError, match='"tree", "chain" or None'):
        tree_prediction_verdict("the tree", 1.3, 1.1)


def test_sampled_children_verdict_follows_all_three_numbers():
    from specdec_ref.chapters.verdicts.ch6 import sampled_children_verdict
    both = sampled_children_verdict(0.7, 0.5, 0.4, 3)
    assert "more than one sampled child (β) and more than the top-3" in both
    assert "though not more than the top-3" in sampled_children_verdict(0.6, 0.5, 0.7, 3)
    assert "though not more than one sampled child" in sampled_children_verdict(0.6, 0.7, 0.5, 3)
    assert "no more than" in sampled_children_verdict(0.5, 0.5, 0.5, 3)

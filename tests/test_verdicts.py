"""Each verdict sentence follows its measurements: flip the numbers and the sentence flips."""
from specdec_ref.chapters.verdicts import kernel_verdict, overhead_verdict, tree_vs_chain_verdict


def test_kernel_verdict_says_within_goal_only_when_it_is():
    before = {1: 1.0, 2: 1.7, 4: 1.8, 8: 1.8}
    good = kernel_verdict(before, {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2})
    bad = kernel_verdict(before, {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.45})
    assert "within 1.25×, as the memory-bound" in good and "cut the cost" in good
    assert "up to k = 4" in bad and "compute-bound" in bad


def test_kernel_verdict_says_when_prepacking_did_not_help():
    s = kernel_verdict({1: 1.0, 8: 1.3}, {1: 1.0, 8: 1.4})
    assert "did not help" in s and "no k > 1" in s


# Chapters 1-3: every comparative sentence of their prose, on both sides of its threshold

def test_one_pass_verdict_says_cheaper_and_free_only_when_measured():
    from specdec_ref.chapters.verdicts import one_pass_verdict
    assert one_pass_verdict(1.1, 8.0).startswith("Far cheaper") and "nearly free" in one_pass_verdict(1.1, 8.0)
    assert "but not free" in one_pass_verdict(1.8, 8.0)
    assert one_pass_verdict(5.0, 8.0).startswith("Cheaper than")
    assert "gains nothing" in one_pass_verdict(8.5, 8.0)


def test_adds_up_verdict_follows_the_sequential_passes():
    from specdec_ref.chapters.verdicts import adds_up_verdict
    assert "on the dashed line" in adds_up_verdict(8.3)
    assert "below the dashed line" in adds_up_verdict(5.0)
    assert "above the dashed line" in adds_up_verdict(11.0)


def test_knee_verdict_says_early_rise_near_knee_or_flat():
    from specdec_ref.chapters.verdicts import knee_verdict
    early = knee_verdict({1: 1.0, 2: 1.1, 4: 1.2, 8: 1.4, 16: 1.7}, knee=60)
    assert "rises long before" in early and "k = 8" in early
    near = knee_verdict({1: 1.0, 16: 1.05, 32: 1.1, 64: 1.5}, knee=50)
    assert "fair forecast" in near and "up to k = 32" in near
    late = knee_verdict({1: 1.0, 16: 1.05, 32: 1.1, 64: 1.5}, knee=10)
    assert "well past the predicted knee" in late
    flat = knee_verdict({1: 1.0, 8: 1.1, 64: 1.2}, knee=300)
    assert "stays within 1.25× one token up to k = 64, the largest k measured" in flat


def test_roofline_verdict_places_decoding_against_the_ridge():
    from specdec_ref.chapters.verdicts import roofline_verdict
    assert "well under the ridge" in roofline_verdict(0.5, 10.0, 40)
    assert "just under the ridge" in roofline_verdict(7.0, 10.0, 40)
    assert "past the ridge" in roofline_verdict(12.0, 10.0, 40)


def test_climb_verdict_compares_with_the_roof():
    from specdec_ref.chapters.verdicts import climb_verdict
    assert "more slowly than the roof" in climb_verdict(10.0, 64.0, 64, 30)
    assert "about as fast as the roof" in climb_verdict(60.0, 64.0, 64, 30)
    assert "faster than the roof" in climb_verdict(18.0, 10.6, 64, 64)


def test_kernel_share_verdict_places_the_rise():
    from specdec_ref.chapters.verdicts import kernel_share_verdict
    assert "lives in the matrix-product kernels" in kernel_share_verdict(1.7, 1.8)
    assert "rises even more than the whole pass" in kernel_share_verdict(2.73, 1.42)
    assert "stays nearly flat" in kernel_share_verdict(1.05, 1.8)
    assert "part of the rise" in kernel_share_verdict(1.4, 1.8)
    assert "neither rises much" in kernel_share_verdict(1.02, 1.05)


def test_depth_verdict_follows_the_two_steps():
    from specdec_ref.chapters.verdicts import depth_verdict
    costly = depth_verdict(0.010, 0.004, extra_ops=600)
    assert "depth costs wall time" in costly and "10 µs per extra operation" in costly
    assert "does not show as a cost" in depth_verdict(0.003, 0.004, extra_ops=600)
    assert "about the same" in depth_verdict(0.0041, 0.004, extra_ops=600)


def test_break_even_verdict_says_when_no_draft_can_pay():
    from specdec_ref.chapters.verdicts import break_even_verdict
    assert "more than 1.60 tokens" in break_even_verdict(1.6, 4)
    assert "cannot pay" in break_even_verdict(5.2, 4)


def test_greedy_match_verdict_follows_the_comparison():
    from specdec_ref.chapters.verdicts import greedy_match_verdict
    assert "wrote the same tokens" in greedy_match_verdict(True, 20, 32)
    assert "did not write the same tokens" in greedy_match_verdict(False, 20, 32)


def test_chapter3_test_verdicts_flip_at_the_significance_level():
    from specdec_ref.chapters.verdicts import configs_verdict, fit_verdict, shift_verdict, two_sample_verdict
    assert "fit the target's distribution" in fit_verdict(0.4, 4000, 0.001)
    assert "The test rejects" in fit_verdict(0.0001, 4000, 0.001)
    assert configs_verdict({"a": 0.3, "b": 0.05}, 1000, 0.001).startswith("None of the 2")
    assert configs_verdict({"a": 0.3, "b": 0.0001}, 1000, 0.001).startswith("1 of the 2 configurations are rejected (b")
    assert "finds no difference" in two_sample_verdict(0.2, 50, 0.001)
    assert "finds a difference" in two_sample_verdict(1e-5, 50, 0.001)
    assert "rejects it" in shift_verdict(1e-6, 4000, 0.001)
    assert "too small a shift" in shift_verdict(0.3, 4000, 0.001)


def test_late_bug_verdict_follows_both_tests():
    from specdec_ref.chapters.verdicts import late_bug_verdict
    assert "passes a sampler that is wrong" in late_bug_verdict(1e-9, 0.4, 0.001, 4, 2)
    assert "not rejected even at γ = 4" in late_bug_verdict(0.2, 0.4, 0.001, 4, 2)
    assert "by chance" in late_bug_verdict(1e-9, 1e-4, 0.001, 4, 2)


def test_sampler_summaries_count_passes_and_rejections():
    from specdec_ref.chapters.verdicts import broken_sampler_summary, correct_sampler_summary
    all_pass = "all 2 tests of our sampler pass at significance level 0.001"
    assert correct_sampler_summary({"x": 0.5, "y": 0.2}, 0.001) == all_pass
    assert "1 of 2 tests" in correct_sampler_summary({"x": 0.5, "y": 1e-5}, 0.001)
    assert broken_sampler_summary({"a": 1e-9, "b": 1e-7}, 0.001) == "the same tests reject all 2 broken samplers"
    assert "not rejected at this sample size: b" in broken_sampler_summary({"a": 1e-9, "b": 0.3}, 0.001)


def test_floating_point_verdicts_follow_the_measurements():
    from specdec_ref.chapters.verdicts import greedy_divergence_verdict, near_tie_verdict
    assert "no position was close enough" in near_tie_verdict("float32", 0, 0)
    assert "2 position(s)" in near_tie_verdict("bfloat16", 2, 1)
    assert "identical" in greedy_divergence_verdict("bfloat16", 32, None)
    tie = greedy_divergence_verdict("bfloat16", 32, 5, " a", " the", gap=0.01, rounding=0.05)
    assert "a near-tie" in tie and "agree on 5" in tie
    assert "rounds differently" in greedy_divergence_verdict("bfloat16", 32, 5, " a", " the", gap=0.2, rounding=0.05)


def test_tree_vs_chain_verdict_follows_the_numbers():
    assert tree_vs_chain_verdict(1.4, 1.1).startswith("the tree is ahead")
    assert tree_vs_chain_verdict(1.1, 1.4).startswith("the chain is ahead")
    assert "level" in tree_vs_chain_verdict(1.20, 1.21)


def test_overhead_verdict_follows_the_numbers():
    assert "at most" in overhead_verdict(5.0, 7.0)
    assert "more than" in overhead_verdict(9.0, 7.0)


def test_adaptive_verdict_follows_the_numbers():
    from specdec_ref.chapters.verdicts import adaptive_verdict
    assert "beat the best fixed" in adaptive_verdict(1.0, {"confidence stop": 1.2, "schedule": 0.9})
    assert "no adaptive rule beat" in adaptive_verdict(1.2, {"confidence stop": 1.0, "schedule": 0.9})
    assert "level" in adaptive_verdict(1.0, {"confidence stop": 1.01})


# --- Chapter 4 ------------------------------------------------------------------------------------------------


def test_verify_cost_verdict_says_flat_only_when_every_curve_is():
    from specdec_ref.chapters.verdicts import verify_cost_verdict
    flat = verify_cost_verdict({"float32": [1.0, 1.05, 1.1], "bfloat16": [1.0, 1.02, 1.04]}, "cpu")
    steep = verify_cost_verdict({"float32": [1.0, 1.4, 1.9], "bfloat16": [1.0, 1.02, 1.04]}, "cpu")
    assert "Scoring 3 tokens costs 1.10 one-token steps in float32 and 1.04 in bfloat16 on this CPU" in flat
    assert "nearly as cheap" in flat and "passes" not in flat
    assert "The cost passes 1.25× one token at k = 2 in float32" in steep and "nearly as cheap" not in steep
    assert "does not hold in that precision" in steep


def test_verify_cost_verdict_credits_the_kernel_only_when_f_linear_costs_more():
    from specdec_ref.chapters.verdicts import verify_cost_verdict
    base = {"float32": [1.0, 1.1, 1.2]}
    worse = verify_cost_verdict({"float32, F.linear": [1.0, 1.8, 1.9], **base}, "cpu")
    level = verify_cost_verdict({"float32, F.linear": [1.0, 1.1, 1.21], **base}, "cpu")
    better = verify_cost_verdict({"float32, F.linear": [1.0, 1.0, 1.0], **base}, "cpu")
    assert "the kernel, not the physics" in worse and "F.linear, 1.90" not in worse  # not listed as a precision
    assert "made no difference" in level and "did not pay" in better


def test_verify_cost_verdict_on_a_gpu_says_what_it_skipped_and_glues_no_nan():
    from specdec_ref.chapters.verdicts import verify_cost_verdict
    gpu = verify_cost_verdict({"bfloat16 (as loaded)": [1.0, 1.01, 1.02]}, "cuda")
    cpu = verify_cost_verdict({"float32": [1.0, 1.01, 1.02]}, "cpu", skipped=["bfloat16"])
    assert "on this GPU" in gpu and "no float32 copy" in gpu and "nan" not in gpu
    assert "no float32 copy" not in cpu and "Skipped, too big to copy on this machine: bfloat16." in cpu


def test_precision_verdict_names_the_faster_precision_for_one_token_and_for_many():
    from specdec_ref.chapters.verdicts import precision_verdict
    flat, steep = [1.0, 1.1, 1.2], [1.0, 2.0, 3.0]
    fast = precision_verdict({"float32": 20.0, "bfloat16": 12.0}, {"float32": flat, "bfloat16": flat}, True)
    split = precision_verdict({"float32": 20.0, "bfloat16": 12.0}, {"float32": flat, "bfloat16": steep}, False)
    slow = precision_verdict({"float32": 20.0, "bfloat16": 30.0}, {"float32": flat, "bfloat16": flat}, None)
    assert "bfloat16 is the faster precision on this machine, for one token and for 3" in fast
    assert "for one token bfloat16 is faster, for 3 tokens float32 is faster" in split and "no native" in split
    assert "float32 is the faster precision" in slow
    assert "level" in precision_verdict({"float32": 20.0, "bfloat16": 20.5}, {"float32": flat, "bfloat16": flat},
                                        None)
    assert precision_verdict({"float16 (as loaded)": 7.0}, {"float16 (as loaded)": flat},
                             None) == "One step in float16 (as loaded) took 7.0 ms."


def test_prediction_verdict_follows_the_errors_and_names_the_fitted_overhead():
    from specdec_ref.chapters.verdicts import prediction_verdict
    good = prediction_verdict(0.06, 0.40, calibration_gamma=4)
    bad = prediction_verdict(0.25, 0.20, calibration_gamma=4)
    assert "brought the prediction closer" in good and "stays within a 10% tolerance" in good
    assert "did not bring" in bad and "misses a 10% tolerance" in bad
    assert all("fitted once, at γ = 4, and reused for every γ" in s for s in (good, bad))


def test_prediction_gap_verdict_says_widens_only_when_it_does():
    from specdec_ref.chapters.verdicts import prediction_gap_verdict
    assert "widens with γ, from 20% at γ = 1 to 80% at γ = 8" in prediction_gap_verdict(
        [1, 8], [1.2, 1.8], [1.0, 1.0])
    assert "does not widen" in prediction_gap_verdict([1, 8], [1.2, 1.1], [1.0, 1.0])
    assert "within 3% of each other" in prediction_gap_verdict([1, 8], [1.01, 1.02], [1.0, 1.0])


def test_best_gamma_shift_verdict_follows_the_slope():
    from specdec_ref.chapters.verdicts import best_gamma_shift_verdict
    assert "textbook's best γ is 8" in best_gamma_shift_verdict(0.8, 0.05, 0.3)
    assert "pulls it down to γ = " in best_gamma_shift_verdict(0.8, 0.05, 0.3)
    assert "leaves it at γ = 8" in best_gamma_shift_verdict(0.8, 0.05, 0.0)


def test_position_verdict_flips_with_the_counts():
    from specdec_ref.chapters.verdicts import position_verdict
    alike = position_verdict([60, 30, 15], [100, 50, 25])  # 0.60 vs 0.60
    early = position_verdict([90, 20, 5], [100, 80, 20])  # 0.90 vs 0.25
    late = position_verdict([30, 27, 25], [100, 30, 27])  # 0.30 vs 0.91
    assert "look alike" in alike and "not alike" not in alike
    assert "not alike, and the first is the easier" in early
    assert "not alike, and the later ones" in late
    assert "Too few" in position_verdict([3], [10])


def test_geometric_fit_verdict_flips_with_the_tail_and_the_mean():
    from specdec_ref.chapters.verdicts import geometric_fit_verdict
    alpha, gamma = 0.5, 2  # capped geometric: P(n=0, 1, 2) = 0.5, 0.25, 0.25, E[n + 1] = 1.75
    fits = geometric_fit_verdict([0] * 50 + [1] * 25 + [2] * 25, gamma, alpha)
    heavy = geometric_fit_verdict([0] * 50 + [2] * 50, gamma, alpha)
    light = geometric_fit_verdict([0] * 90 + [1] * 10, gamma, alpha)
    assert "fits the histogram's tail" in fits and "within noise (1.75 measured, 1.75 predicted)" in fits
    assert "understates the histogram's tail" in heavy and "understates the tokens per iteration" in heavy
    assert "overstates the histogram's tail" in light and "overstates the tokens per iteration" in light
    assert "No iteration" in geometric_fit_verdict([], gamma, alpha)


def test_two_x_verdict_follows_alpha_and_the_speed_helper():
    from specdec_ref.chapters.speed import alpha_for_speedup
    from specdec_ref.chapters.verdicts import two_x_verdict
    needed = alpha_for_speedup(2.0, 0.05)
    assert needed is not None and alpha_for_speedup(2.0, 0.9) is None
    assert "falls short of it" in two_x_verdict(needed - 0.1, needed, 0.05)
    assert "clears it" in two_x_verdict(needed + 0.1, needed, 0.05)
    assert "no α below 1 gives 2×" in two_x_verdict(0.5, None, 0.9)


# --- chapter 5 ----------------------------------------------------------------------------------------------------

def test_draft_limit_verdict_names_the_lower_ceiling():
    from specdec_ref.chapters.verdicts import draft_limit_verdict
    assert "held back by its agreement" in draft_limit_verdict("early exit", 0.3, 0.08)
    assert "held back by its cost" in draft_limit_verdict("int8 copy", 0.97, 0.6)


def test_int8_draft_verdict_follows_cost_and_alpha():
    from specdec_ref.chapters.verdicts import int8_draft_verdict
    cheap, slow = int8_draft_verdict(0.95, 0.6), int8_draft_verdict(1.0, 1.3)
    assert "costs 0.60 of a float32" in cheap and "keeps α at 0.950, below 1" in cheap
    assert "saves no time" in slow and "reached 1" in slow


def test_self_draft_verdict_says_no_gain_only_at_or_below_one():
    from specdec_ref.chapters.verdicts import self_draft_verdict
    assert "no gain" in self_draft_verdict(0.9) and "no gain" in self_draft_verdict(1.01)
    assert "timing noise" in self_draft_verdict(1.2)


def test_measured_vs_predicted_verdict_follows_each_draft():
    from specdec_ref.chapters.verdicts import measured_vs_predicted_verdict as v
    assert v({"a": (2.0, 1.5), "b": (1.2, 0.9)}) == "The measured speedup sits below the predicted one for every draft."
    assert "above the predicted one for every draft" in v({"a": (1.0, 1.5), "b": (1.2, 1.4)})
    mixed = v({"a": (2.0, 1.5), "b": (1.2, 1.21), "c": (1.0, 1.3)})
    assert mixed == "The measured speedup sits below the prediction for a; within 3% of it for b; above it for c."


def test_loop_alpha_verdict_compares_in_loop_with_teacher_forced():
    from specdec_ref.chapters.verdicts import loop_alpha_verdict as v
    s = v({"lm": (0.6, 0.5), "self": (1.0, 1.0), "lookup": (0.4, 0.7), "none": (0.5, float("nan"))})
    assert "below the teacher-forced value for lm" in s and "within 0.02 of it for self" in s
    assert "above it for lookup" in s and "none" not in s
    assert "below the teacher-forced value for lm and lookup" in v({"lm": (0.6, 0.5), "lookup": (0.9, 0.7)})
    assert "No draft proposed" in v({"lm": (0.6, float("nan"))})


def test_task_winner_verdict_says_no_single_winner_only_when_winners_differ():
    from specdec_ref.chapters.verdicts import task_winner_verdict as v
    differ = v({"open question": "distilled LM", "rewrite": "prompt lookup", "summarise": "prompt lookup"})
    assert differ.startswith("No single draft wins everywhere")
    assert differ == ("No single draft wins everywhere: the fastest draft was distilled LM on open question; "
                      "prompt lookup on rewrite and summarise.")
    same = v({"open question": "lookup, else LM", "rewrite": "lookup, else LM"})
    assert same == "Here one draft won every task: lookup, else LM was the fastest on all 2."


def test_lookup_task_verdict_follows_each_task():
    from specdec_ref.chapters.verdicts import lookup_task_verdict as v
    mixed = v({"open question": 0.95, "rewrite": 1.8, "extract fields": 1.3})
    assert mixed == ("prompt lookup sped decoding up on rewrite (1.80×) and extract fields (1.30×), "
                     "but not on open question (0.95×)")
    assert v({"open question": 1.2, "rewrite": 1.8}).startswith("prompt lookup sped decoding up on every task")
    assert v({"open question": 0.9, "rewrite": 1.01}).startswith("prompt lookup sped decoding up on no task here")


def test_lm_copy_verdict_blames_the_training_answers_only_when_copying_did_not_help():
    from specdec_ref.chapters.verdicts import lm_copy_verdict as v
    less = v(0.82, 0.10, 0.30)
    assert less.startswith("The distilled LM gave 0.82× on the rewrite")
    assert "less often there than on open questions (α₁ 0.10 against 0.30)" in less and "did not learn to copy" in less
    level = v(0.95, 0.31, 0.30)
    assert "about as often" in level and "gained it nothing" in level
    more = v(1.20, 0.55, 0.30)
    assert "more often there" in more and "did not keep it from agreeing" in more and "did not learn" not in more


def test_depth_vs_width_verdict_follows_both_ratios():
    from specdec_ref.chapters.verdicts import depth_vs_width_verdict as v
    both = v(1.6, 4.0, gpu_measured=False)
    assert "on this CPU (1.6×) and on a GPU (4.0×, predicted, more there): prefer shallow" in both
    assert "but more on a GPU" in v(1.0, 4.0, gpu_measured=True)
    assert "but not on a GPU" in v(1.6, 0.9, gpu_measured=True)
    assert "no more than width" in v(0.98, 1.0, gpu_measured=False)


def test_training_verdict_follows_first_and_last():
    from specdec_ref.chapters.verdicts import training_verdict
    assert training_verdict(0.2, 0.4) == "rose from 0.20 to 0.40"
    assert training_verdict(0.4, 0.2) == "fell from 0.40 to 0.20"
    assert training_verdict(0.4, 0.405).startswith("stayed near 0.40")


def test_loss_verdict_names_the_better_loss_or_a_tie():
    from specdec_ref.chapters.verdicts import loss_verdict
    assert "within 0.03 of each other" in loss_verdict(0.50, 0.51, 16)
    assert loss_verdict(0.60, 0.50, 16).startswith("Here KL trained to the higher α")
    assert loss_verdict(0.50, 0.60, 16).startswith("Here TV trained to the higher α")


def test_confidence_stop_verdict_says_most_drafts_are_short_only_when_they_are():
    from specdec_ref.chapters.verdicts import confidence_stop_verdict
    short = confidence_stop_verdict([1, 2, 1, 20, 2], [20] * 5, hf_passes=3.1)
    long = confidence_stop_verdict([1, 12, 20, 20, 9], [20] * 5)
    assert "ends most drafts after 2 tokens or fewer" in short and "4 of 5 (80%)" in short and "3.1 draft passes" in short
    assert "most drafts ran longer" in long and "1 of 5 (20%)" in long
    assert "not measured" in confidence_stop_verdict([], [])


def test_greedy_agreement_verdict_follows_the_splits():
    from specdec_ref.chapters.verdicts import greedy_agreement_verdict
    assert greedy_agreement_verdict(8, 8, 0, 0).startswith("all 8 greedy runs")
    assert "near-ties that rounding explains" in greedy_agreement_verdict(7, 8, 1, 1)
    assert "suspect a bug" in greedy_agreement_verdict(7, 8, 1, 0)


def test_distribution_verdict_flips_at_the_level():
    from specdec_ref.chapters.verdicts import distribution_verdict
    good = distribution_verdict({"a": 0.4, "b": 0.02}, 1e-6, 0.001)
    assert "none of the 2 tests finds a difference" in good and "rejects the broken sampler" in good
    bad = distribution_verdict({"a": 0.4, "b": 0.0001}, 0.3, 0.001)
    assert "reject b" in bad and "does not reject the broken sampler" in bad


def test_lookup_verdict_says_free_only_within_the_margin():
    from specdec_ref.chapters.verdicts import lookup_verdict
    assert "costs almost nothing extra" in lookup_verdict(2.0, 0.98) and "it paid" in lookup_verdict(2.0, 0.98)
    slow = lookup_verdict(0.9, 0.8)
    assert "a cost of 20%" in slow and "not free" in slow and "did not pay" in slow
    assert "found stretches to copy" in lookup_verdict(1.5, 1.3)


def test_roofline_turn_verdict_compares_the_measured_rise_with_the_ridge():
    from specdec_ref.chapters.verdicts import roofline_turn_verdict
    assert "sooner than the roofline says" in roofline_turn_verdict(8, 64, 128)
    assert "sooner than the roofline says" in roofline_turn_verdict(8, None, 128)
    assert "roofline predicts" in roofline_turn_verdict(64, 32, 128)
    assert "stays nearly free" in roofline_turn_verdict(None, None, 128)


def test_breakeven_verdict_finds_the_crossing_or_says_there_is_none():
    from specdec_ref.chapters.verdicts import breakeven_verdict
    assert "falls to 1× or below at B = 8" in breakeven_verdict({1: 1.5, 4: 1.2, 8: 0.9, 16: 0.7})
    assert "stays above 1× up to B = 16" in breakeven_verdict({1: 1.5, 16: 1.1})
    assert "never rises above 1×" in breakeven_verdict({1: 0.9, 16: 0.5})


def test_long_context_verdict_says_pays_again_only_when_the_long_curve_is_ahead():
    from specdec_ref.chapters.verdicts import long_context_verdict
    again = long_context_verdict({1: 1.8, 512: 0.97, 1024: 0.85}, {1: 1.8, 512: 1.57}, 512, 8192)
    assert "pays again" in again and "no longer" in again and "B = 512" in again
    less = long_context_verdict({1: 1.8, 64: 1.7}, {1: 1.8, 64: 1.2}, 512, 8192)
    assert "pay less, not more" in less
    assert "hardly changes" in long_context_verdict({1: 1.8}, {1: 1.8}, 512, 8192)


def test_broken_sampler_caught_verdict_flips_at_the_level():
    from specdec_ref.chapters.verdicts import broken_sampler_caught_verdict
    assert broken_sampler_caught_verdict(0.001, 0.01).startswith("rejects it")
    missed = broken_sampler_caught_verdict(0.2, 0.01)
    assert missed.startswith("does not reject it") and "power" in missed


def test_second_candidates_verdict_says_helped_only_when_the_tree_keeps_more():
    from specdec_ref.chapters.verdicts import second_candidates_verdict
    assert "helped" in second_candidates_verdict(1.4, 1.1)
    assert "did not" in second_candidates_verdict(1.1, 1.4) and "fewer" in second_candidates_verdict(1.1, 1.4)
    level = second_candidates_verdict(1.102, 1.1)
    assert "did not" in level and "as many" in level and "helped" not in level


def test_topk_mass_verdict_follows_beta_and_the_mass():
    from specdec_ref.chapters.verdicts import topk_mass_verdict
    assert "keeps less than a sampled chain" in topk_mass_verdict(0.8, 0.5, 3)
    assert "still keeps more" in topk_mass_verdict(0.5, 0.8, 3)
    assert "level" in topk_mass_verdict(0.6, 0.61, 3)


def test_coverage_depth_verdict_follows_the_measured_coverage():
    from specdec_ref.chapters.verdicts import coverage_depth_verdict
    falling = [{1: 0.42, 4: 0.65}, {1: 0.32, 4: 0.56}, {1: 0.29, 4: 0.50}]
    assert "falls from 0.42 at depth 1 to 0.29 at depth 3" in coverage_depth_verdict(falling, 4, 780)
    assert coverage_depth_verdict(falling, 4, 780).startswith("Over 780 answer positions")
    assert "1.7 times as often" in coverage_depth_verdict(falling, 4, 780)
    rising = [{1: 0.30, 4: 0.40}, {1: 0.40, 4: 0.41}]
    assert "rises from 0.30" in coverage_depth_verdict(rising, 4, 50)
    assert "add little" in coverage_depth_verdict(rising, 4, 50)
    flat = [{1: 0.40, 4: 0.60}, {1: 0.41, 4: 0.62}]
    assert "holds near 0.40" in coverage_depth_verdict(flat, 4, 50)
    assert "room" in coverage_depth_verdict(flat, 4, 50)

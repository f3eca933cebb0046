"""Chapter 4, "How much faster?": each verdict sentence follows its measurements
(flip the numbers, the sentence flips)."""


def test_adaptive_verdict_follows_the_numbers():
    from specdec_ref.chapters.verdicts.ch4 import adaptive_verdict
    assert "beat the best fixed" in adaptive_verdict(1.0, {"confidence stop": 1.2, "schedule": 0.9})
    assert "no adaptive rule beat" in adaptive_verdict(1.2, {"confidence stop": 1.0, "schedule": 0.9})
    assert "level" in adaptive_verdict(1.0, {"confidence stop": 1.01})


def test_verify_cost_verdict_says_flat_only_when_every_curve_is():
    from specdec_ref.chapters.verdicts.ch4 import verify_cost_verdict
    flat = verify_cost_verdict({"float32": [1.0, 1.05, 1.1], "bfloat16": [1.0, 1.02, 1.04]}, "cpu")
    steep = verify_cost_verdict({"float32": [1.0, 1.4, 1.9], "bfloat16": [1.0, 1.02, 1.04]}, "cpu")
    assert "Scoring 3 tokens costs 1.10 one-token steps in float32 and 1.04 in bfloat16 on this CPU" in flat
    assert "nearly as cheap" in flat and "passes" not in flat
    assert "The cost passes 1.25× one token at k = 2 in float32" in steep and "nearly as cheap" not in steep
    assert "does not hold in that precision" in steep


def test_verify_cost_verdict_calls_a_point_that_falls_back_a_bump_not_a_knee():
    from specdec_ref.chapters.verdicts.ch4 import sustained_knee, verify_cost_verdict
    bump = verify_cost_verdict({"float32": [1.0, 1.33, 1.21, 1.04, 1.11]}, "cpu")
    knee = verify_cost_verdict({"float32": [1.0, 1.33, 1.21, 1.3, 1.4]}, "cpu")
    assert "rose above 1.25× at k = 2 in float32 and fell back: a bump" in bump and "passes" not in bump
    assert "ends within 1.25× of one token at k = 5" in bump
    assert "The cost passes 1.25× one token at k = 4 in float32" in knee and "bump" not in knee
    assert sustained_knee([1.0, 1.3, 1.1, 1.3]) == 4 and sustained_knee([1.0, 1.1]) is None


def test_verify_cost_verdict_credits_the_kernel_only_when_f_linear_costs_more():
    from specdec_ref.chapters.verdicts.ch4 import verify_cost_verdict
    base = {"float32": [1.0, 1.1, 1.2]}
    worse = verify_cost_verdict({"float32, F.linear": [1.0, 1.8, 1.9], **base}, "cpu")
    level = verify_cost_verdict({"float32, F.linear": [1.0, 1.1, 1.21], **base}, "cpu")
    better = verify_cost_verdict({"float32, F.linear": [1.0, 1.0, 1.0], **base}, "cpu")
    # not listed as a precision
    assert "the kernel, not the physics" in worse and "F.linear, 1.90" not in worse
    assert "made no difference" in level and "did not pay" in better


def test_verify_cost_verdict_on_a_gpu_says_what_it_skipped_and_glues_no_nan():
    from specdec_ref.chapters.verdicts.ch4 import verify_cost_verdict
    gpu = verify_cost_verdict({"bfloat16 (as loaded)": [1.0, 1.01, 1.02]}, "cuda")
    cpu = verify_cost_verdict({"float32": [1.0, 1.01, 1.02]}, "cpu", skipped=["bfloat16"])
    assert "on this GPU" in gpu and "no float32 copy" in gpu and "nan" not in gpu
    assert "no float32 copy" not in cpu and "Skipped, too big to copy on this machine: bfloat16." in cpu


def test_precision_verdict_names_the_faster_precision_for_one_token_and_for_many():
    from specdec_ref.chapters.verdicts.ch4 import precision_verdict
    flat, steep = [1.0, 1.1, 1.2], [1.0, 2.0, 3.0]
    fast = precision_verdict({"float32": 20.0, "bfloat16": 12.0}, {"float32": flat, "bfloat16": flat}, True)
    split = precision_verdict({"float32": 20.0, "bfloat16": 12.0}, {"float32": flat, "bfloat16": steep},
                              False)
    slow = precision_verdict({"float32": 20.0, "bfloat16": 30.0}, {"float32": flat, "bfloat16": flat}, None)
    assert "bfloat16 is the faster precision on this machine, for one token and for 3" in fast
    assert ("for one token bfloat16 is faster, for 3 tokens float32 is faster" in split
            and "no native" in split)
    assert "float32 is the faster precision" in slow
    assert "level" in precision_verdict({"float32": 20.0, "bfloat16": 20.5},
                                        {"float32": flat, "bfloat16": flat}, None)
    assert precision_verdict({"float16 (as loaded)": 7.0}, {"float16 (as loaded)": flat},
                             None) == "One step in float16 (as loaded) took 7.0 ms."


def test_prediction_verdict_follows_the_errors_and_names_the_held_out_gammas():
    import pytest

    from specdec_ref.chapters.verdicts.ch4 import prediction_verdict
    good = prediction_verdict(0.04, 0.06, 0.40, fitted=[1, 3], held_out=[2, 4])
    bad = prediction_verdict(0.25, 0.26, 0.20, fitted=[1, 3], held_out=[2, 4])
    law = prediction_verdict(0.04, 0.30, 0.40, fitted=[1, 3], held_out=[2, 4])
    cancel = prediction_verdict(0.20, 0.05, 0.40, fitted=[1, 3], held_out=[2, 4])
    assert "brought the prediction closer" in good and "stays within a 10% tolerance" in good
    assert "about the same (up to 6%)" in good
    assert "did not bring" in bad and "misses a 10% tolerance" in bad
    assert "adds error (up to 30%)" in law and "acceptance model, not the costs" in law
    assert "partly cancels" in cancel
    assert all("held-out γ = 2, 4 (the overhead h₀ + γh₁ was fitted on γ = 1, 3 only)" in s
               for s in (good, bad, law, cancel))
    with pytest.raises(ValueError, match="disjoint"):
        prediction_verdict(0.04, 0.06, 0.40, fitted=[1, 2], held_out=[2, 4])
    with pytest.raises(ValueError, match="non-empty"):
        prediction_verdict(0.04, 0.06, 0.40, fitted=[1, 2], held_out=[])


def test_knee_verdict_claims_a_knee_only_where_the_curve_has_one():
    import pytest

    from specdec_ref.chapters.verdicts.ch4 import knee_verdict
    flat = knee_verdict([1.0, 1.05, 1.1, 1.2], "cpu", "float32")
    steep = knee_verdict([1.0, 1.1, 1.4, 1.9], "cpu", "float32")
    gpu = knee_verdict([1.0, 1.01, 1.02], "cuda", "bfloat16 (as loaded)")
    assert "stayed within 1.25× of one token up to k = 4" in flat and "beyond the passes timed" in flat
    assert "cost real time" not in flat
    assert "passed 1.25× of one token from k = 3 on, as expected of a CPU" in steep
    assert "cost real time" in steep
    bump = knee_verdict([1.0, 1.33, 1.21, 1.04], "cpu", "float32")
    assert "ended within 1.25×" in bump and "cost real time" not in bump
    assert "came nearly free" in gpu and "CPU" not in gpu
    with pytest.raises(ValueError, match="no t"):
        knee_verdict([], "cpu", "float32")


def test_prediction_gap_verdict_says_widens_only_when_it_does():
    from specdec_ref.chapters.verdicts.ch4 import prediction_gap_verdict
    assert "widens with γ, from 20% at γ = 1 to 80% at γ = 8" in prediction_gap_verdict(
        [1, 8], [1.2, 1.8], [1.0, 1.0])
    assert "does not widen" in prediction_gap_verdict([1, 8], [1.2, 1.1], [1.0, 1.0])
    assert "within 3% of each other" in prediction_gap_verdict([1, 8], [1.01, 1.02], [1.0, 1.0])


def test_best_gamma_shift_verdict_follows_the_slope():
    from specdec_ref.chapters.verdicts.ch4 import best_gamma_shift_verdict
    assert "textbook's best γ is 8" in best_gamma_shift_verdict(0.8, 0.05, 0.3)
    assert "pulls it down to γ = " in best_gamma_shift_verdict(0.8, 0.05, 0.3)
    assert "leaves it at γ = 8" in best_gamma_shift_verdict(0.8, 0.05, 0.0)


def test_position_verdict_flips_with_the_counts():
    from specdec_ref.chapters.verdicts.ch4 import position_verdict
    alike = position_verdict([60, 30, 15], [100, 50, 25])  # 0.60 vs 0.60
    early = position_verdict([90, 20, 5], [100, 80, 20])  # 0.90 vs 0.25
    late = position_verdict([30, 27, 25], [100, 30, 27])  # 0.30 vs 0.91
    assert "look alike" in alike and "not alike" not in alike
    assert "not alike, and the first is the easier" in early
    assert "not alike, and the later ones" in late
    assert all("not tested here" in v for v in (early, late))  # causes are offered, never asserted
    assert "Too few" in position_verdict([3], [10])


def test_geometric_fit_verdict_flips_with_the_tail_and_the_mean():
    from specdec_ref.chapters.verdicts.ch4 import geometric_fit_verdict
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
    from specdec_ref.chapters.verdicts.ch4 import two_x_verdict
    needed = alpha_for_speedup(2.0, 0.05)
    assert needed is not None and alpha_for_speedup(2.0, 0.9) is None
    assert "falls short of it" in two_x_verdict(needed - 0.1, needed, 0.05)
    assert "clears it" in two_x_verdict(needed + 0.1, needed, 0.05)
    assert "no α below 1 gives 2×" in two_x_verdict(0.5, None, 0.9)


def test_pass_price_verdict_says_level_more_or_less_at_the_furthest_gamma():
    import pytest

    from specdec_ref.chapters.verdicts.ch4 import pass_price_verdict
    calibrated = {1: 1.02, 2: 1.05, 4: 1.20}
    level = pass_price_verdict({1: 1.03, 2: 1.07, 4: 1.19}, calibrated)
    more = pass_price_verdict({1: 1.03, 2: 1.07, 4: 1.45}, calibrated)
    less = pass_price_verdict({1: 0.90, 2: 1.05, 4: 1.21}, calibrated)
    assert "within 5% of the calibrated price" in level and "1.07 one-row passes in the loop" in level
    assert "paid more" in more and "1.45 one-row passes in the loop against 1.20" in more and "γ = 4" in more
    assert "paid less" in less and "γ = 1" in less
    untimed_one = pass_price_verdict({1: float("nan"), 4: 1.45}, calibrated)  # NaN: no pass timed at γ = 1
    assert untimed_one == pass_price_verdict({4: 1.45}, calibrated)
    for untimed in ({3: 1.1}, {1: float("nan")}):
        with pytest.raises(ValueError, match="at least one γ"):
            pass_price_verdict(untimed, calibrated)

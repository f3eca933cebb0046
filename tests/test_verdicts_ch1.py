"""Chapter 1, "Why decoding is slow": each verdict sentence follows its measurements
(flip the numbers, the sentence flips)."""
from specdec_ref.chapters.verdicts.ch1 import kernel_verdict


def test_kernel_verdict_says_within_goal_only_when_it_is():
    before = {1: 1.0, 2: 1.7, 4: 1.8, 8: 1.8}
    good = kernel_verdict(before, {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2})
    bad = kernel_verdict(before, {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.45})
    assert "within 1.25×, as the memory-bound" in good and "cut the cost" in good
    assert "up to k = 4" in bad and "compute-bound" in bad


def test_kernel_verdict_says_when_prepacking_did_not_help():
    s = kernel_verdict({1: 1.0, 8: 1.3}, {1: 1.0, 8: 1.4})
    assert "did not help" in s and "no k > 1" in s


def test_one_pass_verdict_says_cheaper_and_free_only_when_measured():
    from specdec_ref.chapters.verdicts.ch1 import one_pass_verdict
    assert (one_pass_verdict(1.1, 8.0).startswith("Far cheaper")
            and "nearly free" in one_pass_verdict(1.1, 8.0))
    assert "but not free" in one_pass_verdict(1.8, 8.0)
    assert one_pass_verdict(5.0, 8.0).startswith("Cheaper than")
    assert "gains nothing" in one_pass_verdict(8.5, 8.0)


def test_adds_up_verdict_follows_the_sequential_passes():
    from specdec_ref.chapters.verdicts.ch1 import adds_up_verdict
    assert "on the dashed line" in adds_up_verdict(8.3)
    assert "below the dashed line" in adds_up_verdict(5.0)
    assert "above the dashed line" in adds_up_verdict(11.0)


def test_knee_verdict_says_early_rise_near_knee_or_flat():
    from specdec_ref.chapters.verdicts.ch1 import knee_verdict
    early = knee_verdict({1: 1.0, 2: 1.1, 4: 1.2, 8: 1.4, 16: 1.7}, knee=60)
    assert "rises long before" in early and "k = 8" in early
    near = knee_verdict({1: 1.0, 16: 1.05, 32: 1.1, 64: 1.5}, knee=50)
    assert "fair forecast" in near and "up to k = 32" in near
    late = knee_verdict({1: 1.0, 16: 1.05, 32: 1.1, 64: 1.5}, knee=10)
    assert "well past the predicted knee" in late
    flat = knee_verdict({1: 1.0, 8: 1.1, 64: 1.2}, knee=300)
    assert "stays within 1.25× one token up to k = 64, the largest k measured" in flat


def test_roofline_verdict_places_decoding_against_the_ridge():
    from specdec_ref.chapters.verdicts.ch1 import roofline_verdict
    assert "well under the ridge" in roofline_verdict(0.5, 10.0, 40)
    assert "just under the ridge" in roofline_verdict(7.0, 10.0, 40)
    assert "past the ridge" in roofline_verdict(12.0, 10.0, 40)


def test_climb_verdict_compares_with_the_roof():
    from specdec_ref.chapters.verdicts.ch1 import climb_verdict
    assert "more slowly than the roof" in climb_verdict(10.0, 64.0, 64, 30)
    assert "about as fast as the roof" in climb_verdict(60.0, 64.0, 64, 30)
    assert "faster than the roof" in climb_verdict(18.0, 10.6, 64, 64)


def test_kernel_share_verdict_places_the_rise():
    from specdec_ref.chapters.verdicts.ch1 import kernel_share_verdict
    assert "lives in the matrix-product kernels" in kernel_share_verdict(1.7, 1.8)
    assert "rises even more than the whole pass" in kernel_share_verdict(2.73, 1.42)
    assert "stays nearly flat" in kernel_share_verdict(1.05, 1.8)
    assert "part of the rise" in kernel_share_verdict(1.4, 1.8)
    assert "neither rises much" in kernel_share_verdict(1.02, 1.05)


def test_depth_verdict_follows_the_two_steps():
    from specdec_ref.chapters.verdicts.ch1 import depth_verdict
    costly = depth_verdict(0.010, 0.004, extra_ops=600)
    assert "depth costs wall time" in costly and "10 µs per extra operation" in costly
    assert "does not show as a cost" in depth_verdict(0.003, 0.004, extra_ops=600)
    assert "about the same" in depth_verdict(0.0041, 0.004, extra_ops=600)


def test_break_even_verdict_says_when_no_draft_can_pay():
    from specdec_ref.chapters.verdicts.ch1 import break_even_verdict
    assert "more than 1.60 tokens" in break_even_verdict(1.6, 4)
    assert "cannot pay" in break_even_verdict(5.2, 4)

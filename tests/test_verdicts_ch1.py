"""Chapter 1, "Why decoding is slow": each verdict sentence follows its measurements
(flip the numbers, the sentence flips)."""
import pytest

from specdec_ref.chapters.verdicts.ch1 import kernel_verdict, stream_share_verdict


def test_kernel_verdict_says_within_goal_only_when_it_is():
    before = {1: 1.0, 2: 1.7, 4: 1.8, 8: 1.8}
    good = kernel_verdict(before, {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2})
    bad = kernel_verdict(before, {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.45})
    assert "within 1.25×, as the memory-bound" in good and "cut the cost" in good
    assert "up to k = 4" in bad and "does not say whether" in bad  # no knee given: no mechanism asserted


def test_kernel_verdict_names_the_cause_only_against_the_measured_knee():
    before, after = {1: 1.0, 2: 1.7, 4: 1.8, 8: 1.8}, {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.45}
    early = kernel_verdict(before, after, knee=60)  # rises at k = 8, long before k* = 60
    assert "long before the roofline's knee at k ≈ 60" in early and "does not explain" in early
    near = kernel_verdict(before, after, knee=10)  # rises at k = 8, near k* = 10
    assert "near or past the roofline's knee at k ≈ 10" in near and "as the roofline expects" in near
    assert "compute-bound small-batch" not in early + near


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


def test_no_repack_note_says_why_by_device():
    from specdec_ref.chapters.verdicts.ch1 import no_repack_note
    assert "not available in this build" in no_repack_note("this CPU", "cpu")
    gpu = no_repack_note("this H100", "cuda")
    assert "prepack only on a CPU" in gpu and "true cost" not in gpu


def test_packing_logits_verdict_separates_rounding_from_a_different_result():
    from specdec_ref.chapters.verdicts.ch1 import packing_logits_verdict
    assert "up to float rounding" in packing_logits_verdict(3e-5, 20.0)
    assert "more than float rounding" in packing_logits_verdict(0.5, 20.0)
    with pytest.raises(ValueError, match="max_logit must be > 0"):
        packing_logits_verdict(0.0, 0.0)


def test_gpu_room_verdict_flips_when_a_knee_falls_below_the_verify_pass():
    from specdec_ref.chapters.verdicts.ch1 import gpu_room_verdict
    room = gpu_room_verdict({"T4": 57, "H100 SXM": 295}, k_verify=5)
    assert "Every spec sheet" in room and "the lowest (T4) at 57" in room and "11×" in room
    tight = gpu_room_verdict({"T4": 4, "H100 SXM": 295}, k_verify=5)
    assert tight.startswith("On T4 the spec sheet puts the knee below") and "room to spare" not in tight
    with pytest.raises(ValueError, match="knees is empty"):
        gpu_room_verdict({}, 5)


def test_decode_gap_verdict_places_the_step_against_the_ridge():
    from specdec_ref.chapters.verdicts.ch1 import decode_gap_verdict
    far = decode_gap_verdict(1.0, 591.0, "H100 SXM")
    assert "591× below" in far and "far inside the memory-bound" in far
    near = decode_gap_verdict(1.0, 5.0, "X")
    assert "5× below" in near and "far inside" not in near
    assert "compute-bound" in decode_gap_verdict(8.0, 5.0, "X")
    with pytest.raises(ValueError, match="must be > 0"):
        decode_gap_verdict(0.0, 5.0, "X")


def test_gpu_depth_verdict_is_an_expectation_unless_measured_on_a_gpu():
    from specdec_ref.chapters.verdicts.ch1 import gpu_depth_verdict
    expected = gpu_depth_verdict(0.06, None)
    assert expected.startswith("An expectation, not measured") and "under 0.06 µs" in expected
    assert "bound by its operations" in gpu_depth_verdict(0.06, 4.0)
    assert "hides behind the weight traffic" in gpu_depth_verdict(0.06, 0.01)


def test_knee_prediction_verdict_says_sooner_later_or_close():
    from specdec_ref.chapters.verdicts.ch1 import knee_prediction_verdict
    assert "sooner than you expected" in knee_prediction_verdict(64, measured=8, largest=64)
    assert "more tokens rode along" in knee_prediction_verdict(2, measured=16, largest=64)
    assert "within a factor of 2" in knee_prediction_verdict(12, measured=8, largest=64)
    assert "cannot prove your prediction wrong" in knee_prediction_verdict(300, measured=64, largest=64)
    assert "sooner" in knee_prediction_verdict(300, measured=32, largest=64)
    for bad in (0, -3):
        with pytest.raises(ValueError, match="MY_PREDICTION must be"):
            knee_prediction_verdict(bad, measured=8, largest=64)


def test_batch_knee_verdict_sees_the_per_sequence_cache_only_when_it_matters():
    from specdec_ref.chapters.verdicts.ch1 import batch_knee_verdict
    cache = batch_knee_verdict({128: 40, 8192: 22}, {128: 6, 8192: 11}, batch=8)
    assert "from 40 to 6 tokens per sequence, 6.7× lower" in cache and "22 to 11, 2.0× lower" in cache
    assert "at the ridge already" not in cache
    assert "from 7 to 1 tokens per sequence (at the ridge already with one token per sequence), 7.0×" in \
        batch_knee_verdict({128: 7, 8192: 4}, {128: 1, 8192: 2}, batch=8)
    assert "own KV cache" in cache
    small = batch_knee_verdict({128: 40, 8192: 39}, {128: 6, 8192: 6}, batch=8)
    assert "too small next to the weights" in small
    assert "even more of the headroom" in batch_knee_verdict({128: 40, 8192: 40}, {128: 10, 8192: 5}, batch=8)
    with pytest.raises(ValueError, match="same two context lengths"):
        batch_knee_verdict({128: 40, 8192: 22}, {128: 6}, batch=8)


def test_compiled_verdict_follows_the_seconds_and_the_ratios():
    from specdec_ref.chapters.verdicts.ch1 import compiled_verdict, no_compiled_note
    eager = {1: 45.0, 8: 50.0}
    fast = compiled_verdict(eager, {1: 17.0, 8: 20.0})  # 8 tokens in less than eager's one; steeper ratio
    assert "0.38 of the eager pass's time" in fast and "fewer seconds for 8 tokens" in fast
    assert "steeper (1.18 against 1.11)" in fast and "not by its ratio" in fast
    some = compiled_verdict(eager, {1: 40.0, 8: 46.0})  # faster, but 8 tokens cost more than eager's one
    assert "fewer seconds" not in some and "8 tokens in 0.92 of the eager pass's 8" in some
    assert "about the eager one's" in some
    assert "flatter too" in compiled_verdict(eager, {1: 40.0, 8: 40.0})
    slow = compiled_verdict(eager, {1: 50.0, 8: 55.0})
    assert slow.startswith("The compiled pass is no faster here") and "1.11×" in slow
    note = no_compiled_note("cpu", "/x.pt2")
    assert "python -m specdec_ref compile" in note and "/x.pt2" in note
    assert "CUDA graphs" in no_compiled_note("cuda")
    off = no_compiled_note("cpu", "/x.pt2", switched_off=True)
    assert "SPECDEC_AOT=0" in off and "python -m specdec_ref compile" not in off
    slower = no_compiled_note("cpu", "/x.pt2", exists=True)  # built, but not attached: eager was faster
    assert "no faster than the eager model" in slower and "python -m specdec_ref compile" not in slower
    assert "no faster" not in note


def test_grouped_verdict_follows_the_measured_costs():
    from specdec_ref.chapters.verdicts.ch1 import grouped_verdict
    copied = {1: 1.0, 4: 1.10}
    cut = grouped_verdict(copied, {1: 1.0, 4: 1.04})
    assert "cut the cost of scoring 4 tokens from 1.10× to 1.04×" in cut
    assert "made no difference" in grouped_verdict(copied, {1: 1.0, 4: 1.09})
    assert "dearer" in grouped_verdict(copied, {1: 1.0, 4: 1.20})


def test_no_grouped_note_names_the_reason():
    from specdec_ref.chapters.verdicts.ch1 import no_grouped_note
    assert "CPU models only" in no_grouped_note("cuda", True)
    assert "as many key/value heads" in no_grouped_note("cpu", False)
    assert "not Hugging Face's SDPA" in no_grouped_note("cpu", True)


def test_fused_verdict_follows_the_measured_times():
    from specdec_ref.chapters.verdicts.ch1 import fused_verdict
    separate = {1: 0.0150, 4: 0.0160}
    both = fused_verdict(separate, {1: 0.0135, 4: 0.0146})
    assert "one token: 10% faster (15.0 → 13.5 ms)" in both and "4 tokens: 9% faster" in both
    assert "does not grow" in both
    flipped = fused_verdict({1: 0.0135, 4: 0.0146}, separate)  # the same numbers, the other way round
    assert "slower" in flipped and "SPECDEC_FUSE=0 is the faster path" in flipped.replace("`", "")
    level = fused_verdict(separate, {1: 0.0149, 4: 0.0161})
    assert "about the same" in level and "too few to show" in level


def test_no_fused_note_names_the_reason():
    from specdec_ref.chapters.verdicts.ch1 import no_fused_note
    assert "CPU models only" in no_fused_note("cuda", False)
    assert "compiled pass" in no_fused_note("cpu", True)
    assert "SPECDEC_FUSE=0" in no_fused_note("cpu", False)


def test_int4_verdict_follows_the_measured_times_and_ratios():
    from specdec_ref.chapters.verdicts.ch1 import int4_verdict
    loaded = {1: 0.0181, 4: 0.0187}
    steeper = int4_verdict(loaded, {1: 0.0125, 4: 0.0143})  # the kernel probe's medians, 2026-12-05
    assert "31% faster" in steeper and "t(4)/t(1) 1.03 → 1.14" in steeper and "shrinks" in steeper
    kept = int4_verdict(loaded, {1: 0.0125, 4: 0.0129})
    assert "keeps its size" in kept
    slower = int4_verdict({1: 0.0125, 4: 0.0143}, loaded)  # the same numbers, the other way round
    assert "the slower one" in slower
    assert "about the same" in int4_verdict(loaded, {1: 0.0180, 4: 0.0188})


def test_int4_logits_verdict_and_note():
    from specdec_ref.chapters.verdicts.ch1 import int4_logits_verdict, no_int4_note
    assert "same model to bfloat16's rounding" in int4_logits_verdict(1.14, 1.20, 20.0)
    assert "computes something else" in int4_logits_verdict(5.0, 1.20, 20.0)
    with pytest.raises(ValueError, match="max_logit"):
        int4_logits_verdict(1.0, 1.0, 0.0)
    assert "for a CPU" in no_int4_note("cuda", True, True)
    assert "no CPU int4 kernel" in no_int4_note("cpu", True, False)
    assert "natively" in no_int4_note("cpu", False, True)
    assert "SPECDEC_PREPACK=0" in no_int4_note("cpu", True, True)


def test_stream_share_verdict_blames_overheads_only_below_the_copy_rate():
    below, above = stream_share_verdict(80), stream_share_verdict(120)
    assert "other than streaming weights" in below and "STREAM convention" not in below
    assert "understates" in above and "other than streaming weights" not in above


def test_after_pass_verdict_follows_the_two_timings():
    from specdec_ref.chapters.verdicts.ch1 import after_pass_verdict
    cold = after_pass_verdict(125e-6, 12.5e-6, n_steps=6, pass_s=8e-3)
    assert "10.0× the 12 µs" in cold and "out of the caches" in cold and "1.6% of a pass" in cold
    level = after_pass_verdict(13e-6, 12.5e-6, n_steps=6, pass_s=8e-3)
    assert "(1.04×)" in level and "leaves what they touch in the caches" in level
    assert "out of the caches" not in level
    # the margin: 1.4× is not yet "several times", 1.6× is
    assert "leaves" in after_pass_verdict(17.5e-6, 12.5e-6, 6, 8e-3)
    assert "out of the caches" in after_pass_verdict(20e-6, 12.5e-6, 6, 8e-3)

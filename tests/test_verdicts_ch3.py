"""Chapter 3, "Exact, not approximate": each verdict sentence follows its measurements
(flip the numbers, the sentence flips)."""


def test_chapter3_test_verdicts_flip_at_the_significance_level():
    from specdec_ref.chapters.verdicts.ch3 import (configs_verdict, fit_verdict, shift_verdict,
                                                   two_sample_verdict)
    assert "fit the target's distribution" in fit_verdict(0.4, 4000, 0.001)
    assert "The test rejects" in fit_verdict(0.0001, 4000, 0.001)
    assert configs_verdict({"a": 0.3, "b": 0.05}, 1000, 0.001).startswith("None of the 2")
    assert configs_verdict({"a": 0.3, "b": 0.0001}, 1000, 0.001).startswith(
        "1 of the 2 configurations are rejected (b")
    assert "finds no difference" in two_sample_verdict(0.2, 50, 0.001)
    assert "finds a difference" in two_sample_verdict(1e-5, 50, 0.001)
    assert "rejects it" in shift_verdict(1e-6, 4000, 0.001)
    assert "too small a shift" in shift_verdict(0.3, 4000, 0.001)


def test_late_bug_verdict_follows_both_tests():
    from specdec_ref.chapters.verdicts.ch3 import late_bug_verdict
    assert "passes a sampler that is wrong" in late_bug_verdict(1e-9, 0.4, 0.001, 4, 2)
    assert "not rejected even at γ = 4" in late_bug_verdict(0.2, 0.4, 0.001, 4, 2)
    assert "by chance" in late_bug_verdict(1e-9, 1e-4, 0.001, 4, 2)


def test_sampler_summaries_count_passes_and_rejections():
    from specdec_ref.chapters.verdicts.ch3 import broken_sampler_summary, correct_sampler_summary
    all_pass = "all 2 tests of our sampler pass at significance level 0.001"
    assert correct_sampler_summary({"x": 0.5, "y": 0.2}, 0.001) == all_pass
    assert "1 of 2 tests" in correct_sampler_summary({"x": 0.5, "y": 1e-5}, 0.001)
    assert (broken_sampler_summary({"a": 1e-9, "b": 1e-7}, 0.001)
            == "the same tests reject all 2 broken samplers")
    assert "not rejected at this sample size: b" in broken_sampler_summary({"a": 1e-9, "b": 0.3}, 0.001)


def test_floating_point_verdicts_follow_the_measurements():
    from specdec_ref.chapters.verdicts.ch3 import greedy_divergence_verdict, near_tie_verdict
    assert "no position was close enough" in near_tie_verdict("float32", 0, 0)
    assert "2 position(s)" in near_tie_verdict("bfloat16", 2, 1)
    assert "identical" in greedy_divergence_verdict("bfloat16", 32, None)
    tie = greedy_divergence_verdict("bfloat16", 32, 5, " a", " the", gap=0.01, rounding=0.05)
    assert "a near-tie" in tie and "agree on 5" in tie
    assert "rounds differently" in greedy_divergence_verdict("bfloat16", 32, 5, " a", " the", gap=0.2,
                                                             rounding=0.05)


def test_false_rejection_note_follows_the_significance_level():
    import pytest

    from specdec_ref.chapters.verdicts.ch3 import false_rejection_note
    assert "one test in 1,000 " in false_rejection_note(0.001)
    assert "one test in 20 " in false_rejection_note(0.05) and "level 0.05" in false_rejection_note(0.05)
    with pytest.raises(ValueError, match="significance must be in"):
        false_rejection_note(0)


def test_gallery_verdict_follows_the_bugs_caught_and_the_tests_passed():
    from specdec_ref.chapters.verdicts.ch3 import gallery_verdict
    bugs, ours = {"a": 1e-9, "b": 1e-7}, {"x": 0.5, "y": 0.2}
    both = gallery_verdict(bugs, ours, 0.001)
    assert "rejects all 2 broken samplers, and all 2 tests" in both and "state both" in both
    assert "once in 1,000 runs" in both
    missed = gallery_verdict({"a": 1e-9, "b": 0.3}, ours, 0.001)
    assert "1 of the 2 broken samplers (not rejected at this sample size: b)" in missed
    assert "state both" not in missed and "needs more samples" in missed
    failed = gallery_verdict(bugs, {"x": 0.5, "y": 1e-5}, 0.001)
    assert "1 of the 2 tests of our sampler reject it (y)" in failed and "another SEED" in failed
    assert "once in 20 runs" in gallery_verdict(bugs, ours, 0.05)


def test_block_verdict_follows_the_gains():
    import pytest

    from specdec_ref.chapters.verdicts.ch3 import block_verdict
    growing = {2: {"token": 1.60, "block": 1.62}, 4: {"token": 1.78, "block": 1.86}}
    text = block_verdict(growing)
    assert "τ goes from 1.780 to 1.860" in text and "γ = 4 (+4.5%)" in text and "+1.2% at γ = 2" in text
    assert "grows with γ" in text
    shrinking = {2: {"token": 1.60, "block": 1.70}, 4: {"token": 1.78, "block": 1.80}}
    text = block_verdict(shrinking)
    assert "at γ = 2 (+6.2%)" in text and "does not grow steadily" in text and "grows with γ:" not in text
    same = {2: {"token": 1.6, "block": 1.6}, 3: {"token": 1.7, "block": 1.7}}
    assert "kept no more tokens" in block_verdict(same)
    assert "kept no more" not in block_verdict({3: {"token": 1.7, "block": 1.75}})
    with pytest.raises(ValueError, match="at least one γ"):
        block_verdict({})


def test_block_gain_phrase_says_more_or_fewer_from_the_numbers():
    import pytest

    from specdec_ref.chapters.verdicts.ch3 import block_gain_phrase
    assert block_gain_phrase({2: {"token": 1.60, "block": 1.62}, 4: {"token": 1.78, "block": 1.86}}) == \
        "up to 4.5% more tokens"
    assert block_gain_phrase({2: {"token": 1.60, "block": 1.594}}) == "at least 0.4% fewer tokens"  # behind
    behind = {2: {"token": 1.60, "block": 1.594}, 4: {"token": 1.80, "block": 1.746}}  # -0.4% and -3%
    assert block_gain_phrase(behind) == "at least 0.4% fewer tokens"
    tiny = {2: {"token": 1.60, "block": 1.6001}}  # any gain is "more", as in block_verdict
    assert block_gain_phrase(tiny) == "up to 0.0% more tokens"
    assert block_gain_phrase({3: {"token": 1.7, "block": 1.7}}) == "no more tokens"
    with pytest.raises(ValueError, match="at least one γ"):
        block_gain_phrase({})

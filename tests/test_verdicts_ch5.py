"""Chapter 5, "Choosing a draft": each verdict sentence follows its measurements
(flip the numbers, the sentence flips)."""


def test_draft_limit_verdict_names_the_lower_ceiling():
    from specdec_ref.chapters.verdicts.ch5 import draft_limit_verdict
    assert "held back by its agreement" in draft_limit_verdict("early exit", 0.3, 0.08)
    assert "held back by its cost" in draft_limit_verdict("int8 copy", 0.97, 0.6)


def test_int8_draft_verdict_follows_cost_and_alpha():
    from specdec_ref.chapters.verdicts.ch5 import int8_draft_verdict
    cheap, slow = int8_draft_verdict(0.95, 0.6), int8_draft_verdict(1.0, 1.3)
    assert "costs 0.60 of a float32" in cheap and "keeps α₁ at 0.950, below 1" in cheap
    assert "saves no time" in slow and "reached 1" in slow


def test_self_draft_verdict_says_no_gain_only_at_or_below_one():
    from specdec_ref.chapters.verdicts.ch5 import self_draft_verdict
    assert "no gain" in self_draft_verdict(0.9) and "no gain" in self_draft_verdict(1.01)
    assert "timing noise" in self_draft_verdict(1.2)


def test_measured_vs_predicted_verdict_follows_each_draft():
    from specdec_ref.chapters.verdicts.ch5 import measured_vs_predicted_verdict as v
    assert v({"a": (2.0, 1.5), "b": (1.2, 0.9)}) == ("The measured speedup sits below the predicted one "
                                                     "for every draft.")
    assert "above the predicted one for every draft" in v({"a": (1.0, 1.5), "b": (1.2, 1.4)})
    mixed = v({"a": (2.0, 1.5), "b": (1.2, 1.21), "c": (1.0, 1.3)})
    assert mixed == ("The measured speedup sits below the prediction for a; within 3% of it for b; "
                     "above it for c.")


def test_loop_alpha_verdict_compares_in_loop_with_teacher_forced():
    from specdec_ref.chapters.verdicts.ch5 import loop_alpha_verdict as v
    s = v({"lm": (0.6, 0.5), "self": (1.0, 1.0), "lookup": (0.4, 0.7), "none": (0.5, float("nan"))})
    assert "below the teacher-forced value for lm" in s and "within 0.02 of it for self" in s
    assert "above it for lookup" in s and "none" not in s
    assert "below the teacher-forced value for lm and lookup" in v({"lm": (0.6, 0.5), "lookup": (0.9, 0.7)})
    assert "No draft proposed" in v({"lm": (0.6, float("nan"))})


def test_task_winner_verdict_says_no_single_winner_only_when_winners_differ():
    from specdec_ref.chapters.verdicts.ch5 import task_winner_verdict as v
    differ = v({"open question": "distilled LM", "rewrite": "prompt lookup", "summarise": "prompt lookup"})
    assert differ.startswith("No single draft wins everywhere")
    assert differ == ("No single draft wins everywhere: the fastest draft was distilled LM on open question; "
                      "prompt lookup on rewrite and summarise.")
    same = v({"open question": "lookup, else LM", "rewrite": "lookup, else LM"})
    assert same == "Here one draft won every task: lookup, else LM was the fastest on all 2."


def test_lookup_task_verdict_follows_each_task():
    from specdec_ref.chapters.verdicts.ch5 import lookup_task_verdict as v
    mixed = v({"open question": 0.95, "rewrite": 1.8, "extract fields": 1.3})
    assert mixed == ("prompt lookup sped decoding up on rewrite (1.80×) and extract fields (1.30×), "
                     "but not on open question (0.95×)")
    assert v({"open question": 1.2, "rewrite": 1.8}).startswith(
        "prompt lookup sped decoding up on every task")
    assert v({"open question": 0.9, "rewrite": 1.01}).startswith(
        "prompt lookup sped decoding up on no task here")


def test_lm_copy_verdict_blames_the_training_answers_only_when_copying_did_not_help():
    from specdec_ref.chapters.verdicts.ch5 import lm_copy_verdict as v
    less = v(0.82, 0.10, 0.30)
    assert less.startswith("The distilled LM gave 0.82× on the rewrite")
    assert ("less often there than on open questions (α₁ 0.10 against 0.30)" in less
            and "did not learn to copy" in less)
    level = v(0.95, 0.31, 0.30)
    assert "about as often" in level and "gained it nothing" in level
    more = v(1.20, 0.55, 0.30)
    assert ("more often there" in more and "did not keep it from agreeing" in more
            and "did not learn" not in more)


def test_depth_vs_width_verdict_follows_both_ratios():
    from specdec_ref.chapters.verdicts.ch5 import depth_vs_width_verdict as v
    both = v(1.6, 4.0, gpu_measured=False)
    assert "on this CPU (1.6×) and on a GPU (4.0×, predicted, more there): prefer shallow" in both
    assert "but more on a GPU" in v(1.0, 4.0, gpu_measured=True)
    assert "but not on a GPU" in v(1.6, 0.9, gpu_measured=True)
    assert "no more than width" in v(0.98, 1.0, gpu_measured=False)


def test_training_verdict_follows_first_and_last():
    from specdec_ref.chapters.verdicts.ch5 import training_verdict
    assert training_verdict(0.2, 0.4) == "rose from 0.20 to 0.40"
    assert training_verdict(0.4, 0.2) == "fell from 0.40 to 0.20"
    assert training_verdict(0.4, 0.405).startswith("stayed near 0.40")


def test_loss_verdict_names_the_better_loss_or_a_tie():
    from specdec_ref.chapters.verdicts.ch5 import loss_verdict
    assert "within 0.03 of each other" in loss_verdict(0.50, 0.51, 16)
    assert loss_verdict(0.60, 0.50, 16).startswith("Here KL trained to the higher α")
    assert loss_verdict(0.50, 0.60, 16).startswith("Here TV trained to the higher α")


def test_coverage_depth_verdict_follows_the_measured_coverage():
    from specdec_ref.chapters.verdicts.ch5 import coverage_depth_verdict
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


def test_draft_limit_and_loss_verdicts_name_the_teacher_forced_alpha():
    from specdec_ref.chapters.verdicts.ch5 import draft_limit_verdict, int8_draft_verdict, loss_verdict
    assert "1 − α₁ = 0.70" in draft_limit_verdict("early exit", 0.3, 0.08)
    assert "keeps α₁ at" in int8_draft_verdict(0.95, 0.6)
    assert "higher α₁ at T = 1" in loss_verdict(0.60, 0.50, 16)


def test_prediction_verdict_is_silent_without_a_prediction_and_follows_the_gap():
    import pytest

    from specdec_ref.chapters.verdicts.ch5 import prediction_verdict as v
    assert v(None, 0.97, "α₁") == ""
    assert "within 0.05 of your prediction" in v(0.95, 0.97, "α₁")
    assert "0.47 higher than you predicted" in v(0.50, 0.97, "α₁")
    assert "0.30 lower than you predicted" in v(0.90, 0.60, "α₁")
    for bad in (1.5, -0.1, "0.9", True):
        with pytest.raises(ValueError, match="MY_PREDICTION must be a number between 0 and 1"):
            v(bad, 0.9, "α₁")


def test_launch_prediction_note_names_its_assumption():
    import pytest

    from specdec_ref.chapters.verdicts.ch5 import launch_prediction_note
    note = launch_prediction_note(5.0, "H100 SXM")
    assert note.startswith("predicted, not measured") and "LAUNCH_US = 5 µs" in note and "H100 SXM" in note
    assert "LAUNCH_US = 10 µs" in launch_prediction_note(10.0, "H100 SXM")
    with pytest.raises(ValueError, match="LAUNCH_US must be > 0"):
        launch_prediction_note(0.0, "H100 SXM")


def test_launch_regime_verdict_flips_with_the_launch_cost():
    from specdec_ref.chapters.verdicts.ch5 import launch_regime_verdict as v
    # 200 ops; 1 GB at 1 TB/s is 1 ms
    assert "launch-bound without CUDA graphs" in v(200, 10.0, 1e9, 1e12)  # 2 ms of launches
    assert "bandwidth-bound" in v(200, 1.0, 1e9, 1e12)  # 0.2 ms of launches
    assert "2.00 ms" in v(200, 10.0, 1e9, 1e12) and "1.00 ms" in v(200, 10.0, 1e9, 1e12)


def test_sharpness_verdict_follows_where_beta_peaks():
    from specdec_ref.chapters.verdicts.ch5 import sharpness_verdict as v
    flat = {0.8: 0.40, 1.0: 0.44, 1.2: 0.452, 1.5: 0.43}
    want = "flatter than the target's p: sharpened by s = 1.2 it keeps β = 0.452, where its own q keeps 0.440"
    assert want in v(flat, 1.2, 640)
    sharp = {0.8: 0.47, 1.0: 0.44, 1.2: 0.41}
    assert "sharper than the target's p: flattened by s = 0.8" in v(sharp, 1.2, 640)
    level = {0.8: 0.43, 1.0: 0.44, 1.2: 0.443}
    assert "keeps about as much as any factor tried" in v(level, 1.0, 50)
    assert v(level, 1.0, 50).startswith("Over 50 answer positions")
    assert "samples with s = 1," in v(level, 1.0, 50)
    assert "chosen on other prompts (the tuning prompts)." in v(level, 1.0, 50)
    assert "which include these: for the shipped s this comparison is in-sample." in v(level, 1.0, 50,
                                                                                      in_sample=True)
    assert "other prompts" not in v(level, 1.0, 50, in_sample=True)

"""Chapter 5's checkers: untouched answers say "Not attempted yet", wrong ones fail with a hint, right ones
pass. Also the coverage-weighted speedup (chapters.choosing) that exercise 3 and the chapter's table rest
on."""
import pytest
import torch

from specdec_ref.chapters.exercises import ch5
from specdec_ref.chapters.exercises.common import NOT_ATTEMPTED
from specdec_ref.drafters import NgramDrafter


def test_check_winner_not_attempted(capsys):
    ch5.check_winner(None)
    assert NOT_ATTEMPTED in capsys.readouterr().out


def test_check_winner_accepts_the_best_draft_and_gamma(capsys):
    ch5.check_winner(("feature head", 5))
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize("answer, hint", [(("big LM draft", 3), "another draft goes faster"),
                                          (("feature head", 4), "a longer draft does better"),
                                          (("feature head", 7), "a shorter draft does better"),
                                          (("tiny LM draft", 4), "another draft goes faster")])
def test_check_winner_rejects_wrong_answers(answer, hint):
    with pytest.raises(AssertionError, match=hint):
        ch5.check_winner(answer)


def test_check_drafter_not_attempted(capsys):
    def make(vocab_size):
        raise NotImplementedError
    ch5.check_drafter(make)
    assert NOT_ATTEMPTED in capsys.readouterr().out


def test_check_drafter_accepts_prompt_lookup(capsys):
    ch5.check_drafter(lambda v: NgramDrafter(v, max_ngram=1), n=600)
    assert "Correct" in capsys.readouterr().out


class LyingDrafter(NgramDrafter):
    """Power: proposes lookup tokens but reports a uniform draft distribution (not the one it drew from)."""

    def propose(self, context_ids, gamma, sampling, generator=None):
        tokens, probs = super().propose(context_ids, gamma, sampling, generator)
        return tokens, torch.full_like(probs, 1.0 / self.vocab_size)


def test_check_drafter_rejects_a_drafter_that_misreports_its_probabilities():
    with pytest.raises(AssertionError):
        ch5.check_drafter(lambda v: LyingDrafter(v, max_ngram=1), n=1500)


# --- exercise 3: predict prompt lookup's speedup with its coverage, then measure -------------------------

def test_coverage_speedup_is_the_textbook_formula_at_full_coverage_and_a_slowdown_at_none():
    from specdec_ref.chapters.choosing import coverage_speedup
    from specdec_ref.lab.speedup import predicted_speedup
    assert coverage_speedup(0.7, 4, 0.05, 1.0) == pytest.approx(predicted_speedup(0.7, 4, 0.05))
    assert coverage_speedup(0.7, 4, 0.01, 0.0) == pytest.approx(1 / 1.01)
    # half the iterations propose: (0.5 * E[n+1] + 0.5) / (1 + c (0.5 γ + 0.5))
    e = (1 - 0.7 ** 5) / 0.3
    assert coverage_speedup(0.7, 4, 0.01, 0.5) == pytest.approx((0.5 * e + 0.5) / (1 + 0.01 * 2.5))
    with pytest.raises(ValueError, match="coverage"):
        coverage_speedup(0.7, 4, 0.01, 1.5)


def test_coverage_lowers_prompt_lookups_best_speedup():
    from specdec_ref.chapters.choosing import best_gamma_with_coverage
    assert best_gamma_with_coverage(0.6, 0.001, 0.3, 8)[1] < best_gamma_with_coverage(0.6, 0.001, 1.0, 8)[1]


def test_with_coverage_leaves_model_drafts_alone_and_reweighs_lookup():
    from specdec_ref.chapters.choosing import with_coverage
    from specdec_ref.lab.compare import DraftRow
    from specdec_ref.lab.speedup import best_gamma
    model = with_coverage(DraftRow("lm", 0.6, 0.5, 1.0, 0.05), gamma_max=8)
    assert (model.gamma, model.predicted) == pytest.approx(best_gamma(0.6, 0.05, gamma_max=8))
    lookup = with_coverage(DraftRow("lookup", 0.6, 0.5, 0.2, 0.001), gamma_max=8)
    assert lookup.predicted < best_gamma(0.6, 0.001, gamma_max=8)[1]
    silent = with_coverage(DraftRow("lookup", float("nan"), float("nan"), 0.0, 0.001), gamma_max=8)
    assert silent.gamma == 1 and silent.predicted < 1


def test_loop_coverage_counts_iterations_that_drafted():
    from specdec_ref.chapters.choosing import loop_coverage
    from specdec_ref.generate import Stats
    assert loop_coverage(Stats(accepted=[0, 2, 0, 1], drafted=[0, 4, 0, 4])) == 0.5
    assert loop_coverage(None) != loop_coverage(None)  # nan: no run


LOOKUP = dict(alpha=0.6, coverage=0.4, c=0.002, gamma=4)


def test_check_lookup_prediction_not_attempted(capsys):
    ch5.check_lookup_prediction(None, **LOOKUP, measured=1.1)
    out = capsys.readouterr().out
    assert NOT_ATTEMPTED in out and "Measured: 1.100×" in out


def test_check_lookup_prediction_accepts_the_coverage_weighted_formula(capsys):
    a, k, c, g = LOOKUP.values()
    e = sum(a ** i for i in range(g + 1))
    ch5.check_lookup_prediction((k * e + 1 - k) / (1 + c * (k * g + 1 - k)), **LOOKUP, measured=1.1)
    out = capsys.readouterr().out
    assert "Correct" in out and "Measured: 1.100×" in out


def test_check_lookup_prediction_rejects_the_textbook_formula_and_a_wrong_number():
    from specdec_ref.lab.speedup import predicted_speedup
    a, k, c, g = LOOKUP.values()
    with pytest.raises(AssertionError, match="textbook prediction"):
        ch5.check_lookup_prediction(predicted_speedup(a, g, c), **LOOKUP)
    with pytest.raises(AssertionError, match="2.500× is too high. Hint"):  # which way, never the answer
        ch5.check_lookup_prediction(2.5, **LOOKUP)
    with pytest.raises(AssertionError, match="too low"):
        ch5.check_lookup_prediction(0.5, **LOOKUP)

"""Chapter 4's exercise checkers: they pass right answers, reject wrong ones, and wait politely for untouched
ones."""
import pytest

from specdec_ref.chapters.exercises import ch4
from specdec_ref.lab.speedup import generalized_speedup


def not_done(*args):
    raise NotImplementedError


def test_checkers_report_unattempted_exercises_without_failing(capsys):
    ch4.check_expected_tokens(not_done)
    ch4.check_best_gamma(None, 0.8, 0.05)
    ch4.check_prediction(None, 0.5, 2, 0.1, 1.2, 0.05)
    assert capsys.readouterr().out.count("Not attempted yet") == 3


def test_expected_tokens_checker_accepts_the_sum_and_rejects_one_term_short():
    ch4.check_expected_tokens(lambda a, g: sum(a ** k for k in range(g + 1)))
    with pytest.raises(AssertionError, match="too low.*one term short"):
        ch4.check_expected_tokens(lambda a, g: sum(a ** k for k in range(g)))
    with pytest.raises(AssertionError):  # the closed form divides by zero at α = 1 unless handled
        ch4.check_expected_tokens(lambda a, g: (1 - a ** (g + 1)) / (1 - a) if a < 1 else 1.0)


def test_best_gamma_checker():
    ch4.check_best_gamma(8, 0.8, 0.05)  # (1 - .8^9) / .2 / 1.4 = 3.09, the maximum
    with pytest.raises(AssertionError, match="a longer draft does better"):
        ch4.check_best_gamma(4, 0.8, 0.05)  # 2.80x: a good guess, not the best
    with pytest.raises(AssertionError, match="a shorter draft does better"):
        ch4.check_best_gamma(12, 0.8, 0.05)
    ch4.check_best_gamma(0, 0.2, 0.3)  # α <= c: do not speculate
    with pytest.raises(AssertionError, match="0.923×.*a shorter draft does better"):
        ch4.check_best_gamma(1, 0.2, 0.3)
    with pytest.raises(AssertionError, match="do not speculate.*a longer draft does better"):
        ch4.check_best_gamma(0, 0.8, 0.05)


def test_prediction_checker_accepts_generalised_and_names_the_textbook_mistake(capsys):
    args = (0.5, 3, 0.1, 1.4, 0.08)
    ch4.check_prediction(generalized_speedup(*args), *args, measured=1.0)
    assert "Measured" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="textbook"):
        ch4.check_prediction(generalized_speedup(0.5, 3, 0.1, 1.0), *args)
    with pytest.raises(AssertionError, match="2.000× is too high. Hint"):
        ch4.check_prediction(2.0, *args)
    with pytest.raises(AssertionError, match="too low"):
        ch4.check_prediction(0.5, *args)

"""The speedup formulas (Leviathan et al. 2023): their limits, their known values, and their refusals."""
import math

import pytest

from specdec_ref.lab.speedup import expected_tokens_per_iteration, predicted_speedup


def test_expected_tokens_per_iteration_formula():
    assert expected_tokens_per_iteration(0.0, 4) == 1.0  # every draft rejected: one token per target pass
    assert expected_tokens_per_iteration(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_expected_tokens_is_continuous_at_alpha_one():
    """α = 1 must give γ + 1 (the formula's limit), not a division by zero."""
    assert expected_tokens_per_iteration(1.0, 4) == 5.0
    assert expected_tokens_per_iteration(1 - 1e-9, 4) == pytest.approx(5.0, rel=1e-6)
    assert predicted_speedup(1.0, 4, 0.0) == 5.0


def test_predicted_speedup_formula():
    assert predicted_speedup(0.0, 4, 0.0) == 1.0
    assert predicted_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)  # a useless draft only costs time
    assert predicted_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8 ** 5) / 0.2 / 1.2)


@pytest.mark.parametrize("alpha, gamma, c", [(-0.1, 4, 0.1), (1.1, 4, 0.1), (math.nan, 4, 0.1),
                                             (0.5, -1, 0.1), (0.5, 4, -0.1)])
def test_speedup_formula_refuses_impossible_inputs(alpha, gamma, c):
    with pytest.raises(ValueError):
        predicted_speedup(alpha, gamma, c)

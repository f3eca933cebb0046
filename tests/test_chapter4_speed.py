"""Chapter 4's helpers (chapters.speed): the best γ in closed form (Lambert W), and the overhead fitted as
h₀ + γh₁ on some γ and tested on the others."""
import math

import pytest

from specdec_ref.chapters import speed
from specdec_ref.lab.speedup import best_gamma, predicted_speedup

ALPHAS, CS = (0.2, 0.4, 0.6, 0.75, 0.85, 0.9, 0.95, 0.99), (0.001, 0.01, 0.05, 0.1, 0.3, 0.6)
GRID = [(a, c) for a in ALPHAS for c in CS]


@pytest.mark.parametrize("alpha,c", GRID)
def test_closed_form_best_gamma_brackets_the_brute_force_integer_argmax(alpha, c):
    g_star = speed.continuous_best_gamma(alpha, c)
    g_int, _ = best_gamma(alpha, c, gamma_max=5000)  # brute force over γ = 1..5000
    assert g_star < 4999  # the grid's optimum lies well inside the brute-force range
    candidates = {max(1, math.floor(g_star)), max(1, math.ceil(g_star))}
    assert g_int in candidates, (alpha, c, g_star, g_int)


@pytest.mark.parametrize("alpha,c", [(0.8, 0.05), (0.6, 0.1), (0.95, 0.02)])
def test_closed_form_best_gamma_is_a_stationary_maximum_of_the_real_speedup(alpha, c):
    def s(g: float) -> float:  # Theorem 3.8 for real γ
        return (1 - alpha ** (g + 1)) / ((1 - alpha) * (g * c + 1))

    g, eps = speed.continuous_best_gamma(alpha, c), 1e-4
    assert abs(s(g + eps) - s(g - eps)) / (2 * eps) < 1e-6  # dS/dγ = 0 there
    assert s(g) > s(g - 0.5) and s(g) > s(g + 0.5)  # a maximum, not a minimum
    assert s(round(g)) == pytest.approx(predicted_speedup(alpha, round(g), c))


def test_closed_form_best_gamma_agrees_across_the_scipy_and_newton_branches():
    # K = 1 + L(1 - c)/c crosses 700 between these two c: the first uses scipy's W₋₁, the second Newton
    alpha = 0.1
    L = -math.log(alpha)
    c_scipy, c_newton = L / (698 + L), L / (702 + L)
    for c in (c_scipy, c_newton):
        g = speed.continuous_best_gamma(alpha, c)
        g_int, _ = best_gamma(alpha, c, gamma_max=200)
        assert g_int in {math.floor(g), math.ceil(g)}
    assert speed.continuous_best_gamma(alpha, c_newton) > speed.continuous_best_gamma(alpha, c_scipy)


def test_closed_form_best_gamma_rejects_the_edges_with_a_reason():
    with pytest.raises(ValueError, match="alpha must lie strictly between 0 and 1"):
        speed.continuous_best_gamma(1.0, 0.1)
    with pytest.raises(ValueError, match="c must lie strictly between 0 and 1"):
        speed.continuous_best_gamma(0.8, 0.0)


def test_overhead_fit_recovers_a_line_and_predicts_the_held_out_gamma_from_tau():
    c, h0, h1 = 0.05, 0.3, 0.04
    gammas = [1, 2, 3, 4, 5]
    verify = {g: 1 + 0.1 * g for g in gammas}
    tau = {g: 1 + 0.7 * g for g in gammas}
    # a machine that obeys the model
    measured = {g: tau[g] / (g * c + verify[g] + h0 + g * h1) for g in gammas}
    fit, held = speed.split_gammas(gammas)
    assert (fit, held) == ([1, 3, 5], [2, 4])
    hs = [speed.implied_overhead(tau[g], measured[g], g, c, verify[g]) for g in fit]
    got_h0, got_h1 = speed.fit_overhead(fit, hs)
    assert (got_h0, got_h1) == (pytest.approx(h0), pytest.approx(h1))
    for g in held:
        pred = speed.speedup_from_tau(tau[g], g, c, verify[g], got_h0 + g * got_h1)
        assert pred == pytest.approx(measured[g])
    # a constant h fitted at one γ misses the held-out γ when the overhead grows with γ: the test can fail
    h_one = speed.implied_overhead(tau[1], measured[1], 1, c, verify[1])
    assert speed.speedup_from_tau(tau[4], 4, c, verify[4], h_one) > 1.05 * measured[4]


def test_overhead_helpers_reject_bad_input_with_a_reason():
    with pytest.raises(ValueError, match="at least three γ"):
        speed.split_gammas([1, 2])
    with pytest.raises(ValueError, match="two γ or more"):
        speed.fit_overhead([2, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="must be > 0"):
        speed.implied_overhead(2.0, 0.0, 1, 0.1, 1.0)
    with pytest.raises(ValueError, match="take no time"):
        speed.speedup_from_tau(2.0, 1, 0.1, 1.0, -1.5)
    with pytest.raises(ValueError, match="τ, the tokens one target pass keeps"):
        speed.speedup_from_tau(0.0, 1, 0.1, 1.0, 0.1)

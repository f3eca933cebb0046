"""How much faster: the expected tokens per iteration and the walltime speedup (Leviathan et al. 2023).

Notation, as in the chapters: α is the per-token acceptance (the probability that one draft token
is accepted, `Stats.alpha`), γ the number of draft tokens per iteration, c the cost of one draft step
divided by the cost of one target step.
"""
from __future__ import annotations

from collections.abc import Sequence


def expected_tokens_per_iteration(alpha: float, gamma: int) -> float:
    """E[tokens per draft/verify iteration] = (1 - α^(γ+1)) / (1 - α) (Leviathan et al. 2023, eq. 1).

    At α = 1 every draft token is accepted: γ + 1 tokens (the limit of the formula).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"gamma must be an integer >= 0, got {gamma!r}")
    return gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def predicted_speedup(alpha: float, gamma: int, c: float) -> float:
    """Walltime improvement (1 - α^(γ+1)) / ((1 - α)(γc + 1)) (Leviathan et al. 2023, Theorem 3.8).

    It assumes that the target scores γ+1 tokens in the time of one; chapter 4 replaces that
    assumption with the measured cost.
    """
    if c < 0:
        raise ValueError(f"the cost ratio c must be >= 0, got {c}")
    return expected_tokens_per_iteration(alpha, gamma) / (gamma * c + 1)


# ---------------------------------------------------------------------------------------------
# Chapter 4: the same formula with the costs measured instead of assumed.
# ---------------------------------------------------------------------------------------------

def _check_costs(gamma: int, c: float, verify_cost: float, overhead: float) -> None:
    if not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 0:
        raise ValueError(f"gamma must be an integer >= 0, got {gamma!r}")
    if not c >= 0:
        raise ValueError(f"the cost ratio c must be >= 0 (draft step / target step), got {c}")
    if not verify_cost > 0:
        raise ValueError(f"verify_cost t(γ+1)/t(1) must be > 0 (1 means 'as cheap as one token'), "
                         f"got {verify_cost}")
    if not overhead > -verify_cost:
        raise ValueError(f"overhead {overhead} would make an iteration take no time; it is in target steps, "
                         "usually a small number >= 0")


def iteration_cost(gamma: int, c: float, verify_cost: float, overhead: float = 0.0) -> float:
    """γc + t(γ+1)/t(1) + h: one iteration's time in target steps, the denominator of eq-generalized (every
    speedup from measured costs divides by it)."""
    _check_costs(gamma, c, verify_cost, overhead)
    return gamma * c + verify_cost + overhead


def generalized_speedup(alpha: float, gamma: int, c: float, verify_cost: float,
                        overhead: float = 0.0) -> float:
    """S_gen = E[tokens] / (γc + t(γ+1)/t(1) + h): Theorem 3.8 with the verify pass and the loop measured.

    verify_cost is t(γ+1)/t(1), the cost of the target pass that scores γ+1 tokens in units of one
    target step t(1) (the textbook assumes 1); overhead is h, the rest of an iteration (sampling,
    bookkeeping, rollback, the draft catching up), already in units of t(1). verify_cost=1, overhead=0 gives
    `predicted_speedup`.
    """
    return expected_tokens_per_iteration(alpha, gamma) / iteration_cost(gamma, c, verify_cost, overhead)


def linear_verify_costs(slope: float, k_max: int) -> list[float]:
    """t(k)/t(1) = 1 + slope (k - 1) for k = 1..k_max: a straight-line model of a measured curve."""
    if slope < 0:
        raise ValueError(f"slope must be >= 0 (scoring more tokens never gets cheaper), got {slope}")
    return [1 + slope * (k - 1) for k in range(1, k_max + 1)]


def speedup_by_gamma(alpha: float, c: float, verify_costs: Sequence[float] | None = None,
                     overhead: float | Sequence[float] = 0.0, gamma_max: int = 16) -> dict[int, float]:
    """{γ: generalized_speedup} for γ = 1..gamma_max. verify_costs[k-1] = t(k)/t(1) for k = 1, 2, ...;
    None is the textbook's 1 for every k (then overhead should be 0 too, for Theorem 3.8 itself). overhead
    is one h for every γ, or h(γ) per γ (overhead[γ-1], e.g. h₀ + γh₁), as long as gamma_max."""
    if verify_costs is not None:
        if len(verify_costs) < 2:
            raise ValueError("verify_costs needs t(k)/t(1) for k = 1 and at least k = 2 (γ = 1)")
        gamma_max = min(gamma_max, len(verify_costs) - 1)  # γ draft tokens need t(γ+1)
    if gamma_max < 1:
        raise ValueError(f"gamma_max must be >= 1, got {gamma_max}")
    if isinstance(overhead, Sequence) and len(overhead) < gamma_max:
        raise ValueError(f"overhead per γ needs h(γ) for γ = 1..{gamma_max}, got {len(overhead)} values")
    h = (lambda g: float(overhead[g - 1])) if isinstance(overhead, Sequence) else (lambda g: overhead)
    cost = (lambda k: 1.0) if verify_costs is None else (lambda k: float(verify_costs[k - 1]))
    return {g: generalized_speedup(alpha, g, c, cost(g + 1), h(g)) for g in range(1, gamma_max + 1)}


def best_gamma(alpha: float, c: float, verify_costs: Sequence[float] | None = None,
               overhead: float | Sequence[float] = 0.0, gamma_max: int = 16) -> tuple[int, float]:
    """(γ with the highest predicted speedup, that speedup). A speedup <= 1 means: do not speculate."""
    speedups = speedup_by_gamma(alpha, c, verify_costs, overhead, gamma_max)
    gamma = max(speedups, key=speedups.get)
    return gamma, speedups[gamma]

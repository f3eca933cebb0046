"""How much faster: the expected tokens per iteration and the walltime speedup (Leviathan et al. 2023).

Notation, as in the chapters: α is the per-token acceptance (the probability that one draft token
is accepted, `Stats.alpha`), γ the number of draft tokens per iteration, c the cost of one draft step
divided by the cost of one target step.
"""
from __future__ import annotations


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

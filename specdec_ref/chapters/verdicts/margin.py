"""One comparison for every verdict: is a number higher than another, lower, or level within a margin?"""
from __future__ import annotations

from typing import Literal

Side = Literal["higher", "lower", "level"]


def compare(a: float, b: float, margin: float, *, relative: bool = True) -> Side:
    """Where a sits against b: "higher" if a > b·(1 + margin), "lower" if a < b·(1 − margin), else "level".

    relative=False makes the margin absolute: "higher" if a > b + margin, "lower" if a < b − margin.
    A value on a bound counts as level, and so does a NaN (no comparison with it holds).
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}: it is the band around b that counts as level")
    if relative and b < 0:
        raise ValueError(f"a relative margin needs b >= 0, got b = {b}; "
                         "pass relative=False for an absolute margin")
    high, low = (b * (1 + margin), b * (1 - margin)) if relative else (b + margin, b - margin)
    return "higher" if a > high else "lower" if a < low else "level"

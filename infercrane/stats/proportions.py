"""Two proportions measured on the same items: the difference of their success rates and its interval.

The replicate is an item: each one is answered by both arms, so the data are the 2 x 2 table of paired outcomes

                       candidate right   candidate wrong
    reference right          both          reference_only
    reference wrong     candidate_only        neither

and the difference of the accuracies is ``(candidate_only - reference_only) / n``. Its interval is Newcombe's hybrid
score interval for paired proportions (method 10 of R. G. Newcombe, "Improved confidence intervals for the difference
between binomial proportions based on paired data", Statistics in Medicine 17 (1998) 2635-2650): each arm's Wilson
score interval, combined through the correlation of the paired outcomes (phi, with Newcombe's continuity correction
when it is positive). Unlike the Wald interval it stays inside [-1, 1], keeps its width when no item changes (a
sample of identical outcomes still says how much a larger sample might differ), and needs no resampling.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

NEWCOMBE_METHOD = ("Newcombe hybrid score interval for paired proportions (method 10, 1998): Wilson score intervals of "
                   "each arm's accuracy combined through the phi correlation of the paired outcomes; the item is the "
                   "replicate")


@dataclass(frozen=True)
class PairedCounts:
    """The 2 x 2 table of paired outcomes (module docstring)."""

    both: int
    reference_only: int
    candidate_only: int
    neither: int

    def __post_init__(self) -> None:
        for name in ("both", "reference_only", "candidate_only", "neither"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.n == 0:
            raise ValueError("no items: a paired difference needs at least one")

    @property
    def n(self) -> int:
        return self.both + self.reference_only + self.candidate_only + self.neither

    @property
    def reference_rate(self) -> float:
        return (self.both + self.reference_only) / self.n

    @property
    def candidate_rate(self) -> float:
        return (self.both + self.candidate_only) / self.n

    @property
    def difference(self) -> float:
        """candidate rate - reference rate."""
        return (self.candidate_only - self.reference_only) / self.n


def _z(confidence: float) -> float:
    from scipy.stats import norm

    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return float(norm.ppf(0.5 + confidence / 2.0))


def wilson(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson score interval of a proportion ``successes / n`` at two-sided ``confidence``."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes} of {n}")
    z = _z(confidence)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _phi(t: PairedCounts) -> float:
    """Newcombe's phi of the paired table: the correlation of the two arms' outcomes, its numerator reduced by n/2
    when positive (his continuity correction); 0 when a margin of the table is empty."""
    a, b, c, d = t.both, t.reference_only, t.candidate_only, t.neither
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    if denom == 0:
        return 0.0
    num = a * d - b * c
    if num > 0:
        num = max(num - t.n / 2.0, 0.0)
    return num / math.sqrt(denom)


def paired_difference_interval(t: PairedCounts, confidence: float) -> tuple[float, float]:
    """Two-sided ``confidence`` interval of ``t.difference`` (candidate - reference), ``NEWCOMBE_METHOD``."""
    n = t.n
    p1, p2 = t.candidate_rate, t.reference_rate
    l1, u1 = wilson(t.both + t.candidate_only, n, confidence)
    l2, u2 = wilson(t.both + t.reference_only, n, confidence)
    phi = _phi(t)
    theta = p1 - p2
    lower_sq = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    upper_sq = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    lo = theta - math.sqrt(max(lower_sq, 0.0))
    hi = theta + math.sqrt(max(upper_sq, 0.0))
    return max(-1.0, lo), min(1.0, hi)


def items_to_show_margin(reference_rate: float, margin: float, confidence: float, *, limit: int = 100_000) -> int | None:
    """The fewest items with which the interval's lower end can reach ``-margin`` at all: when every item's outcome
    is the same in both arms at ``reference_rate`` (the best case for showing non-inferiority). None when even
    ``limit`` items cannot."""
    if not 0 < margin < 1:
        raise ValueError(f"margin must lie in (0, 1), got {margin}")

    def shown(n: int) -> bool:
        right = round(reference_rate * n)
        t = PairedCounts(both=right, reference_only=0, candidate_only=0, neither=n - right)
        return paired_difference_interval(t, confidence)[0] >= -margin

    if not shown(limit):
        return None
    lo, hi = 1, limit
    while lo < hi:  # the lower end rises with n (at a fixed rate): the first n that shows it
        mid = (lo + hi) // 2
        if shown(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo

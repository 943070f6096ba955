"""Family-wise error control for a decision that reads many verdicts at once.

A claim that holds when ANY of m hypotheses is rejected ("slower than some baseline at some row") is a union claim:
read at a level alpha per test it is wrong far more often than alpha, so the p-values are adjusted over the family.
A claim that needs EVERY test to reject ("faster than every baseline at every row") is an intersection-union
test: each test at level alpha already bounds the claim's error by alpha, and it needs no adjustment.
"""
from __future__ import annotations

from collections.abc import Sequence

HOLM = "holm"


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order.

    With the p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted value of the i-th is
    ``max_{j <= i} min(1, (m - j + 1) * p_(j))``. Rejecting every hypothesis whose adjusted p-value is below alpha
    controls the family-wise error rate at alpha under any dependence between the tests (Holm 1979). With one
    p-value the adjustment is the identity. Raises ValueError for a p-value outside [0, 1] or NaN.
    """
    ps = [float(p) for p in p_values]
    bad = [p for p in ps if not 0.0 <= p <= 1.0]
    if bad:
        raise ValueError(f"p-values must lie in [0, 1], got {bad}")
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted

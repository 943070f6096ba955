"""Derived comparison fields of a receipt, as pure functions shared by the serving lab and the receipt validator.

A is the baseline recipe, B the candidate. Rounding follows the receipts: ratios to 4 decimals, percents to 2.
"""
from __future__ import annotations

import math

SPEEDUP_DECIMALS = 4
PERCENT_DECIMALS = 2


def _check(a: float, b: float, a_name: str, b_name: str) -> None:
    if not (math.isfinite(a) and a > 0):
        raise ValueError(f"{a_name} must be a finite positive number, got {a!r}")
    if not (math.isfinite(b) and b >= 0):
        raise ValueError(f"{b_name} must be a finite non-negative number, got {b!r}")


def throughput_speedup(a_tok_s: float, b_tok_s: float) -> float:
    """``B / A`` of output throughput, 4 decimals: 573.1606 / 88.9783 -> 6.4416."""
    _check(a_tok_s, b_tok_s, "a_tok_s", "b_tok_s")
    return round(b_tok_s / a_tok_s, SPEEDUP_DECIMALS)


def reduction_percent(a: float, b: float) -> float:
    """``(A - B) / A * 100``, 2 decimals: positive when B is lower (a latency went down)."""
    _check(a, b, "a", "b")
    return round((a - b) / a * 100.0, PERCENT_DECIMALS)


def change_percent(a: float, b: float) -> float:
    """``(B - A) / A * 100``, 2 decimals: 12950.2671 -> 12880.3447 tok/s is -0.54."""
    _check(a, b, "a", "b")
    return round((b - a) / a * 100.0, PERCENT_DECIMALS)


def ttft_p95_reduction_percent(a_ttft_p95_ms: float, b_ttft_p95_ms: float) -> float:
    """``(A - B) / A * 100`` of p95 TTFT, 2 decimals: 35.2737 -> 15.5103 ms is 56.03."""
    return reduction_percent(a_ttft_p95_ms, b_ttft_p95_ms)


def latency_p95_reduction_percent(a_latency_p95_ms: float, b_latency_p95_ms: float) -> float:
    """``(A - B) / A * 100`` of p95 request latency, 2 decimals: 779.8675 -> 116.1183 ms is 85.11."""
    return reduction_percent(a_latency_p95_ms, b_latency_p95_ms)

"""Statistics for both labs: sample summaries, ratio confidence intervals, rank tests and verdict rules."""
from __future__ import annotations

from infercrane.stats.compare import (
    Band,
    EquivalenceVerdict,
    RankTest,
    RatioCI,
    Verdict,
    b_over_a_ci,
    classify_band,
    equivalence_verdict,
    min_achievable_p,
    rank_test,
    ratio_ci,
    speedup_ci,
    timing_verdict,
)
from infercrane.stats.summary import Summary, summarize

__all__ = [
    "Band",
    "EquivalenceVerdict",
    "RankTest",
    "RatioCI",
    "Summary",
    "Verdict",
    "b_over_a_ci",
    "classify_band",
    "equivalence_verdict",
    "min_achievable_p",
    "rank_test",
    "ratio_ci",
    "speedup_ci",
    "summarize",
    "timing_verdict",
]

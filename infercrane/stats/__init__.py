"""Statistics for both labs: sample summaries, ratio confidence intervals (per sample for serving runs, per trial
for kernel timings), rank tests, verdict rules and family-wise adjustment."""
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
from infercrane.stats.family import HOLM, holm_adjust
from infercrane.stats.summary import Summary, summarize
from infercrane.stats.trials import MIN_PAIRED_TRIALS, TRIAL_METHOD, TrialSpeedup, trial_speedup

__all__ = [
    "HOLM",
    "MIN_PAIRED_TRIALS",
    "TRIAL_METHOD",
    "Band",
    "EquivalenceVerdict",
    "RankTest",
    "RatioCI",
    "Summary",
    "TrialSpeedup",
    "Verdict",
    "b_over_a_ci",
    "classify_band",
    "equivalence_verdict",
    "holm_adjust",
    "min_achievable_p",
    "rank_test",
    "ratio_ci",
    "speedup_ci",
    "summarize",
    "timing_verdict",
    "trial_speedup",
]

"""Two-group comparisons: a ratio with a bootstrap confidence interval, a rank test, and the verdict rules.

One ratio API serves both labs; the direction is in the function name and in ``RatioCI.definition``:

* ``speedup_ci(baseline_times, candidate_times)`` -> ``median(baseline) / median(candidate)``: a SPEEDUP of the
  candidate, > 1 when the candidate is faster (the samples are times; lower is better).
* ``b_over_a_ci(a, b)`` -> ``median(b) / median(a)``: the B/A ratio of a metric over runs (output_tok_s, ttft_p95_ms);
  whether > 1 is good depends on the metric, and ``equivalence_verdict`` takes that direction explicitly.

Both call ``ratio_ci(numerator, denominator)``. It resamples every sample as independent, which is right when each
sample is a replicate (one serving run) and wrong for the samples inside one kernel-timing trial, which share that
trial's state: the kernel lab uses ``infercrane.stats.trials.trial_speedup``, whose replicate is the trial.

Confidence interval method: a **percentile** bootstrap with **independent** resampling of each group
(``scipy.stats.bootstrap(..., paired=False, method="percentile")``). Percentile, not BCa, by default because the
statistic is a median: with a few runs per arm its bootstrap distribution is a handful of discrete values, where
BCa's acceleration estimate is unstable and scipy returns NaN for degenerate data. BCa is available via
``ci_method="BCa"`` for large samples; a NaN interval is an error, never a result.

Verdicts classify the interval against a band ``[1 - margin, 1 + margin]`` that counts as "the same":
a difference is called only when the whole interval lies outside the band on one side; an interval wholly
inside the band is "the same"; an interval that overlaps a band edge is undecided.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from enum import Enum
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from infercrane.stats.summary import as_finite_array

Statistic = Literal["median", "mean"]
CIMethod = Literal["percentile", "BCa"]

# Exact permutation p-values are enumerated while the number of distinct group splits stays below this
# (7 v 7 = 3432 splits; 8 v 8 = 12870 uses the normal approximation, which is accurate by then).
_EXACT_SPLITS_MAX = 10_000


# --------------------------------------------------------------------------------------------- ratio + CI


class RatioCI(BaseModel):
    """A ratio of two group statistics with its bootstrap confidence interval, and how it was computed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    definition: str = Field(description="what the ratio is, e.g. 'median(baseline_t) / median(candidate_t)'")
    ratio: float = Field(gt=0)
    ci_lo: float = Field(gt=0)
    ci_hi: float = Field(gt=0)
    confidence: float = Field(gt=0, lt=1)
    ci_method: CIMethod
    statistic: Statistic
    n_resamples: int
    seed: int
    n_numerator: int
    n_denominator: int


def _check_ratio_args(confidence: float, n_resamples: int, statistic: str, ci_method: str) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be at least 100 for a usable interval, got {n_resamples}")
    if statistic not in ("median", "mean"):
        raise ValueError(f"statistic must be 'median' or 'mean', got {statistic!r}")
    if ci_method not in ("percentile", "BCa"):
        raise ValueError(f"ci_method must be 'percentile' or 'BCa', got {ci_method!r}")


def _positive_samples(samples: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    arr = as_finite_array(samples, name=name)
    if arr.size < 2:
        raise ValueError(f"{name} has {arr.size} sample; a confidence interval needs at least 2 per group")
    if (arr <= 0).any():
        raise ValueError(f"{name} must be strictly positive (times, throughputs); got min {arr.min()!r}")
    return arr


def ratio_ci(
    numerator: Sequence[float] | np.ndarray,
    denominator: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    statistic: Statistic = "median",
    ci_method: CIMethod = "percentile",
    numerator_name: str = "numerator",
    denominator_name: str = "denominator",
) -> RatioCI:
    """``stat(numerator) / stat(denominator)`` with a bootstrap CI; each group is resampled independently.

    Samples must be finite and strictly positive, at least 2 per group. The same ``seed`` gives the same interval.
    Prefer the direction-named wrappers ``speedup_ci`` and ``b_over_a_ci``.
    """
    _check_ratio_args(confidence, n_resamples, statistic, ci_method)
    num = _positive_samples(numerator, numerator_name)
    den = _positive_samples(denominator, denominator_name)
    from scipy import stats as _st  # deferred: scipy.stats takes ~1 s to import, and a CLI --help needs none of it

    reduce = np.median if statistic == "median" else np.mean

    def _ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return reduce(x, axis=axis) / reduce(y, axis=axis)

    with warnings.catch_warnings():
        # BCa on degenerate data warns and returns NaN; the NaN check below turns that into one clear error.
        warnings.simplefilter("ignore", category=_st.DegenerateDataWarning)
        warnings.simplefilter("ignore", category=RuntimeWarning)
        res = _st.bootstrap(
            (num, den),
            _ratio,
            n_resamples=n_resamples,
            vectorized=True,
            paired=False,
            confidence_level=confidence,
            method=ci_method,
            rng=np.random.default_rng(seed),
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(
            f"the {ci_method} bootstrap interval is undefined for these samples (degenerate resampling "
            f"distribution); use ci_method='percentile' or collect more varied samples"
        )
    return RatioCI(
        definition=f"{statistic}({numerator_name}) / {statistic}({denominator_name})",
        ratio=float(_ratio(num, den)),
        ci_lo=lo,
        ci_hi=hi,
        confidence=confidence,
        ci_method=ci_method,
        statistic=statistic,
        n_resamples=n_resamples,
        seed=seed,
        n_numerator=int(num.size),
        n_denominator=int(den.size),
    )


def speedup_ci(
    baseline_times: Sequence[float] | np.ndarray,
    candidate_times: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    statistic: Statistic = "median",
    ci_method: CIMethod = "percentile",
) -> RatioCI:
    """Speedup of the candidate: ``median(baseline_t) / median(candidate_t)``; > 1 means the candidate is faster.

    Every sample counts as an independent replicate. For samples grouped in trials (the kernel lab) the interval is
    far too narrow; use ``infercrane.stats.trials.trial_speedup`` there.
    """
    return ratio_ci(
        baseline_times,
        candidate_times,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
        statistic=statistic,
        ci_method=ci_method,
        numerator_name="baseline_t",
        denominator_name="candidate_t",
    )


def b_over_a_ci(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    statistic: Statistic = "median",
    ci_method: CIMethod = "percentile",
) -> RatioCI:
    """B/A ratio of one metric over runs: ``median(b) / median(a)``. Whether > 1 is better depends on the metric."""
    return ratio_ci(
        b,
        a,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
        statistic=statistic,
        ci_method=ci_method,
        numerator_name="B",
        denominator_name="A",
    )


# --------------------------------------------------------------------------------------------- rank test


class RankTest(BaseModel):
    """Two-sided Mann-Whitney U test of A vs B, with the smallest p-value these group sizes could ever give."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    u_statistic: float = Field(description="U of sample a (scipy's convention)")
    p_value: float = Field(ge=0, le=1)
    method: Literal["exact-permutation", "asymptotic"]
    n_a: int
    n_b: int
    min_achievable_p: float = Field(gt=0, le=1)


def min_achievable_p(n_a: int, n_b: int) -> float:
    """Smallest two-sided Mann-Whitney p-value possible with ``n_a`` and ``n_b`` samples: ``2 / C(n_a + n_b, n_a)``.

    It is reached when the groups do not overlap at all and there are no ties (ties only raise it).
    3 v 3 -> 0.1, so a rank test can never reach p < 0.05 with 3 runs per arm; 4 v 4 -> 0.0286.
    """
    if n_a < 1 or n_b < 1:
        raise ValueError(f"group sizes must be at least 1, got n_a={n_a}, n_b={n_b}")
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def rank_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> RankTest:
    """Two-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu``).

    Small groups (at most 10 000 distinct splits, e.g. up to 7 v 7) get the exact permutation distribution, which
    handles ties correctly; scipy's default switches to the normal approximation as soon as there are ties, and that
    reports p = 0.047 for [1, 1, 1] vs [2, 2, 2] where no 3 v 3 test can go below 0.1. Larger groups use the normal
    approximation with tie and continuity corrections.
    """
    from scipy import stats as _st  # deferred, as in ratio_ci

    xa = as_finite_array(a, name="a")
    xb = as_finite_array(b, name="b")
    n_a, n_b = int(xa.size), int(xb.size)
    if math.comb(n_a + n_b, n_a) <= _EXACT_SPLITS_MAX:
        method: Literal["exact-permutation", "asymptotic"] = "exact-permutation"
        res = _st.mannwhitneyu(xa, xb, alternative="two-sided", method=_st.PermutationMethod(n_resamples=np.inf))
    else:
        method = "asymptotic"
        res = _st.mannwhitneyu(xa, xb, alternative="two-sided", method="asymptotic")
    return RankTest(
        u_statistic=float(res.statistic),
        p_value=min(1.0, float(res.pvalue)),
        method=method,
        n_a=n_a,
        n_b=n_b,
        min_achievable_p=min_achievable_p(n_a, n_b),
    )


# --------------------------------------------------------------------------------------------- verdicts


class Band(str, Enum):
    """Where a ratio's confidence interval lies relative to the band ``[1 - margin, 1 + margin]``."""

    ABOVE = "above"  # ci_lo > 1 + margin
    BELOW = "below"  # ci_hi < 1 - margin
    INSIDE = "inside"  # 1 - margin <= ci_lo and ci_hi <= 1 + margin
    STRADDLES = "straddles"  # overlaps a band edge


def classify_band(ci_lo: float, ci_hi: float, *, margin: float) -> Band:
    """Place ``[ci_lo, ci_hi]`` against ``[1 - margin, 1 + margin]``; the single rule both verdicts use."""
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin!r}")
    if not (math.isfinite(ci_lo) and math.isfinite(ci_hi)) or ci_lo <= 0 or ci_lo > ci_hi:
        raise ValueError(f"need a finite positive interval with ci_lo <= ci_hi, got [{ci_lo!r}, {ci_hi!r}]")
    lower, upper = 1.0 - margin, 1.0 + margin
    if ci_lo > upper:
        return Band.ABOVE
    if ci_hi < lower:
        return Band.BELOW
    if lower <= ci_lo and ci_hi <= upper:
        return Band.INSIDE
    return Band.STRADDLES


class Verdict(str, Enum):
    """Kernel timing verdict of a candidate against one baseline, from the speedup's CI.

    ``timing_verdict`` returns one of the first four. The last two are no verdict at all: INSUFFICIENT when the
    sample cannot support a claim (``stats.trials``: too few paired trials), FLAGGED when a timing cell carries a
    flag (a timer disagreement, a time below the physical floor) and so cannot carry a verdict whatever its numbers.
    """

    FASTER = "FASTER"
    SLOWER = "SLOWER"
    SAME = "SAME"
    AMBIGUOUS = "AMBIGUOUS"
    INSUFFICIENT = "INSUFFICIENT"
    FLAGGED = "FLAGGED"


def timing_verdict(ci_lo: float, ci_hi: float, *, same_margin: float) -> Verdict:
    """Verdict from the CI of a SPEEDUP (``baseline_t / candidate_t``) and the policy's ``same_margin``.

    * FASTER    when ``ci_lo > 1 + same_margin``: even the pessimistic end gains more than the margin;
    * SLOWER    when ``ci_hi < 1 - same_margin``: even the optimistic end loses more than the margin;
    * SAME      when ``1 - same_margin <= ci_lo`` and ``ci_hi <= 1 + same_margin``;
    * AMBIGUOUS otherwise (the interval overlaps a band edge: e.g. [1.01, 1.04] with a 2 % margin is faster
      than 1 but not demonstrably by more than the margin, so it is not called).

    The point estimate plays no part: the interval alone decides.
    """
    band = classify_band(ci_lo, ci_hi, margin=same_margin)
    return {
        Band.ABOVE: Verdict.FASTER,
        Band.BELOW: Verdict.SLOWER,
        Band.INSIDE: Verdict.SAME,
        Band.STRADDLES: Verdict.AMBIGUOUS,
    }[band]


class EquivalenceVerdict(str, Enum):
    """Serving verdict of recipe B against recipe A on one metric, from the B/A ratio's CI."""

    BETTER = "BETTER"
    WORSE = "WORSE"
    EQUIVALENT = "EQUIVALENT"
    INCONCLUSIVE = "INCONCLUSIVE"


def equivalence_verdict(ci_lo: float, ci_hi: float, *, margin: float, higher_is_better: bool) -> EquivalenceVerdict:
    """Verdict from the CI of a B/A ratio and an equivalence ``margin`` (e.g. 0.01 for ±1 %).

    * EQUIVALENT   when the CI lies inside ``[1 - margin, 1 + margin]``;
    * BETTER       when the CI lies wholly above ``1 + margin`` for a higher-is-better metric (output_tok_s), or wholly
      below ``1 - margin`` for a lower-is-better one (ttft_p95_ms, e2e_p95_ms);
    * WORSE        in the mirrored case;
    * INCONCLUSIVE when the CI overlaps a band edge.

    So B/A = 0.995 with CI [0.992, 0.998] reads EQUIVALENT at ±1 %, not WORSE.
    """
    band = classify_band(ci_lo, ci_hi, margin=margin)
    if band is Band.INSIDE:
        return EquivalenceVerdict.EQUIVALENT
    if band is Band.STRADDLES:
        return EquivalenceVerdict.INCONCLUSIVE
    up_is_good = (band is Band.ABOVE) == higher_is_better
    return EquivalenceVerdict.BETTER if up_is_good else EquivalenceVerdict.WORSE

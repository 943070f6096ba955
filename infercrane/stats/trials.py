"""Speedup of a candidate over a baseline with the TRIAL as the replicate, not the sample.

Samples inside one trial share that trial's state (clocks, caches, what else ran on the machine); measured on an
H200, the spread between trials was about 2.6x the error within one, so an interval that resamples samples as if
they were independent (``speedup_ci``) covers the true ratio about half the time. Here each trial gives one number
per implementation and the interval is built from those numbers.

Method (``TRIAL_METHOD``, recorded in every result):

* pair the two implementations' trials by trial id: both were measured in the same interleaved round, so pairing
  removes the drift shared by that round; a trial only one side kept samples for is left out and named;
* per trial, the statistic is the median of that trial's kept samples, and ``d_t = ln(median_baseline_t /
  median_candidate_t)``;
* speedup ``= exp(mean d)``; interval ``= exp(mean d -/+ t_{n-1, 1-alpha/2} * sd(d) / sqrt(n))`` with Student's t
  (``scipy.stats.t``) and ``alpha = 1 - confidence``. The point and both bounds come from one ``mean d``, and exp is
  monotone, so the point lies inside its interval by construction;
* one-sided p-values from the same t statistic against the SAME band ``[1 - m, 1 + m]``: ``p_faster`` for
  H0 speedup <= 1 + m, ``p_slower`` for H0 speedup >= 1 - m, and the TOST ``p_same`` = the larger of the p-values
  for H0 speedup <= 1 - m and H0 speedup >= 1 + m;
* verdict: FASTER / SLOWER / SAME when that p-value is below ``alpha / 2``, the tail of the two-sided interval (the
  same as the interval lying wholly above, below or inside the band), AMBIGUOUS otherwise; INSUFFICIENT, with no
  interval and no p-values, below ``MIN_PAIRED_TRIALS`` paired trials.

``sd(d) = 0`` (identical trials) gives a zero-width interval at the point and p-values of 0 or 1, not an error.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.stats.compare import Verdict
from infercrane.stats.summary import as_finite_array

MIN_PAIRED_TRIALS = 3
TRIAL_DEFINITION = "exp(mean over paired trials t of ln(median(baseline_t[t]) / median(candidate_t[t])))"
TRIAL_METHOD = (
    "paired-trial Student t on log ratios: trials paired by trial id; per trial the median of its kept samples; "
    "d_t = ln(median_baseline_t / median_candidate_t); speedup = exp(mean d); interval = exp(mean d -/+ "
    "t_{n-1, 1-alpha/2} * sd(d) / sqrt(n)); one-sided t p-values against the SAME band edges (TOST for SAME); "
    f"verdicts at alpha/2 per tail; fewer than {MIN_PAIRED_TRIALS} paired trials support no claim"
)


class TrialSpeedup(BaseModel):
    """Speedup of the candidate (``> 1``: faster) from paired trials, its t interval, p-values and verdict.

    ``verdict`` is INSUFFICIENT exactly when there are fewer than ``MIN_PAIRED_TRIALS`` paired trials; then
    ``reason`` says so and the interval, spread and p-values are absent. The point and the two geometric-mean times
    are given whenever at least one trial is paired, as a description, not a claim.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    definition: str = TRIAL_DEFINITION
    method: str = TRIAL_METHOD
    confidence: float = Field(gt=0, lt=1)
    same_margin: float = Field(ge=0, lt=1)
    trial_ids: list[int] = Field(description="paired trial ids, ascending")
    unpaired_trial_ids: list[int] = Field(default_factory=list,
                                          description="trials with kept samples on one side only, left out")
    baseline_trial_t_us: list[float] = Field(description="median of the baseline's kept samples, per paired trial")
    candidate_trial_t_us: list[float] = Field(description="median of the candidate's kept samples, per paired trial")
    trial_speedups: list[float] = Field(description="baseline / candidate per paired trial")
    baseline_t_us: float | None = Field(gt=0, description="geometric mean of baseline_trial_t_us")
    candidate_t_us: float | None = Field(gt=0, description="geometric mean of candidate_trial_t_us")
    ratio: float | None = Field(gt=0, description="the speedup: exp(mean ln trial_speedups)")
    ci_lo: float | None = Field(gt=0)
    ci_hi: float | None = Field(gt=0)
    log_sd: float | None = Field(ge=0, description="sample standard deviation (ddof=1) of ln trial_speedups")
    t_quantile: float | None = Field(gt=0, description="t_{n-1, 1 - alpha/2}")
    p_faster: float | None = Field(ge=0, le=1, description="one-sided p for H0: speedup <= 1 + same_margin")
    p_slower: float | None = Field(ge=0, le=1, description="one-sided p for H0: speedup >= 1 - same_margin")
    p_same: float | None = Field(ge=0, le=1, description="TOST p for H0: speedup outside the SAME band")
    verdict: Verdict
    reason: str | None = Field(default=None, description="why no claim can be made (INSUFFICIENT only)")

    @property
    def n_trials(self) -> int:
        return len(self.trial_ids)

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    @model_validator(mode="after")
    def _consistent(self) -> "TrialSpeedup":
        n = len(self.trial_ids)
        if not (len(self.baseline_trial_t_us) == len(self.candidate_trial_t_us) == len(self.trial_speedups) == n):
            raise ValueError("trial_ids, baseline_trial_t_us, candidate_trial_t_us and trial_speedups differ in length")
        given = {v is not None for v in (self.ratio, self.baseline_t_us, self.candidate_t_us)}
        if given != {n >= 1}:
            raise ValueError(f"{n} paired trials: the point and the two times are given exactly when n >= 1")
        claimed = (self.ci_lo, self.ci_hi, self.log_sd, self.t_quantile, self.p_faster, self.p_slower, self.p_same)
        if n < MIN_PAIRED_TRIALS:
            if self.verdict is not Verdict.INSUFFICIENT or not self.reason or any(v is not None for v in claimed):
                raise ValueError(f"{n} paired trials support no claim: verdict INSUFFICIENT with a reason, "
                                 "and no interval or p-values")
            return self
        if any(v is None for v in claimed) or self.verdict in (Verdict.INSUFFICIENT, Verdict.FLAGGED):
            raise ValueError(f"{n} paired trials: the interval, spread, p-values and a verdict are required")
        if not self.ci_lo <= self.ratio <= self.ci_hi:  # type: ignore[operator]
            raise ValueError(f"speedup {self.ratio!r} lies outside its interval [{self.ci_lo!r}, {self.ci_hi!r}]")
        return self


def _trial_medians(trials: Sequence[Sequence[float]], ids: Sequence[int], name: str) -> dict[int, float]:
    if len(trials) != len(ids):
        raise ValueError(f"{name}: {len(trials)} trials but {len(ids)} trial ids")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{name}: a trial id appears twice: {list(ids)}")
    out = {}
    for trial_id, samples in zip(ids, trials):
        arr = as_finite_array(samples, name=f"{name} trial {trial_id}")
        if (arr <= 0).any():
            raise ValueError(f"{name} trial {trial_id}: times must be strictly positive; got min {arr.min()!r}")
        out[int(trial_id)] = float(np.median(arr))
    return out


def _p_greater(diff: float, se: float, df: int) -> float:
    """One-sided p for H0: true log ratio <= edge, given ``diff = mean d - edge``; ``se = 0`` gives 0 or 1."""
    from scipy import stats as _st  # deferred: scipy.stats takes ~1 s to import, and a CLI --help needs none of it

    if se == 0.0:
        return 0.0 if diff > 0 else 1.0
    return float(_st.t.sf(diff / se, df))


def trial_speedup(
    baseline_trials: Sequence[Sequence[float]],
    candidate_trials: Sequence[Sequence[float]],
    baseline_trial_ids: Sequence[int],
    candidate_trial_ids: Sequence[int],
    *,
    confidence: float,
    same_margin: float,
) -> TrialSpeedup:
    """Speedup ``baseline_t / candidate_t`` of the candidate over the baseline from per-trial samples (method above).

    ``*_trials[i]`` are the kept per-call times (any unit, the same for both) of trial ``*_trial_ids[i]``, e.g.
    ``TimingCell.kept_by_trial()`` and ``TimingCell.trial_ids()``. Raises ValueError for bad input (mismatched
    lengths, a repeated trial id, an empty trial, a non-finite or non-positive time, a confidence outside (0, 1),
    a margin outside [0, 1)); too few paired trials is not an error but an INSUFFICIENT result.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    if not 0.0 <= same_margin < 1.0:
        raise ValueError(f"same_margin must be in [0, 1), got {same_margin!r}")
    base = _trial_medians(baseline_trials, baseline_trial_ids, "baseline")
    cand = _trial_medians(candidate_trials, candidate_trial_ids, "candidate")
    paired = sorted(set(base) & set(cand))
    unpaired = sorted(set(base) ^ set(cand))
    mb = np.array([base[t] for t in paired])
    mc = np.array([cand[t] for t in paired])
    ratios = mb / mc
    common = dict(
        confidence=confidence, same_margin=same_margin, trial_ids=paired, unpaired_trial_ids=unpaired,
        baseline_trial_t_us=mb.tolist(), candidate_trial_t_us=mc.tolist(), trial_speedups=ratios.tolist(),
    )
    n = len(paired)
    if n == 0:
        return TrialSpeedup(**common, baseline_t_us=None, candidate_t_us=None, ratio=None, ci_lo=None, ci_hi=None,
                            log_sd=None, t_quantile=None, p_faster=None, p_slower=None, p_same=None,
                            verdict=Verdict.INSUFFICIENT, reason="no trial with kept samples on both sides")
    d = np.log(ratios)
    mean_d = float(np.mean(d))
    point = math.exp(mean_d)
    times = dict(baseline_t_us=math.exp(float(np.mean(np.log(mb)))),
                 candidate_t_us=math.exp(float(np.mean(np.log(mc)))), ratio=point)
    if n < MIN_PAIRED_TRIALS:
        return TrialSpeedup(**common, **times, ci_lo=None, ci_hi=None, log_sd=None, t_quantile=None,
                            p_faster=None, p_slower=None, p_same=None, verdict=Verdict.INSUFFICIENT,
                            reason=f"{n} paired trial{'s' if n != 1 else ''}; a between-trial interval needs at "
                                   f"least {MIN_PAIRED_TRIALS}")
    from scipy import stats as _st  # deferred, as in _p_greater

    df = n - 1
    log_sd = float(np.std(d, ddof=1))
    se = log_sd / math.sqrt(n)
    alpha = 1.0 - confidence
    q = float(_st.t.ppf(1.0 - alpha / 2.0, df))
    half = q * se
    # exp is monotone, so exp(mean_d - half) <= exp(mean_d) <= exp(mean_d + half) in exact arithmetic; the min/max
    # keeps it so whatever the last bit of the platform's exp, without moving a bound by more than that bit.
    lo = min(math.exp(mean_d - half), point)
    hi = max(math.exp(mean_d + half), point)
    upper, lower = math.log1p(same_margin), math.log1p(-same_margin)
    p_faster = _p_greater(mean_d - upper, se, df)
    p_slower = _p_greater(lower - mean_d, se, df)
    p_above_lower = _p_greater(mean_d - lower, se, df)  # H0: speedup <= 1 - m
    p_below_upper = _p_greater(upper - mean_d, se, df)  # H0: speedup >= 1 + m
    p_same = max(p_above_lower, p_below_upper)
    tail = alpha / 2.0
    if p_faster < tail:
        verdict = Verdict.FASTER
    elif p_slower < tail:
        verdict = Verdict.SLOWER
    elif p_same < tail:
        verdict = Verdict.SAME
    else:
        verdict = Verdict.AMBIGUOUS
    return TrialSpeedup(**common, **times, ci_lo=lo, ci_hi=hi, log_sd=log_sd, t_quantile=q, p_faster=p_faster,
                        p_slower=p_slower, p_same=p_same, verdict=verdict)

"""Kernel decision: correctness and timed comparisons at every shape -> accept / retain / reject.

Rule (policy thresholds in ``policies/kernel.yaml``), applied to the comparisons in the policy's timing mode and to
the policy's counted baselines; each verdict comes from ``stats.timing_verdict`` on the speedup's CI:

1. **reject** when the candidate is incorrect at any shape (speed of a wrong kernel does not count);
2. **reject** when it is SLOWER than any measured counted baseline at any shape (a user already has something
   faster there);
3. **reject** when it is FASTER than every measured counted baseline (i.e. than the best one) at no shape:
   no measurable gain;
4. **retain** ("correct kernel candidate, do not integrate yet") when it is faster than the best baseline at some
   shapes only (SAME or AMBIGUOUS elsewhere), when a counted baseline was skipped, when no end-to-end ceiling was
   given, or when the largest expected end-to-end decode gain is below ``min_expected_e2e_gain_percent``;
5. **accept** for serving integration otherwise.

Percent slower/faster are relative to the baseline's time: ``(candidate_t / baseline_t - 1) * 100`` from the
speedup ``s = baseline_t / candidate_t`` as ``(1 / s - 1) * 100``; 0.88082 reads "13.5 percent slower".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.decide.amdahl import AmdahlCeiling
from infercrane.decide.policy import KernelPolicy, load_policy
from infercrane.errors import InputError
from infercrane.stats.compare import Verdict, speedup_ci, timing_verdict

TimingMode = Literal["launch", "graph", "cold"]

# How a reason sentence names a baseline; any other name is used as written.
BASELINE_PHRASES = {
    "eager": "eager PyTorch",
    "torch_compile": "torch.compile",
    "vllm_vendor": "the vLLM vendor kernel",
    "triton": "the Triton candidate",
}


def baseline_phrase(name: str) -> str:
    return BASELINE_PHRASES.get(name, name)


# --------------------------------------------------------------------------------------------- inputs


class BaselineTiming(BaseModel):
    """The candidate against one baseline at one shape, in one timing mode (medians of per-call times)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: str = Field(min_length=1)
    timing_mode: TimingMode
    candidate_t_us: float = Field(gt=0, description="median candidate time per call")
    baseline_t_us: float = Field(gt=0, description="median baseline time per call")
    speedup: float = Field(gt=0, description="baseline_t_us / candidate_t_us")
    speedup_ci_lo: float = Field(gt=0)
    speedup_ci_hi: float = Field(gt=0)
    confidence: float = Field(gt=0, lt=1)

    @model_validator(mode="after")
    def _consistent(self) -> "BaselineTiming":
        if self.speedup_ci_lo > self.speedup_ci_hi:
            raise ValueError(f"speedup_ci_lo {self.speedup_ci_lo} > speedup_ci_hi {self.speedup_ci_hi}")
        implied = self.baseline_t_us / self.candidate_t_us
        if not math.isclose(self.speedup, implied, rel_tol=1e-6):
            raise ValueError(
                f"speedup {self.speedup} is not baseline_t_us / candidate_t_us = {implied} "
                "(both times must be the medians the speedup was computed from)"
            )
        return self


def compare_timings(
    baseline: str,
    timing_mode: TimingMode,
    baseline_samples_us: Sequence[float] | np.ndarray,
    candidate_samples_us: Sequence[float] | np.ndarray,
    *,
    policy: KernelPolicy,
) -> BaselineTiming:
    """Speedup of the candidate over ``baseline`` from per-call time samples, with the policy's CI settings."""
    ci = speedup_ci(
        baseline_samples_us,
        candidate_samples_us,
        confidence=policy.confidence,
        n_resamples=policy.bootstrap_resamples,
        seed=policy.bootstrap_seed,
    )
    return BaselineTiming(
        baseline=baseline,
        timing_mode=timing_mode,
        candidate_t_us=float(np.median(candidate_samples_us)),
        baseline_t_us=float(np.median(baseline_samples_us)),
        speedup=ci.ratio,
        speedup_ci_lo=ci.ci_lo,
        speedup_ci_hi=ci.ci_hi,
        confidence=ci.confidence,
    )


class ShapeResult(BaseModel):
    """Correctness and timings of the candidate at one shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int = Field(ge=1)
    correct: bool
    correctness_detail: str | None = Field(
        default=None, description="for a failure: max abs/rel error and first bad index"
    )
    timings: list[BaselineTiming] = Field(default_factory=list)


class SkippedBaseline(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class KernelDecisionInputs(BaseModel):
    """Everything a kernel decision reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: str = Field(min_length=1, description="phrase for the candidate: 'handwritten CUDA candidate'")
    shapes: list[ShapeResult] = Field(min_length=1)
    skipped_baselines: list[SkippedBaseline] = Field(default_factory=list)
    ceilings: list[AmdahlCeiling] = Field(default_factory=list, description="one Amdahl estimate per decode shape")

    @model_validator(mode="after")
    def _distinct_rows(self) -> "KernelDecisionInputs":
        rows = [s.rows for s in self.shapes]
        if len(set(rows)) != len(rows):
            raise ValueError(f"each shape must appear once; rows: {rows}")
        return self


# --------------------------------------------------------------------------------------------- decision


class ComparisonEvidence(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: str
    counted: bool = Field(description="whether the policy counts this baseline")
    candidate_t_us: float
    baseline_t_us: float
    speedup: float
    speedup_ci_lo: float
    speedup_ci_hi: float
    verdict: Verdict
    time_change_percent: float = Field(description="(candidate_t / baseline_t - 1) * 100; negative = faster")


class ShapeEvidence(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int
    correct: bool
    correctness_detail: str | None = None
    best_baseline: str | None = Field(description="fastest measured counted baseline at this shape")
    comparisons: list[ComparisonEvidence]


class KernelDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: Literal["accept", "retain", "reject"]
    decision_text: str
    reason: str
    timing_mode: TimingMode
    policy: KernelPolicy
    shapes: list[ShapeEvidence]
    skipped_baselines: list[SkippedBaseline]
    ceilings: list[AmdahlCeiling]


def _time_change_percent(speedup: float) -> float:
    return (1.0 / speedup - 1.0) * 100.0


def _range(values: Sequence[float], decimals: int = 1) -> str:
    lo, hi = f"{min(values):.{decimals}f}", f"{max(values):.{decimals}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def _rows(rows: Sequence[int]) -> str:
    return ", ".join(str(r) for r in rows)


def _gather(inputs: KernelDecisionInputs, policy: KernelPolicy) -> list[ShapeEvidence]:
    skipped = {s.baseline for s in inputs.skipped_baselines}
    mode = policy.timing_mode
    # Timings only matter where the candidate is correct; an incorrect shape may carry none.
    correct = [s for s in inputs.shapes if s.correct]
    if correct and not any(t.timing_mode == mode for s in correct for t in s.timings):
        modes = sorted({t.timing_mode for s in correct for t in s.timings})
        raise InputError(
            f"the kernel policy decides on {mode!r} timings, but the inputs hold none (modes present: {modes or 'none'})",
            hint=f"time in {mode!r} mode, or set timing_mode in a policy file",
        )
    seen_baselines = {t.baseline for s in inputs.shapes for t in s.timings} | skipped
    missing = [b for b in policy.counted_baselines if b not in seen_baselines]
    if correct and missing:
        raise InputError(
            f"the policy counts baseline(s) {missing}, but the inputs neither measured nor skipped them "
            f"(present: {sorted(seen_baselines)})",
            hint="record an unavailable baseline as skipped with its reason, or fix counted_baselines",
        )
    out: list[ShapeEvidence] = []
    for shape in sorted(inputs.shapes, key=lambda s: s.rows):
        in_mode = [t for t in shape.timings if t.timing_mode == mode]
        names = [t.baseline for t in in_mode]
        if len(set(names)) != len(names):
            raise InputError(f"rows={shape.rows}: a baseline appears twice in {mode!r} mode: {names}")
        both = sorted(set(names) & skipped)
        if both:
            raise InputError(f"rows={shape.rows}: baseline(s) {both} are both measured and listed as skipped")
        for b in policy.counted_baselines if shape.correct else ():
            if b not in names and b not in skipped:
                raise InputError(
                    f"rows={shape.rows}: counted baseline {b!r} has no {mode!r} timing and is not listed as skipped"
                )
        comparisons = []
        for t in in_mode:
            if not math.isclose(t.confidence, policy.confidence):
                raise InputError(
                    f"rows={shape.rows}, baseline {t.baseline!r}: CI at confidence {t.confidence}, "
                    f"but the policy decides at {policy.confidence}"
                )
            comparisons.append(
                ComparisonEvidence(
                    baseline=t.baseline,
                    counted=t.baseline in policy.counted_baselines,
                    candidate_t_us=t.candidate_t_us,
                    baseline_t_us=t.baseline_t_us,
                    speedup=t.speedup,
                    speedup_ci_lo=t.speedup_ci_lo,
                    speedup_ci_hi=t.speedup_ci_hi,
                    verdict=timing_verdict(t.speedup_ci_lo, t.speedup_ci_hi, same_margin=policy.same_margin),
                    time_change_percent=_time_change_percent(t.speedup),
                )
            )
        counted = [c for c in comparisons if c.counted]
        if not counted and shape.correct:
            raise InputError(
                f"rows={shape.rows}: no counted baseline was measured in {mode!r} mode, so there is nothing to beat",
                hint=f"counted baselines: {policy.counted_baselines}",
            )
        best = min(counted, key=lambda c: c.baseline_t_us).baseline if counted else None
        out.append(
            ShapeEvidence(
                rows=shape.rows,
                correct=shape.correct,
                correctness_detail=shape.correctness_detail,
                best_baseline=best,
                comparisons=comparisons,
            )
        )
    return out


def decide_kernel(inputs: KernelDecisionInputs, policy: KernelPolicy | None = None) -> KernelDecision:
    """Apply the kernel rule (module docstring) and write the decision with its reason and evidence."""
    policy = policy or load_policy("kernel")
    shapes = _gather(inputs, policy)
    margin_pct = f"±{policy.same_margin * 100:g} percent"
    reject_text = f"reject {inputs.candidate} for serving integration"
    retain_text = "retain as a correct kernel candidate, but do not integrate into serving yet"
    accept_text = f"accept {inputs.candidate} for serving integration"

    def done(decision: Literal["accept", "retain", "reject"], text: str, reason: str) -> KernelDecision:
        return KernelDecision(
            decision=decision,
            decision_text=text,
            reason=reason,
            timing_mode=policy.timing_mode,
            policy=policy,
            shapes=shapes,
            skipped_baselines=list(inputs.skipped_baselines),
            ceilings=list(inputs.ceilings),
        )

    # 1. correctness
    wrong = [s for s in shapes if not s.correct]
    if wrong:
        details = "; ".join(f"rows {s.rows}: {s.correctness_detail}" for s in wrong if s.correctness_detail)
        reason = f"incorrect on {len(wrong)} of {len(shapes)} shapes (rows {_rows([s.rows for s in wrong])})"
        reason += f": {details}" if details else ""
        return done("reject", reject_text, reason + "; timings of an incorrect kernel do not count")

    counted = {s.rows: [c for c in s.comparisons if c.counted] for s in shapes}

    # 2. slower than a counted baseline anywhere
    slower_parts = []
    for b in policy.counted_baselines:
        hits = [(s.rows, c) for s in shapes for c in counted[s.rows] if c.baseline == b and c.verdict is Verdict.SLOWER]
        if not hits:
            continue
        measured_rows = [s.rows for s in shapes if any(c.baseline == b for c in counted[s.rows])]
        part = f"{_range([c.time_change_percent for _, c in hits])} percent slower than {baseline_phrase(b)}"
        if len(hits) < len(measured_rows):
            part += f" at rows {_rows([r for r, _ in hits])}"
        slower_parts.append(part)
    if slower_parts:
        reason = (
            "correct on every shape, but "
            + " and ".join(slower_parts)
            + f" ({policy.timing_mode} timing; each {policy.confidence * 100:g} percent CI beyond the {margin_pct} same band)"
        )
        return done("reject", reject_text, reason)

    # 3./4. faster than the best counted baseline where?
    def faster_everywhere(rows: int) -> bool:
        return all(c.verdict is Verdict.FASTER for c in counted[rows])

    fast_rows = [s.rows for s in shapes if faster_everywhere(s.rows)]
    blockers: dict[tuple[str, Verdict], list[int]] = {}
    for s in shapes:
        for c in counted[s.rows]:
            if c.verdict is not Verdict.FASTER:
                blockers.setdefault((c.baseline, c.verdict), []).append(s.rows)

    def blocker_text() -> str:
        parts = []
        for (b, v), rows in blockers.items():
            what = f"same within {margin_pct} as" if v is Verdict.SAME else "ambiguous against"
            parts.append(f"{what} {baseline_phrase(b)} at rows {_rows(rows)}")
        return "; ".join(parts)

    if not fast_rows:
        return done(
            "reject",
            reject_text,
            f"correct on every shape, but no measurable gain: not faster than the best baseline at any shape "
            f"({blocker_text()})",
        )

    def vs_best(rows: int) -> ComparisonEvidence:
        s = next(x for x in shapes if x.rows == rows)
        return next(c for c in s.comparisons if c.baseline == s.best_baseline)

    best_cmp = [vs_best(r) for r in fast_rows]
    faster_pct = _range([-c.time_change_percent for c in best_cmp])
    win_ns = _range([(c.baseline_t_us - c.candidate_t_us) * 1000.0 for c in best_cmp], decimals=0)

    if len(fast_rows) < len(shapes):
        not_beaten = sorted({b for (b, _) in blockers})
        return done(
            "retain",
            retain_text,
            f"correct on every shape and {faster_pct} percent faster than the best baseline at rows "
            f"{_rows(fast_rows)}, but the candidate does not consistently beat "
            f"{' or '.join(baseline_phrase(b) for b in not_beaten)} ({blocker_text()})",
        )

    win = f"the isolated win is {win_ns} ns per call ({faster_pct} percent faster than the best baseline at every shape)"
    holds: list[str] = []
    if inputs.skipped_baselines:
        skipped_counted = [s for s in inputs.skipped_baselines if s.baseline in policy.counted_baselines]
        if skipped_counted:
            holds.append(
                "the comparison is incomplete: "
                + "; ".join(f"{baseline_phrase(s.baseline)} skipped ({s.reason})" for s in skipped_counted)
            )
    if not inputs.ceilings:
        holds.append("no decode step time was given, so the end-to-end Amdahl ceiling is unknown")
        return done("retain", retain_text, f"{win}; " + "; ".join(holds))

    best_possible = _range([c.best_possible_gain_percent for c in inputs.ceilings])
    expected_values = [c.expected_gain_percent for c in inputs.ceilings]
    expected = _range(expected_values, decimals=2)
    ceiling = (
        f"the optimistic decode Amdahl ceiling is about {best_possible} percent and the expected end-to-end gain "
        f"{expected} percent"
    )
    threshold = policy.min_expected_e2e_gain_percent
    if max(expected_values) < threshold:
        holds.append(f"{ceiling}, below the policy's {threshold:g} percent")
        return done("retain", retain_text, win.replace("is ", "is only ", 1) + "; " + "; ".join(holds))
    if holds:
        return done("retain", retain_text, f"{win}; {ceiling}; but " + "; ".join(holds))
    return done(
        "accept",
        accept_text,
        f"correct on every shape; {win}; {ceiling}, at least the policy's {threshold:g} percent",
    )

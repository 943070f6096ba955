"""Serving decision: repeated runs of recipe A (baseline) and recipe B (candidate) -> accept / reject / inconclusive.

Per metric: the B/A ratio of per-run medians, its percentile-bootstrap CI (``stats.b_over_a_ci``), a two-sided
Mann-Whitney p (``stats.rank_test``) and the direction-aware ``stats.equivalence_verdict`` against the policy's
equivalence margin. BETTER or WORSE from the CI stands only when the rank test agrees (p < 1 - confidence);
otherwise the metric is INCONCLUSIVE. EQUIVALENT needs only the CI.

Rule (policy thresholds in ``policies/serving.yaml``):

1. **inconclusive** when either arm has fewer runs than ``min_runs_per_arm``;
2. **reject** when the primary metric or any guard metric is WORSE;
3. **accept** when the primary metric is BETTER (and no guard is WORSE);
4. **reject** when the primary metric is EQUIVALENT: no gain to adopt (the text says "equivalent", not "worse");
5. **inconclusive** otherwise (the primary metric's CI overlaps a band edge, or the rank test does not confirm).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.decide.derived import change_percent
from infercrane.decide.metrics import serving_metric
from infercrane.decide.policy import ServingPolicy, load_policy
from infercrane.errors import InputError
from infercrane.stats.compare import (
    EquivalenceVerdict,
    b_over_a_ci,
    equivalence_verdict,
    min_achievable_p,
    rank_test,
)


class ServingArm(BaseModel):
    """One recipe's repeated runs: metric name -> one value per run, in run order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe: str = Field(min_length=1, description="recipe name, e.g. 'eager'")
    phrase: str = Field(min_length=1, description="how a decision names it: 'compiled vLLM', 'throughput mode'")
    runs: dict[str, list[float]]

    @model_validator(mode="after")
    def _same_run_count(self) -> "ServingArm":
        counts = {m: len(v) for m, v in self.runs.items()}
        if len(set(counts.values())) > 1:
            raise ValueError(f"every metric needs one value per run; counts differ: {counts}")
        return self

    @property
    def n_runs(self) -> int:
        return len(next(iter(self.runs.values()))) if self.runs else 0


def interval_method(policy: ServingPolicy | dict) -> str:
    """How a serving B/A interval is made, as every statistic records it (from a policy, or a receipt's policy
    mapping)."""
    p = policy if isinstance(policy, dict) else policy.model_dump()
    return (f"percentile bootstrap of median(B) / median(A), each arm's runs resampled independently (the run is the "
            f"replicate), {p['bootstrap_resamples']} resamples, seed {p['bootstrap_seed']}")


def verdict_rule(policy: ServingPolicy | dict) -> str:
    """How a serving verdict reads the interval and the rank test, as every statistic records it."""
    p = policy if isinstance(policy, dict) else policy.model_dump()
    margin, confidence = p["equivalence_margin"], p["confidence"]
    return (f"BETTER/WORSE: the whole {confidence * 100:g} % interval beyond ±{margin:g} on one side and the "
            f"two-sided Mann-Whitney p < {1 - confidence:g}; EQUIVALENT: the interval inside ±{margin:g} (TOST-style); "
            "INCONCLUSIVE otherwise; each concurrency and metric is its own comparison, no family-wise adjustment "
            "across them")


class MetricComparison(BaseModel):
    """B against A on one metric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    higher_is_better: bool
    a_median: float
    b_median: float
    ratio_b_over_a: float
    change_percent: float = Field(description="(B - A) / A * 100, 2 decimals")
    ci_lo: float | None = Field(description="None with fewer than 2 runs in an arm")
    ci_hi: float | None
    confidence: float
    p_value: float | None
    rank_test_method: str | None
    min_achievable_p: float
    ci_verdict: EquivalenceVerdict | None = Field(description="from the CI alone")
    verdict: EquivalenceVerdict = Field(description="the CI verdict, with BETTER/WORSE confirmed by the rank test")
    note: str | None = None


class ServingDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: Literal["accept", "reject", "inconclusive"]
    decision_text: str
    reason: str
    baseline_recipe: str
    candidate_recipe: str
    runs_a: int
    runs_b: int
    primary: MetricComparison
    guards: list[MetricComparison]
    policy: ServingPolicy


def _values(arm: ServingArm, metric: str, which: str) -> np.ndarray:
    if metric not in arm.runs:
        raise InputError(
            f"arm {which} (recipe {arm.recipe!r}) has no runs of {metric!r}",
            hint=f"metrics present: {sorted(arm.runs)}",
        )
    vals = np.asarray(arm.runs[metric], dtype=np.float64)
    if vals.size == 0:
        raise InputError(f"arm {which} (recipe {arm.recipe!r}) has no runs")
    if not np.isfinite(vals).all() or (vals <= 0).any():
        raise InputError(f"arm {which} (recipe {arm.recipe!r}), {metric}: every run must be finite and > 0: {vals.tolist()}")
    return vals


def compare_metric(metric: str, a: ServingArm, b: ServingArm, policy: ServingPolicy) -> MetricComparison:
    """B/A ratio, CI, rank test and verdict of one metric."""
    spec = serving_metric(metric)
    va, vb = _values(a, metric, "A"), _values(b, metric, "B")
    a_med, b_med = float(np.median(va)), float(np.median(vb))
    p_min = min_achievable_p(va.size, vb.size)
    common = dict(
        metric=metric,
        higher_is_better=spec.higher_is_better,
        a_median=a_med,
        b_median=b_med,
        ratio_b_over_a=b_med / a_med,
        change_percent=change_percent(a_med, b_med),
        confidence=policy.confidence,
        min_achievable_p=p_min,
    )
    if va.size < 2 or vb.size < 2:
        return MetricComparison(
            **common,
            ci_lo=None,
            ci_hi=None,
            p_value=None,
            rank_test_method=None,
            ci_verdict=None,
            verdict=EquivalenceVerdict.INCONCLUSIVE,
            note=f"{va.size} v {vb.size} runs: no interval or rank test with fewer than 2 runs per arm",
        )
    ci = b_over_a_ci(
        va, vb, confidence=policy.confidence, n_resamples=policy.bootstrap_resamples, seed=policy.bootstrap_seed
    )
    rt = rank_test(va, vb)
    ci_verdict = equivalence_verdict(
        ci.ci_lo, ci.ci_hi, margin=policy.equivalence_margin, higher_is_better=spec.higher_is_better
    )
    verdict, note = ci_verdict, None
    if ci_verdict in (EquivalenceVerdict.BETTER, EquivalenceVerdict.WORSE) and rt.p_value >= policy.alpha:
        verdict = EquivalenceVerdict.INCONCLUSIVE
        note = f"the CI alone says {ci_verdict.value}, but rank-test p = {rt.p_value:.2g} is not below {policy.alpha:.2g}"
        if p_min >= policy.alpha:
            note += f" and cannot be with {va.size} v {vb.size} runs"
    return MetricComparison(
        **common,
        ci_lo=ci.ci_lo,
        ci_hi=ci.ci_hi,
        p_value=rt.p_value,
        rank_test_method=rt.method,
        ci_verdict=ci_verdict,
        verdict=verdict,
        note=note,
    )


def _pct(x: float) -> str:
    return f"{x:+.2f} percent"


def _describe(m: MetricComparison, policy: ServingPolicy) -> str:
    """'output throughput B/A 0.9946 (-0.54 percent; 95 percent CI 0.9921-0.9970; Mann-Whitney p = 0.0079,
    5 v 5 runs): EQUIVALENT within ±1 percent'"""
    phrase = serving_metric(m.metric).phrase
    head = f"{phrase} B/A {m.ratio_b_over_a:.4f} ({_pct(m.change_percent)}"
    if m.ci_lo is not None and m.ci_hi is not None and m.p_value is not None:
        head += (
            f"; {m.confidence * 100:g} percent CI {m.ci_lo:.4f}-{m.ci_hi:.4f}; "
            f"Mann-Whitney p = {m.p_value:.2g}"
        )
    head += ")"
    tail = f": {m.verdict.value}"
    if m.verdict is EquivalenceVerdict.EQUIVALENT:
        tail += f" within ±{policy.equivalence_margin * 100:g} percent"
    if m.note:
        tail += f", {m.note}"
    return head + tail


def decide_serving(
    a: ServingArm,
    b: ServingArm,
    policy: ServingPolicy | None = None,
    *,
    workload: str = "this workload",
) -> ServingDecision:
    """Decide whether recipe B should replace recipe A for ``workload`` (rule in the module docstring)."""
    policy = policy or load_policy("serving")
    primary = compare_metric(policy.primary_metric, a, b, policy)
    guards = [compare_metric(g, a, b, policy) for g in policy.guard_metrics]
    n_a, n_b = a.n_runs, b.n_runs
    margin = f"±{policy.equivalence_margin * 100:g} percent"
    p_phrase = serving_metric(primary.metric).phrase
    runs = f"{n_a} v {n_b} runs"
    evidence = "; ".join(_describe(m, policy) for m in [primary, *guards])

    def done(decision: Literal["accept", "reject", "inconclusive"], text: str, reason: str) -> ServingDecision:
        return ServingDecision(
            decision=decision,
            decision_text=text,
            reason=reason,
            baseline_recipe=a.recipe,
            candidate_recipe=b.recipe,
            runs_a=n_a,
            runs_b=n_b,
            primary=primary,
            guards=guards,
            policy=policy,
        )

    no_decision = f"no decision on {b.phrase} over {a.phrase} for {workload}"
    if min(n_a, n_b) < policy.min_runs_per_arm:
        p_min = min_achievable_p(n_a, n_b)
        why = f"{runs}, fewer than the policy's {policy.min_runs_per_arm} per arm"
        if p_min >= policy.alpha:
            why += f"; a rank test cannot reach {policy.alpha:.2g} with {runs} (smallest p = {p_min:.2g})"
        return done("inconclusive", f"{no_decision}; {why}", f"{why}; {evidence}")

    worse_guards = [g for g in guards if g.verdict is EquivalenceVerdict.WORSE]
    if primary.verdict is EquivalenceVerdict.WORSE or worse_guards:
        clauses = []
        if primary.verdict is EquivalenceVerdict.WORSE:
            moved = "reduced" if primary.higher_is_better else "increased"
            clauses.append(f"it {moved} {p_phrase} by {abs(primary.change_percent):.2f} percent")
        elif primary.verdict is EquivalenceVerdict.EQUIVALENT:
            clauses.append(f"{p_phrase} was equivalent within {margin} ({_pct(primary.change_percent)})")
        else:
            clauses.append(f"its {p_phrase} change ({_pct(primary.change_percent)}) is inconclusive")
        for g in worse_guards:
            subject = "it " if len(clauses) == 1 and not clauses[0].startswith("it ") else ""
            clauses.append(
                f"{subject}worsened {serving_metric(g.metric).phrase} by {abs(g.change_percent):.2f} percent"
            )
        text = f"reject {b.phrase} for {workload}; " + " and ".join(clauses)
        return done("reject", text, f"{runs}: {evidence}")

    if primary.verdict is EquivalenceVerdict.BETTER:
        return done("accept", f"accept {b.phrase} over {a.phrase} for {workload}", f"{runs}: {evidence}")

    if primary.verdict is EquivalenceVerdict.EQUIVALENT:
        text = (
            f"reject {b.phrase} for {workload}; {p_phrase} was equivalent to {a.phrase} within {margin} "
            f"({_pct(primary.change_percent)}), so there is no gain to adopt"
        )
        return done("reject", text, f"{runs}: {evidence}")

    return done(
        "inconclusive",
        f"{no_decision}; the {p_phrase} difference ({_pct(primary.change_percent)}) is not resolved at {runs}",
        f"{runs}: {evidence}",
    )

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

Bootstrap seeds: with the policy's ``per_statistic_seed`` each interval draws its own seed, derived from
``bootstrap_seed`` and the statistic's (metric, concurrency) by SHA-256 (``statistic_seed``) and recorded with it;
without it (receipts decided before the key) every interval uses ``bootstrap_seed`` itself.

**Paired window design** (``decide_serving_paired``): both engines stay up and fixed time windows are measured in
blocks A1 B1 B2 A2; window j of A1 pairs with window j of B1 at the same concurrency, and B2 with A2. The pair is the
replicate. The decision reads ONE family of ``1 + len(guard_metrics)`` tests: the primary metric and each guard,
each pooled over the concurrency sweep (the geometric mean B/A over all window pairs of the workload,
``stats.paired.paired_ratio``), with Holm step-down adjusted p-values and intervals at ``1 - alpha / m``.
Per-concurrency ratios are reported as description, outside the family. Its rule is the one above with
"runs per arm" read as "window pairs" (``min_pairs``) and BETTER/WORSE as in ``paired_verdict``.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.decide.derived import change_percent
from infercrane.decide.metrics import serving_metric
from infercrane.decide.policy import ServingPolicy, load_policy
from infercrane.errors import InputError
from infercrane.stats.compare import (
    Band,
    EquivalenceVerdict,
    b_over_a_ci,
    classify_band,
    equivalence_verdict,
    min_achievable_p,
    rank_test,
)
from infercrane.stats.family import holm_adjust
from infercrane.stats.paired import MIN_PAIRS, PairedRatio, paired_ratio


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


def statistic_seed(base_seed: int, metric: str, concurrency: int | None) -> int:
    """The bootstrap seed of one statistic: the first 4 bytes (big-endian) of SHA-256 of the JSON text
    ``[base_seed, metric, concurrency]``. Stable across processes and Python versions (unlike ``hash()``), distinct
    per statistic, and recomputable from what a receipt records."""
    identity = json.dumps([int(base_seed), str(metric), concurrency], separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(identity.encode("utf-8")).digest()[:4], "big")


def bootstrap_seed_for(policy: ServingPolicy, metric: str, concurrency: int | None) -> int:
    """The seed the bootstrap interval of (metric, concurrency) uses under ``policy``: ``statistic_seed`` with
    ``per_statistic_seed``, else ``bootstrap_seed`` itself (how receipts decided before that key were made)."""
    if policy.per_statistic_seed:
        return statistic_seed(policy.bootstrap_seed, metric, concurrency)
    return policy.bootstrap_seed


def interval_method(policy: ServingPolicy | dict) -> str:
    """How a serving B/A interval is made, as every statistic records it (from a policy, or a receipt's policy
    mapping; a mapping without ``per_statistic_seed`` reads as off, and gives the sentence such receipts hold)."""
    p = policy if isinstance(policy, dict) else policy.model_dump()
    head = (f"percentile bootstrap of median(B) / median(A), each arm's runs resampled independently (the run is the "
            f"replicate), {p['bootstrap_resamples']} resamples, ")
    if not p.get("per_statistic_seed", False):
        return head + f"seed {p['bootstrap_seed']}"
    return head + (f"seed per statistic: the first 4 bytes of SHA-256 of the JSON [{p['bootstrap_seed']}, metric, "
                   "concurrency], recorded with the statistic")


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
    bootstrap_seed: int | None = Field(default=None, description="seed of this statistic's bootstrap (None: no CI)")
    bootstrap_resamples: int | None = None


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


def compare_metric(
    metric: str, a: ServingArm, b: ServingArm, policy: ServingPolicy, *, concurrency: int | None = None
) -> MetricComparison:
    """B/A ratio, CI, rank test and verdict of one metric (at ``concurrency``, which with the policy's
    ``per_statistic_seed`` picks the bootstrap seed: ``bootstrap_seed_for``)."""
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
    seed = bootstrap_seed_for(policy, metric, concurrency)
    ci = b_over_a_ci(va, vb, confidence=policy.confidence, n_resamples=policy.bootstrap_resamples, seed=seed)
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
        bootstrap_seed=seed,
        bootstrap_resamples=policy.bootstrap_resamples,
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
    concurrency: int | None = None,
) -> ServingDecision:
    """Decide whether recipe B should replace recipe A for ``workload`` (rule in the module docstring); ``concurrency``
    names the point the runs were measured at, for the per-statistic bootstrap seed."""
    policy = policy or load_policy("serving")
    primary = compare_metric(policy.primary_metric, a, b, policy, concurrency=concurrency)
    guards = [compare_metric(g, a, b, policy, concurrency=concurrency) for g in policy.guard_metrics]
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


# --------------------------------------------------------------------------------------------- paired window design

PAIRED_FAMILY = "primary + guards, pooled over concurrencies"
PairTriple = tuple[int, float, float]  # (concurrency, A's window value, B's window value)


class PairedMetricVerdict(BaseModel):
    """One metric of the paired decision's family: B/A pooled over every window pair of the workload, its verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    role: Literal["primary", "guard"]
    higher_is_better: bool
    estimand: str = Field(description="what ratio is: the geometric mean B/A over all window pairs of the workload")
    n_pairs: int
    concurrencies: list[int]
    ratio: PairedRatio | None = Field(description="t interval at the family level; None with fewer than 2 pairs")
    change_percent: float | None = Field(description="(ratio - 1) * 100, 2 decimals")
    p_holm: float | None = Field(description="Holm-adjusted p over the family; None when the family was not tested")
    verdict: EquivalenceVerdict
    note: str | None = None


class DescriptiveRatio(BaseModel):
    """B/A of one metric at one concurrency over its window pairs: a description, NOT part of the decision's family
    (no verdict, no adjustment; its interval at the policy's confidence)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    concurrency: int
    n_pairs: int
    ratio: PairedRatio | None = Field(description="None with fewer than 2 pairs")
    change_percent: float | None
    in_decision_family: Literal[False] = False
    role: str = "descriptive: not part of the decision's family, no verdict and no family-wise adjustment"
    note: str | None = None


class PairedServingDecision(BaseModel):
    """Accept / reject / inconclusive from window pairs, with the family it read and how that family was controlled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: Literal["accept", "reject", "inconclusive"]
    decision_text: str
    reason: str
    baseline_phrase: str
    candidate_phrase: str
    workload: str
    family: str = Field(description="the tests the decision reads together")
    family_control: str = Field(description="how the family's error rate is held, and the interval level")
    m_tests: int
    alpha: float = Field(description="family-wise level: 1 - confidence")
    interval_level: float = Field(description="level of each family interval: 1 - alpha / m_tests")
    verdict_rule: str
    primary: PairedMetricVerdict
    guards: list[PairedMetricVerdict]
    per_concurrency: list[DescriptiveRatio]
    policy: ServingPolicy


def paired_interval_level(policy: ServingPolicy) -> float:
    """Level of each interval in the paired decision's family: ``1 - alpha / m`` (Bonferroni-consistent).

    The decision reads its verdicts off the intervals (EQUIVALENT: inside the band; BETTER/WORSE: beyond 1), so each
    interval is at ``1 - alpha / m``: then all ``m`` cover their true ratios together with probability at least
    ``1 - alpha`` (Bonferroni), and every verdict of the family, equivalence included, is wrong with probability at
    most ``alpha`` together. An interval that excludes 1 at this level means a raw p below ``alpha / m``, which
    implies a Holm-adjusted p below ``alpha``: BETTER/WORSE are read at Holm's first-step level for every metric."""
    return 1.0 - policy.alpha / policy.family_size


def paired_family_control(policy: ServingPolicy) -> str:
    """The family and how its error rate is held, as a paired decision records it."""
    m, level = policy.family_size, paired_interval_level(policy)
    return (f"Holm step-down over the {m} tests of the family, family-wise alpha = 1 - confidence = {policy.alpha:g}; "
            f"each interval at 1 - alpha / m = {level * 100:.4g} % (Bonferroni-consistent: the {m} intervals hold "
            f"together with probability >= {(1 - policy.alpha) * 100:g} %)")


def paired_verdict_rule(policy: ServingPolicy) -> str:
    """How a paired verdict reads a family interval and its Holm-adjusted p."""
    margin, level = policy.equivalence_margin, paired_interval_level(policy)
    return (f"EQUIVALENT: the whole {level * 100:.4g} % interval inside ±{margin:g}; BETTER/WORSE: Holm-adjusted "
            f"p < {policy.alpha:g} and the interval excludes 1 on that side (direction from the metric); "
            "INCONCLUSIVE otherwise")


def paired_verdict(r: PairedRatio, p_holm: float, *, margin: float, alpha: float,
                   higher_is_better: bool) -> EquivalenceVerdict:
    """EQUIVALENT when ``[ci_lo, ci_hi]`` lies inside ``[1 - margin, 1 + margin]``; else BETTER/WORSE when
    ``p_holm < alpha`` and the interval excludes 1 (above 1 is BETTER for a higher-is-better metric); else
    INCONCLUSIVE."""
    if classify_band(r.ci_lo, r.ci_hi, margin=margin) is Band.INSIDE:
        return EquivalenceVerdict.EQUIVALENT
    if p_holm < alpha and (r.ci_lo > 1.0 or r.ci_hi < 1.0):
        up_is_good = (r.ci_lo > 1.0) == higher_is_better
        return EquivalenceVerdict.BETTER if up_is_good else EquivalenceVerdict.WORSE
    return EquivalenceVerdict.INCONCLUSIVE


def _pair_table(pairs: Mapping[str, Sequence[PairTriple]], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(concurrencies, A values, B values) of one metric's window pairs; InputError for a missing metric or a bad
    value."""
    if metric not in pairs:
        raise InputError(f"no window pairs of {metric!r}", hint=f"metrics present: {sorted(pairs)}")
    rows = list(pairs[metric])
    if any(len(r) != 3 for r in rows):
        raise InputError(f"{metric}: every window pair is (concurrency, a_value, b_value)")
    c = np.asarray([r[0] for r in rows], dtype=np.int64)
    a = np.asarray([r[1] for r in rows], dtype=np.float64)
    b = np.asarray([r[2] for r in rows], dtype=np.float64)
    if (c < 1).any():
        raise InputError(f"{metric}: every concurrency must be >= 1, got {sorted(set(c.tolist()))}")
    for name, x in (("A", a), ("B", b)):
        if not np.isfinite(x).all() or (x <= 0).any():
            raise InputError(f"{metric}: every {name} window value must be finite and > 0, got {x.tolist()}")
    return c, a, b


def _change(r: PairedRatio | None) -> float | None:
    return None if r is None else round((r.ratio - 1.0) * 100.0, 2)


def _family_member(metric: str, role: Literal["primary", "guard"], pairs: Mapping[str, Sequence[PairTriple]],
                   level: float, policy: ServingPolicy) -> PairedMetricVerdict:
    """One family metric pooled over the concurrency sweep, not yet adjusted (``p_holm`` None, INCONCLUSIVE)."""
    c, a, b = _pair_table(pairs, metric)
    cs = sorted(set(c.tolist()))
    r = paired_ratio(a, b, confidence=level) if a.size >= MIN_PAIRS else None
    k = policy.continuity_for(metric)
    of = "" if k is None else (f" of (requests within every SLO + {k:g}) / window (Haldane-Anscombe: a window that kept "
                               "none enters)")
    return PairedMetricVerdict(
        metric=metric, role=role, higher_is_better=serving_metric(metric).higher_is_better,
        estimand=f"geometric mean B/A{of} over all {a.size} window pairs of the workload, pooled over concurrencies "
                 f"{', '.join(map(str, cs))}",
        n_pairs=int(a.size), concurrencies=cs, ratio=r, change_percent=_change(r), p_holm=None,
        verdict=EquivalenceVerdict.INCONCLUSIVE,
        note=None if r else f"{a.size} window pair(s): no interval or test with fewer than {MIN_PAIRS}")


def _adjusted(family: list[PairedMetricVerdict], policy: ServingPolicy) -> list[PairedMetricVerdict]:
    """The family with Holm-adjusted p-values and verdicts; every member has a ratio (``min_pairs`` >= 2 pairs)."""
    ratios = [m.ratio for m in family]
    if any(r is None for r in ratios):
        raise ValueError("every family metric needs a ratio before the family is adjusted")
    p_holm = holm_adjust([r.p_value for r in ratios if r is not None])
    return [m.model_copy(update={"p_holm": p, "verdict": paired_verdict(
        r, p, margin=policy.equivalence_margin, alpha=policy.alpha, higher_is_better=m.higher_is_better)})
        for m, r, p in zip(family, ratios, p_holm) if r is not None]


def describe_per_concurrency(pairs: Mapping[str, Sequence[PairTriple]], confidence: float) -> list[DescriptiveRatio]:
    """B/A of every metric in ``pairs`` at each concurrency (``paired_ratio`` at ``confidence``): description only."""
    out = []
    for metric in pairs:
        c, a, b = _pair_table(pairs, metric)
        for conc in sorted(set(c.tolist())):
            at = c == conc
            n = int(at.sum())
            r = paired_ratio(a[at], b[at], confidence=confidence) if n >= MIN_PAIRS else None
            note = None if r else f"{n} window pair: no interval with fewer than {MIN_PAIRS}"
            out.append(DescriptiveRatio(metric=metric, concurrency=conc, n_pairs=n, ratio=r, change_percent=_change(r),
                                        note=note))
    return out


def _describe_paired(m: PairedMetricVerdict, policy: ServingPolicy) -> str:
    """'output throughput B/A 1.0301 (+3.01 percent; 98.33 percent CI 1.0120-1.0485; t test p = 0.0004, Holm
    p = 0.0012; 15 window pairs): BETTER'"""
    phrase = serving_metric(m.metric).phrase
    if m.ratio is None:
        return f"{phrase}: {m.n_pairs} window pair(s), no interval: {m.verdict.value}"
    r = m.ratio
    head = (f"{phrase} B/A {r.ratio:.4f} ({_pct((r.ratio - 1) * 100)}; {r.confidence * 100:.4g} percent CI "
            f"{r.ci_lo:.4f}-{r.ci_hi:.4f}; t test p = {r.p_value:.2g}")
    head += f", Holm p = {m.p_holm:.2g}" if m.p_holm is not None else ""
    tail = f"; {m.n_pairs} window pairs): {m.verdict.value}"
    if m.verdict is EquivalenceVerdict.EQUIVALENT:
        tail += f" within ±{policy.equivalence_margin * 100:g} percent"
    return head + tail + (f", {m.note}" if m.note else "")


def _too_few_pairs(family: list[PairedMetricVerdict], policy: ServingPolicy) -> str | None:
    """Why the family cannot be tested under ``min_pairs``, and what would fix it; None when it can."""
    short = [m for m in family if m.n_pairs < policy.min_pairs]
    if not short:
        return None
    counts = ", ".join(f"{serving_metric(m.metric).phrase} {m.n_pairs}" for m in short)
    need = policy.min_pairs - min(m.n_pairs for m in short)
    return (f"window pairs ({counts}) fewer than the policy's min_pairs = {policy.min_pairs}; measure at least {need} "
            f"more window pair{'s' if need != 1 else ''} of every family metric (more windows per block, more ABBA "
            "blocks or more concurrencies), or lower min_pairs in a policy file")


def decide_serving_paired(
    pairs: Mapping[str, Sequence[PairTriple]],
    policy: ServingPolicy | None = None,
    *,
    phrases: tuple[str, str],
    workload: str = "this workload",
) -> PairedServingDecision:
    """Decide whether recipe B should replace recipe A for ``workload`` from window pairs.

    ``pairs``: metric -> window pairs ``(concurrency, a_value, b_value)`` (window j of an A block with window j of
    the adjacent B block at the same concurrency); every family metric must be present. ``phrases``: how the
    decision names (A, B), e.g. ``("eager vLLM", "compiled vLLM")``.

    The family is the primary metric and each guard metric, each pooled over the concurrency sweep
    (``PAIRED_FAMILY``; ``m = 1 + len(guard_metrics)`` tests): the estimand is the geometric mean B/A over all window
    pairs of the workload (``paired_ratio``). Pooling ratios that differ between concurrencies widens the interval
    (their spread reads as noise), so the pooled test errs on the conservative side. The p-values are Holm-adjusted
    over the family; each interval is at ``1 - alpha / m`` (``paired_interval_level`` says why). Verdicts:
    ``paired_verdict``. Rule:

    1. **inconclusive** when a family metric has fewer than ``min_pairs`` window pairs (the reason says how many more);
    2. **reject** when the primary metric or any guard metric is WORSE;
    3. **accept** when the primary metric is BETTER (and no guard is WORSE);
    4. **reject** when the primary metric is EQUIVALENT: no gain to adopt;
    5. **inconclusive** otherwise.

    Per-concurrency ratios of every metric in ``pairs`` come back in ``per_concurrency``, outside the family.
    """
    policy = policy or load_policy("serving")
    if len(phrases) != 2 or not all(isinstance(p, str) and p for p in phrases):
        raise InputError(f"phrases must name A and B, e.g. ('eager vLLM', 'compiled vLLM'); got {phrases!r}")
    pa, pb = phrases
    level = paired_interval_level(policy)
    family = [_family_member(policy.primary_metric, "primary", pairs, level, policy),
              *(_family_member(g, "guard", pairs, level, policy) for g in policy.guard_metrics)]
    short = _too_few_pairs(family, policy)
    if short is None:
        family = _adjusted(family, policy)
    primary, guards = family[0], family[1:]
    counts = sorted({m.n_pairs for m in family})
    where = f"{'/'.join(map(str, counts))} window pairs over concurrencies {', '.join(map(str, primary.concurrencies))}"
    evidence = f"{where}; family {PAIRED_FAMILY}, {paired_family_control(policy)}: " + "; ".join(
        _describe_paired(m, policy) for m in family)

    def done(decision: Literal["accept", "reject", "inconclusive"], text: str, reason: str) -> PairedServingDecision:
        return PairedServingDecision(
            decision=decision, decision_text=text, reason=reason, baseline_phrase=pa, candidate_phrase=pb,
            workload=workload, family=PAIRED_FAMILY, family_control=paired_family_control(policy),
            m_tests=policy.family_size, alpha=policy.alpha, interval_level=level,
            verdict_rule=paired_verdict_rule(policy), primary=primary, guards=guards,
            per_concurrency=describe_per_concurrency(pairs, policy.confidence), policy=policy)

    if short is not None:
        return done("inconclusive", f"no decision on {pb} over {pa} for {workload}; {short}", f"{short}; {evidence}")
    code, text = _paired_rule(primary, guards, policy, phrases=phrases, workload=workload)
    return done(code, text, evidence)


def _paired_rule(primary: PairedMetricVerdict, guards: list[PairedMetricVerdict], policy: ServingPolicy, *,
                 phrases: tuple[str, str], workload: str) -> tuple[Literal["accept", "reject", "inconclusive"], str]:
    """Rules 2-5 of ``decide_serving_paired``: the decision code and its sentence."""
    pa, pb = phrases
    p_phrase = serving_metric(primary.metric).phrase
    change = primary.change_percent or 0.0
    margin = f"±{policy.equivalence_margin * 100:g} percent"
    worse = [g for g in guards if g.verdict is EquivalenceVerdict.WORSE]
    if primary.verdict is EquivalenceVerdict.WORSE or worse:
        clauses = []
        if primary.verdict in (EquivalenceVerdict.WORSE, EquivalenceVerdict.BETTER):
            up = change > 0
            clauses.append(f"it {'raised' if up else 'reduced'} {p_phrase} by {abs(change):.2f} percent")
        elif primary.verdict is EquivalenceVerdict.EQUIVALENT:
            clauses.append(f"{p_phrase} was equivalent within {margin} ({_pct(change)})")
        else:
            clauses.append(f"its {p_phrase} change ({_pct(change)}) is {primary.verdict.value.lower()}")
        for g in worse:
            subject = "it " if len(clauses) == 1 and not clauses[0].startswith("it ") else ""
            clauses.append(f"{subject}worsened {serving_metric(g.metric).phrase} by "
                           f"{abs(g.change_percent or 0.0):.2f} percent")
        return "reject", f"reject {pb} for {workload}; " + " and ".join(clauses)
    if primary.verdict is EquivalenceVerdict.BETTER:
        return "accept", f"accept {pb} over {pa} for {workload}"
    if primary.verdict is EquivalenceVerdict.EQUIVALENT:
        return "reject", (f"reject {pb} for {workload}; {p_phrase} was equivalent to {pa} within {margin} "
                          f"({_pct(change)}), so there is no gain to adopt")
    return "inconclusive", (f"no decision on {pb} over {pa} for {workload}; the {p_phrase} difference "
                            f"({_pct(change)}) is not resolved by the window pairs")

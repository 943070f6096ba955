"""Speedups of each candidate over every other implementation, from raw per-call samples.

No statistics are computed here: ``infercrane.stats.speedup_ci`` gives ``median(reference_t) / median(candidate_t)``
with a bootstrap CI (> 1: the candidate is faster) and ``infercrane.stats.timing_verdict`` reads the CI against the
kernel policy's SAME band. The CI settings (confidence, resamples, seed) and the band come from the kernel policy
(``infercrane/decide/policies/kernel.yaml``), the same ones the decision uses.

``decision_inputs`` turns a screen result into what ``infercrane.decide.kernel.decide_kernel`` reads.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from infercrane.receipts.base import Strict
from infercrane.stats.compare import RatioCI, Verdict

if TYPE_CHECKING:
    from infercrane.decide.kernel import KernelDecisionInputs
    from infercrane.decide.policy import KernelPolicy
    from infercrane.kernels.harness.runner import ScreenResult


class Comparison(Strict):
    """Candidate against one reference implementation at one row count, in one timing mode."""

    candidate: str
    reference: str
    reference_kind: Literal["baseline", "candidate"]
    rows: int
    mode: Literal["launch", "graph", "cold"]
    candidate_t_us: float = Field(gt=0, description="median of the candidate's kept samples")
    reference_t_us: float = Field(gt=0, description="median of the reference's kept samples")
    speedup: RatioCI = Field(description="median(reference_t) / median(candidate_t) with its bootstrap CI")
    verdict: Verdict
    same_margin: float


def compare_all(
    result: "ScreenResult", policy: "KernelPolicy | None" = None, notes: list[str] | None = None,
) -> list[Comparison]:
    """Every ok candidate against every other ok implementation, at every (rows, mode) both have samples for.

    A pair whose samples cannot give an interval (fewer than 2 kept samples, a non-positive time) is left out, with
    a line saying why appended to ``notes``.
    """
    from infercrane.decide.policy import load_policy
    from infercrane.stats import speedup_ci, timing_verdict

    policy = policy or load_policy("kernel")
    ok = [i for i in result.implementations if i.status == "ok"]
    out: list[Comparison] = []
    for cand in (i for i in ok if i.kind == "candidate"):
        cand_cells = {(c.rows, c.mode): c for c in cand.timings}
        for ref in ok:
            if ref.key == cand.key:
                continue
            for cell in ref.timings:
                mine = cand_cells.get((cell.rows, cell.mode))
                if mine is None:
                    continue
                where = f"{cand.key} vs {ref.key} at rows={cell.rows} {cell.mode}"
                try:
                    ci = speedup_ci(
                        cell.kept_samples_us, mine.kept_samples_us, confidence=policy.confidence,
                        n_resamples=policy.bootstrap_resamples, seed=policy.bootstrap_seed,
                    )
                except ValueError as e:
                    if notes is not None:
                        notes.append(f"{where}: no comparison ({e})")
                    continue
                out.append(Comparison(
                    candidate=cand.key, reference=ref.key, reference_kind=ref.kind, rows=cell.rows, mode=cell.mode,
                    candidate_t_us=mine.summary.median, reference_t_us=cell.summary.median, speedup=ci,
                    verdict=timing_verdict(ci.ci_lo, ci.ci_hi, same_margin=policy.same_margin),
                    same_margin=policy.same_margin,
                ))
    return out


def decision_inputs(
    result: "ScreenResult", candidate: str, *, policy: "KernelPolicy | None" = None, phrase: str | None = None,
    ceilings: list | None = None,
) -> "KernelDecisionInputs":
    """The decision inputs for ``candidate``: correctness per rows, its timings against every other measured
    implementation in every mode (``decide_kernel`` counts the policy's baselines in the policy's mode; the other
    candidates are context), and the baselines that were skipped, failed, or not selected (a counted baseline left
    out of the screen is listed as skipped, so the decision sees the gap). A candidate that crashed or timed out is
    incorrect at every row it did not pass."""
    from infercrane.decide.kernel import KernelDecisionInputs, ShapeResult, SkippedBaseline, compare_timings
    from infercrane.decide.policy import load_policy
    from infercrane.errors import InputError

    policy = policy or load_policy("kernel")
    by_key = {i.key: i for i in result.implementations}
    if candidate not in by_key:
        raise InputError(f"no implementation {candidate!r} in this screen; present: {', '.join(by_key)}")
    cand = by_key[candidate]
    if cand.status == "skipped":
        raise InputError(f"{candidate!r} was not screened (skipped: {cand.skip_reason})")
    baselines = [i for i in result.implementations if i.kind == "baseline"]
    references = [i for i in result.implementations if i.key != candidate and i.status == "ok"]
    skipped = [
        SkippedBaseline(baseline=b.key, reason=(b.skip_reason if b.status == "skipped" else f"failed: {b.error}")
                        or b.status)
        for b in baselines if b.status != "ok"
    ]
    skipped += [SkippedBaseline(baseline=b, reason="not selected for this screen")
                for b in policy.counted_baselines if b not in by_key]
    cand_cells = {(c.rows, c.mode): c for c in cand.timings}
    checked = {c.rows: c for c in cand.correctness}
    shapes = []
    for rows in result.rows:
        corr = checked.get(rows)
        if corr is None:
            why = f"{cand.failure or cand.status}: {cand.error or cand.exit_signal or 'not checked'}"
            shapes.append(ShapeResult(rows=rows, correct=False, correctness_detail=why))
            continue
        timings = []
        if corr.passed:
            for b in references:
                for cell in b.timings:
                    mine = cand_cells.get((cell.rows, cell.mode))
                    if cell.rows != corr.rows or mine is None:
                        continue
                    timings.append(compare_timings(b.key, cell.mode, cell.kept_samples_us, mine.kept_samples_us,
                                                   policy=policy))
        shapes.append(ShapeResult(rows=corr.rows, correct=corr.passed,
                                  correctness_detail=None if corr.passed else corr.failure_summary(), timings=timings))
    return KernelDecisionInputs(candidate=phrase or cand.label, shapes=shapes, skipped_baselines=skipped,
                                ceilings=ceilings or [])

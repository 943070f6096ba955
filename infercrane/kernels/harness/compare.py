"""Speedups of each candidate over every other implementation, from the per-trial samples of each timing cell.

No statistics are computed here: ``infercrane.stats.trial_speedup`` pairs the two cells' trials by trial id and
gives ``exp(mean ln(median_baseline_t / median_candidate_t))`` over the paired trials with a Student t interval
(> 1: the candidate is faster), its one-sided p-values and verdict against the kernel policy's SAME band; the trial,
not the sample, is the replicate. A cell with flags (``TimingCell.flags``: a timer disagreement, a time below the
floor) gets no verdict: the comparison is FLAGGED and quotes them. The confidence and the band come from the kernel
policy (``infercrane/decide/policies/kernel.yaml``), the same ones the decision uses.

Each comparison is computed once, by ``compare_all``; ``decision_inputs`` turns a screen result and those
comparisons into what ``infercrane.decide.kernel.decide_kernel`` reads. ``compare_all`` also marks each comparison
that belongs to its candidate's decision family with the family verdict (Holm over the family, the function the
decision itself uses), so that a receipt can show both.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from infercrane.kernels.result import Comparison, FamilyMark  # noqa: F401  (the result model)
from infercrane.stats.compare import Verdict

if TYPE_CHECKING:
    from infercrane.decide.kernel import KernelDecisionInputs
    from infercrane.decide.policy import KernelPolicy
    from infercrane.kernels.result import ScreenResult, TimingCell


def _flags(candidate: str, mine: "TimingCell", reference: str, theirs: "TimingCell") -> list[str]:
    return [f"{candidate}: {f}" for f in mine.flags] + [f"{reference}: {f}" for f in theirs.flags]


def compare_all(
    result: "ScreenResult", policy: "KernelPolicy | None" = None, notes: list[str] | None = None,
    *, candidate: str | None = None,
) -> list[Comparison]:
    """Every ok candidate (or only ``candidate``) against every other ok implementation, at every (rows, mode) both
    have timings for; each comparison in a candidate's decision family carries its family mark.

    A pair whose samples are unusable (a non-finite or non-positive time) is left out, with a line saying why
    appended to ``notes``; too few paired trials is kept, as an INSUFFICIENT comparison.
    """
    from infercrane.decide.kernel import family_verdicts
    from infercrane.decide.policy import load_policy
    from infercrane.stats import trial_speedup

    policy = policy or load_policy("kernel")
    ok = [i for i in result.implementations if i.status == "ok"]
    out: list[Comparison] = []
    for cand in (i for i in ok if i.kind == "candidate" and (candidate is None or i.key == candidate)):
        cand_cells = {(c.rows, c.mode): c for c in cand.timings}
        mine_out: list[Comparison] = []
        for ref in ok:
            if ref.key == cand.key:
                continue
            for cell in ref.timings:
                mine = cand_cells.get((cell.rows, cell.mode))
                if mine is None:
                    continue
                try:
                    speedup = trial_speedup(cell.kept_by_trial(), mine.kept_by_trial(), cell.trial_ids(),
                                            mine.trial_ids(), confidence=policy.confidence,
                                            same_margin=policy.same_margin)
                except ValueError as e:
                    if notes is not None:
                        notes.append(f"{cand.key} vs {ref.key} at rows={cell.rows} {cell.mode}: no comparison ({e})")
                    continue
                flags = _flags(cand.key, mine, ref.key, cell)
                mine_out.append(Comparison(
                    candidate=cand.key, reference=ref.key, reference_kind=ref.kind, rows=cell.rows, mode=cell.mode,
                    speedup=speedup, flags=flags, verdict=Verdict.FLAGGED if flags else speedup.verdict,
                ))
        members = [i for i, c in enumerate(mine_out) if c.mode == policy.timing_mode
                   and c.reference in policy.counted_baselines and policy.decides_on(c.rows)]
        marks = family_verdicts([(mine_out[i].verdict, mine_out[i].speedup.p_slower) for i in members],
                                alpha=policy.alpha)
        tested = sum(mine_out[i].verdict not in (Verdict.FLAGGED, Verdict.INSUFFICIENT) for i in members)
        for i, (p_holm, verdict) in zip(members, marks):
            mine_out[i] = mine_out[i].model_copy(update={"family": FamilyMark(
                size=len(members), tested=tested, p_slower_holm=p_holm, verdict=verdict)})
        out += mine_out
    return out


def _computed_with(comparisons: list[Comparison], policy: "KernelPolicy") -> bool:
    return all(c.speedup.confidence == policy.confidence and c.speedup.same_margin == policy.same_margin
               for c in comparisons)


def comparison_policy(policy: "KernelPolicy") -> dict[str, object]:
    """What a result records about the settings its comparisons were made under."""
    from infercrane.stats.trials import TRIAL_METHOD

    return {"same_margin": policy.same_margin, "confidence": policy.confidence, "timing_mode": policy.timing_mode,
            "counted_baselines": list(policy.counted_baselines), "decision_max_rows": policy.decision_max_rows,
            "decide_on_bandwidth_rows": policy.decide_on_bandwidth_rows, "method": TRIAL_METHOD}


def with_comparisons(result: "ScreenResult", policy: "KernelPolicy") -> "ScreenResult":
    """``result`` with every comparison made (again) under ``policy``: the screen's last step, and the first of
    deciding again under another policy. Pairs left uncompared are named in ``comparison_notes``."""
    from infercrane.kernels.result import ScreenResult

    notes: list[str] = []
    comparisons = compare_all(result, policy, notes)
    updated = result.model_copy(update={"comparisons": comparisons, "comparison_notes": notes,
                                        "comparison_policy": comparison_policy(policy)})
    return ScreenResult.model_validate(updated.model_dump())


def decision_inputs(
    result: "ScreenResult", candidate: str, *, policy: "KernelPolicy | None" = None, phrase: str | None = None,
    ceilings: list | None = None,
) -> "KernelDecisionInputs":
    """The decision inputs for ``candidate``: correctness per rows, its comparisons against every other measured
    implementation in every mode (``decide_kernel`` counts the policy's baselines in the policy's mode at its decision
    rows; the other candidates are context), and the baselines that were skipped, failed, or not selected (a counted
    baseline left out of the screen is listed as skipped, so the decision sees the gap). A candidate that crashed or
    timed out is incorrect at every row it did not pass.

    The comparisons are the screen's own (``result.comparisons``), computed once; only when they were computed at
    another confidence or SAME band than ``policy`` (a decision made again under another policy) are the candidate's
    computed again, once, under ``policy``.
    """
    from infercrane.decide.kernel import BaselineTiming, KernelDecisionInputs, ShapeResult, SkippedBaseline
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
    skipped = [
        SkippedBaseline(baseline=b.key, reason=(b.skip_reason if b.status == "skipped" else f"failed: {b.error}")
                        or b.status)
        for b in baselines if b.status != "ok"
    ]
    skipped += [SkippedBaseline(baseline=b, reason="not selected for this screen")
                for b in policy.counted_baselines if b not in by_key]
    mine = [c for c in result.comparisons if c.candidate == candidate]
    if not mine or not _computed_with(mine, policy):
        mine = compare_all(result, policy, candidate=candidate)
    checked = {c.rows: c for c in cand.correctness}
    shapes = []
    for rows in result.rows:
        corr = checked.get(rows)
        if corr is None:
            why = f"{cand.failure or cand.status}: {cand.error or cand.exit_signal or 'not checked'}"
            shapes.append(ShapeResult(rows=rows, correct=False, correctness_detail=why))
            continue
        timings = [BaselineTiming(baseline=c.reference, timing_mode=c.mode, speedup=c.speedup, flags=c.flags)
                   for c in mine if c.rows == corr.rows] if corr.passed else []
        shapes.append(ShapeResult(rows=corr.rows, correct=corr.passed,
                                  correctness_detail=None if corr.passed else corr.failure_summary(), timings=timings))
    return KernelDecisionInputs(candidate=phrase or cand.label, shapes=shapes, skipped_baselines=skipped,
                                ceilings=ceilings or [])

"""Speedups of each candidate over every other implementation, from the per-trial samples of each timing cell.

No statistics are computed here: ``infercrane.stats.trial_speedup`` pairs the two cells' trials by trial id and
gives ``exp(mean ln(median_baseline_t / median_candidate_t))`` over the paired trials with a Student t interval
(> 1: the candidate is faster), its one-sided p-values and verdict against the kernel policy's SAME band; the trial,
not the sample, is the replicate. The confidence and the band come from the kernel policy
(``infercrane/decide/policies/kernel.yaml``), the same ones the decision uses.

**The flag rule** (``FLAG_RULES``; a result records the one its comparisons were made under in
``comparison_policy["flag_rule"]`` and on every comparison, ``Comparison.flag_rule``). A timing cell's flags
(``TimingCell.flags``: each starts with its kind) act on the comparison's own verdict:

* ``void`` (every result before the rule was recorded: no ``flag_rule`` reads ``void``): a comparison with a flag
  on either cell, of any kind, is FLAGGED: no verdict.
* ``widen_ratio`` (a new screen's): **a flag voids only what it could change.** When the flags of the two cells
  are ONLY timer disagreements (kind ``timer_disagreement``: the primary timer and the independent second timer
  differ by more than the limit; the cell's ``timer_disagreement`` holds the signed fraction ``d``, primary over
  second less one), either timer could be the right one, so a cell's time is known only within the ratio of the
  two, ``r = max(1 + d, 1 / (1 + d))``, and the interval is widened by ``k = r_candidate * r_reference`` (``r = 1``
  for a cell without that flag) to ``[ci_lo / k, ci_hi * k]`` (``Comparison.widened``). A primary that reads 10x
  fast (``d = -0.9``) widens by 10, not 1.9. The verdict is
  kept when it still holds on the widened interval (FASTER: lower end > 1 + m; SLOWER: upper end < 1 - m; SAME:
  inside [1 - m, 1 + m]; AMBIGUOUS stays AMBIGUOUS: widening cannot make it a claim), otherwise the comparison is
  FLAGGED. Any other kind (``below_floor``, ``no_second_timer``, ``outputs_not_finite``, ``timer_fault``, or one
  this rule does not know) is a fault the interval cannot absorb: FLAGGED, as under ``void``. An INSUFFICIENT
  comparison (too few paired trials) has no verdict for a flag to void and stays INSUFFICIENT. The Holm adjustment
  of the family reads the own verdicts after the rule and the unwidened p-values.
* ``widen`` (results made before ``widen_ratio``; re-derived as they were made): the same, with ``r = 1 + |d|``,
  which under-widens a primary that reads fast.

``receipts.validate`` makes every comparison again under the rule the result records (``with_comparisons``), so a
receipt whose verdicts do not follow from its cells under its own rule does not validate.

Each comparison is computed once, by ``compare_all``; ``decision_inputs`` turns a screen result and those
comparisons into what ``infercrane.decide.kernel.decide_kernel`` reads. ``compare_all`` also marks each comparison
that belongs to its candidate's decision family with its family mark (``decide.kernel.family_marks``: Holm over the
family, once); the decision reads those marks (``BaselineTiming.family``) rather than adjusting again, so the receipt's
comparisons and its decision show one family.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, get_args

from infercrane.receipts.screen_result import (  # noqa: F401  (the result model)
    FAILURE_WORDS,
    TIMER_DISAGREEMENT,
    Comparison,
    FlagRule,
    WidenedInterval,
)
from infercrane.stats.compare import Verdict

if TYPE_CHECKING:
    from infercrane.decide.kernel import KernelDecisionInputs
    from infercrane.decide.policy import KernelPolicy
    from infercrane.receipts.screen_result import ScreenResult, TimingCell
    from infercrane.stats.trials import TrialSpeedup

FLAG_RULES: tuple[str, ...] = get_args(FlagRule)
LEGACY_FLAG_RULE = "void"  # what a result without a recorded rule was compared under
NEW_SCREEN_FLAG_RULE = "widen_ratio"  # what a new screen compares under


def _flags(candidate: str, mine: "TimingCell", reference: str, theirs: "TimingCell") -> list[str]:
    return [f"{candidate}: {f}" for f in mine.flags] + [f"{reference}: {f}" for f in theirs.flags]


def flag_kind(cell_flag: str) -> str:
    """The kind of one cell flag: the word before its first colon (``timer_disagreement``, ``below_floor``, …)."""
    return cell_flag.split(":", 1)[0].strip()


def widening(cell: "TimingCell", rule: str) -> float | None:
    """What a cell contributes to the widening factor under ``rule`` (module docstring): 1 for a cell not flagged for
    a timer disagreement, None for a flagged cell without the figure or with timers of opposite sign."""
    if not any(flag_kind(f) == TIMER_DISAGREEMENT for f in cell.flags):
        return 1.0
    d = cell.timer_disagreement
    if d is None:
        return None
    if rule == "widen":
        return 1.0 + abs(d)
    return max(1.0 + d, 1.0 / (1.0 + d)) if d > -1.0 else None


def apply_flag_rule(speedup: "TrialSpeedup", mine: "TimingCell", theirs: "TimingCell",
                    flag_rule: str | None) -> tuple[Verdict, WidenedInterval | None]:
    """The own verdict of a comparison of cell ``mine`` (the candidate's) with ``theirs`` under ``flag_rule``
    (module docstring; None reads ``void``), and the widened interval when rule ``widen`` widened it."""
    rule = flag_rule or LEGACY_FLAG_RULE
    if rule not in FLAG_RULES:
        raise ValueError(f"unknown flag rule {flag_rule!r}; known: {', '.join(FLAG_RULES)}")
    if not (mine.flags or theirs.flags):
        return speedup.verdict, None
    if rule == "void":
        return Verdict.FLAGGED, None
    if speedup.verdict is Verdict.INSUFFICIENT:
        return Verdict.INSUFFICIENT, None
    if any(flag_kind(f) != TIMER_DISAGREEMENT for f in mine.flags + theirs.flags):
        return Verdict.FLAGGED, None
    r_cand, r_ref = widening(mine, rule), widening(theirs, rule)
    if r_cand is None or r_ref is None:
        return Verdict.FLAGGED, None
    widened = WidenedInterval.of(speedup, r_cand * r_ref)
    return (speedup.verdict if widened.holds else Verdict.FLAGGED), widened


def recorded_flag_rule(result: "ScreenResult") -> str | None:
    """The flag rule a result's comparisons were made under, as it records it (None: before it was recorded)."""
    return (result.comparison_policy or {}).get("flag_rule")


def compare_all(
    result: "ScreenResult", policy: "KernelPolicy | None" = None, notes: list[str] | None = None,
    *, candidate: str | None = None, flag_rule: str | None = None,
) -> list[Comparison]:
    """Every ok candidate (or only ``candidate``) against every other ok implementation, at every (rows, mode) both
    have timings for, under ``flag_rule`` (module docstring; None: ``void``, recorded as no rule, as a result
    from before the rule was recorded); each comparison in a candidate's decision family carries its family mark.

    A pair whose samples are unusable (a non-finite or non-positive time) is left out, with a line saying why
    appended to ``notes``; too few paired trials is kept, as an INSUFFICIENT comparison.
    """
    from infercrane.decide.kernel import family_marks, in_family
    from infercrane.decide.policy import load_policy
    from infercrane.stats import trial_speedup

    if flag_rule is not None and flag_rule not in FLAG_RULES:
        raise ValueError(f"unknown flag rule {flag_rule!r}; known: {', '.join(FLAG_RULES)}")
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
                verdict, widened = apply_flag_rule(speedup, mine, cell, flag_rule)
                mine_out.append(Comparison(
                    candidate=cand.key, reference=ref.key, reference_kind=ref.kind, rows=cell.rows, mode=cell.mode,
                    speedup=speedup, flags=_flags(cand.key, mine, ref.key, cell), verdict=verdict,
                    flag_rule=flag_rule, widened=widened,
                ))
        members = [i for i, c in enumerate(mine_out) if in_family(policy, c.rows, c.mode, c.reference)]
        marks = family_marks([(mine_out[i].verdict, mine_out[i].speedup.p_slower) for i in members],
                             alpha=policy.alpha)
        for i, mark in zip(members, marks):
            mine_out[i] = mine_out[i].model_copy(update={"family": mark})
        out += mine_out
    return out


def _computed_with(comparisons: list[Comparison], policy: "KernelPolicy") -> bool:
    return all(c.speedup.confidence == policy.confidence and c.speedup.same_margin == policy.same_margin
               for c in comparisons)


def _marked_for(comparisons: list[Comparison], policy: "KernelPolicy") -> bool:
    """Whether one candidate's comparisons carry the family marks of ``policy``'s family: marked exactly where
    ``in_family``, each mark counting them (a result marked under another policy, or before marks, is not)."""
    from infercrane.decide.kernel import in_family

    member = [in_family(policy, c.rows, c.mode, c.reference) for c in comparisons]
    return all((c.family is not None) == m and (c.family is None or c.family.size == sum(member))
               for c, m in zip(comparisons, member))


def comparison_policy(policy: "KernelPolicy", flag_rule: str | None = NEW_SCREEN_FLAG_RULE) -> dict[str, object]:
    """What a result records about the settings its comparisons were made under, the flag rule among them (None:
    the record of a result from before the rule was recorded, which has no ``flag_rule`` and reads ``void``)."""
    from infercrane.stats.trials import TRIAL_METHOD

    out: dict[str, object] = {
        "same_margin": policy.same_margin, "confidence": policy.confidence, "timing_mode": policy.timing_mode,
        "counted_baselines": list(policy.counted_baselines), "decision_max_rows": policy.decision_max_rows,
        "decide_on_bandwidth_rows": policy.decide_on_bandwidth_rows, "method": TRIAL_METHOD}
    if flag_rule is not None:
        out["flag_rule"] = flag_rule
    return out


def with_comparisons(result: "ScreenResult", policy: "KernelPolicy", flag_rule: str | None = None) -> "ScreenResult":
    """``result`` with every comparison made (again) under ``policy`` and ``flag_rule``: the screen's last step (a new
    screen passes ``NEW_SCREEN_FLAG_RULE``), and the first of deciding again under another policy or validating a
    receipt. ``flag_rule`` None: the rule the result records (``comparison_policy["flag_rule"]``), else ``void``
    (and the record stays without one, as it was). Pairs left uncompared are named in ``comparison_notes``."""
    from infercrane.receipts.screen_result import ScreenResult

    rule = flag_rule if flag_rule is not None else recorded_flag_rule(result)
    notes: list[str] = []
    comparisons = compare_all(result, policy, notes, flag_rule=rule)
    updated = result.model_copy(update={"comparisons": comparisons, "comparison_notes": notes,
                                        "comparison_policy": comparison_policy(policy, rule)})
    return ScreenResult.model_validate(updated.model_dump())


def _first_line(text: str | None) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def failure_detail(failure: str, error: str | None, exit_signal: str | None = None) -> str:
    """The first line of a failed implementation's error, without a leading repeat of its kind."""
    line = _first_line(error) or (f"exit signal {exit_signal}" if exit_signal else "")
    for prefix in (f"{failure}:", f"{FAILURE_WORDS.get(failure, failure)}:"):
        if line.startswith(prefix):
            line = line[len(prefix):].strip()
            break
    return line or "no error text"


def decision_inputs(
    result: "ScreenResult", candidate: str, *, policy: "KernelPolicy | None" = None, phrase: str | None = None,
    ceilings: list | None = None,
) -> "KernelDecisionInputs":
    """The decision inputs for ``candidate``: correctness per rows, its comparisons against every other measured
    implementation in every mode (``decide_kernel`` counts the policy's baselines in the policy's mode at its decision
    rows; the other candidates are context), and the baselines that were skipped, failed, or not selected (a counted
    baseline left out of the screen is listed as skipped, so the decision sees the gap). A candidate that failed
    (crashed, timed out, a timer fault, raised) carries its failure kind and the first line of its error; a row it
    never got to is "not checked", not incorrect (a result from before the flag rule was recorded keeps reading it as
    incorrect, as it was decided then). Each timing carries the comparison's own verdict under the result's flag
    rule. An interrupted screen's reason goes with them (``interrupted``).

    The comparisons are the screen's own (``result.comparisons``), computed once; only when they were computed at
    another confidence or SAME band than ``policy`` (a decision made again under another policy) are the candidate's
    computed again, once, under ``policy`` and the rule the result records.
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
    if not mine or not _computed_with(mine, policy) or not _marked_for(mine, policy):
        mine = compare_all(result, policy, candidate=candidate, flag_rule=recorded_flag_rule(result))
    cells = {(i.key, c.rows, c.mode): c for i in result.implementations for c in i.timings}

    def disagreement(c: Comparison) -> float | None:
        """The largest |timer disagreement| of the comparison's cells flagged for one."""
        ds = [abs(cell.timer_disagreement) for cell in (cells.get((c.candidate, c.rows, c.mode)),
                                                        cells.get((c.reference, c.rows, c.mode)))
              if cell is not None and cell.timer_disagreement is not None
              and any(flag_kind(f) == TIMER_DISAGREEMENT for f in cell.flags)]
        return max(ds) if ds else None

    failure = cand.failure if cand.status == "failed" else None
    interrupted = getattr(result, "interrupted", None)
    if failure is not None and failure != "incorrect":
        not_checked = f"not checked: {FAILURE_WORDS.get(failure, failure)}"
    elif interrupted:
        not_checked = "not checked: the screen was interrupted"
    else:
        not_checked = "not checked"
    checked = {c.rows: c for c in cand.correctness}
    legacy = result.run_kind == "timed" and recorded_flag_rule(result) is None
    shapes = []
    for rows in result.rows:
        corr = checked.get(rows)
        if corr is None:
            if legacy:  # decided as it was then, so that its receipt validates: a row not checked read as incorrect
                why = f"{cand.failure or cand.status}: {cand.error or cand.exit_signal or 'not checked'}"
                shapes.append(ShapeResult(rows=rows, correct=False, correctness_detail=why))
            else:
                shapes.append(ShapeResult(rows=rows, correct=False, checked=False, correctness_detail=not_checked))
            continue
        timings = [BaselineTiming(baseline=c.reference, timing_mode=c.mode, speedup=c.speedup, flags=c.flags,
                                  verdict=c.verdict, timer_disagreement=disagreement(c),
                                  widened_by=c.widened.factor if c.widened is not None else None, family=c.family)
                   for c in mine if c.rows == corr.rows] if corr.passed else []
        shapes.append(ShapeResult(rows=corr.rows, correct=corr.passed,
                                  correctness_detail=None if corr.passed else corr.failure_summary(), timings=timings))
    return KernelDecisionInputs(
        candidate=phrase or cand.label, shapes=shapes, skipped_baselines=skipped, ceilings=ceilings or [],
        failure=failure, failure_detail=failure_detail(failure, cand.error, cand.exit_signal) if failure else None,
        interrupted=interrupted, flag_rule=recorded_flag_rule(result))

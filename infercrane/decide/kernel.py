"""Kernel decision: correctness and trial-level timed comparisons -> accept / retain / reject / inconclusive.

Inputs: per shape (row count), whether the candidate is correct, and its speedup over each other implementation
from paired trials (``infercrane.stats.trials``: per trial the median of its kept samples, Student t on the log
ratios). The policy (``policies/kernel.yaml``) names the timing mode, the counted baselines and the decision rows:
rows ``<= decision_max_rows`` (decode batches); larger, bandwidth-bound rows are measured and reported but enter the
decision only with ``decide_on_bandwidth_rows``. The candidate's comparisons against the counted baselines at the
decision rows in that mode are the decision's **family**; every decision names it (``DecisionFamily``: size,
baselines, rows, mode, adjustment, alpha).

Each comparison carries its own verdict and, inside the family, a family verdict:

* own verdict: FASTER / SLOWER / SAME / AMBIGUOUS from its one-sided p-values at ``alpha / 2`` (``alpha = 1 -
  confidence``; the same as its interval lying above, below or inside the SAME band); INSUFFICIENT below 3 paired
  trials; FLAGGED, no verdict, when a flag of either timing cell voids it under the screen's flag rule
  (``kernels/harness/compare.py``: under ``void`` any flag; under ``widen_ratio`` a fault the interval cannot
  absorb, or a timer disagreement the verdict does not survive once the interval is widened by it). The comparison's own
  verdict is read as the comparison gives it (``BaselineTiming.verdict``), never recomputed from its flags;
* family verdict: SLOWER only when the Holm-adjusted ``p_slower`` over the family's comparisons that have a verdict
  is below ``alpha / 2``; an own SLOWER that does not survive the adjustment reads AMBIGUOUS; otherwise the own one.

Rule:

1. **reject** when the candidate is incorrect at any shape, decision row or not (speed of a wrong kernel does not
   count); **reject** when it failed in the screen by its own fault (crashed, timed out, a timer fault, raised an
   error: the reason starts with that word and the first line of its error; rows it never got to are "not checked",
   not incorrect); **inconclusive** when the harness failed, or when rows were not checked without a fault of the
   candidate (an interrupted screen). All of this before any timing is read, so a failed candidate is never an input
   error;
2. **reject** when it is SLOWER than a counted baseline at some decision row by the family verdict. "Slower
   somewhere" is a union claim over the family; unadjusted, one of ~24 comparisons would read SLOWER by chance far
   more often than alpha, hence Holm;
3. the **faster rows** are the decision rows where it is FASTER than every counted baseline measured there. "Faster
   than every baseline" (at a row, or at every row) is an intersection-union claim: it holds only if every
   comparison holds, so each comparison at its own level bounds its error and no adjustment is applied.
   No faster row: **reject** (no measurable gain) when every decision row has a comparison that was read and is
   not FASTER; **inconclusive** when some decision row is blocked only by FLAGGED or INSUFFICIENT comparisons, or
   when no screened row is a decision row, or when an interrupted screen left the timings the decision needs
   incomplete. A reason names FLAGGED comparisons by count and kind ("flagged: 2 comparisons; timer_disagreement up
   to 18.2 %, below_floor"); the receipt keeps every flag in its comparisons;
4. **retain** ("correct kernel candidate, do not integrate yet") when it is faster at some decision rows only (a
   FLAGGED or INSUFFICIENT comparison is never FASTER, so one in the family always blocks accept), when a counted
   baseline was skipped, when no end-to-end ceiling was given, or when the largest expected end-to-end decode gain
   is below ``min_expected_e2e_gain_percent``;
5. **accept** for serving integration otherwise.

Percent slower/faster are relative to the baseline's time: ``(candidate_t / baseline_t - 1) * 100`` from the
speedup ``s = baseline_t / candidate_t`` as ``(1 / s - 1) * 100``; 0.88082 reads "13.5 percent slower". Times are
geometric means over the paired trials of each trial's median, so ``s`` is their ratio.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.decide.amdahl import AmdahlCeiling
from infercrane.decide.policy import KernelPolicy, TimingMode, load_policy
from infercrane.errors import InputError
from infercrane.decide.failures import FAILURE_WORDS, Failure
from infercrane.stats.compare import Verdict
from infercrane.stats.family import HOLM, holm_adjust
from infercrane.stats.trials import TrialSpeedup, trial_speedup

# How a timing cell's flags act on a comparison's verdict (``kernels/harness/compare.py`` applies them): 'void', or
# widen the interval by the timers' disagreement — 'widen_ratio' by their ratio either way, 'widen' (results made
# before it) by 1 + |d| a cell.
FlagRule = Literal["void", "widen", "widen_ratio"]

DecisionCode = Literal["accept", "retain", "reject", "inconclusive"]
NO_VERDICT = (Verdict.FLAGGED, Verdict.INSUFFICIENT)
# The kinds a timing cell's flag can have (``harness/runner.py``, ``harness/timing.py``).
FLAG_KINDS = ("timer_disagreement", "below_floor", "no_second_timer", "outputs_not_finite", "timer_fault")

# How a reason sentence names a baseline; any other name is used as written.
BASELINE_PHRASES = {
    "eager": "eager PyTorch",
    "torch_compile": "torch.compile",
    "vllm_vendor": "the vLLM vendor kernel",
    "triton": "the Triton candidate",
}


def baseline_phrase(name: str) -> str:
    return BASELINE_PHRASES.get(name, name)


# --------------------------------------------------------------------------------------------- verdicts


def own_verdict(speedup: TrialSpeedup, flags: Sequence[str], verdict: Verdict | None = None) -> Verdict:
    """A comparison's own verdict: the one it carries (``verdict``: after the screen's flag rule) when given; else,
    for inputs built without one, the rule ``void``: FLAGGED when either cell carries a flag, else the trial-level
    verdict."""
    if verdict is not None:
        return verdict
    return Verdict.FLAGGED if flags else speedup.verdict


def flag_kind(flag: str) -> str:
    """The kind of a comparison's flag ("user: timer_disagreement: …" -> "timer_disagreement")."""
    parts = [p.strip() for p in flag.split(":")]
    known = next((p for p in parts if p in FLAG_KINDS), None)
    if known is not None:
        return known
    return parts[1] if len(parts) > 2 else parts[0]


def in_family(policy: KernelPolicy, rows: int, timing_mode: str, baseline: str) -> bool:
    """Whether a comparison of a correct candidate belongs to its decision family: the policy's mode, a counted
    baseline, a decision row (module docstring). The one definition the screen's marks and the decision share."""
    return timing_mode == policy.timing_mode and baseline in policy.counted_baselines and policy.decides_on(rows)


class FamilyMark(BaseModel):
    """A comparison's place in its candidate's decision family (policy mode, counted baseline, decision row)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    size: int = Field(ge=1, description="comparisons in the family")
    tested: int = Field(ge=0, description="of them, those with a verdict")
    p_slower_holm: float | None = Field(description="Holm-adjusted p_slower; None when not tested")
    verdict: Verdict = Field(description="family verdict")


def family_marks(members: Sequence[tuple[Verdict, float | None]], *, alpha: float) -> list[FamilyMark]:
    """Holm over one decision family, the only place it runs for a kernel decision. ``members``: each comparison's
    (own verdict, p_slower).

    Returns, per member, its mark: the Holm-adjusted ``p_slower`` (None for a member without a verdict: FLAGGED or
    INSUFFICIENT, which is not tested) and its family verdict (module docstring). The one-sided level is
    ``alpha / 2``, the tail of the two-sided interval, so a family of one gives back the own verdicts.
    """
    tested = [i for i, (v, p) in enumerate(members) if v not in NO_VERDICT]
    if any(members[i][1] is None for i in tested):
        raise ValueError("a comparison with a verdict must carry its p_slower")
    adjusted = dict(zip(tested, holm_adjust([members[i][1] for i in tested])))  # type: ignore[misc]
    out: list[FamilyMark] = []
    for i, (v, _) in enumerate(members):
        p_holm = adjusted.get(i)
        if v is Verdict.SLOWER:
            v = Verdict.SLOWER if p_holm is not None and p_holm < alpha / 2.0 else Verdict.AMBIGUOUS
        out.append(FamilyMark(size=len(members), tested=len(tested), p_slower_holm=p_holm, verdict=v))
    return out


# --------------------------------------------------------------------------------------------- inputs


class BaselineTiming(BaseModel):
    """The candidate against one baseline at one shape, in one timing mode: the trial-level speedup, the flags of
    either timing cell (quoted with the implementation they belong to) and the comparison's own verdict after the
    screen's flag rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: str = Field(min_length=1)
    timing_mode: TimingMode
    speedup: TrialSpeedup
    flags: list[str] = Field(default_factory=list, description="reasons either cell cannot carry a verdict")
    verdict: Verdict | None = Field(default=None, description="the comparison's own verdict after the flag rule "
                                    "(``Comparison.verdict``); None: FLAGGED when there are flags (rule 'void')")
    timer_disagreement: float | None = Field(default=None, ge=0, description="the largest |timer disagreement| of "
                                             "the cells flagged for one")
    widened_by: float | None = Field(default=None, ge=1, description="a widening rule: the factor the interval was "
                                     "widened by (the verdict stands when it holds there, else FLAGGED)")
    family: FamilyMark | None = Field(default=None, description="the comparison's family mark as the screen made it "
                                      "under the decision's policy (``Comparison.family``); the decision reads it "
                                      "instead of adjusting again. None on every timing: the decision marks the "
                                      "family itself")

    @model_validator(mode="after")
    def _verdict_from_speedup(self) -> "BaselineTiming":
        if self.verdict is not None and self.verdict not in (self.speedup.verdict, Verdict.FLAGGED):
            raise ValueError(f"verdict {self.verdict.value}: a comparison's own verdict is its speedup's "
                             f"({self.speedup.verdict.value}) or FLAGGED")
        if self.verdict is not None and self.verdict is not Verdict.FLAGGED and self.flags and \
                self.verdict is not Verdict.INSUFFICIENT and self.widened_by is None:
            raise ValueError(f"verdict {self.verdict.value} despite flags {self.flags}: only a comparison whose "
                             "interval was widened by the timers' disagreement keeps its verdict")
        return self

    @property
    def own_verdict(self) -> Verdict:
        return own_verdict(self.speedup, self.flags, self.verdict)

    @property
    def candidate_t_us(self) -> float | None:
        return self.speedup.candidate_t_us

    @property
    def baseline_t_us(self) -> float | None:
        return self.speedup.baseline_t_us


def compare_timings(
    baseline: str,
    timing_mode: TimingMode,
    baseline_trials: Sequence[Sequence[float]],
    candidate_trials: Sequence[Sequence[float]],
    baseline_trial_ids: Sequence[int],
    candidate_trial_ids: Sequence[int],
    *,
    policy: KernelPolicy,
    flags: Sequence[str] = (),
) -> BaselineTiming:
    """Trial-level speedup of the candidate over ``baseline`` from per-trial kept samples (``TimingCell.kept_by_trial``
    and ``trial_ids``), at the policy's confidence and SAME band."""
    return BaselineTiming(
        baseline=baseline,
        timing_mode=timing_mode,
        speedup=trial_speedup(baseline_trials, candidate_trials, baseline_trial_ids, candidate_trial_ids,
                              confidence=policy.confidence, same_margin=policy.same_margin),
        flags=list(flags),
    )


class ShapeResult(BaseModel):
    """Correctness and timings of the candidate at one shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int = Field(ge=1)
    correct: bool
    checked: bool = Field(default=True, description="False: never checked (the candidate failed before it, or the "
                          "screen was interrupted); then not correct, and not incorrect either")
    correctness_detail: str | None = Field(
        default=None, description="for a failure: max abs/rel error and first bad index; unchecked: why"
    )
    timings: list[BaselineTiming] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unchecked_is_not_correct(self) -> "ShapeResult":
        if not self.checked and (self.correct or self.timings):
            raise ValueError(f"rows={self.rows}: a shape that was not checked is neither correct nor timed")
        return self


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
    failure: Failure | None = Field(
        default=None, description="the candidate failed in the screen: its failure kind (``receipts/screen_result.py``)")
    failure_detail: str | None = Field(default=None, description="the first line of its error")
    interrupted: str | None = Field(default=None, description="the screen was stopped before it finished: why")
    flag_rule: FlagRule | None = Field(
        default="widen_ratio", description="the flag rule the comparisons were made under "
        "(``kernels/harness/compare.py``); None: a screen from before the rule was recorded, whose reasons quote "
        "every flag of a FLAGGED comparison as they did then, so that its receipt decides again to the letter")

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
    in_family: bool = Field(description="counted, at a decision row, in the policy's mode")
    speedup: TrialSpeedup
    flags: list[str] = Field(default_factory=list)
    verdict: Verdict = Field(description="the comparison's own verdict")
    timer_disagreement: float | None = Field(default=None, description="largest |timer disagreement| of its cells")
    widened_by: float | None = Field(default=None, description="a widening rule: the factor its interval was "
                                      "widened by")
    p_slower_holm: float | None = Field(description="Holm-adjusted p_slower over the family; None if not tested")
    family_verdict: Verdict | None = Field(description="verdict after the family adjustment; None outside the family")
    time_change_percent: float | None = Field(description="(candidate_t / baseline_t - 1) * 100; negative = faster")

    @property
    def candidate_t_us(self) -> float | None:
        return self.speedup.candidate_t_us

    @property
    def baseline_t_us(self) -> float | None:
        return self.speedup.baseline_t_us


class ShapeEvidence(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int
    in_decision: bool = Field(description="whether the decision reads this row count")
    correct: bool
    checked: bool = True
    correctness_detail: str | None = None
    best_baseline: str | None = Field(description="fastest measured counted baseline at this shape")
    comparisons: list[ComparisonEvidence]


class DecisionFamily(BaseModel):
    """The comparisons one decision reads together, and how their error is controlled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timing_mode: TimingMode
    rows: list[int] = Field(description="decision rows")
    baselines: list[str] = Field(description="counted baselines measured at a decision row")
    size: int = Field(ge=0, description="comparisons in the family")
    tested: int = Field(ge=0, description="of them, those with a verdict (not FLAGGED or INSUFFICIENT)")
    adjustment: Literal["holm"] = HOLM
    alpha: float = Field(gt=0, lt=1, description="family-wise level, 1 - confidence")
    tail_alpha: float = Field(gt=0, lt=1, description="level of each one-sided claim, alpha / 2")
    reported_rows: list[int] = Field(description="rows measured and reported but not decided on")
    decision_max_rows: int

    def sentence(self) -> str:
        names = ", ".join(baseline_phrase(b) for b in self.baselines)
        tested = f", {self.tested} with a verdict" if self.tested != self.size else ""
        plural = "" if self.size == 1 else "s"
        text = (f"family: {self.size} comparison{plural}{tested} ({names} at rows {_rows(self.rows)}, {self.timing_mode} "
                f"timing); 'slower than a baseline somewhere' is Holm-adjusted over them at alpha {self.alpha:g} "
                f"({self.tail_alpha:g} per one-sided claim); 'faster than every baseline' is an intersection-union "
                "claim, each comparison at its own level")
        if self.reported_rows:
            text += (f"; rows {_rows(self.reported_rows)} are measured but not decided on (above "
                     f"{self.decision_max_rows} rows)")
        return text


class KernelDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: DecisionCode
    decision_text: str
    reason: str
    timing_mode: TimingMode
    policy: KernelPolicy
    family: DecisionFamily
    shapes: list[ShapeEvidence]
    skipped_baselines: list[SkippedBaseline]
    ceilings: list[AmdahlCeiling]


def _time_change_percent(speedup: float | None) -> float | None:
    return None if speedup is None else (1.0 / speedup - 1.0) * 100.0


def _range(values: Sequence[float], decimals: int = 1) -> str:
    lo, hi = f"{min(values):.{decimals}f}", f"{max(values):.{decimals}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def _rows(rows: Sequence[int]) -> str:
    return ", ".join(str(r) for r in rows)


def _first_line(text: str | None) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def _check_inputs(inputs: KernelDecisionInputs, policy: KernelPolicy) -> None:
    """Bad or incomplete inputs fail here, naming the shape and baseline; nothing is decided on them."""
    skipped = {s.baseline for s in inputs.skipped_baselines}
    mode = policy.timing_mode
    # Timings only matter where the candidate is correct and the decision reads the row.
    read = [s for s in inputs.shapes if s.correct and policy.decides_on(s.rows)]
    if read and not any(t.timing_mode == mode for s in read for t in s.timings):
        modes = sorted({t.timing_mode for s in read for t in s.timings})
        raise InputError(
            f"the kernel policy decides on {mode!r} timings, but the inputs hold none (modes present: {modes or 'none'})",
            hint=f"time in {mode!r} mode, or set timing_mode in a policy file",
        )
    seen_baselines = {t.baseline for s in inputs.shapes for t in s.timings} | skipped
    missing = [b for b in policy.counted_baselines if b not in seen_baselines]
    if read and missing:
        raise InputError(
            f"the policy counts baseline(s) {missing}, but the inputs neither measured nor skipped them "
            f"(present: {sorted(seen_baselines)})",
            hint="record an unavailable baseline as skipped with its reason, or fix counted_baselines",
        )
    for shape in inputs.shapes:
        in_mode = [t for t in shape.timings if t.timing_mode == mode]
        names = [t.baseline for t in in_mode]
        if len(set(names)) != len(names):
            raise InputError(f"rows={shape.rows}: a baseline appears twice in {mode!r} mode: {names}")
        both = sorted(set(names) & skipped)
        if both:
            raise InputError(f"rows={shape.rows}: baseline(s) {both} are both measured and listed as skipped")
        for t in in_mode:
            if not (math.isclose(t.speedup.confidence, policy.confidence)
                    and math.isclose(t.speedup.same_margin, policy.same_margin)):
                raise InputError(
                    f"rows={shape.rows}, baseline {t.baseline!r}: interval at confidence {t.speedup.confidence} and "
                    f"SAME band ±{t.speedup.same_margin}, but the policy decides at {policy.confidence} and "
                    f"±{policy.same_margin}",
                    hint="compute the comparisons with the policy the decision uses",
                )
        if not (shape.correct and policy.decides_on(shape.rows)):
            continue
        for b in policy.counted_baselines:
            if b not in names and b not in skipped:
                raise InputError(
                    f"rows={shape.rows}: counted baseline {b!r} has no {mode!r} timing and is not listed as skipped"
                )
        if not any(n in policy.counted_baselines for n in names):
            raise InputError(
                f"rows={shape.rows}: no counted baseline was measured in {mode!r} mode, so there is nothing to beat",
                hint=f"counted baselines: {policy.counted_baselines}",
            )


def _given_marks(inputs: KernelDecisionInputs, members: Sequence[BaselineTiming]) -> list[FamilyMark] | None:
    """The family marks the timings carry (the screen's), when they are this decision's family: every member marked,
    each mark counting the family's size and its own verdict's place in it, no timing outside it marked. None when no
    timing carries one; marks of another family are an input error, never read."""
    marked = [t for s in inputs.shapes for t in s.timings if t.family is not None]
    if not marked:
        return None
    ids = {id(t) for t in members}
    tested = sum(t.own_verdict not in NO_VERDICT for t in members)
    stray = [t.baseline for t in marked if id(t) not in ids]
    wrong = [t.baseline for t in members if t.family is None or t.family.size != len(members)
             or t.family.tested != tested or (t.family.p_slower_holm is None) != (t.own_verdict in NO_VERDICT)]
    if stray or wrong:
        raise InputError(
            f"the timings' family marks are not this decision's family of {len(members)} comparisons "
            f"(marked outside it: {sorted(set(stray)) or 'none'}; unmarked or miscounted in it: "
            f"{sorted(set(wrong)) or 'none'})",
            hint="make the comparisons under the policy the decision uses (kernels/harness/compare.py compare_all)")
    return [t.family for t in members]  # type: ignore[misc]


def _gather(inputs: KernelDecisionInputs, policy: KernelPolicy, *, check: bool = True
            ) -> tuple[list[ShapeEvidence], DecisionFamily]:
    if check:
        _check_inputs(inputs, policy)
    mode = policy.timing_mode
    shapes = sorted(inputs.shapes, key=lambda s: s.rows)
    # The family: counted comparisons in the policy's mode at the decision rows where the candidate is correct.
    in_mode = {s.rows: [t for t in s.timings if t.timing_mode == mode] for s in shapes}
    members = [(s.rows, t) for s in shapes if s.correct for t in in_mode[s.rows]
               if in_family(policy, s.rows, t.timing_mode, t.baseline)]
    marks = _given_marks(inputs, [t for _, t in members]) or \
        family_marks([(t.own_verdict, t.speedup.p_slower) for _, t in members], alpha=policy.alpha)
    mark_of = {(rows, t.baseline): (m.p_slower_holm, m.verdict) for (rows, t), m in zip(members, marks)}
    out: list[ShapeEvidence] = []
    for shape in shapes:
        comparisons = []
        for t in in_mode[shape.rows]:
            p_holm, family = mark_of.get((shape.rows, t.baseline), (None, None))
            comparisons.append(ComparisonEvidence(
                baseline=t.baseline,
                counted=t.baseline in policy.counted_baselines,
                in_family=(shape.rows, t.baseline) in mark_of,
                speedup=t.speedup,
                flags=t.flags,
                verdict=t.own_verdict,
                timer_disagreement=t.timer_disagreement,
                widened_by=t.widened_by,
                p_slower_holm=p_holm,
                family_verdict=family,
                time_change_percent=_time_change_percent(t.speedup.ratio),
            ))
        timed = [c for c in comparisons if c.counted and c.baseline_t_us is not None]
        best = min(timed, key=lambda c: c.baseline_t_us).baseline if timed else None  # type: ignore[arg-type, return-value]
        out.append(ShapeEvidence(rows=shape.rows, in_decision=policy.decides_on(shape.rows), correct=shape.correct,
                                 checked=shape.checked, correctness_detail=shape.correctness_detail, best_baseline=best,
                                 comparisons=comparisons))
    family = DecisionFamily(
        timing_mode=mode,
        rows=sorted({rows for rows, _ in members}),
        baselines=[b for b in policy.counted_baselines if any(t.baseline == b for _, t in members)],
        size=len(members),
        tested=sum(t.own_verdict not in NO_VERDICT for _, t in members),
        alpha=policy.alpha,
        tail_alpha=policy.alpha / 2.0,
        reported_rows=[s.rows for s in shapes if not policy.decides_on(s.rows)],
        decision_max_rows=policy.decision_max_rows,
    )
    return out, family


def flagged_summary(comparisons: Sequence[ComparisonEvidence]) -> str:
    """What FLAGGED comparisons have in common, in a line: their count and their flags' kinds, a timer disagreement
    with its largest size ("flagged: 2 comparisons; timer_disagreement up to 18.2 %, below_floor"). The flags
    themselves stay in the receipt's comparisons."""
    kinds: list[str] = []
    for c in comparisons:
        for f in c.flags:
            k = flag_kind(f)
            if k not in kinds:
                kinds.append(k)
    worst = [c.timer_disagreement for c in comparisons if c.timer_disagreement is not None]
    words = [f"{k} up to {max(worst) * 100:.1f} %" if k == "timer_disagreement" and worst else k for k in kinds]
    n = len(comparisons)
    text = f"flagged: {n} comparison{'' if n == 1 else 's'}" + (f"; {', '.join(words)}" if words else "")
    widened = sum(c.widened_by is not None for c in comparisons)
    if widened:
        who = "it lost its" if n == 1 else f"{widened} of them lost their"
        text += f"; {who} verdict on the interval widened by the timers' disagreement"
    return text


def _blocker_label(c: ComparisonEvidence, margin_pct: str, summarize: bool = True) -> tuple[str, str | None]:
    """How a reason names a family comparison that is not FASTER, and a detail to quote (the shortfall; a FLAGGED
    one is summed up with the others of its label, ``flagged_summary``)."""
    if c.family_verdict is Verdict.SAME:
        return f"same within {margin_pct} as {baseline_phrase(c.baseline)}", None
    if c.family_verdict is Verdict.FLAGGED:
        return f"no verdict against {baseline_phrase(c.baseline)}", (None if summarize else
                                                                      "flagged: " + "; ".join(c.flags))
    if c.family_verdict is Verdict.INSUFFICIENT:
        return f"no verdict against {baseline_phrase(c.baseline)}", c.speedup.reason
    if c.verdict is Verdict.SLOWER:
        return (f"slower than {baseline_phrase(c.baseline)} by its own interval but not after the Holm adjustment",
                None)
    return f"ambiguous against {baseline_phrase(c.baseline)}", None


def decide_kernel(inputs: KernelDecisionInputs, policy: KernelPolicy | None = None) -> KernelDecision:
    """Apply the kernel rule (module docstring) and write the decision with its reason, family and evidence."""
    policy = policy or load_policy("kernel")
    # Correctness and the candidate's own failure decide before any timing is read (rule 1).
    stops_early = inputs.failure is not None or any(not (s.checked and s.correct) for s in inputs.shapes)
    incomplete: str | None = None
    if stops_early:
        shapes, family = _gather(inputs, policy, check=False)
    else:
        try:
            shapes, family = _gather(inputs, policy)
        except InputError as e:
            if not inputs.interrupted:
                raise
            incomplete = e.message
            shapes, family = _gather(inputs, policy, check=False)
    margin_pct = f"±{policy.same_margin * 100:g} percent"
    reject_text = f"reject {inputs.candidate} for serving integration"
    retain_text = "retain as a correct kernel candidate, but do not integrate into serving yet"
    accept_text = f"accept {inputs.candidate} for serving integration"
    inconclusive_text = f"no decision on {inputs.candidate} for serving integration"

    partial = f"; from a partial screen (interrupted: {_first_line(inputs.interrupted)})" if inputs.interrupted else ""

    def done(decision: DecisionCode, text: str, reason: str, *, name_family: bool = True) -> KernelDecision:
        return KernelDecision(
            decision=decision,
            decision_text=text,
            reason=(f"{reason}; {family.sentence()}" if name_family else reason) + partial,
            timing_mode=policy.timing_mode,
            policy=policy,
            family=family,
            shapes=shapes,
            skipped_baselines=list(inputs.skipped_baselines),
            ceilings=list(inputs.ceilings),
        )

    # 1. correctness, at every shape, and the candidate's own failure
    wrong = [s for s in shapes if s.checked and not s.correct]
    unchecked = [s for s in shapes if not s.checked]
    correct_rows = [s.rows for s in shapes if s.correct]

    def not_checked() -> str:
        """ "rows 32, 128 not checked: crashed", one part per distinct why."""
        by_why: dict[str, list[int]] = {}
        for s in unchecked:
            by_why.setdefault(s.correctness_detail or "not checked", []).append(s.rows)
        return "; ".join(f"rows {_rows(rows)} {why if why.startswith('not checked') else 'not checked: ' + why}"
                         for why, rows in by_why.items())

    if wrong:
        details = "; ".join(f"rows {s.rows}: {s.correctness_detail}" for s in wrong if s.correctness_detail)
        reason = f"incorrect on {len(wrong)} of {len(shapes)} shapes (rows {_rows([s.rows for s in wrong])})"
        reason += f": {details}" if details else ""
        reason += f"; {not_checked()}" if unchecked else ""
        return done("reject", reject_text, reason + "; timings of an incorrect kernel do not count", name_family=False)
    failed_at = (f"; correct at rows {_rows(correct_rows)}" if correct_rows else "") + (
        f"; {not_checked()}" if unchecked else "")
    if inputs.failure == "harness":
        return done("inconclusive", inconclusive_text,
                    f"{FAILURE_WORDS['harness']}: {inputs.failure_detail or 'no error text'}{failed_at}; the harness "
                    "failed, not the candidate, so nothing is decided", name_family=False)
    if inputs.failure is not None:
        return done("reject", reject_text,
                    f"{FAILURE_WORDS.get(inputs.failure, inputs.failure)}: {inputs.failure_detail or 'no error text'}"
                    f"{failed_at}; a candidate that fails in the screen is rejected, and its timings do not count",
                    name_family=False)
    if unchecked:
        return done("inconclusive", inconclusive_text,
                    f"{not_checked()}" + (f"; correct at rows {_rows(correct_rows)}" if correct_rows else "")
                    + "; nothing is decided before every shape is checked", name_family=False)
    if incomplete is not None:
        return done("inconclusive", inconclusive_text,
                    f"correct on every shape, but the screen stopped before the timings the decision reads were "
                    f"complete ({incomplete})", name_family=False)

    decision_shapes = [s for s in shapes if s.in_decision]
    if not decision_shapes:
        return done(
            "inconclusive", inconclusive_text,
            f"correct on every shape, but none of rows {_rows([s.rows for s in shapes])} is a decision row (the "
            f"policy decides on rows up to {policy.decision_max_rows}; decide_on_bandwidth_rows: true in a policy "
            "file decides on larger rows too)",
        )
    family_of = {s.rows: [c for c in s.comparisons if c.in_family] for s in decision_shapes}

    # 2. slower than a counted baseline at some decision row, after the Holm adjustment over the family
    slower_parts = []
    for b in policy.counted_baselines:
        hits = [(r, c) for r, cs in family_of.items() for c in cs if c.baseline == b and c.family_verdict is Verdict.SLOWER]
        if not hits:
            continue
        measured_rows = [r for r, cs in family_of.items() if any(c.baseline == b for c in cs)]
        part = f"{_range([c.time_change_percent for _, c in hits])} percent slower than {baseline_phrase(b)}"
        if len(hits) < len(measured_rows):
            part += f" at rows {_rows([r for r, _ in hits])}"
        slower_parts.append(part)
    if slower_parts:
        reason = (
            "correct on every shape, but "
            + " and ".join(slower_parts)
            + f" ({policy.timing_mode} timing; each beyond the {margin_pct} same band at "
            f"{policy.confidence * 100:g} percent confidence after the Holm adjustment)"
        )
        return done("reject", reject_text, reason)

    # 3./4. faster than every counted baseline (intersection-union: no adjustment) where?
    fast_rows = [r for r, cs in family_of.items() if all(c.family_verdict is Verdict.FASTER for c in cs)]
    blockers: dict[str, tuple[list[int], list[str], list[ComparisonEvidence]]] = {}
    read_blocked: set[int] = set()  # decision rows where a comparison with a verdict is not FASTER
    not_beaten: list[str] = []
    for r, cs in family_of.items():
        for c in cs:
            if c.family_verdict is Verdict.FASTER:
                continue
            label, detail = _blocker_label(c, margin_pct, summarize=inputs.flag_rule is not None)
            rows, details, flagged = blockers.setdefault(label, ([], [], []))
            if r not in rows:
                rows.append(r)
            if c.family_verdict is Verdict.FLAGGED and inputs.flag_rule is not None:
                flagged.append(c)
            if detail and detail not in details:
                details.append(detail)
            if c.family_verdict not in NO_VERDICT:
                read_blocked.add(r)
                if c.baseline not in not_beaten:
                    not_beaten.append(c.baseline)

    def blocker_text() -> str:
        parts = []
        for label, (rows, details, flagged) in blockers.items():
            quoted = ([flagged_summary(flagged)] if flagged else []) + details
            parts.append(f"{label} at rows {_rows(rows)}" + (f" ({'; '.join(quoted)})" if quoted else ""))
        return "; ".join(parts)

    if not fast_rows:
        unread = [r for r in family_of if r not in read_blocked]
        if unread:
            return done(
                "inconclusive", inconclusive_text,
                f"correct on every shape, but the timings support no speed claim at rows {_rows(unread)} and the "
                f"candidate is not faster than the best baseline at any other decision row ({blocker_text()})",
            )
        return done(
            "reject",
            reject_text,
            f"correct on every shape, but no measurable gain: not faster than the best baseline at any decision row "
            f"({blocker_text()})",
        )

    def vs_best(rows: int) -> ComparisonEvidence:
        s = next(x for x in shapes if x.rows == rows)
        return next(c for c in s.comparisons if c.baseline == s.best_baseline)

    best_cmp = [vs_best(r) for r in fast_rows]
    faster_pct = _range([-c.time_change_percent for c in best_cmp])  # type: ignore[operator]
    win_ns = _range([(c.baseline_t_us - c.candidate_t_us) * 1000.0 for c in best_cmp], decimals=0)  # type: ignore[operator]
    every = "every shape" if len(decision_shapes) == len(shapes) else "every decision row"

    if len(fast_rows) < len(decision_shapes):
        if len(read_blocked) == len(decision_shapes) - len(fast_rows):
            but = f"the candidate does not consistently beat {' or '.join(baseline_phrase(b) for b in not_beaten)}"
        else:
            but = "it is not shown to beat every counted baseline at every decision row"
        return done(
            "retain",
            retain_text,
            f"correct on every shape and {faster_pct} percent faster than the best baseline at rows "
            f"{_rows(fast_rows)}, but {but} ({blocker_text()})",
        )

    win = f"the isolated win is {win_ns} ns per call ({faster_pct} percent faster than the best baseline at {every})"
    holds: list[str] = []
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

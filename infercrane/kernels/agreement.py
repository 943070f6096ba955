"""Do two screens of one op agree within their runs' spread? (``infercrane kernel agree A B``)

Two screens made apart (through two executors, on two GPUs of one type, or a day apart) are independent runs: their
trials are not paired, so the paired-trial speedup of one screen (``stats.trials``) does not apply between them. The
comparison here is descriptive and says so (``METHOD``):

* a cell is one (implementation, rows, timing mode) both screens timed;
* per trial, the statistic is the median of that trial's kept samples (the trial is the replicate, as in a screen);
* each screen's spread of a cell is the range [min, max] of its trial medians; the cells **agree** when the two
  ranges overlap, i.e. the difference between the screens is no larger than what each run's own trials show;
* the ratio B / A is of the geometric means of the trial medians, a description, not a claim;
* a cell with fewer than ``MIN_TRIALS`` trials on a side is not compared (one trial has no spread);
* a cell either screen flagged (its second timer disagreed, or a time fell below the physical floor) is compared too,
  on the primary timer's trial medians, but counted apart (``compared_flagged``): it carries no time that screen
  stands behind, so its agreement says only that the two runs read that timer alike (the question an executor, a
  second GPU of a type or a day apart raises), never that the time is right.

The decisions of the two receipts are set side by side too: the same evidence should give the same decision.

Two receipts of one run are not two screens: the same receipt twice (``same_receipt``: one content hash) agrees
with itself by construction and ``kernel agree`` refuses it; one measurement decided twice (``same_measurement``:
``kernel decide`` keeps what was measured whole) agrees cell by cell by construction too, and ``kernel agree`` says
so first, since only its decisions can differ.
"""
from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

MIN_TRIALS = 2
METHOD = ("per cell (implementation, rows, timing mode) both screens timed: per trial the median of its kept "
          "samples; a screen's spread is the range [min, max] of its trial medians; the cells agree when the two "
          f"ranges overlap; B/A is the ratio of the geometric means of trial medians; cells with fewer than "
          f"{MIN_TRIALS} trials on a side are not compared; cells flagged by either screen are compared on the "
          "primary timer and counted apart: their times are not ones the screen stands behind")


class CellAgreement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    impl: str
    rows: int
    mode: str
    a_trial_medians_us: list[float]
    b_trial_medians_us: list[float]
    ratio_b_over_a: float | None
    agree: bool | None
    flagged_by: Literal["A", "B", "both"] | None = None
    note: str | None = None


AGREEMENT_SCHEMA = "infercrane.kernel-agreement/v2"


class Agreement(BaseModel):
    """What ``kernel agree --json-out`` writes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["infercrane.kernel-agreement/v2"] = AGREEMENT_SCHEMA
    method: str = METHOD
    op: str
    a_gpu: str
    b_gpu: str
    a_decision: str
    b_decision: str
    cells: list[CellAgreement]

    @property
    def compared(self) -> list[CellAgreement]:
        """The cells compared that neither screen flagged."""
        return [c for c in self.cells if c.agree is not None and c.flagged_by is None]

    @property
    def disagreeing(self) -> list[CellAgreement]:
        return [c for c in self.compared if c.agree is False]

    @property
    def compared_flagged(self) -> list[CellAgreement]:
        """The cells compared on the primary timer although a screen flagged them (module docstring)."""
        return [c for c in self.cells if c.agree is not None and c.flagged_by is not None]

    @property
    def disagreeing_flagged(self) -> list[CellAgreement]:
        return [c for c in self.compared_flagged if c.agree is False]

    @property
    def not_compared(self) -> list[CellAgreement]:
        return [c for c in self.cells if c.agree is None]

    def summary(self) -> str:
        """One line: the clean cells that agree, the flagged ones apart, what was not compared."""
        return summary_line(agreeing=len(self.compared) - len(self.disagreeing), compared=len(self.compared),
                            agreeing_flagged=len(self.compared_flagged) - len(self.disagreeing_flagged),
                            compared_flagged=len(self.compared_flagged), not_compared=len(self.not_compared))


def summary_line(*, agreeing: int, compared: int, agreeing_flagged: int, compared_flagged: int,
                 not_compared: int) -> str:
    """The counts of an agreement as one line (``kernel agree`` and the fan-out's closing lines)."""
    if compared:
        line = f"{agreeing} of {compared} compared cells agree within their runs' spread"
    else:
        line = "no cell that neither screen flagged to compare" if compared_flagged else "no timed cell to compare"
    if compared_flagged:
        line += f"; flagged by a screen, compared on the primary timer: {agreeing_flagged} of {compared_flagged} agree"
    if not_compared:
        line += f"; {not_compared} not compared"
    return line


def _gm(values: list[float]) -> float:
    return math.exp(float(np.mean(np.log(values))))


# What a screen decides from its measurement (``kernel decide`` makes these again): left out of what it measured.
DECIDED_PARTS = frozenset({"comparisons", "comparison_notes", "comparison_policy"})


def same_receipt(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why two kernel screen receipts' documents are one receipt (one content hash), or None."""
    from infercrane.hashing import HASH_FIELD, content_hash

    sha_a, sha_b = a.get(HASH_FIELD) or content_hash(a), b.get(HASH_FIELD) or content_hash(b)
    return f"the same receipt (content sha256 {sha_a[:12]}…)" if sha_a == sha_b else None


def same_measurement(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why two kernel screen receipts' documents hold one measurement (``kernel decide`` keeps the measured result
    whole: the result read through its model, less ``DECIDED_PARTS``), or None. Their cells agree by construction;
    their decisions may still differ (another policy, another decode step)."""
    from infercrane.hashing import content_hash
    from infercrane.receipts.screen_result import ScreenResult

    measured = [content_hash(ScreenResult.model_validate(d["result"]).model_dump(mode="json",
                                                                                exclude=set(DECIDED_PARTS)))
                for d in (a, b)]
    if measured[0] != measured[1]:
        return None
    return f"one measurement (run {a.get('app_id')}, measured result sha256 {measured[0][:12]}…)"


def compare_screens(a: dict[str, Any], b: dict[str, Any]) -> Agreement:
    """The agreement of two kernel screen receipts' documents (v3) of one op (module docstring); ValueError for
    receipts of two ops or shapes."""
    from infercrane.receipts.screen_result import ScreenResult

    ra, rb = ScreenResult.model_validate(a["result"]), ScreenResult.model_validate(b["result"])
    sa, sb = ra.spec.model_dump(), rb.spec.model_dump()
    for key in ("op", "hidden_size", "dtype"):
        if sa.get(key) != sb.get(key):
            raise ValueError(f"the screens differ in {key}: {sa.get(key)} vs {sb.get(key)}; compare screens of one op "
                             "at one shape")
    cells_b = {(i.key, c.rows, c.mode): c for i in rb.implementations for c in i.timings}
    out = []
    for impl in ra.implementations:
        for ca in impl.timings:
            cb = cells_b.get((impl.key, ca.rows, ca.mode))
            if cb is None:
                continue
            ma, mb = ca.trial_medians(), cb.trial_medians()
            ratio = _gm(mb) / _gm(ma) if ma and mb else None
            note, agree, by = None, None, None
            if ca.flags or cb.flags:
                by = "both" if ca.flags and cb.flags else "A" if ca.flags else "B"
                note = f"flagged by {by}: " + "; ".join([*(f"A {f}" for f in ca.flags), *(f"B {f}" for f in cb.flags)])
            if min(len(ma), len(mb)) < MIN_TRIALS:
                note = "; ".join(x for x in (f"{min(len(ma), len(mb))} trial(s) on a side: no spread to compare "
                                             "against", note) if x)
            else:
                agree = max(ma) >= min(mb) and max(mb) >= min(ma)
            out.append(CellAgreement(impl=impl.key, rows=ca.rows, mode=ca.mode, a_trial_medians_us=ma,
                                     b_trial_medians_us=mb, ratio_b_over_a=ratio, agree=agree, flagged_by=by,
                                     note=note))
    return Agreement(op=str(sa.get("op")), a_gpu=a["hardware"]["gpu"], b_gpu=b["hardware"]["gpu"],
                     a_decision=str(a.get("decision")), b_decision=str(b.get("decision")), cells=out)

"""One family from statistics to receipt: the screen marks each candidate's decision family once
(``decide.kernel.family_marks``, Holm), the decision reads those marks (``BaselineTiming.family``) and adjusts
again only for inputs that carry none; marks of another family are refused, never read."""
from __future__ import annotations

import json

import pytest

from evidence import archived

import infercrane.decide.kernel as dk
from infercrane.decide.kernel import FamilyMark, KernelDecisionInputs, ShapeResult, decide_kernel
from infercrane.decide.policy import load_policy
from infercrane.errors import InputError
from infercrane.kernels.harness.compare import decision_inputs, with_comparisons
from infercrane.receipts.screen_result import ScreenResult

EXECUTOR = archived("2026-12-02-h200-executors/receipts.tar.xz/local-fused_add_rmsnorm.h200.json")


def _result() -> ScreenResult:
    doc = json.loads(EXECUTOR.read_text())
    return ScreenResult.model_validate(doc.get("result", doc))


@pytest.fixture
def holm_calls(monkeypatch):
    calls: list[int] = []
    real = dk.holm_adjust

    def counting(ps):
        calls.append(len(ps))
        return real(ps)

    monkeypatch.setattr(dk, "holm_adjust", counting)
    return calls


def test_a_screen_and_its_decision_adjust_each_candidate_family_once(holm_calls):
    policy = load_policy("kernel")
    result = with_comparisons(_result(), policy)
    candidates = sorted({c.candidate for c in result.comparisons})
    assert candidates and len(holm_calls) == len(candidates)  # with_comparisons: one family per candidate
    for key in candidates:
        inputs = decision_inputs(result, key, policy=policy)
        marked = [t for s in inputs.shapes for t in s.timings if t.family is not None]
        assert marked and all(t.family.size == len(marked) for t in marked)
        decision = decide_kernel(inputs, policy)
        # the decision's family is the screen's: same members, same adjusted p-values and verdicts
        mine = {(c.rows, c.reference): c.family for c in result.comparisons if c.candidate == key and c.family}
        read = {(s.rows, c.baseline): (c.p_slower_holm, c.family_verdict) for s in decision.shapes
                for c in s.comparisons if c.in_family}
        assert read == {k: (m.p_slower_holm, m.verdict) for k, m in mine.items()}
        assert decision.family.size == len(mine)
    assert len(holm_calls) == len(candidates)  # no decision adjusted again


def test_the_decision_of_unmarked_inputs_marks_its_family_itself(holm_calls):
    policy = load_policy("kernel")
    result = with_comparisons(_result(), policy)
    key = sorted({c.candidate for c in result.comparisons})[0]
    marked = decision_inputs(result, key, policy=policy)
    unmarked = KernelDecisionInputs.model_validate(
        marked.model_dump(exclude={"shapes": {"__all__": {"timings": {"__all__": {"family"}}}}}))
    before = len(holm_calls)
    a, b = decide_kernel(marked, policy), decide_kernel(unmarked, policy)
    assert len(holm_calls) == before + 1
    assert a.model_dump() == b.model_dump()


def test_marks_of_another_family_are_refused():
    policy = load_policy("kernel")
    result = with_comparisons(_result(), policy)
    key = sorted({c.candidate for c in result.comparisons})[0]
    inputs = decision_inputs(result, key, policy=policy)
    # a family of one more comparison than the decision's: its marks are not this decision's
    shapes = []
    for s in inputs.shapes:
        timings = [t.model_copy(update={"family": FamilyMark(**{**t.family.model_dump(), "size": t.family.size + 1})})
                   if t.family is not None else t for t in s.timings]
        shapes.append(ShapeResult(rows=s.rows, correct=s.correct, timings=timings))
    with pytest.raises(InputError, match="not this decision's family"):
        decide_kernel(inputs.model_copy(update={"shapes": shapes}), policy)


def test_a_decision_under_another_policy_remarks_the_family():
    """A screen decided again under a policy with other decision rows: its recorded marks are of the other family,
    so the candidate's comparisons are made again under this policy, marks included."""
    result = with_comparisons(_result(), load_policy("kernel"))
    key = sorted({c.candidate for c in result.comparisons})[0]
    narrow = load_policy("kernel").model_copy(update={"decision_max_rows": min(result.rows)})
    inputs = decision_inputs(result, key, policy=narrow)
    marked_rows = {s.rows for s in inputs.shapes for t in s.timings if t.family is not None}
    assert marked_rows == {min(result.rows)}
    decide_kernel(inputs, narrow)  # the marks are this policy's, so nothing is refused

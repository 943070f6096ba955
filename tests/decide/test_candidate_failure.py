"""A candidate's fault is the candidate's: one that crashed, timed out, had a timer fault or raised is rejected with
a reason that starts with that word and the first line of its error, before any timing is read (never an input
error); rows it never got to are "not checked", not incorrect; an incorrect one is rejected first; a harness fault
decides nothing. Built from a committed H200 screen's result with the candidate's record edited."""
from __future__ import annotations

import json

import pytest

from evidence import archived

from infercrane.decide.kernel import KernelDecisionInputs, ShapeResult, decide_kernel
from infercrane.decide.policy import KernelPolicy, load_policy
from infercrane.kernels.harness.compare import decision_inputs, with_comparisons
from infercrane.kernels.receipt import _correctness_text, build_document, derive
from infercrane.receipts.screen_result import CheckResult, ScreenResult
from infercrane.hashing import HASH_FIELD, content_hash
from infercrane.receipts.validate import check_document

EXECUTOR = archived("2026-12-02-h200-executors/receipts.tar.xz/local-fused_add_rmsnorm.h200.json")
TIMER_FAULT = ("timer_fault: trial 2: the worker's samples add up to 812 us but InferCrane's clock saw 9120 us around "
               "them, 8100 us more than that and the measured handshake cost (208 us): its timer cannot be trusted\n"
               "second line of the error")


@pytest.fixture(scope="module")
def screen() -> tuple[ScreenResult, KernelPolicy]:
    doc = json.loads(EXECUTOR.read_text())
    return ScreenResult.model_validate(doc["result"]), KernelPolicy.model_validate(doc["policy"])


def _failed(res: ScreenResult, key: str, failure: str, error: str, *, rows_checked: int | None = None,
            incorrect_at: int | None = None, rule: str | None = "widen") -> ScreenResult:
    """``res`` with implementation ``key`` failed (``failure``, ``error``): correct at its first ``rows_checked``
    rows (all when None), incorrect at ``incorrect_at``; compared again under ``rule`` (None: before the rule)."""
    impls = []
    for impl in res.implementations:
        if impl.key == key:
            corr = list(impl.correctness[:rows_checked] if rows_checked is not None else impl.correctness)
            if incorrect_at is not None:
                corr = [c if c.rows != incorrect_at else c.model_copy(update={"passed": False, "checks": [
                    CheckResult(check_index=0, seed=1, input_scale=1.0, passed=False,
                                contract_error="out has shape (8, 512), expected (8, 1024)")]}) for c in corr]
            impl = impl.model_copy(update={"status": "failed", "failure": failure, "error": error,
                                           "correctness": corr})
        impls.append(impl)
    out = ScreenResult.model_validate(res.model_copy(update={"implementations": impls}).model_dump())
    return with_comparisons(out, _policy(res), flag_rule=rule)  # None: the rule ``res`` records (none: void)


def _policy(res: ScreenResult) -> KernelPolicy:
    return KernelPolicy.model_validate(load_policy("kernel").model_dump() | {
        k: res.comparison_policy[k] for k in ("same_margin", "confidence", "timing_mode", "counted_baselines",
                                              "decision_max_rows", "decide_on_bandwidth_rows")})


def _decided(res: ScreenResult, pol: KernelPolicy, key: str) -> tuple[str, str, str]:
    d = derive(res, pol, None)
    if d["candidate"]["key"] == key:
        return d["decision_code"], d["decision"], d["reason"]
    o = next(o for o in d["other_candidates"] if o["implementation"] == key)
    return o["decision_code"], o["decision"], o["reason"]


def test_a_timer_fault_rejects_with_its_word_not_an_input_error(screen):
    res, pol = screen
    failed = _failed(res, "cuda", "timer_fault", TIMER_FAULT)
    assert not any(c.candidate == "cuda" for c in failed.comparisons)  # a failed candidate is not compared
    inputs = decision_inputs(failed, "cuda", policy=pol, phrase="handwritten CUDA candidate")
    assert inputs.failure == "timer_fault" and inputs.failure_detail.startswith("trial 2: the worker's samples")
    assert all(s.correct and not s.timings for s in inputs.shapes)  # correct, no timings: an input error before
    code, text, reason = _decided(failed, pol, "cuda")
    assert code == "reject" and text == "reject handwritten CUDA candidate for serving integration"
    assert reason.startswith("timer fault: trial 2: the worker's samples add up to 812 us")
    assert "incorrect" not in reason and "second line" not in reason and "\n" not in reason
    assert "correct at rows " in reason and "its timings do not count" in reason


@pytest.mark.parametrize("failure, word", [("crashed", "crashed"), ("timeout", "timed out"),
                                           ("error", "raised an error")])
def test_a_candidate_that_stopped_part_way_is_rejected_for_that_and_the_rest_is_not_checked(screen, failure, word):
    res, pol = screen
    failed = _failed(res, "cuda", failure, f"worker of cuda at rows={res.rows[2]}: gone\nTraceback …",
                     rows_checked=2)
    code, _, reason = _decided(failed, pol, "cuda")
    rest = ", ".join(map(str, res.rows[2:]))
    assert code == "reject" and reason.startswith(f"{word}: worker of cuda at rows={res.rows[2]}: gone")
    assert f"correct at rows {res.rows[0]}, {res.rows[1]}" in reason
    assert f"rows {rest} not checked: {word}" in reason
    assert "incorrect" not in reason and "float32 oracle" not in reason
    shapes = decision_inputs(failed, "cuda", policy=pol).shapes
    assert [s.checked for s in shapes] == [True, True] + [False] * (len(res.rows) - 2)
    assert all(s.correctness_detail == f"not checked: {word}" for s in shapes[2:])
    # the receipt's candidate record says the same
    text = _correctness_text(failed, failed.implementation("cuda"))
    assert text == (f"passed against the float32 oracle at rows {res.rows[0]}, {res.rows[1]}; not checked at rows "
                    f"{rest}: {word}")


def test_incorrect_comes_first_and_the_rows_after_a_crash_are_not_called_incorrect(screen):
    res, pol = screen
    failed = _failed(res, "cuda", "crashed", "worker died (SIGSEGV)", rows_checked=2, incorrect_at=res.rows[1])
    code, _, reason = _decided(failed, pol, "cuda")
    assert code == "reject"
    assert reason.startswith(f"incorrect on 1 of {len(res.rows)} shapes (rows {res.rows[1]}): rows {res.rows[1]}: ")
    assert f"rows {', '.join(map(str, res.rows[2:]))} not checked: crashed" in reason
    assert reason.endswith("timings of an incorrect kernel do not count")


def test_a_harness_fault_decides_nothing(screen):
    res, pol = screen
    code, _, reason = _decided(_failed(res, "cuda", "harness", "the worker pipe closed"), pol, "cuda")
    assert code == "inconclusive" and "the harness failed, not the candidate" in reason
    d = decide_kernel(KernelDecisionInputs(candidate="c", shapes=[ShapeResult(rows=1, correct=True)],
                                           failure="harness", failure_detail="pipe closed"))
    assert d.decision == "inconclusive" and d.reason.startswith("harness fault: pipe closed")


def test_rows_not_checked_without_a_fault_of_the_candidate_are_inconclusive():
    d = decide_kernel(KernelDecisionInputs(candidate="c", interrupted="SIGINT after trial 2 of 5", shapes=[
        ShapeResult(rows=1, correct=True),
        ShapeResult(rows=8, correct=False, checked=False, correctness_detail="not checked: the screen was interrupted"),
    ]))
    assert d.decision == "inconclusive"
    assert d.reason.startswith("rows 8 not checked: the screen was interrupted; correct at rows 1")
    assert d.reason.endswith("(interrupted: SIGINT after trial 2 of 5)")
    with pytest.raises(ValueError, match="neither correct nor timed"):
        ShapeResult(rows=8, correct=True, checked=False)


def test_a_screen_from_before_the_rule_decides_as_it_did(screen):
    """A result without a recorded flag rule is decided as it was then, so that its receipt validates: a row a
    crashed candidate never got to read as incorrect."""
    res, pol = screen
    failed = _failed(res, "cuda", "crashed", "worker died (SIGSEGV)", rows_checked=2, rule=None)
    assert "flag_rule" not in failed.comparison_policy
    code, _, reason = _decided(failed, pol, "cuda")
    assert code == "reject" and reason.startswith(f"incorrect on {len(res.rows) - 2} of {len(res.rows)} shapes")
    assert f"rows {res.rows[2]}: crashed: worker died (SIGSEGV)" in reason


def test_a_receipt_of_a_failed_candidate_is_written_and_validates(screen):
    res, pol = screen
    failed = _failed(res, "cuda", "timer_fault", TIMER_FAULT)
    doc = build_document(failed, pol, provenance=json.loads(EXECUTOR.read_text())["provenance"], model_source="test")
    doc[HASH_FIELD] = content_hash(doc)
    model, problems = check_document(doc)
    assert problems == [] and model is not None
    reasons = {doc["candidate"]["key"]: doc["reason"]} | {o["implementation"]: o["reason"]
                                                          for o in doc["other_candidates"]}
    assert reasons["cuda"].startswith("timer fault: ")


def test_a_functional_run_words_a_crash_as_a_crash(screen):
    """Without a GPU, a candidate that crashed after passing its checks is rejected for the crash, not called
    incorrect against the oracle."""
    res, pol = screen
    failed = _failed(res, "cuda", "crashed", "worker died (SIGSEGV)\nmore", rows_checked=2)
    functional = ScreenResult.model_validate(failed.model_copy(update={
        "run_kind": "functional", "modes": [], "methods": {}, "calibration": None, "comparisons": [],
        "comparison_notes": [], "comparison_policy": {},
        "implementations": [i.model_copy(update={"timings": []}) for i in failed.implementations],
    }).model_dump())
    d = derive(functional, pol, None)
    cuda = {o["implementation"]: o for o in d["other_candidates"]} | {d["candidate"]["key"]: {
        "decision": d["decision"], "decision_code": d["decision_code"], "reason": d["reason"]}}
    assert cuda["cuda"]["decision_code"] == "reject" and cuda["cuda"]["decision"].endswith(": crashed")
    assert cuda["cuda"]["reason"].startswith("crashed: worker died (SIGSEGV); correct against the float32 oracle "
                                             f"at rows {res.rows[0]}, {res.rows[1]} before it")
    assert "incorrect" not in cuda["cuda"]["reason"]

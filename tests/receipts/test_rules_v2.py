"""The v2 screening receipt's consistency rules, each shown to fail on an edited copy of a consistent document."""
from __future__ import annotations

import copy

import pytest

from infercrane.hashing import content_hash
from infercrane.receipts.validate import check_document


def _problems(doc: dict) -> list[tuple[str, str]]:
    doc = copy.deepcopy(doc)
    doc["content_sha256"] = content_hash(doc)
    model, problems = check_document(doc)
    return problems


def test_consistent_document_has_no_problem(screening_v2_doc: dict) -> None:
    assert _problems(screening_v2_doc) == []


def test_retain_without_candidate_correctness(screening_v2_doc: dict) -> None:
    doc = copy.deepcopy(screening_v2_doc)
    doc["correctness"] = [c for c in doc["correctness"] if c["implementation"] != "triton"]
    paths = [p for p, _ in _problems(doc)]
    assert paths == ["correctness"]
    doc["decision_code"] = "inconclusive"
    assert _problems(doc) == []


def test_failed_candidate_cannot_be_retained(screening_v2_doc: dict) -> None:
    doc = copy.deepcopy(screening_v2_doc)
    bad = next(c for c in doc["correctness"] if c["implementation"] == "triton" and c["rows"] == 8)
    bad.update(passed=False, mismatched=12, first_bad_index=[3, 17])
    [(path, reason)] = _problems(doc)
    assert path == "decision_code" and "rows [8]" in reason


def test_median_must_match_samples(screening_v2_doc: dict) -> None:
    doc = copy.deepcopy(screening_v2_doc)
    doc["timings"][1]["median_us"] = 1.3
    paths = {p for p, _ in _problems(doc)}
    assert "timings[1].median_us" in paths


def test_measurement_must_match_timing_median(screening_v2_doc: dict) -> None:
    doc = copy.deepcopy(screening_v2_doc)
    m = doc["measurements"][0]
    m["triton_ms"] = 0.0009
    m["speedup_vs_eager"] = m["eager_ms"] / m["triton_ms"]
    paths = {p for p, _ in _problems(doc)}
    assert paths == {"measurements[0].triton_ms"}


def test_speedup_outside_its_interval(screening_v2_doc: dict) -> None:
    doc = copy.deepcopy(screening_v2_doc)
    doc["comparisons"][0]["ci_low"] = doc["comparisons"][0]["speedup"] * 1.1
    doc["comparisons"][0]["ci_high"] = doc["comparisons"][0]["speedup"] * 1.2
    [(path, reason)] = _problems(doc)
    assert path == "comparisons[0].speedup" and "outside its interval" in reason


def test_functional_check_makes_no_speed_claim(screening_v2_doc: dict) -> None:
    doc = copy.deepcopy(screening_v2_doc)
    doc["evidence_class"] = "cpu-functional-check"
    paths = {p for p, _ in _problems(doc)}
    assert {"evidence_class", "decision_code"} <= paths


@pytest.mark.parametrize("field, value", [("op_share", 0.5), ("expected_gain_percent", 9.0)])
def test_amdahl_fields_follow_from_inputs(screening_v2_doc: dict, field: str, value: float) -> None:
    doc = copy.deepcopy(screening_v2_doc)
    calls, cand, base, step = 56, 1.26, 1.54, 2.23
    f = calls * base / 1000 / step
    s = base / cand
    doc["amdahl"] = [{"calls_per_step": calls, "candidate_t_us": cand, "baseline_t_us": base, "baseline": "torch_compile",
                      "decode_step_ms": step, "decode_step_source": "user: --decode-step-ms", "rows": 1,
                      "timing_mode": "graph", "op_share": f, "op_speedup": s, "win_ns_per_call": (base - cand) * 1000,
                      "best_possible_gain_percent": (1 / (1 - f) - 1) * 100,
                      "expected_gain_percent": (1 / ((1 - f) + f / s) - 1) * 100}]
    assert _problems(doc) == []
    doc["amdahl"][0][field] = value
    assert f"amdahl[0].{field}" in {p for p, _ in _problems(doc)}

"""The release gate's rules (decide/gate.py), each both ways over hand-made facts, and the rules files' validation."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from infercrane.decide.gate import GateRules, ReceiptFacts, evaluate, passed

NOW = datetime(2026, 12, 7, tzinfo=timezone.utc)


def _section(name, decision="accept", evidence="real-gpu-measurement", quality=None, recorded="2026-12-05T00:00:00Z"):
    return {"section": name, "decision_code": decision, "evidence_class": evidence, "recorded_at": recorded,
            "quality_gate": quality}


def _facts(*sections, path="poc.json", evidence="real-gpu-measurement", complete=True, model="M", revision="r1",
           recorded="2026-12-05T00:00:00Z", signatures=None):
    summary = {"evidence_class": evidence, "complete": complete, "incomplete_reason": None if complete else "stopped",
               "model": model, "model_revision": revision, "recorded_at": recorded, "sections": list(sections)}
    return ReceiptFacts(path=path, valid=True, summary=summary, signatures=signatures or {})


def _rules(*rules):
    return GateRules.model_validate({"schema_version": "infercrane.gate-rules/v1", "name": "t", "rules": list(rules)})


def _one(rule, *facts):
    results = evaluate(_rules(rule), list(facts), now=NOW)
    assert results[0].name == "receipts validate"
    return results[1]


def test_section_decision_both_ways_and_a_missing_section_fails():
    rule = {"name": "paired", "section": "paired*", "decision": ["accept"]}
    ok = _one(rule, _facts(_section("paired.h200", "accept"), _section("kernel.h200", "retain")))
    assert ok.passed and ok.value == "paired.h200 accept"
    bad = _one(rule, _facts(_section("paired.h200", "accept"), _section("paired.h100", "inconclusive")))
    assert not bad.passed and "paired.h100 inconclusive" in bad.value
    missing = _one(rule, _facts(_section("kernel.h200", "retain")))
    assert not missing.passed and missing.value == "no section matches"


def test_quality_gate_needs_one_that_ran_and_every_one_passed():
    rule = {"name": "quality", "quality_gate": "PASS"}
    passed_ = {"ran": True, "verdict": "PASS", "reason": "kept"}
    failed = {"ran": True, "verdict": "FAIL", "reason": "accuracy INFERIOR"}
    skipped = {"ran": False, "verdict": None, "reason": "dummy weights"}
    assert _one(rule, _facts(_section("paired.h200", quality=passed_), _section("kernel.h200"))).passed
    assert not _one(rule, _facts(_section("paired.h200", quality=passed_), _section("public.h200", quality=failed))
                    ).passed
    none = _one(rule, _facts(_section("paired.h200", quality=skipped)))
    assert not none.passed and none.value == "no section ran the quality gate"
    narrowed = {"name": "quality", "quality_gate": "PASS", "section": "paired*"}
    assert _one(narrowed, _facts(_section("paired.h200", quality=passed_), _section("public.h200", quality=failed))
                ).passed


def test_evidence_measured_refuses_a_functional_receipt_or_section():
    rule = {"name": "measured", "evidence": "measured"}
    assert _one(rule, _facts(_section("paired.h200"))).passed
    assert not _one(rule, _facts(_section("paired.cpu"), evidence="functional-check")).passed
    r = _one(rule, _facts(_section("kernel.cpu", evidence="cpu-functional-check")))
    assert not r.passed and "kernel.cpu cpu-functional-check" in r.value


def test_complete_both_ways():
    rule = {"name": "complete", "complete": True}
    assert _one(rule, _facts(_section("a"))).passed
    r = _one(rule, _facts(_section("a")), _facts(_section("b"), path="b.json", complete=False))
    assert not r.passed and "b.json: incomplete (stopped)" in r.value


def test_signed_by_both_ways():
    rule = {"name": "signed", "signed_by": "release.pub"}
    good = _facts(_section("a"), signatures={"release.pub": (True, "verified: key abc")})
    assert _one(rule, good).passed
    unsigned = _facts(_section("a"), path="u.json", signatures={"release.pub": (False, "unsigned")})
    r = _one(rule, good, unsigned)
    assert not r.passed and r.value == "u.json: unsigned"


def test_max_age_reads_the_oldest_section_too():
    rule = {"name": "recent", "max_age_days": 7}
    assert _one(rule, _facts(_section("a", recorded="2026-12-01T00:00:00Z"))).passed  # 6 days
    old = _one(rule, _facts(_section("a", recorded="2026-11-29T00:00:00Z"), recorded="2026-12-06T00:00:00Z"))
    assert not old.passed and "recorded 8.00 days ago" in old.value


def test_model_and_revision_both_ways():
    assert _one({"name": "m", "model": "M"}, _facts(_section("a"))).passed
    assert _one({"name": "m", "model": "M", "model_revision": "r1"}, _facts(_section("a"))).passed
    r = _one({"name": "m", "model": "M", "model_revision": "r2"}, _facts(_section("a")))
    assert not r.passed and "M r1" in r.value
    assert not _one({"name": "m", "model": "N"}, _facts(_section("a"))).passed


def test_an_invalid_receipt_fails_validation_and_every_rule_that_reads_it():
    bad = ReceiptFacts(path="x.json", valid=False, problems=["content_sha256: does not match"])
    results = evaluate(_rules({"name": "complete", "complete": True},
                              {"name": "paired", "section": "paired*", "decision": ["accept"]}),
                       [_facts(_section("paired.h200")), bad], now=NOW)
    assert [r.passed for r in results] == [False, False, False]
    assert results[0].value == "x.json: content_sha256: does not match"
    assert "x.json: not valid" in results[1].value and "x.json: not valid" in results[2].value
    assert not passed(results)


def test_every_rule_passing_passes_and_lines_carry_value_and_bound():
    results = evaluate(_rules({"name": "complete", "complete": True}), [_facts(_section("a"))], now=NOW)
    assert passed(results)
    assert results[1].line() == "PASS  complete: 1 complete (bound: every receipt complete)"


@pytest.mark.parametrize("rule,match", [
    ({"name": "x"}, "exactly one check"),
    ({"name": "x", "complete": True, "evidence": "measured"}, "exactly one check"),
    ({"name": "x", "decision": ["accept"]}, "decision needs section"),
    ({"name": "x", "section": "a*", "complete": True}, "section goes with"),
    ({"name": "x", "model_revision": "r"}, "exactly one check"),
    ({"name": "x", "decision": ["approve"], "section": "a"}, "decision"),
    ({"name": "x", "max_age_days": 0}, "greater than 0"),
    ({"name": "x", "complete": True, "colour": "red"}, "Extra inputs"),
])
def test_a_malformed_rule_is_refused(rule, match):
    with pytest.raises(ValidationError, match=match):
        _rules(rule)


def test_rule_names_are_unique():
    with pytest.raises(ValidationError, match="repeated: a"):
        _rules({"name": "a", "complete": True}, {"name": "a", "evidence": "measured"})


def test_sections_of_several_receipts_are_named_with_their_receipt():
    rule = {"name": "kernels", "section": "kernel", "decision": ["retain", "accept"]}
    r = _one(rule, _facts(_section("kernel", "retain"), path="a.json"), _facts(_section("kernel", "reject"), path="b.json"))
    assert not r.passed and r.value == "a.json:kernel retain, b.json:kernel reject"


def test_slos_met_reads_the_candidates_runs_and_needs_one_section_that_recorded_slos():
    rule = {"name": "slos", "slos_met": True}

    def sec(name, met, runs, subject="b"):
        s = _section(name)
        s["subject"] = subject
        s["slo"] = {"by_recipe": {subject: {"runs": runs, "met": met}, "a": {"runs": runs, "met": 0}}}
        return s

    ok = _one(rule, _facts(sec("paired.h200", 10, 10)))
    assert ok.passed and ok.value == "paired.h200 10 of 10 runs met"  # the baseline's misses do not count
    bad = _one(rule, _facts(sec("paired.h200", 10, 10), sec("public.h200", 4, 5)))
    assert not bad.passed and "public.h200 4 of 5 runs met" in bad.value
    none = _one(rule, _facts(_section("paired.h200")))
    assert not none.passed and none.value == "no section's candidate recorded SLOs"
    narrowed = {"name": "slos", "slos_met": True, "section": "paired*"}
    assert _one(narrowed, _facts(sec("paired.h200", 3, 3), sec("public.h200", 0, 3))).passed

"""``infercrane gate`` on a committed PoC receipt (the H100 one-sitting PoC): the shipped rules one passing, one
failing; a tampered receipt fails validation; signatures both ways; exit 2 for what cannot be read."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evidence import archived

from infercrane.cli import main

POC = archived("2026-12-06-h100-poc-one-sitting-seventh-try/poc-evidence.tar.xz/poc.json")
AT = ["--now", "2026-12-07T00:00:00Z"]  # the receipt was recorded on 2026-12-06


def test_the_shipped_example_passes_and_the_strict_set_fails_on_the_quality_gate(capsys):
    assert main(["gate", str(POC), "--rules", "release-example", *AT]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "PASS  receipts validate: 1 of 1 valid (bound: every receipt validates)"
    assert "PASS  paired A/B accepted: paired.h100 accept (bound: sections 'paired*': accept)" in out
    assert out[-1] == "gate release-example: PASS (7 of 7 rules passed)"
    assert main(["gate", str(POC), "--rules", "release-strict", *AT]) == 1
    out = capsys.readouterr().out
    assert "FAIL  quality kept: no section ran the quality gate" in out
    assert out.splitlines()[-1] == "gate release-strict: FAIL (7 of 8 rules passed)"


def test_json_output_and_age_as_of_a_later_time(capsys):
    assert main(["gate", str(POC), "--rules", "release-example", "--json", "--now", "2027-03-01T00:00:00Z"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is False and doc["rules"] == "release-example"
    recent = next(r for r in doc["results"] if r["name"] == "recent")
    assert recent["passed"] is False and "days ago" in recent["value"]


def test_a_tampered_receipt_fails_the_gate(tmp_path: Path, capsys):
    doc = json.loads(POC.read_text())
    doc["evidence"]["paired"]["h100"]["paired_aiperf"]["decision_code"] = "accept"  # not re-hashed: caught
    doc["recorded_at"] = "2026-12-06T01:00:00Z"
    bad = tmp_path / "poc.json"
    bad.write_text(json.dumps(doc))
    assert main(["gate", str(bad), "--rules", "release-example", *AT]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL  receipts validate: ")
    assert "not valid" in out


def _rules(tmp_path: Path, key: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text("schema_version: infercrane.gate-rules/v1\nname: signed\nrules:\n"
                    f"  - name: signed by release\n    signed_by: {key}\n")
    return path


def test_signed_by_verifies_with_the_named_key(tmp_path: Path, capsys):
    pytest.importorskip("cryptography")
    from infercrane.receipts import signing

    key, _pub = signing.keygen(tmp_path / "keys", "release")
    other, _ = signing.keygen(tmp_path / "other", "other")
    receipt = tmp_path / "poc.json"
    shutil.copyfile(POC, receipt)
    rules = _rules(tmp_path, "keys/release.pub")  # relative to the rules file
    assert main(["gate", str(receipt), "--rules", str(rules)]) == 1  # unsigned
    assert "FAIL  signed by release:" in capsys.readouterr().out
    signing.sign(receipt, key)
    assert main(["gate", str(receipt), "--rules", str(rules)]) == 0
    assert "PASS  signed by release: verified: key" in capsys.readouterr().out
    signing.envelope_path(receipt).unlink()
    signing.sign(receipt, other)
    assert main(["gate", str(receipt), "--rules", str(rules)]) == 1
    assert "not by" in capsys.readouterr().out


def test_what_cannot_be_read_is_exit_2(tmp_path: Path, capsys):
    not_json = tmp_path / "x.json"
    not_json.write_text("{")
    assert main(["gate", str(not_json), "--rules", "release-example"]) == 2
    assert main(["gate", str(tmp_path / "missing.json"), "--rules", "release-example"]) == 2
    assert main(["gate", str(POC), "--rules", "no-such-rules"]) == 2
    bad_rules = tmp_path / "bad.yaml"
    bad_rules.write_text("schema_version: infercrane.gate-rules/v1\nname: b\nrules:\n  - name: r\n")
    assert main(["gate", str(POC), "--rules", str(bad_rules)]) == 2
    assert main(["gate", str(POC), "--rules", "release-example", "--now", "yesterday"]) == 2
    assert main(["gate", str(POC), "--rules", str(_rules(tmp_path, "nokey.pub"))]) == 2
    err = capsys.readouterr().err
    assert "exactly one check" in err


def test_a_bug_inside_the_gate_is_not_read_as_its_fail(monkeypatch, capsys):
    """An exception InferCrane did not raise on purpose prints its traceback and exits 70 from the program, never the
    1 of a FAIL."""
    from infercrane.cli import run
    from infercrane.decide import gate as rules
    from infercrane.errors import INTERNAL_ERROR_EXIT

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a rule divided by zero")

    monkeypatch.setattr(rules, "evaluate", broken)
    assert run(["gate", str(POC), "--rules", "release-example", *AT]) == INTERNAL_ERROR_EXIT == 70
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError: a rule divided by zero" in err
    assert err.splitlines()[-1].startswith("infercrane: error: internal error (ZeroDivisionError)")

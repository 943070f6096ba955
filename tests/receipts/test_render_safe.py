"""Nothing a receipt holds reaches the terminal as control: escape sequences are shown as '?', rich markup as text."""
from __future__ import annotations

from rich.console import Console

from infercrane.report.console import render_diff, render_show, safe


def test_escape_sequences_and_markup_are_shown_not_obeyed() -> None:
    doc = {"schema_version": "x", "reason": "\x1b[2J\x1b[31mFAKE: ACCEPTED\x1b[0m", "note[/oops]": "[bold]x[/bold]",
           "runs": [{"recipe": "\x1b]0;title\x07eager", "[red]k": 1}]}
    con = Console(record=True, width=200, force_terminal=True)
    con.print(render_show(doc, show_all=True))
    con.print(render_diff(doc, {**doc, "reason": "plain"}, "a\x1b[2J.json", "[b]b.json", show_all=True))
    out = con.export_text()
    assert "\x1b" not in out and "\x07" not in out
    assert "?[2J?[31mFAKE: ACCEPTED?[0m" in out and "[bold]x[/bold]" in out and "note[/oops]" in out
    assert "[b]b.json" in out and "[red]k" in out


def test_safe_keeps_text_and_newlines() -> None:
    assert safe("a\tb\nc é") == "a\tb\nc é" and safe("\r\x1b") == "??"


def test_an_incomplete_receipt_cannot_accept() -> None:
    import json
    from pathlib import Path

    from infercrane.hashing import HASH_FIELD, content_hash
    from infercrane.receipts.validate import check_document

    path = Path(__file__).parents[2] / "docs" / "benchmarks" / "2026-12-01-h200-serving" / "seed-paired-eager-vs-compiled.json"
    doc = json.loads(path.read_text())
    assert doc["paired_aiperf"]["decision_code"] == "accept" and check_document(doc)[1] == []
    doc.update(complete=False, incomplete_reason="interrupted")
    doc.pop(HASH_FIELD)
    doc[HASH_FIELD] = content_hash(doc)
    assert any(p == "paired_aiperf.decision_code" for p, _ in check_document(doc)[1])


def test_a_statistic_s_method_label_must_be_its_policy_s() -> None:
    import json
    from pathlib import Path

    from infercrane.decide.serving import interval_method, verdict_rule
    from infercrane.hashing import HASH_FIELD, content_hash
    from infercrane.receipts.validate import check_document

    path = Path(__file__).parents[2] / "docs" / "benchmarks" / "2026-12-01-h200-serving" / "seed-paired-eager-vs-compiled.json"
    doc = json.loads(path.read_text())
    policy = doc["policy"]
    for s in doc["paired_aiperf"]["statistics"]:
        s.update(interval_method=interval_method(policy), test_method="Mann-Whitney U, two-sided, exact-permutation",
                 verdict_rule=verdict_rule(policy))

    def problems(d):
        d = {k: v for k, v in d.items() if k != HASH_FIELD}
        d[HASH_FIELD] = content_hash(d)
        return check_document(d)[1]

    assert problems(doc) == []
    doc["paired_aiperf"]["statistics"][0]["interval_method"] = "BCa bootstrap, 10 resamples"
    assert any(p.endswith("interval_method") for p, _ in problems(doc))


def test_diff_shows_a_change_in_the_second_of_two_records_that_share_their_identity() -> None:
    from infercrane.report.console import diff_rows

    a = {"engines": [{"recipe": "eager", "pid": 1}, {"recipe": "eager", "pid": 2}]}
    b = {"engines": [{"recipe": "eager", "pid": 1}, {"recipe": "eager", "pid": 3}]}
    changed = [r for r in diff_rows(a, b) if r[1] != r[2]]
    assert changed and changed[0][0] == "engines[recipe=eager #2].pid" and changed[0][1:3] == (2, 3)


def test_the_ledger_tells_a_workaround_applied_from_a_finding_observed() -> None:
    import pytest
    from pydantic import ValidationError

    from infercrane.receipts.models_v2 import RuntimeFindingV2

    applied = RuntimeFindingV2(finding="f", workaround="w")
    assert applied.status == "applied" and applied.evidence is None
    with pytest.raises(ValidationError, match="quotes its evidence"):
        RuntimeFindingV2(finding="f", workaround="w", status="observed")
    assert RuntimeFindingV2(finding="f", workaround="w", status="observed", evidence="engine log: x").evidence


def test_records_inside_records_are_tables_of_their_own_not_cells():
    doc = {"engines": [{"recipe": "a", "kernels": []},
                       {"recipe": "b", "kernels": [{"provider": "infercrane_triton", "calls": 16017,
                                                    "checks": [{"shape": "8x1024 bfloat16", "passed": True}]}]}]}
    con = Console(width=120, record=True, color_system=None)
    con.print(render_show(doc, show_all=True))
    text = con.export_text()
    assert "engines[1].kernels" in text and "infercrane_triton" in text and "16017" in text
    assert "engines[1].kernels[0].checks" in text and "8x1024 bfloat16" in text
    assert "{'provider'" not in text and "'checks'" not in text  # no record printed as a Python literal in a cell
    con = Console(width=120, record=True, color_system=None)
    con.print(render_show(doc))  # the summary: records two deep are counted, not listed
    text = con.export_text()
    assert "engines[1].kernels" in text and "infercrane_triton" in text and "16017" in text
    assert "[1 record]" in text and "8x1024 bfloat16" not in text and "'checks'" not in text

"""``kernel agree``: two screens of one op, cell by cell, agree when their ranges of trial medians overlap."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from evidence import archived

from infercrane.cli import main
from infercrane.kernels.agreement import compare_screens

TWO_OPS = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz")


def _doc(name: str) -> dict:
    return json.loads((TWO_OPS / name).read_text())


def test_a_screen_agrees_with_itself_in_every_cell_it_can_compare():
    doc = _doc("rms_norm.json")
    result = compare_screens(doc, copy.deepcopy(doc))
    assert result.compared and not result.disagreeing
    assert all(c.ratio_b_over_a == pytest.approx(1.0) for c in result.compared)
    # a cell the screen flagged is compared on the primary timer, counted apart, and agrees with itself too
    flagged = result.compared_flagged
    assert flagged and all(c.flagged_by == "both" and c.note.startswith("flagged by both") for c in flagged)
    assert all(c.agree for c in flagged) and not result.disagreeing_flagged
    assert not set(map(id, flagged)) & set(map(id, result.compared))
    assert result.a_decision == result.b_decision


def test_a_flagged_cell_that_moved_disagrees_apart_from_the_clean_ones():
    """A flagged cell twice as slow in B: named among the flagged disagreements; the clean cells' count is
    untouched, so a flag never turns into a disagreement of the measurement the screens stand behind."""
    a = _doc("rms_norm.json")
    b = copy.deepcopy(a)
    impl = next(i for i in b["result"]["implementations"] if i["key"] == "torch_compile")
    cell = next(c for c in impl["timings"] if c["flags"])
    for block in cell["blocks"]:
        block["samples_us"] = [2 * t for t in block["samples_us"]]
    result = compare_screens(a, b)
    [bad] = result.disagreeing_flagged
    assert (bad.impl, bad.rows, bad.mode, bad.flagged_by) == ("torch_compile", cell["rows"], cell["mode"], "both")
    assert not result.disagreeing
    assert result.summary().startswith(f"{len(result.compared)} of {len(result.compared)} compared cells agree "
                                       "within their runs' spread; flagged by a screen, compared on the primary timer: "
                                       f"{len(result.compared_flagged) - 1} of {len(result.compared_flagged)} agree")


def test_a_cell_with_one_trial_on_a_side_is_not_compared():
    a = _doc("rms_norm.json")
    b = copy.deepcopy(a)
    impl = next(i for i in b["result"]["implementations"] if i["key"] == "triton")
    cell = next(c for c in impl["timings"] if c["mode"] == "graph" and not c["flags"])
    cell["blocks"] = cell["blocks"][:1]
    result = compare_screens(a, b)
    [lone] = result.not_compared
    assert (lone.impl, lone.rows, lone.mode, lone.agree) == ("triton", cell["rows"], "graph", None)
    assert lone.note.startswith("1 trial(s) on a side")
    assert result.summary().endswith("; 1 not compared")


def test_a_cell_twice_as_slow_in_every_trial_disagrees_and_only_it():
    a = _doc("rms_norm.json")
    b = copy.deepcopy(a)
    impl = next(i for i in b["result"]["implementations"] if i["key"] == "triton")
    cell = next(c for c in impl["timings"] if c["mode"] == "graph" and not c["flags"])
    for block in cell["blocks"]:
        block["samples_us"] = [2 * t for t in block["samples_us"]]
    result = compare_screens(a, b)
    [bad] = result.disagreeing
    assert (bad.impl, bad.rows, bad.mode) == ("triton", cell["rows"], "graph")
    assert bad.ratio_b_over_a == pytest.approx(2.0)
    assert len(result.compared) == len(compare_screens(a, a).compared)


def test_screens_of_two_ops_are_not_compared():
    with pytest.raises(ValueError, match="differ in op"):
        compare_screens(_doc("rms_norm.json"), _doc("fused_add_rmsnorm.json"))


def _another_run_of_the_same_measurement(tmp_path: Path) -> Path:
    """rms_norm.json as another receipt (another run id, hashed again) holding the same measurement."""
    from infercrane.hashing import HASH_FIELD, content_hash

    doc = _doc("rms_norm.json")
    doc["app_id"] = doc["provenance"]["run_id"] = "another-run"
    doc = {k: v for k, v in doc.items() if k != HASH_FIELD}
    path = tmp_path / "rms_norm.again.json"
    path.write_text(json.dumps({**doc, HASH_FIELD: content_hash(doc)}))
    return path


def test_the_command_exits_0_on_agreement_and_writes_the_cells(tmp_path, capsys):
    out = tmp_path / "agree.json"
    assert main(["kernel", "agree", str(TWO_OPS / "rms_norm.json"), str(_another_run_of_the_same_measurement(tmp_path)),
                 "--json-out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "compared cells agree" in text and "the same" in text
    assert "compared on the primary timer" in text and "(flagged by both)" in text
    doc = json.loads(out.read_text())
    assert doc["method"].startswith("per cell (implementation, rows, timing mode)") and doc["cells"]


def test_the_command_refuses_two_ops(capsys):
    assert main(["kernel", "agree", str(TWO_OPS / "rms_norm.json"), str(TWO_OPS / "fused_add_rmsnorm.json")]) == 2
    assert "differ in op" in capsys.readouterr().err


@pytest.mark.parametrize("copy_of_it", [False, True], ids=["same file", "same content"])
def test_the_command_refuses_a_receipt_compared_with_itself(copy_of_it, tmp_path, capsys):
    a = TWO_OPS / "rms_norm.json"
    b = tmp_path / "copy.json" if copy_of_it else a
    if copy_of_it:
        b.write_bytes(a.read_bytes())
    assert main(["kernel", "agree", str(a), str(b)]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"infercrane: error: {a} and {b}: are the same receipt (content sha256 ")
    assert "agrees with itself in every cell" in line and "compared cells agree" not in captured.out


def test_one_measurement_decided_twice_is_said_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    b = _another_run_of_the_same_measurement(tmp_path)
    assert main(["kernel", "agree", str(TWO_OPS / "rms_norm.json"), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"warning: {TWO_OPS / 'rms_norm.json'} and {b} hold one measurement (run ")
    assert lines[0].endswith("every cell agrees by construction; only the decisions are compared")

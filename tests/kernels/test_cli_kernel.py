"""`infercrane kernel screen` and `kernel decide` end to end on the CPU: a functional screen with a user candidate,
labelled as such, with a receipt that validates; a cheating candidate is rejected; a re-decision keeps the evidence."""
from __future__ import annotations

from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.receipts.validate import load_receipt

FIXTURES = Path(__file__).parent / "fixtures"


def _screen(tmp_path: Path, candidate: str, name: str) -> dict:
    out = tmp_path / name / "kernel-screen.json"
    rc = main(["kernel", "screen", "--device", "cpu", "--rows", "1", "8", "--impls", "eager", "--checks", "2",
               "--model", "Qwen/Qwen3-0.6B", "--candidate", candidate, "--out", str(out)])
    assert rc == 0
    return load_receipt(out).document


def test_functional_screen_of_a_user_candidate(tmp_path: Path, capsys) -> None:
    doc = _screen(tmp_path, f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm", "good")
    assert "FUNCTIONAL RUN" in capsys.readouterr().out
    assert doc["evidence_class"] == "cpu-functional-check"
    assert doc["candidate"]["key"] == "user" and doc["candidate"]["in_place"] is False
    assert doc["decision_code"] == "inconclusive" and "functional check only" in doc["decision"]
    assert doc["timings"] == [] and doc["measurements"] == []
    user = [c for c in doc["correctness"] if c["implementation"] == "user"]
    assert [c["rows"] for c in user] == [1, 8] and all(c["passed"] for c in user)
    assert doc["model_shape_source"]["hidden_size"] == 1024


def test_functional_screen_compiles_the_cuda_candidate_to_ptx(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager", "cuda", "--checks", "1",
                 "--out", str(out)]) == 0
    cuda = next(i for i in load_receipt(out).document["implementations"] if i["key"] == "cuda")
    assert cuda["status"] == "skipped"
    assert any("compiled to PTX for compute_90" in n for n in cuda["details"]["notes"])


def test_cheating_candidate_is_rejected_naming_the_bad_index(tmp_path: Path) -> None:
    doc = _screen(tmp_path, f"{FIXTURES / 'cheaters.py'}:first_row_only", "cheat")
    assert doc["decision_code"] == "reject"
    bad = [c for c in doc["correctness"] if c["implementation"] == "user" and not c["passed"]]
    assert [c["rows"] for c in bad] == [8]  # one row is all it computes: rows=1 passes, rows=8 fails at row 1
    assert bad[0]["first_bad_index"][0] == 1 and bad[0]["mismatched"] > 0


def test_decide_again_keeps_the_measuring_machine(tmp_path: Path) -> None:
    doc = _screen(tmp_path, f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm", "again")
    folder = tmp_path / "again"
    out = tmp_path / "decided.json"
    assert main(["kernel", "decide", str(folder / "screen-result.json"), "--measured-receipt",
                 str(folder / "kernel-screen.json"), "--out", str(out)]) == 0
    new = load_receipt(out).document
    assert new["app_id"] == doc["app_id"] and new["hardware"] == doc["hardware"]
    assert new["decision"] == doc["decision"] and new["correctness"] == doc["correctness"]
    assert new["provenance"]["config"]["decided_from"]["receipt_sha256"] == doc["content_sha256"]


def test_decide_refuses_a_foreign_screen_result(tmp_path: Path) -> None:
    _screen(tmp_path, f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm", "one")
    (tmp_path / "junk.json").write_text("{}")
    rc = main(["kernel", "decide", str(tmp_path / "junk.json"), "--measured-receipt",
               str(tmp_path / "one" / "kernel-screen.json"), "--out", str(tmp_path / "x.json")])
    assert rc == 2 and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("args, needle", [
    (["--rows", "0"], "rows"),
    (["--model", "Nope/Model"], "Nope/Model"),
    (["--candidate", "missing.py:fn"], "missing.py"),
])
def test_bad_input_fails_before_any_kernel_runs(tmp_path: Path, capsys, args: list[str], needle: str) -> None:
    rc = main(["kernel", "screen", "--device", "cpu", "--out", str(tmp_path / "k.json"), *args])
    assert rc == 2
    captured = capsys.readouterr()
    assert needle in captured.err + captured.out
    assert not (tmp_path / "k.json").exists()

"""The closing summary of `kernel screen` / `kernel decide`, rendered for committed H200 receipts into a 100-column
console: one table with every implementation's status, correctness and verdict (each candidate's decision code and
its verdicts against each baseline at the decision rows, "baseline" for a baseline), a µs table that keeps every
timed implementation, lines that fit 100 columns, the decision and reason last; a failed or skipped implementation
shows its status and the first line of why, as text, never as markup."""
from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from infercrane.commands.kernel import _print_summary

REPO = Path(__file__).resolve().parents[2]
RECEIPTS = [REPO / "docs/benchmarks/2026-12-01-h200-kernel-two-ops/fused_add_rmsnorm.json",
            REPO / "docs/benchmarks/2026-12-01-h200-kernel-two-ops/rms_norm.json",
            REPO / "docs/benchmarks/2026-12-01-h200-kernel-in-vllm/kernel-cuda.json"]
WIDTH = 100


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _render(doc: dict[str, Any]) -> str:
    con = Console(file=io.StringIO(), width=WIDTH)
    _print_summary(con, doc)
    return con.file.getvalue()


def _words(text: str) -> str:
    return " ".join(text.split())


def _table_rows(out: str) -> dict[str, list[str]]:
    """The implementations table, row by row: key -> its cells, each cell's lines joined (a folded cell reads as
    one text again)."""
    lines = out.splitlines()
    start = next(n for n, ln in enumerate(lines) if ln.startswith("implementations"))
    rows: dict[str, list[list[str]]] = {}
    current: list[list[str]] | None = None
    for ln in lines[start + 1:]:
        if ln.startswith("└"):
            break
        if not ln.startswith("│"):
            continue
        cells = [c.strip() for c in ln.split("│")[1:-1]]
        if cells[0]:
            current = rows.setdefault(cells[0], [[] for _ in cells])
        assert current is not None, out
        for parts, cell in zip(current, cells):
            if cell:
                parts.append(cell)
    return {k: [_words(" ".join(p)) for p in cells] for k, cells in rows.items()}


def _decisions(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each candidate's (decision code, decision) as the receipt states them."""
    out = {doc["candidate"]["key"]: (doc["decision_code"], doc["decision"])}
    out.update({o["implementation"]: (o["decision_code"], o["decision"]) for o in doc["other_candidates"]})
    return out


@pytest.mark.parametrize("path", RECEIPTS, ids=lambda p: p.stem)
def test_one_table_lists_every_implementation_with_its_status_and_verdict(path: Path) -> None:
    doc = _load(path)
    out = _render(doc)
    rows = _table_rows(out)
    impls = doc["result"]["implementations"]
    assert list(rows) == [i["key"] for i in impls], out
    decisions = _decisions(doc)
    assert set(decisions) == {i["key"] for i in impls if i["kind"] == "candidate"}
    for i in impls:
        key, kind, status, correctness, verdict = rows[i["key"]]
        assert (kind, status) == (i["kind"], i["status"]), out
        assert correctness.startswith("correct at rows " + ", ".join(str(c["rows"]) for c in i["correctness"]))
        flagged = sum(1 for c in i["timings"] if c["flags"])
        assert f"{len(i['timings'])} cells timed, {flagged} flagged" in correctness, correctness
        if i["kind"] == "baseline":
            assert verdict.startswith("baseline"), verdict
        else:
            code, decision = decisions[i["key"]]
            assert verdict.startswith(f"{code}: {_words(decision)}"), verdict
    assert max(len(ln) for ln in out.splitlines()) <= WIDTH, out


@pytest.mark.parametrize("path", RECEIPTS, ids=lambda p: p.stem)
def test_the_decision_and_its_reason_come_last(path: Path) -> None:
    doc = _load(path)
    lines = _render(doc).splitlines()
    at = max(n for n, ln in enumerate(lines) if ln.startswith("decision: "))
    assert at > max(n for n, ln in enumerate(lines) if ln.startswith("└"))
    assert _words(lines[at]) == _words(f"decision: {doc['decision']}")
    assert _words(" ".join(lines[at + 1:])) == _words(f"reason: {doc['reason']}")


def test_each_candidate_gets_its_verdicts_against_each_baseline_at_the_decision_rows() -> None:
    rows = _table_rows(_render(_load(RECEIPTS[0])))  # fused_add_rmsnorm: triton (the receipt's) and cuda
    # the family verdicts the receipt's reasons name: faster at 1, 512; same at 8, 32, 128 (and ambiguous at 128)
    assert "vs torch_compile: FASTER at 1, 512; SAME at 8, 32, 128" in rows["triton"][4]
    assert "vs torch_compile: FASTER at 1, 512; SAME at 8, 32; AMBIGUOUS at 128" in rows["cuda"][4]
    for key in ("triton", "cuda"):
        assert "vs eager: FASTER at 1, 8, 32, 128, 512" in rows[key][4]
        assert "2048" not in rows[key][4]  # measured, not decided on
    # the receipt's Amdahl ceilings are taken against torch.compile at every decision row: said of it, of no other
    assert "fastest counted baseline at rows 1, 8, 32, 128, 512" in rows["torch_compile"][4]
    assert rows["eager"][4] == rows["vllm_vendor"][4] == "baseline"


def test_a_verdict_the_family_adjustment_changed_shows_both() -> None:
    rows = _table_rows(_render(_load(RECEIPTS[1])))  # rms_norm: slower at 1 by its own interval, not after Holm
    assert "vs torch_compile: AMBIGUOUS (own SLOWER) at 1; SAME at 8, 32, 128, 512" in rows["triton"][4]


def test_flagged_comparisons_read_flagged_and_the_times_are_marked() -> None:
    doc = _load(RECEIPTS[2])  # kernel-cuda: timer disagreements at rows 1-128
    out = _render(doc)
    verdict = _table_rows(out)["cuda"][4]
    assert verdict.endswith("vs torch_compile: FLAGGED at 1, 8, 32, 128"), verdict
    assert "4096" not in verdict and "1024" not in verdict
    times = out[:out.index("implementations")]
    header = next(ln for ln in times.splitlines() if "rows" in ln)
    assert "torch_compile" in header and "cuda" in header
    flagged = {c["rows"] for i in doc["result"]["implementations"] for c in i["timings"]
               if c["mode"] == doc["measurements_timing_mode"] and c["flags"]}
    for ln in times.splitlines():
        cells = [c.strip() for c in ln.split("│")[1:-1]]
        if cells and cells[0].isdigit():
            assert any(c.endswith("*") for c in cells[1:]) == (int(cells[0]) in flagged), ln


def test_every_timed_implementation_keeps_its_times() -> None:
    doc = _load(RECEIPTS[0])
    out = _render(doc)
    times = out[:out.index("implementations")]
    header = next(ln for ln in times.splitlines() if "rows" in ln)
    assert [c.strip() for c in header.split("┃")[1:-1]] == ["rows"] + [i["key"] for i in doc["result"]["implementations"]]
    triton_1 = next(c for c in doc["result"]["implementations"][3]["timings"] if c["rows"] == 1 and c["mode"] == "graph")
    assert f"{triton_1['summary']['median']:.3f}" in times


def test_a_skipped_and_a_failed_implementation_show_status_and_first_line_of_why() -> None:
    doc = copy.deepcopy(_load(RECEIPTS[0]))
    impls = {i["key"]: i for i in doc["result"]["implementations"]}
    impls["cuda"].update(status="skipped", available=False, skip_reason="no GPU: [bold]cuda[/bold] needs one\n"
                         "second line", correctness=[], timings=[])
    impls["vllm_vendor"].update(status="failed", failure="crashed", error="worker died [red]x[/red]\nTraceback …",
                                correctness=impls["vllm_vendor"]["correctness"][:2], timings=[])
    out = _render(doc)
    rows = _table_rows(out)
    assert rows["cuda"][2] == "skipped"
    assert rows["cuda"][3] == "no GPU: [bold]cuda[/bold] needs one (… more in the receipt)"
    assert rows["vllm_vendor"][2] == "failed"
    assert rows["vllm_vendor"][3] == ("correct at rows 1, 8; then crashed: worker died [red]x[/red] "
                                      "(… more in the receipt)")
    assert "second line" not in out and "Traceback" not in out  # first lines only: the receipt keeps the rest
    assert max(len(ln) for ln in out.splitlines()) <= WIDTH, out


def test_a_functional_screen_has_no_times_and_says_why_there_are_no_verdicts() -> None:
    doc = copy.deepcopy(_load(RECEIPTS[2]))
    doc.update(measurements_timing_mode=None, measurements=[], amdahl=[])
    doc["result"].update(run_kind="functional", comparisons=[])
    for i in doc["result"]["implementations"]:
        i["timings"] = []
    out = _render(doc)
    assert "µs per call" not in out and "no speed verdicts: nothing was timed" in out
    assert _table_rows(out)["cuda"][4].startswith("inconclusive: ")

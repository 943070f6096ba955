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

from evidence import archived

from infercrane.commands.kernel import _print_summary

RECEIPTS = [archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json"),
            archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/rms_norm.json"),
            archived("2026-12-01-h200-kernel-in-vllm/evidence-compiled-cuda.tar.xz/apply/kernel.json")]
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


# --------------------------------------------------------------------------------------------- what the timing rests on

EXECUTOR = archived("2026-12-02-h200-executors/receipts.tar.xz/local-fused_add_rmsnorm.h200.json")
RERUN = "— rerun, or decide on another timing mode (--policy with timing_mode)"


def _widened(path: Path) -> dict[str, Any]:
    """The committed receipt as a new screen writes it: its result compared under the flag rule 'widen', and every
    field derived from it derived again."""
    from infercrane.decide.policy import KernelPolicy
    from infercrane.kernels.harness.compare import with_comparisons
    from infercrane.kernels.receipt import derive
    from infercrane.receipts.screen_result import ScreenResult

    doc = copy.deepcopy(_load(path))
    pol = KernelPolicy.model_validate(doc["policy"])
    res = with_comparisons(ScreenResult.model_validate(doc["result"]), pol, flag_rule="widen")
    doc.update(derive(res, pol, None), result=res.model_dump(mode="json"))
    return doc


def _basis(out: str) -> dict[str, str]:
    """Each candidate's line on its decision comparisons, unwrapped, by candidate."""
    import re

    text = _words(out[out.index("verdicts at the decision rows"):out.index("decision: ")])
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"\b(triton|cuda): (?:\d+ of|all) ", text)]
    return {k: text[a:b].strip() for (a, k), (b, _) in zip(starts, starts[1:] + [(len(text), "")])}


def test_one_line_per_candidate_says_what_its_decision_comparisons_rest_on() -> None:
    out = _render(_load(EXECUTOR))  # as committed: flag rule 'void', every decision comparison flagged
    lines = _basis(out)
    for key in ("triton", "cuda"):
        assert lines[key].startswith(
            f"{key}: 0 of 15 decision comparisons rest on clean timing; 0 keep their verdict with the interval "
            f"widened by the timers' disagreement; 15 carry no verdict (flagged) {RERUN}"), lines[key]
    at = out.index("decision: ")
    assert all(out.index(f"{k}: 0 of 15") < at for k in ("triton", "cuda"))  # before the decision and its reason
    assert max(len(ln) for ln in out.splitlines()) <= WIDTH, out
    # a clean screen says so in a few words
    clean = _basis(_render(_load(RECEIPTS[0])))
    assert clean["triton"].startswith("triton: all 15 decision comparisons rest on clean timing")


def test_under_the_widen_rule_the_line_counts_the_verdicts_the_widened_interval_kept() -> None:
    doc = _widened(EXECUTOR)
    family = [c for c in doc["result"]["comparisons"] if c["candidate"] == "triton" and c.get("family")]
    kept = sum(1 for c in family if c["flags"] and c.get("widened") and c["verdict"] != "FLAGGED")
    voided = sum(1 for c in family if c["verdict"] == "FLAGGED")
    assert (len(family), kept, voided) == (15, 13, 2)
    line = _basis(_render(doc))["triton"]
    assert line == (f"triton: 0 of 15 decision comparisons rest on clean timing; 13 keep their verdict with the "
                    f"interval widened by the timers' disagreement; 2 carry no verdict (flagged) {RERUN}")
    # and the decision's reason names the flagged ones by count and kind, not flag by flag
    assert len(doc["reason"]) < 1200 and "flagged: 2 comparisons; timer_disagreement up to" in doc["reason"]


def test_a_failed_candidate_is_worded_by_its_failure_kind() -> None:
    doc = copy.deepcopy(_load(RECEIPTS[0]))
    impls = {i["key"]: i for i in doc["result"]["implementations"]}
    impls["cuda"].update(status="failed", failure="timer_fault", timings=[],
                         error="timer_fault: trial 2: the worker's samples add up to 812 us\nmore")
    impls["triton"].update(status="failed", failure="timeout", error="no reply in 120 s", timings=[])
    rows = _table_rows(_render(doc))
    assert rows["cuda"][3].endswith("then timer fault: trial 2: the worker's samples add up to 812 us (… more in "
                                    "the receipt)")
    assert rows["triton"][3].endswith("then timed out: no reply in 120 s")


# --------------------------------------------------------------------------------------------- host cost per call


@pytest.fixture
def launch_doc(monkeypatch) -> dict[str, Any]:
    """A receipt of a launch-mode screen (a synthetic device: eager's host time bounds its launch time at 8 rows,
    the candidate's does not), as `kernel screen` writes it."""
    from datetime import datetime, timezone

    from test_harness_runner import GOOD, _synthetic_device

    from infercrane.decide.policy import load_policy
    from infercrane.hashing import HASH_FIELD, config_hash, content_hash
    from infercrane.kernels.harness.runner import screen
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec
    from infercrane.kernels.receipt import build_document

    _synthetic_device(monkeypatch, [])
    spec = FusedAddRMSNormSpec(hidden_size=128, eps=1e-6, rows=(8, 64), num_layers=28)
    res = screen(spec, ["eager"], modes=["launch", "graph"], trials=3, samples_per_trial=4, candidate=GOOD,
                 isolate=False)
    prov = {"infercrane_version": "0.1.0", "git_commit": None, "git_dirty": None, "config": {},
            "command_line": ["infercrane", "kernel", "screen"], "config_sha256": config_hash({}), "run_id": "r1",
            "hardware": {"gpu": "synthetic", "compute_capability": "9.0", "cpu": "x", "cpu_count": 2, "host": "h",
                         "platform": "linux"},
            "software": {"torch": "2"}, "recorded_at": datetime.now(timezone.utc).isoformat()}
    doc = build_document(res, load_policy("kernel"), provenance=prov, model_source="test")
    doc[HASH_FIELD] = content_hash(doc)
    return doc


def _host_rows(out: str) -> list[list[str]]:
    """The host cost table's rows (implementation, rows, launch µs, host µs/call, host-bound), the implementation
    carried down from its first line."""
    lines = out.splitlines()
    start = next(n for n, ln in enumerate(lines) if ln.startswith("host cost per call, launch mode"))
    rows, key = [], ""
    for ln in lines[start + 1:]:
        if ln.startswith("└"):
            break
        if ln.startswith("│"):
            cells = [c.strip() for c in ln.split("│")[1:-1]]
            key = cells[0] or key
            rows.append([key, *cells[1:]])
    return rows


def test_the_summary_shows_each_implementations_host_cost_beside_its_launch_time(launch_doc) -> None:
    out = _render(launch_doc)
    assert "host µs/call: the host's time to issue one call" in _words(out)
    got = _host_rows(out)
    want = [[i["key"], str(c["rows"]), f"{c['summary']['median']:.3f}" + ("*" if c["flags"] else ""),
             f"{c['host_summary']['median']:.2f}", "yes" if c["host_bound"] else "no"]
            for i in launch_doc["result"]["implementations"] for c in sorted(i["timings"], key=lambda c: c["rows"])
            if c["mode"] == "launch"]
    assert got == want and len(got) == 4
    assert [r[4] for r in got] == ["yes", "no", "no", "no"]  # eager at 8 rows: the host bounds its launch time
    assert out.index("µs per call, graph mode") < out.index("host cost per call") < out.index("implementations")
    assert max(len(ln) for ln in out.splitlines()) <= WIDTH, out


@pytest.mark.parametrize("path", RECEIPTS, ids=lambda p: p.stem)
def test_a_receipt_from_before_host_times_shows_no_host_table(path: Path) -> None:
    out = _render(_load(path))
    assert "µs per call" in out and "host cost per call" not in out and "host µs/call" not in out


def test_receipt_show_shows_the_same_times_with_the_host_cost(launch_doc, monkeypatch) -> None:
    from infercrane.report.console import render_show

    con = Console(file=io.StringIO(), width=WIDTH)
    con.print(render_show(launch_doc))
    out = con.file.getvalue()
    lines = out.splitlines()
    assert lines.index("times") > lines.index("conditions") and lines.index("times") < lines.index("evidence")
    assert _host_rows(out) == _host_rows(_render(launch_doc))
    assert max(len(ln) for ln in lines) <= WIDTH, out
    # a committed receipt: the times in the decision's mode, no host table
    con = Console(file=io.StringIO(), width=WIDTH)
    con.print(render_show(_load(RECEIPTS[0])))
    committed = con.file.getvalue()
    assert "µs per call, graph mode, median" in committed and "host cost per call" not in committed


# --------------------------------------------------------------------------------------------- an interrupted screen


@pytest.mark.parametrize("why, code", [
    ("interrupted (Ctrl-C) after 61 of 90 steps; the implementations' unfinished visits are not in this result", 130),
    ("terminated by SIGTERM after 61 of 90 steps; the implementations' unfinished visits are not in this result", 143),
])
def test_an_interrupted_screen_writes_its_partial_receipt_and_exits_130(tmp_path: Path, monkeypatch, capsys, why,
                                                                        code) -> None:
    """The runner keeps what finished when Ctrl-C or SIGTERM stops it (``result.interrupted``): the receipt is written
    as usual, the summary printed, one line says where the partial receipt is, and the exit code is the
    interruption's (130 Ctrl-C, 143 SIGTERM)."""
    from infercrane.cli import main
    from infercrane.kernels.harness import runner
    from infercrane.receipts.screen_result import ScreenResult
    from infercrane.receipts.validate import load_receipt

    partial = ScreenResult.model_validate(_load(RECEIPTS[0])["result"]).model_copy(update={"interrupted": why})
    monkeypatch.setattr(runner, "screen", lambda *a, **k: partial)  # what the runner returns when stopped
    # the machine the result was measured on, as the receipt records it (its device is an H200's)
    monkeypatch.setattr("infercrane.env.capture.hardware", lambda **k: _load(RECEIPTS[0])["hardware"])
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # (so the screen does not set it for the rest of the tests)
    out = tmp_path / "partial.json"
    rc = main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager,triton", "--model",
               "Qwen/Qwen3-0.6B", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == code, captured.err
    assert captured.err.strip().splitlines()[-1] == f"interrupted: {why}; partial receipt: {out}"
    assert "decision: " in captured.out and "receipt: " not in captured.out.splitlines()[-1]
    doc = load_receipt(out).document  # written, and it validates
    assert doc["result"]["interrupted"] == why

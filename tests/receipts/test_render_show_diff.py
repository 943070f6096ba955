"""``receipt show`` and ``receipt diff`` on the committed benchmark receipts: decisions first, tables that fit the
console (or not, with --wide), everything with --all, and a diff that lists what changed. Behaviour, not timing."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from evidence import archived

from infercrane.cli import main
from infercrane.report.console import fitted_console, render_diff, render_show, verdicts

BENCH = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
KERNEL_V3 = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")
SERVING = BENCH / "2026-12-01-h200-serving" / "seed-paired-eager-vs-compiled.json"
POC = archived("2026-12-01-h200-poc/poc-evidence.tar.xz/poc.json")
IN_VLLM_CUDA = BENCH / "2026-12-01-h200-kernel-in-vllm" / "compiled-cuda.json"
IN_VLLM_TRITON = BENCH / "2026-12-01-h200-kernel-in-vllm" / "compiled-triton.json"
RECEIPTS = [KERNEL_V3, SERVING, POC, IN_VLLM_CUDA]
TABLE_TOP = re.compile(r"^[┏┌╭]")  # the first line of a rich table
COUNTS = re.compile(r"(\d+) changed, (\d+) same, (\d+) only in A, (\d+) only in B")


def _run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str,
         columns: int | None = 100) -> list[str]:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["receipt", *args]) == 0
    return [line.rstrip() for line in capsys.readouterr().out.splitlines()]


def _flat(lines: list[str]) -> str:
    """The text with its wrapping undone, to find a sentence that was folded over lines."""
    return " ".join(" ".join(lines).split())


def _words(text: str, n: int = 12) -> str:
    return " ".join(text.split()[:n])


def _column(lines: list[str], i: int) -> str:
    """Column ``i`` of the rich tables in ``lines``, its cells' lines joined, wrapping undone."""
    return _flat([line.split("│")[i] for line in lines if line.startswith("│") and line.count("│") > i])


@pytest.mark.parametrize("path", RECEIPTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_show_leads_with_every_decision_then_the_conditions(path: Path, capsys, monkeypatch) -> None:
    lines = _run(capsys, monkeypatch, "show", str(path))
    first_table = next(i for i, line in enumerate(lines) if TABLE_TOP.match(line))
    decision, conditions = lines.index("decision"), lines.index("conditions")
    assert _flat(lines[:decision]) == f"{path} ({json.loads(path.read_text())['schema_version']}) — valid"
    assert decision < conditions < first_table  # the file's line, then the decision, then the conditions
    before_conditions = _flat(lines[decision:conditions])
    found = verdicts(json.loads(path.read_text()))
    assert found, "every one of these receipts decides something"
    for v in found:  # every section's decision, by its section's name, and its reason
        assert _words(f"{v.section}") in before_conditions
        assert _words(v.headline()) in before_conditions, v.section
        if v.reason:
            assert _words(v.reason) in before_conditions, v.section
    assert "qualification_boundary:" in before_conditions
    conds = _flat(lines[conditions:first_table])
    assert "GPU NVIDIA H200" in conds and "software" in conds and "model Qwen/Qwen3-0.6B" in conds


@pytest.mark.parametrize("path", RECEIPTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_the_summary_fits_100_columns(path: Path, capsys, monkeypatch) -> None:
    lines = _run(capsys, monkeypatch, "show", str(path))
    assert max(len(line) for line in lines) <= 100


def test_a_pipe_without_columns_gets_100_columns_and_columns_is_obeyed(capsys, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert fitted_console().width == 100  # stdout is captured here: not a terminal
    monkeypatch.setenv("COLUMNS", "132")
    assert fitted_console().width == 132
    lines = _run(capsys, monkeypatch, "show", str(SERVING), columns=None)
    assert 80 < max(len(line) for line in lines) <= 100  # neither rich's 80 nor the old forced 200
    lines = _run(capsys, monkeypatch, "show", str(SERVING), columns=60)
    assert max(len(line) for line in lines) <= 60


def test_the_serving_runs_are_one_compact_table(capsys, monkeypatch) -> None:
    doc = json.loads(SERVING.read_text())
    lines = _run(capsys, monkeypatch, "show", str(SERVING))
    start = lines.index("runs")
    header = _flat(lines[start:start + 4])
    for column in ("arm", "#", "c", "driver", "status", "out tok/s", "TTFT p95 ms", "TPOT p95 ms", "e2e p95 ms",
                   "fail"):
        assert f" {column} " in header
    rows = [line for line in lines[start:] if line.startswith("│")]
    assert len(rows) == len(doc["runs"])  # one line per run, every run
    for run, row in zip(doc["runs"], rows):
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[:5] == [run["recipe"], str(run["run_index"]), str(run["concurrency"]), run["driver"], "ok"]
        assert cells[5] == f"{run['output_tokens_per_second']:.6g}"
    assert all(run["raw_export"] not in "\n".join(lines) for run in doc["runs"])  # raw paths: --all


def test_the_serving_summary_is_short(capsys, monkeypatch) -> None:
    # 30 runs (one line each), 21 rows of medians, comparisons and statistics, 3 runtime findings, a 12-line
    # reason and 15 lines of conditions: with table edges, headers and titles that is about 140 lines at 100
    # columns. 150 leaves a few lines for wrapping; listing every run field (--all: over 700 lines) or folding
    # the runs' 24 fields into crushed cells (the old view: about 700) fails it.
    assert len(_run(capsys, monkeypatch, "show", str(SERVING))) <= 150


def test_wide_lets_tables_be_as_wide_as_they_need(capsys, monkeypatch) -> None:
    doc = json.loads(SERVING.read_text())
    lines = _run(capsys, monkeypatch, "show", "--wide", str(SERVING))
    text = "\n".join(lines)
    assert max(len(line) for line in lines) > 100
    assert "not shown:" not in text  # no column dropped ...
    assert all(run["raw_export"] in text for run in doc["runs"])  # ... and none folded: a raw path reads whole


def test_all_shows_every_field_and_every_row(capsys, monkeypatch) -> None:
    doc = json.loads(SERVING.read_text())
    summary = _run(capsys, monkeypatch, "show", str(SERVING))
    full = _run(capsys, monkeypatch, "show", "--all", str(SERVING))
    text = "\n".join(full)
    assert len(full) > 3 * len(summary)
    assert max(len(line) for line in full) <= 100  # too wide a table is split into column groups, not crushed
    assert "runs (columns, part 1 of" in text
    for run in doc["runs"]:  # fields the summary leaves out, for every run
        assert f"{run['duration_s']:.6g}" in text and f"{run['ttft_p99_ms']:.6g}" in text
    assert "provenance" in text and doc["provenance"]["config_sha256"] in _flat(full).replace(" ", "")


def test_all_shows_the_receipts_a_poc_receipt_embeds(capsys, monkeypatch) -> None:
    summary = _run(capsys, monkeypatch, "show", str(POC))
    assert not any(line.startswith("evidence.kernel.h200") for line in summary)
    assert "the receipts behind the sections, whole: kernel (h200: cuda-kernel-screening-receipt" in _flat(summary)
    full = _run(capsys, monkeypatch, "show", "--all", str(POC))
    assert any(line.startswith("evidence.kernel.h200") for line in full) and len(full) > 20 * len(summary)


def test_an_incomplete_receipt_says_so_first(capsys, monkeypatch) -> None:
    partial = archived("2026-12-01-h200-poc/poc-evidence-first-sitting.tar.xz/poc.json")
    lines = _run(capsys, monkeypatch, "show", str(partial))
    text = _flat(lines)
    assert text.index("INCOMPLETE: in progress or interrupted") < text.index(" decision ")
    assert "public still to run" in text


def test_a_serve_bench_receipt_says_it_decides_nothing(capsys, monkeypatch) -> None:
    text = _flat(_run(capsys, monkeypatch, "show", str(BENCH / "2026-12-01-h200-poc" / "drivers-c8.json")))
    assert "bench decision: none — serve bench measures one recipe (compiled)" in text


def test_a_table_too_wide_drops_its_least_important_columns_and_names_them() -> None:
    records = [{"recipe": f"arm{i}", "concurrency": i, "verdict": "SAME", "log_path": f"/very/long/path/{i}.log",
                **{f"metric_{k}_ms": 1000.0 + i + k / 7 for k in range(12)}} for i in range(3)]
    con = Console(width=70, record=True, color_system=None)
    con.print(render_show({"schema_version": "x", "runs_like": records}))
    lines = con.export_text().splitlines()
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 70
    assert "recipe" in text and "concurrency" in text and "verdict" not in text.split("every row:")[0]
    assert "every row: verdict = SAME" in _flat(lines)  # a column equal in every row is said once
    assert "not shown:" in text and "log_path" in text.split("not shown:")[1]  # dropped, and named
    con = Console(width=70, record=True, color_system=None)
    con.print(render_show({"schema_version": "x", "runs_like": records}, show_all=True))
    text = con.export_text()
    assert "(columns, part 2 of" in text and "log_path" in text


def test_the_diff_leads_with_both_decisions_and_lists_only_what_changed(capsys, monkeypatch) -> None:
    a, b = json.loads(IN_VLLM_TRITON.read_text()), json.loads(IN_VLLM_CUDA.read_text())
    lines = _run(capsys, monkeypatch, "diff", str(IN_VLLM_TRITON), str(IN_VLLM_CUDA))
    assert len(lines) < 400 and max(len(line) for line in lines) <= 100
    counts = next(i for i, line in enumerate(lines) if COUNTS.search(line))
    decisions = _flat(lines[:counts])
    for i, doc in ((2, a), (3, b)):  # the changed decision, A's beside B's, before anything else
        assert _words(doc["paired_aiperf"]["decision"], 9) in _column(lines[:counts], i)
    assert a["paired_aiperf"]["decision"] != b["paired_aiperf"]["decision"]
    assert lines.index("decisions") < counts < lines.index("fields that differ (--all lists every field)")
    assert "arms aligned: recipe compiled-triton (A) with recipe compiled-cuda (B)" in decisions
    changed, same, only_a, only_b = map(int, COUNTS.search(lines[counts]).groups())
    assert changed and same and only_a and only_b
    text = "\n".join(lines)
    assert "policy.primary_metric" not in text  # equal in both: not listed
    assert "runs: 30 of 30 records differ" in _flat(lines)  # the raw runs are one line; their medians are listed
    record = lines.index("paired_aiperf.measurements[recipe=compiled-triton|compiled-cuda,concurrency=8]")
    assert lines[record + 1].split()[:3] == ["output_tokens_per_second", "2107.29", "2134.92"]
    full = _run(capsys, monkeypatch, "diff", "--all", str(IN_VLLM_TRITON), str(IN_VLLM_CUDA))
    assert len(full) > 3 * len(lines) and "policy.primary_metric" in "\n".join(full)
    assert COUNTS.search(_flat(full)).groups() == COUNTS.search(lines[counts]).groups()


def test_a_receipt_diffed_with_itself_says_nothing_changed(capsys, monkeypatch) -> None:
    lines = _run(capsys, monkeypatch, "diff", str(IN_VLLM_CUDA), str(IN_VLLM_CUDA))
    text = _flat(lines)
    assert re.search(r"nothing changed: 0 changed, \d+ same, 0 only in A, 0 only in B", text)
    assert "fields that differ" not in text and "same as A" in text


def test_raw_arrays_collapse_when_equal_and_are_summarized_when_they_differ() -> None:
    a = {"schema_version": "x", "kept": {"samples_us": [float(i) for i in range(100)]},
         "moved": {"samples_us": [1.0] * 50}}
    b = {"schema_version": "x", "kept": {"samples_us": [float(i) for i in range(100)]},
         "moved": {"samples_us": [2.0] * 49 + [9.0]}}
    con = Console(width=100, record=True, color_system=None)
    con.print(render_diff(a, b, "a.json", "b.json"))
    text = con.export_text()
    assert "1 changed, 2 same, 0 only in A, 0 only in B" in text  # a list is one field
    assert "kept" not in text and "1, 2, 3" not in text
    assert re.search(r"moved\.samples_us\s+median 1 of 50\s+median 2 of 50\s+\+1\s+2\.0000", text)
    con = Console(width=100, record=True, color_system=None)
    con.print(render_diff(a, b, "a.json", "b.json", show_all=True))
    assert "kept.samples_us" in con.export_text()


def test_receipt_text_is_printed_as_text_in_the_summary_and_the_diff() -> None:
    doc = {"schema_version": "x", "paired_aiperf": {"decision": "[bold]x[/bold] \x1b[2J", "decision_code": "accept",
                                                    "reason": "[red]r"},
           "runs": [{"recipe": "[b]eager", "run_index": 0, "concurrency": 1, "driver": "d", "status": "ok",
                     "output_tokens_per_second": 1.0}] * 2}
    con = Console(width=100, record=True, force_terminal=True)
    con.print(render_show(doc))
    con.print(render_diff(doc, {**doc, "paired_aiperf": {**doc["paired_aiperf"], "reason": "[/oops]"}}, "a", "b"))
    out = con.export_text()
    assert "\x1b" not in out and "[bold]x[/bold] ?[2J" in out and "[b]eager" in out and "[/oops]" in out


def test_a_nested_value_reads_as_one_value_of_its_key(capsys, monkeypatch) -> None:
    """A workload's ``requests_per_point`` (a dict of concurrency -> requests) and ``concurrency`` (a list) each read
    as one value in the conditions line, never as more ``key=value`` pairs (once ``requests_per_point=8=384``)."""
    path = BENCH / "2026-12-01-h200-poc" / "drivers-c8.json"  # a serve bench at one concurrency, 384 requests
    text = _flat(_run(capsys, monkeypatch, "show", str(path), columns=200))
    assert "requests_per_point={8: 384}" in text and "=8=" not in text
    lines = _run(capsys, monkeypatch, "show", str(POC), columns=400)
    workload = next(line for line in lines if "paired_aiperf: " in line and "requests_per_point" in line)
    assert "concurrency=[1, 8, 32]" in workload, workload
    assert re.search(r"requests_per_point=\{1: \d+, 8: \d+, 32: \d+\}", workload), workload
    pairs = re.findall(r"(\w+)=", re.sub(r"[\[{][^\]}]*[\]}]", "", workload))
    assert len(pairs) == len(set(pairs)), pairs  # every key once: no value's own keys read as keys of the line

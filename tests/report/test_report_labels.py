"""Every label of a report says what its receipt records: a functional kernel screen is drawn as what it checked
(never as an empty timing chart, every axis covering every row count measured); a drift check that could not run
says so; "published example" only where the workload has one; a machine without a GPU reads as the CPU it ran on;
each section's reason is stated once, in the page's head."""
from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from evidence import archived

from infercrane.cli import main

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

from infercrane.report.console import conditions  # noqa: E402
from infercrane.receipts.validate import load_receipt  # noqa: E402
from infercrane.report.build import receipt_report  # noqa: E402
from infercrane.report.kernel import custom_kernel_sections, kernel_sections  # noqa: E402
from infercrane.report.model import Figure  # noqa: E402
from infercrane.report.page import render_page  # noqa: E402
from infercrane.report.serving import serving_sections  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
KERNEL = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")
POC = archived("2026-12-01-h200-poc/poc-evidence.tar.xz/poc.json")
THREE_RUNS = BENCH / "2026-12-01-h200-poc/drivers-c8.json"  # serve bench, 3 runs per driver; no published example
PUBLIC_1000 = BENCH / "2026-12-01-h200-serving/public-1000-compiled.json"  # a workload with a published example
ROWS = [1, 8, 32]


def _doc(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _drawn(ax: Any) -> int:
    """Data points an axes draws: lines' points, scatter/fill collections' offsets and paths, bars."""
    lines = sum(len(line.get_xdata()) for line in ax.get_lines())
    collections = sum(len(c.get_offsets()) + len(c.get_paths()) for c in ax.collections)
    return lines + collections + len(ax.patches)


def _empty_axes(fig: Figure) -> list[str]:
    return [ax.get_title() or "untitled" for ax in fig.fig.axes if ax.get_visible() and _drawn(ax) == 0]


def _texts(fig: Figure) -> str:
    """Every text a figure shows: titles, labels, legends, annotations."""
    parts = [t.get_text() for t in fig.fig.findobj(lambda a: hasattr(a, "get_text"))]
    return " | ".join(p for p in parts if p)


@pytest.fixture(scope="module")
def functional_screen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A functional kernel screen on this CPU (seconds): eager checked at rows 1, 8, 32, the CUDA candidate skipped."""
    out = tmp_path_factory.mktemp("screen") / "kernel.json"
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1,8,32", "--impls", "eager,cuda", "--checks", "1",
                 "--out", str(out)]) == 0
    return load_receipt(out).document


# --- 1. a functional kernel screen: what was checked, never an empty timing chart ---------------------------------

def test_a_functional_screen_draws_its_correctness_per_implementation_and_rows(functional_screen) -> None:
    doc = functional_screen
    assert doc["result"]["run_kind"] == "functional"
    (section,) = kernel_sections(doc)
    assert "nothing timed" in section.title
    (fig,) = section.figures
    assert fig.name == "correctness" and not _empty_axes(fig)
    (ax,) = fig.fig.axes
    eager = next(line for line in ax.get_lines() if line.get_label().startswith("eager"))
    worst = [max(t["max_rel_err"] for c in cell["checks"] for t in c["tensors"])
             for cell in next(i for i in doc["result"]["implementations"] if i["key"] == "eager")["correctness"]]
    assert list(eager.get_ydata()) == worst  # the receipt's numbers, one point per row count
    rtol = doc["result"]["tolerance"]["rtol"]
    assert any(list(line.get_ydata()) == [rtol, rtol] for line in ax.get_lines())
    (table,) = section.tables
    assert table.columns[3:6] == [f"rows {r}" for r in ROWS]
    rows = {r[0]: r for r in table.rows}
    assert all(cell.startswith("PASS") for cell in rows["eager"][3:6])
    assert rows["cuda"][2] == "skipped" and rows["cuda"][3:6] == ["not checked"] * 3
    cuda = next(i for i in doc["result"]["implementations"] if i["key"] == "cuda")
    assert cuda["skip_reason"] in rows["cuda"][-1]


def test_every_rows_axis_covers_every_row_count_measured(functional_screen) -> None:
    (ax,) = kernel_sections(functional_screen)[0].figures[0].fig.axes
    lo, hi = ax.get_xlim()
    assert list(ax.get_xticks()) == ROWS and lo < 1 and hi > 32
    timed = _doc(KERNEL)
    rows = timed["result"]["rows"]
    for section in kernel_sections(timed):
        for fig in section.figures:
            if fig.name.startswith(("time-", "speedup-")):
                for ax in fig.fig.axes:
                    lo, hi = ax.get_xlim()
                    assert set(ax.get_xticks()) >= set(rows) and lo < min(rows) and hi > max(rows), fig.name


def test_a_functional_poc_gets_no_timing_panel() -> None:
    """The PoC's custom_kernel block of a functional check records no measurements: no axes are drawn for it (once
    an empty log-log chart reading "nothing timed"), and the table says nothing was timed."""
    doc = _doc(POC)
    block = doc["custom_kernel"]["h200"]
    doc["custom_kernel"]["h200"] = {**block, "measurements": [], "evidence_class": "cpu-functional-check",
                                    "timing_mode": None, "gpu": "none"}
    (section,) = custom_kernel_sections(doc)
    assert section.figures == []
    (table,) = section.tables
    assert table.rows[0][1:] == ["CPU (functional check)", block["decision"], "nothing timed"]
    assert any("nothing timed" in n for n in section.notes)
    # a timed block beside it keeps its panel, with data
    doc["custom_kernel"]["l40s"] = {**block, "gpu": "NVIDIA L40S"}
    (section,) = custom_kernel_sections(doc)
    (fig,) = section.figures
    assert [ax.get_title() for ax in fig.fig.axes] == ["l40s: NVIDIA L40S"] and not _empty_axes(fig)


# --- 2. a drift check that could not run --------------------------------------------------------------------------

def test_a_drift_check_that_could_not_run_says_so() -> None:
    doc = _doc(THREE_RUNS)
    drift = doc["bench"]["drift"]
    assert drift and all(d["other_runs_spread_percent"] is None for d in drift)  # 3 runs: 1 between first and last
    (section,) = [s for s in serving_sections(doc) if s.title.startswith("Serving benchmark")]
    fig = next(f for f in section.figures if f.name == "bench-drift")
    shown = _texts(fig)
    assert "could not run" in shown and "checked, not flagged" not in shown
    assert f"0 flagged, 0 checked and not flagged, {len(drift)} could not run" in fig.caption
    table = next(t for t in section.tables if t.title.startswith("Warm-up drift"))
    flagged = [row[table.columns.index("flagged")] for row in table.rows]
    assert flagged == ["not checked: fewer than 2 other runs"] * len(drift)


def test_a_drift_check_that_ran_keeps_its_flags() -> None:
    doc = _doc(POC)
    drift = doc["paired_aiperf"]["drift"]
    fig = next(f for s in serving_sections(doc) for f in s.figures if f.name == "paired-drift")
    flagged = sum(1 for d in drift if d["flagged"])
    assert f"{flagged} flagged, {len(drift) - flagged} checked and not flagged, 0 could not run" in fig.caption
    assert "could not run" not in _texts(fig)


# --- 3. "published example" only where there is one ---------------------------------------------------------------

def test_published_example_is_named_only_where_the_workload_has_one() -> None:
    none = _doc(THREE_RUNS)
    assert none["public_workload_reproduction"]["published_example"] is None
    (public,) = [s for s in serving_sections(none) if s.title == "Public workload reproduction"]
    words = " ".join([*(f.title for f in public.figures), *(t.title for t in public.tables),
                      *(_texts(f) for f in public.figures)])
    assert "published example" not in words.replace("no published example", "")
    some = _doc(PUBLIC_1000)
    (public,) = [s for s in serving_sections(some) if s.title == "Public workload reproduction"]
    assert "against the published example" in public.figures[0].title
    assert public.tables[0].title.endswith("and the published example")


# --- 4. no GPU: the CPU, as the receipt records it ----------------------------------------------------------------

def _on_the_cpu(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["evidence_class"] = "functional-check"
    doc["paired_aiperf"]["gpu"] = "none"
    doc["provenance"]["hardware"] = {**doc["provenance"]["hardware"], "gpu": "none", "compute_capability": "none"}
    return doc


def test_a_run_without_a_gpu_reads_as_the_cpu_in_titles_and_conditions() -> None:
    doc = _on_the_cpu(_doc(POC))
    titles = [s.title for s in serving_sections(doc)]
    paired = next(t for t in titles if t.startswith("Serving A/B"))
    assert "(paired_aiperf, CPU (functional check))" in paired and "none" not in paired
    gpu = dict(conditions(doc))["GPU"]
    assert gpu == "none: CPU (functional check)"
    doc["evidence_class"] = None  # a receipt that does not say what its evidence is: no GPU, nothing more
    assert dict(conditions(doc))["GPU"] == "none: CPU (no GPU)"
    assert dict(conditions(_doc(POC)))["GPU"].startswith("NVIDIA H200")


# --- 5. each section's reason once ---------------------------------------------------------------------------------

def _reasons(doc: dict[str, Any]) -> list[str]:
    out = [doc[k]["reason"] for k in ("paired_aiperf", "public_workload_reproduction", "custom_kernel")
           if isinstance(doc.get(k), dict) and doc[k].get("reason")]
    out += [g["reason"] for g in (doc.get("custom_kernel") or {}).values() if isinstance(g, dict) and g.get("reason")]
    return out


def test_each_sections_reason_is_stated_once_in_the_head(tmp_path: Path) -> None:
    doc = _doc(POC)
    text = html.unescape(render_page([receipt_report(POC)], tmp_path).read_text())
    head, evidence = text.split("Qualification boundary", 1)
    reasons = _reasons(doc)
    assert len(reasons) >= 3
    for reason in reasons:
        assert reason in head, reason[:60]
        assert reason not in evidence, f"repeated under the evidence: {reason[:60]}"
    assert not re.search(r"<p>(decision|reason)( \(\w+\))?: ", evidence)


def test_the_correctness_table_counts_checks_as_the_receipt_does(functional_screen) -> None:
    """Each check runs in phases (eager, then reuse on refilled buffers): a cell counts checks, not phases."""
    (section,) = kernel_sections(functional_screen)
    checks = functional_screen["result"]["checks_per_rows"]
    eager = next(r for r in section.tables[0].rows if r[0] == "eager")
    assert all(cell.startswith(f"PASS ({checks} check") for cell in eager[3:6]), eager
    assert f"{checks} checks per row count" in section.notes[0]

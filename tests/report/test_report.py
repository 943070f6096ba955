"""``infercrane report`` without a browser: what the page leads with, what each kernel figure draws, how bad
input is refused, and that receipt text is escaped."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from evidence import archived

from infercrane.cli import main

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

from infercrane.report.build import receipt_report  # noqa: E402
from infercrane.report.kernel import custom_kernel_sections, kernel_sections, trial_medians  # noqa: E402
from infercrane.report.page import render_page  # noqa: E402

KERNEL = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")
POC = archived("2026-12-01-h200-poc/poc-evidence.tar.xz/poc.json")


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_page_opens_with_the_decision_then_the_boundary_then_the_evidence(tmp_path: Path) -> None:
    page = render_page([receipt_report(KERNEL)], tmp_path)
    text = page.read_text()
    doc = _doc(KERNEL)
    decision, boundary, first_figure = (text.index(doc["decision"]), text.index("Qualification boundary"),
                                        text.index("<figure>"))
    assert decision < boundary < first_figure
    # the decision mode is drawn before the others
    assert text.index("graph mode (the mode the decision reads)") < text.index("<h3>launch mode")


def test_every_png_is_written_and_embedded(tmp_path: Path) -> None:
    page = render_page([receipt_report(KERNEL)], tmp_path)
    text = page.read_text()
    pngs = sorted(tmp_path.glob("*/*.png"))
    assert {p.name for p in pngs} >= {"time-graph.png", "speedup-graph.png", "time-launch.png", "amdahl.png"}
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(embedded) == len(pngs)
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f'data-file="{p.parent.name}/{p.name}"' in text


def test_time_figure_draws_each_cell_median_with_its_trial_range_and_the_recorded_floor() -> None:
    doc = _doc(KERNEL)
    graph = next(s for s in kernel_sections(doc) if s.title.startswith("graph mode"))
    fig = next(f for f in graph.figures if f.name == "time-graph").fig
    ax = fig.axes[0]
    impls = [i for i in doc["result"]["implementations"] if i["status"] == "ok"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert all(any(i["key"] in lab for lab in labels) for i in impls)
    triton = next(i for i in impls if i["key"] == "triton")
    cell = next(c for c in triton["timings"] if c["mode"] == "graph" and c["rows"] == 1)
    meds = trial_medians(cell)
    assert len(meds) == doc["result"]["trials"]
    assert min(meds) <= cell["summary"]["median"] <= max(meds)
    floor = next(line for line in ax.get_lines() if line.get_label().startswith("floor"))
    assert cell["floor_us"] in list(floor.get_ydata())
    assert "lowest and highest" in next(f for f in graph.figures if f.name == "time-graph").caption


def test_verdict_grid_holds_every_comparison_of_the_mode() -> None:
    doc = _doc(KERNEL)
    graph = next(s for s in kernel_sections(doc) if s.title.startswith("graph mode"))
    grid = graph.tables[0]
    comps = [c for c in doc["result"]["comparisons"] if c["mode"] == "graph"]
    pairs = {(c["candidate"], c["reference"]) for c in comps}
    assert {(r[0], r[1]) for r in grid.rows} == pairs
    c = comps[0]
    row = next(r for r in grid.rows if (r[0], r[1]) == (c["candidate"], c["reference"]))
    cell = row[2 + grid.columns[2:].index(f"rows {c['rows']}")]
    assert cell.startswith(c["verdict"]) and f"{c['speedup']['ratio']:.3f}" in cell


def test_custom_kernel_gets_one_panel_per_gpu_type_side_by_side() -> None:
    doc = copy.deepcopy(_doc(POC))
    assert len(custom_kernel_sections(doc)[0].figures[0].fig.axes) == 1
    doc["custom_kernel"]["l40s"] = copy.deepcopy(doc["custom_kernel"]["h200"]) | {"gpu": "NVIDIA L40S"}
    (section,) = custom_kernel_sections(doc)
    axes = section.figures[0].fig.axes
    assert [a.get_title() for a in axes] == ["h200: NVIDIA H200", "l40s: NVIDIA L40S"]
    assert [r[0] for r in section.tables[0].rows] == ["h200", "l40s"]


def test_two_gpus_of_one_type_are_told_apart_by_their_index() -> None:
    doc = copy.deepcopy(_doc(POC))
    doc["custom_kernel"]["h200__2"] = copy.deepcopy(doc["custom_kernel"]["h200"])
    first = doc["evidence"]["kernel"]["h200"]
    doc["evidence"]["kernel"]["h200__2"] = copy.deepcopy(first)
    first["hardware"]["gpu_index"] = 0
    doc["evidence"]["kernel"]["h200__2"]["hardware"]["gpu_index"] = 1
    (section,) = custom_kernel_sections(doc)
    assert [a.get_title() for a in section.figures[0].fig.axes] == ["h200: NVIDIA H200 (GPU 0)",
                                                                    "h200__2: NVIDIA H200 (GPU 1)"]
    assert [r[:2] for r in section.tables[0].rows] == [["h200", "NVIDIA H200 (GPU 0)"],
                                                       ["h200__2", "NVIDIA H200 (GPU 1)"]]


def test_receipt_text_is_escaped(tmp_path: Path) -> None:
    rep = receipt_report(KERNEL)
    rep.head.decisions[0].reason = "<script>alert(1)</script>"
    text = render_page([rep], tmp_path).read_text()
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_several_receipts_share_one_page_with_a_contents_list(tmp_path: Path) -> None:
    other = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/rms_norm.json")
    assert main(["report", str(KERNEL), str(other), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "index.html").read_text()
    assert "<nav>" in text and 'href="#fused_add_rmsnorm"' in text and 'href="#rms_norm"' in text
    assert _doc(other)["decision"] in text


def test_an_invalid_receipt_is_refused_and_nothing_is_drawn(tmp_path: Path, capsys) -> None:
    doc = _doc(KERNEL)
    doc["decision_code"] = "integrate"  # no longer what the content hash covers
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert main(["report", str(bad), "--out", str(out)]) == 2
    assert not (out / "index.html").exists()


def test_a_missing_receipt_and_an_out_that_is_a_file_are_refused(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["report", str(KERNEL), "--out", str(f)]) == 2
    assert "--out" in capsys.readouterr().err


def test_a_long_reason_opens_folded_and_a_long_cell_says_it_was_cut(tmp_path: Path) -> None:
    from infercrane.report.model import Section, Table
    from infercrane.report.page import CELL_CHARS, REASON_CHARS

    rep = receipt_report(KERNEL)
    rep.head.decisions[0].reason = "why " * REASON_CHARS
    rep.sections = [Section(title="t", tables=[Table(title="long", columns=["c"], rows=[["x" * (CELL_CHARS + 50)]])])]
    text = render_page([rep], tmp_path).read_text()
    assert f"<summary>the whole reason ({len(rep.head.decisions[0].reason)} characters)</summary>" in text
    assert rep.head.decisions[0].reason.strip() in text  # all of it, inside the fold
    assert "x" * CELL_CHARS + " … (the whole text is in the receipt)" in text and "x" * (CELL_CHARS + 1) not in text


def test_without_out_the_report_goes_beside_its_receipt_not_into_the_working_directory(tmp_path: Path, capsys,
                                                                                      monkeypatch) -> None:
    """``infercrane report RECEIPT`` writes ``<receipt stem>.report/`` beside the receipt (as ``poc`` writes
    ``runs/RUN_ID/poc.report/``); several receipts go under ``runs/RUN_ID/report/``. Once a ``./report`` folder
    appeared in the working directory (the checkout), which git does not ignore."""
    import shutil

    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    receipt = run / "kernel.json"
    shutil.copy(KERNEL, receipt)
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["report", str(receipt)]) == 0
    page = run / "kernel.report" / "index.html"
    assert page.is_file() and f"report: {page}" in capsys.readouterr().out
    assert list(cwd.iterdir()) == []
    other = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/rms_norm.json")
    monkeypatch.setenv("INFERCRANE_RUN_ID", "two")
    assert main(["report", str(receipt), str(other)]) == 0
    assert (cwd / "runs" / "two" / "report" / "index.html").is_file()
    assert [p.name for p in cwd.iterdir()] == ["runs"]  # runs/ is ignored by git


def test_the_launch_section_tables_each_implementations_host_cost_where_the_receipt_has_it() -> None:
    doc = _doc(KERNEL)
    launch = next(s for s in kernel_sections(doc) if s.title.startswith("launch mode"))
    assert not any(t.title.startswith("Host cost") for t in launch.tables)  # a receipt from before host times
    doc = copy.deepcopy(doc)
    doc["result"]["host_method"] = "host: perf_counter around the same burst (test)"
    for n, impl in enumerate(doc["result"]["implementations"]):
        for c in impl["timings"]:
            if c["mode"] == "launch":
                h = 10.0 * (n + 1)
                c["host_summary"] = {"n": 3, "median": h, "q1": h - 1, "q3": h + 1, "min": h - 1, "max": h + 1,
                                     "mean": h, "stdev": 1.0}
                c["host_bound"] = h >= 0.9 * c["summary"]["median"]
    launch = next(s for s in kernel_sections(doc) if s.title.startswith("launch mode"))
    table = next(t for t in launch.tables if t.title == "Host cost per call, launch mode")
    want = [(i["key"], c["rows"], f"{c['host_summary']['median']:.2f}", "yes" if c["host_bound"] else "no")
            for i in doc["result"]["implementations"] for c in sorted(i["timings"], key=lambda c: c["rows"])
            if c["mode"] == "launch"]
    assert [(r[0], r[1], r[3], r[5]) for r in table.rows] == want and "yes" in {r[5] for r in table.rows}
    assert table.caption.endswith("Method: host: perf_counter around the same burst (test)")
    graph = next(s for s in kernel_sections(doc) if s.title.startswith("graph mode"))
    assert not any(t.title.startswith("Host cost") for t in graph.tables)

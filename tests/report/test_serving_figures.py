"""``report/serving.py``: the committed H200 serving receipts drawn as sections whose figures render, whose captions
name the receipt's own interval method, whose whiskers are one per interval the receipt holds, and whose tables
hold the receipt's numbers; absent sections are left out."""
from __future__ import annotations

import copy
import io
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.container import ErrorbarContainer  # noqa: E402

from evidence import archived

from infercrane.report.model import Figure, Section, Table  # noqa: E402
from infercrane.report.serving import serving_sections  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SERVING = REPO / "docs/benchmarks/2026-12-01-h200-serving"
EAGER_VS_COMPILED = SERVING / "seed-paired-eager-vs-compiled.json"
TWO_DRIVERS = SERVING / "seed-paired-compiled-two-drivers.json"
PUBLIC_1000 = SERVING / "public-1000-compiled.json"
POC = archived("2026-12-01-h200-poc/poc-evidence.tar.xz/poc.json")
KERNEL_IN_VLLM = REPO / "docs/benchmarks/2026-12-01-h200-kernel-in-vllm/compiled-cuda.json"
RECEIPTS = [EAGER_VS_COMPILED, TWO_DRIVERS, PUBLIC_1000, POC, KERNEL_IN_VLLM]
SECTION_KEYS = ("paired_aiperf", "bench", "public_workload_reproduction", "kernel_in_serving")
FLAGGED_RING = "#c62828"


@lru_cache(maxsize=None)
def _doc(path: Path) -> str:
    return path.read_text()


def doc(path: Path) -> dict[str, Any]:
    return json.loads(_doc(path))


@lru_cache(maxsize=None)
def _sections(path: Path) -> tuple[Section, ...]:
    return tuple(serving_sections(doc(path)))


def figures(path: Path) -> dict[str, Figure]:
    return {f.name: f for s in _sections(path) for f in s.figures}


def tables(path: Path) -> list[Table]:
    return [t for s in _sections(path) for t in s.tables]


def whiskers(fig: Figure) -> int:
    return sum(isinstance(c, ErrorbarContainer) for ax in fig.fig.axes for c in ax.containers)


def column(table: Table, name: str) -> list[Any]:
    i = table.columns.index(name)
    return [row[i] for row in table.rows]


def table_titled(path: Path, start: str, section: str = "") -> list[Table]:
    """The tables whose title starts with ``start``, in the sections whose title starts with ``section``."""
    return [t for s in _sections(path) if s.title.startswith(section) for t in s.tables if t.title.startswith(start)]


# --- every receipt ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", RECEIPTS, ids=lambda p: p.stem)
def test_every_figure_renders_with_title_labels_legend_and_caption(path: Path) -> None:
    sections = _sections(path)
    assert sections, "a receipt with serving evidence gives sections"
    names = [f.name for s in sections for f in s.figures]
    assert names and len(names) == len(set(names)), names
    for s in sections:
        assert s.title and s.tables, s.title
        for f in s.figures:
            assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", f.name), f.name
            assert f.title and len(f.caption) > 80, f.name
            buf = io.BytesIO()
            f.fig.savefig(buf, format="png", dpi=40)
            assert buf.getvalue().startswith(b"\x89PNG\r\n\x1a\n") and len(buf.getvalue()) > 2000, f.name
            w, h = f.fig.get_size_inches()
            assert w <= 9 and h <= 7, (f.name, w, h)
            assert f.fig.legends or any(ax.get_legend() for ax in f.fig.axes), f"{f.name} has no legend"
            for ax in (a for a in f.fig.axes if a.get_visible()):
                assert ax.get_xlabel() and ax.get_ylabel(), f.name
                assert ax.get_title(), f.name


@pytest.mark.parametrize("path", RECEIPTS, ids=lambda p: p.stem)
def test_sections_follow_the_receipt(path: Path) -> None:
    d = doc(path)
    names = set(figures(path))
    assert ("paired-ratios" in names) == bool(d.get("paired_aiperf"))
    assert ("bench-drivers" in names) == bool((d.get("bench") or {}).get("driver_agreement"))
    assert ("public-arms" in names) == bool(d.get("public_workload_reproduction"))
    assert ("kis-prediction" in names) == bool(d.get("kernel_in_serving"))


@pytest.mark.parametrize("path", RECEIPTS, ids=lambda p: p.stem)
def test_units_on_the_metric_axes(path: Path) -> None:
    for f in figures(path).values():
        if f.name.endswith("-metrics"):
            labels = [ax.get_ylabel() for ax in f.fig.axes if ax.get_visible()]
            assert "output throughput (tok/s)" in labels and "p95 TTFT (ms)" in labels, labels
            assert all(ax.get_xscale() == "log" for ax in f.fig.axes if ax.get_visible())


# --- the paired A/B --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [EAGER_VS_COMPILED, POC, KERNEL_IN_VLLM], ids=lambda p: p.stem)
def test_ratio_figure_has_one_whisker_per_metric_and_concurrency(path: Path) -> None:
    stats = doc(path)["paired_aiperf"]["statistics"]
    fig = figures(path)["paired-ratios"]
    assert whiskers(fig) == len(stats) == len({(s["metric"], s["concurrency"]) for s in stats})
    # One panel per metric, its whiskers spanning exactly the receipt's interval.
    panels = [ax for ax in fig.fig.axes if ax.get_visible()]
    assert len(panels) == len({s["metric"] for s in stats})
    spans = sorted(tuple(round(v, 9) for v in seg[:, 1])
                   for ax in panels for c in ax.containers for coll in c.lines[2] for seg in coll.get_segments())
    assert spans == sorted((round(s["ci_low"], 9), round(s["ci_high"], 9)) for s in stats)


@pytest.mark.parametrize("path", [POC, KERNEL_IN_VLLM], ids=lambda p: p.stem)
def test_ratio_caption_names_the_receipts_methods(path: Path) -> None:
    stats = doc(path)["paired_aiperf"]["statistics"]
    caption = figures(path)["paired-ratios"].caption
    for s in stats:
        assert s["interval_method"] in caption and s["test_method"] in caption
    n = {len(s["a_values"]) for s in stats}
    assert f"A {'/'.join(map(str, sorted(n)))}" in caption


def test_a_receipt_without_methods_says_it_states_none() -> None:
    stats = doc(EAGER_VS_COMPILED)["paired_aiperf"]["statistics"]
    assert not any(s.get("interval_method") for s in stats)
    caption = figures(EAGER_VS_COMPILED)["paired-ratios"].caption
    assert "Interval method: not stated in the receipt" in caption
    assert "Test method: not stated in the receipt" in caption


@pytest.mark.parametrize("path", [EAGER_VS_COMPILED, POC, KERNEL_IN_VLLM], ids=lambda p: p.stem)
def test_decision_table_holds_the_receipts_statistics(path: Path) -> None:
    stats = doc(path)["paired_aiperf"]["statistics"]
    (table,) = table_titled(path, "B/A per concurrency and metric", section="Serving A/B")
    assert len(table.rows) == len(stats)
    by_key = {(r[0], r[1]): r for r in table.rows}
    for s in stats:
        row = by_key[(s["concurrency"], s["metric"])]
        assert row[table.columns.index("ratio B/A")] == s["ratio_b_over_a"]
        assert row[table.columns.index("CI low")] == s["ci_low"]
        assert row[table.columns.index("CI high")] == s["ci_high"]
        assert row[table.columns.index("p")] == s["p_value"]
        assert row[table.columns.index("verdict")] == s["verdict"]
    if stats[0].get("interval_method"):
        assert stats[0]["interval_method"] in table.caption


def _dots(ax: Any) -> int:
    return sum(len(line.get_xdata()) for line in ax.get_lines()
               if line.get_marker() == "o" and line.get_linestyle() == "None")


def test_every_run_is_a_dot_even_when_the_runs_are_in_the_poc_evidence() -> None:
    d = doc(POC)
    assert d["runs"] == []  # a PoC keeps its runs in the serve ab receipt under evidence
    runs = d["evidence"]["paired"][d["evidence"]["serving_gpu"]]["runs"]
    fig = figures(POC)["paired-metrics"]
    assert all(_dots(ax) == len(runs) for ax in fig.fig.axes if ax.get_visible())
    assert "evidence.paired.h200.runs" in fig.caption
    own = doc(KERNEL_IN_VLLM)["runs"]
    assert all(_dots(ax) == len(own) for ax in figures(KERNEL_IN_VLLM)["paired-metrics"].fig.axes)


def _rings(fig: Figure, colour: str) -> int:
    return sum(len(line.get_xdata()) for ax in fig.fig.axes for line in ax.get_lines()
               if line.get_markerfacecolor() == "none" and line.get_markeredgecolor() == colour)


@pytest.mark.parametrize("path", [POC, KERNEL_IN_VLLM], ids=lambda p: p.stem)
def test_drift_figure_marks_the_receipts_flags(path: Path) -> None:
    drift = doc(path)["paired_aiperf"]["drift"]
    flagged = [x for x in drift if x["flagged"]]
    assert flagged, "these receipts flag some drift"
    fig = figures(path)["paired-drift"]
    assert _rings(fig, FLAGGED_RING) == 2 * len(flagged)  # its first and its last run
    (table,) = table_titled(path, "Warm-up drift", section="Serving A/B")
    assert column(table, "flagged") == [x["flagged"] for x in drift]
    assert column(table, "change (%)") == [x["change_percent"] for x in drift]


def test_a_receipt_without_a_drift_check_marks_nothing() -> None:
    fig = figures(EAGER_VS_COMPILED)["paired-drift"]
    assert _rings(fig, FLAGGED_RING) == 0
    assert "records no drift check" in fig.caption


# --- two drivers on one engine ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [TWO_DRIVERS, PUBLIC_1000], ids=lambda p: p.stem)
def test_driver_agreement(path: Path) -> None:
    agreement = doc(path)["bench"]["driver_agreement"]
    fig = figures(path)["bench-drivers"]
    assert whiskers(fig) == sum(1 for e in agreement if e.get("ci_low") is not None)
    assert agreement[0]["interval_method"] in fig.caption
    (table,) = table_titled(path, "Driver agreement")
    assert column(table, "ratio") == [e["ratio"] for e in agreement]
    assert column(table, "verdict") == [e["verdict"] for e in agreement]
    # Both drivers' runs are dots on the metric figure.
    runs = doc(path)["runs"]
    assert {r["driver"] for r in runs} == {"aiperf", "vllm-bench"}
    metrics = figures(path)["bench-metrics"]
    assert all(_dots(ax) == len(runs) for ax in metrics.fig.axes if ax.get_visible())


def test_public_workload_against_the_published_example() -> None:
    block = doc(PUBLIC_1000)["public_workload_reproduction"]
    (table,) = table_titled(PUBLIC_1000, "Public workload")
    assert column(table, "output tok/s") == [a["output_tokens_per_second"] for a in block["arms"]] + [
        block["published_example"]["output_tokens_per_second"]]
    fig = figures(PUBLIC_1000)["public-arms"]
    published = block["published_example"]["output_tokens_per_second"]
    assert any(list(line.get_ydata()) == [published, published] for line in fig.fig.axes[0].get_lines())


def test_the_poc_public_ab_is_drawn_from_its_embedded_receipt() -> None:
    d = doc(POC)
    embedded = d["evidence"]["public"][d["evidence"]["serving_gpu"]]["paired_aiperf"]
    names = figures(POC)
    assert {"public-arms", "public-metrics", "public-ratios", "public-drift"} <= set(names)
    assert whiskers(names["public-ratios"]) == len(embedded["statistics"])
    (table,) = table_titled(POC, "B/A per concurrency and metric", section="Public workload")
    assert column(table, "ratio B/A") == [s["ratio_b_over_a"] for s in
                                          sorted(embedded["statistics"], key=lambda s: (s["concurrency"], s["metric"]))]


# --- kernel in serving -----------------------------------------------------------------------------------------

def test_kernel_in_vllm_prediction_against_measurement() -> None:
    rows = doc(KERNEL_IN_VLLM)["kernel_in_serving"]["prediction"]["concurrencies"]
    (table,) = table_titled(KERNEL_IN_VLLM, "Kernel in serving")
    assert column(table, "concurrency") == [r["concurrency"] for r in rows]
    assert column(table, "predicted B/A") == [r["predicted_ratio"] for r in rows]
    assert column(table, "measured B/A") == [r["measured"]["ratio_b_over_a"] for r in rows]
    assert column(table, "verdict") == [r["verdict"] for r in rows]
    fig = figures(KERNEL_IN_VLLM)["kis-prediction"]
    assert whiskers(fig) == len(rows)
    assert rows[0]["measured"]["interval_method"] in fig.caption
    (ax,) = fig.fig.axes
    diamonds = [y for line in ax.get_lines() if line.get_marker() == "D" for y in line.get_ydata()]
    assert diamonds == [r["predicted_ratio"] for r in rows]


# --- absent sections -------------------------------------------------------------------------------------------

def test_a_document_without_serving_sections_gives_nothing() -> None:
    d = doc(KERNEL_IN_VLLM)
    for key in SECTION_KEYS:
        d.pop(key, None)
    assert serving_sections(d) == []
    assert serving_sections({"schema_version": "infercrane.cuda-kernel-screening-receipt/v3"}) == []
    assert serving_sections({**d, "paired_aiperf": None, "bench": None}) == []


def test_absent_sections_are_skipped() -> None:
    full = doc(POC)
    d = copy.deepcopy(full)
    del d["public_workload_reproduction"]
    assert {f.name for s in serving_sections(d) for f in s.figures} == {"paired-metrics", "paired-ratios",
                                                                       "paired-drift"}
    d = copy.deepcopy(full)
    del d["paired_aiperf"]
    (section,) = serving_sections(d)
    assert section.title == "Public workload reproduction"
    d = doc(KERNEL_IN_VLLM)
    del d["kernel_in_serving"]
    names = {f.name for s in serving_sections(d) for f in s.figures}
    assert "kis-prediction" not in names and "paired-ratios" in names


def test_without_run_records_the_dots_are_the_statistics_values() -> None:
    d = doc(KERNEL_IN_VLLM)
    d["runs"] = []
    (paired, _kis) = serving_sections(d)
    names = {f.name: f for f in paired.figures}
    assert "paired-drift" not in names  # run order is unknown
    stats = d["paired_aiperf"]["statistics"]
    n = sum(len(s["a_values"]) + len(s["b_values"]) for s in stats if s["metric"] == "output_tok_s")
    assert n == 30 and _dots(names["paired-metrics"].fig.axes[0]) == n
    assert "from statistics[] a_values / b_values" in names["paired-metrics"].caption
    assert any("no run records" in note for note in paired.notes)


def test_functional_receipts_render_the_same_way() -> None:
    d = doc(EAGER_VS_COMPILED)
    d["evidence_class"] = "functional-check"
    names = [f.name for s in serving_sections(d) for f in s.figures]
    assert names == [f.name for s in _sections(EAGER_VS_COMPILED) for f in s.figures]


def test_a_v1_receipt_without_runs_or_statistics_draws_its_medians() -> None:
    d = json.loads((REPO / "examples/receipts/optimization-poc-v1.seed.json").read_text())
    paired, public = serving_sections(d)
    (fig,) = paired.figures
    assert fig.name == "paired-metrics" and "no per-run numbers" in fig.caption
    assert all(_dots(ax) == 0 for ax in fig.fig.axes)
    (table,) = paired.tables
    assert column(table, "throughput speedup (B/A)") == [c["throughput_speedup"]
                                                         for c in d["paired_aiperf"]["compiled_vs_eager"]]
    assert column(public.tables[0], "output tok/s")[:2] == [
        d["public_workload_reproduction"][k]["output_tokens_per_second"] for k in ("balanced", "throughput_mode")]

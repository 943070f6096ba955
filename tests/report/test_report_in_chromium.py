"""The report as a person sees it: each committed receipt kind rendered by ``infercrane report`` and opened in
headless Chromium. The screenshot is not blank, every image on the page loaded, and the receipt's decision text is
on the page; the functional PoC's page (its receipt made once per session, tests/conftest.py) also draws no empty
chart and no label its receipt contradicts. Chromium is Debian's ``chromium`` package, installed on CI by
``.ci/run``; elsewhere without it these tests skip."""
from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from evidence import archived
from report_browser import loaded_dom, screenshot

from infercrane.cli import main

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

BENCH = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
KINDS = {
    "kernel-screen-v3": archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json"),
    "kernel-screen-v2": BENCH / "2026-12-01-h200-kernel/kernel-screen.json",
    "serving-ab": BENCH / "2026-12-01-h200-serving/seed-paired-eager-vs-compiled.json",
    "serving-two-drivers": BENCH / "2026-12-01-h200-serving/seed-paired-compiled-two-drivers.json",
    "serving-public": BENCH / "2026-12-01-h200-serving/public-1000-compiled.json",
    "poc": archived("2026-12-01-h200-poc/poc-evidence.tar.xz/poc.json"),
    "kernel-in-vllm": BENCH / "2026-12-01-h200-kernel-in-vllm/compiled-cuda.json",
}


def _decisions(doc: dict) -> list[str]:
    """Every decision text a receipt holds, wherever its kind keeps it."""
    out = [doc[k] for k in ("decision",) if isinstance(doc.get(k), str)]
    for section in ("paired_aiperf", "public_workload_reproduction"):
        if isinstance(doc.get(section), dict) and doc[section].get("decision"):
            out.append(doc[section]["decision"])
    for g in (doc.get("custom_kernel") or {}).values():
        if isinstance(g, dict) and g.get("decision"):
            out.append(g["decision"])
    return out


def _not_blank(shot: Path) -> tuple[float, float]:
    """(share of pixels that are not near-white, standard deviation of the grey levels)."""
    from matplotlib.image import imread

    img = imread(shot)[..., :3]
    grey = img.mean(axis=2)
    return float((grey < 0.9).mean()), float(grey.std())


@pytest.mark.parametrize("kind", list(KINDS))
def test_report_opens_in_chromium_with_its_decision_and_every_image(kind: str, tmp_path: Path, capsys) -> None:
    receipt = KINDS[kind]
    out = tmp_path / "report"
    assert main(["report", str(receipt), "--out", str(out)]) == 0
    page = out / "index.html"
    assert f"report: {page}" in capsys.readouterr().out

    shot = screenshot(page, tmp_path / "shot.png")
    dark_share, spread = _not_blank(shot)
    assert dark_share > 0.02 and spread > 0.05, f"the screenshot looks blank ({dark_share:.3f}, {spread:.3f})"

    dom, images, loaded = loaded_dom(page)
    pngs = sorted(out.glob("*/*.png"))
    assert images == len(pngs) > 0, f"{images} images on the page, {len(pngs)} PNGs written"
    assert loaded == images, f"{images - loaded} of {images} images did not load"
    text = html.unescape(dom)
    decisions = _decisions(json.loads(receipt.read_text()))
    for d in decisions:
        assert d in text, f"decision not on the page: {d[:80]}"
    if not decisions:  # a benchmark of one recipe compares nothing, and its page says so first
        assert "no decision: serve bench measures one recipe" in text
    assert "Qualification boundary" in text


def _drift_counts(drift: list[dict]) -> tuple[int, int, int]:
    """(flagged, checked and not flagged, could not run) of a drift[] list, read from its raw fields: a check without
    a spread of other runs (fewer than 2 between the first and the last run) could not run."""
    unchecked = sum(1 for d in drift if d.get("other_runs_spread_percent") is None)
    flagged = sum(1 for d in drift if d.get("other_runs_spread_percent") is not None and d["flagged"])
    return flagged, len(drift) - unchecked - flagged, unchecked


@pytest.mark.slow
@pytest.mark.timeout(900)  # the first test to ask for the functional PoC waits for it (tests/conftest.py)
def test_a_functional_poc_report_labels_only_what_its_receipt_records(functional_run, tmp_path: Path) -> None:
    """The functional PoC's page (CPU, test server): no empty chart, every chart drawn with data, no label the receipt
    contradicts (no "published example" for a workload without one, no GPU "none" in a title, drift worded as the
    receipt's check went), and each section's reason stated once, in the head."""
    import re

    from infercrane.receipts.validate import load_receipt
    from infercrane.report.build import receipt_report

    _, receipt = functional_run
    doc = load_receipt(receipt).document
    assert doc["evidence_class"] == "functional-check" and doc["custom_kernel"]["cpu"]["measurements"] == []
    out = tmp_path / "report"
    assert main(["report", str(receipt), "--out", str(out)]) == 0
    page = out / "index.html"
    dark_share, spread = _not_blank(screenshot(page, tmp_path / "shot.png"))
    assert dark_share > 0.02 and spread > 0.05, f"the screenshot looks blank ({dark_share:.3f}, {spread:.3f})"
    dom, images, loaded = loaded_dom(page)
    assert images == loaded == len(list(out.glob("*/*.png"))) > 0
    text = html.unescape(dom)
    alts = [html.unescape(a) for a in re.findall(r'<img [^>]*alt="([^"]*)"', dom)]
    titles = [html.unescape(re.sub(r"<[^>]+>", "", h)) for h in re.findall(r"<h3>(.*?)</h3>", dom, re.S)]
    captions = [html.unescape(c) for c in re.findall(r"<caption>(.*?)</caption>", dom, re.S)]

    # no empty chart: every figure on the page is one the report drew with data in each of its axes; what the
    # kernel screen checked is drawn, nothing is drawn as timed
    figures = [f for s in receipt_report(receipt).sections for f in s.figures]
    assert sorted(alts) == sorted(f.title for f in figures)
    for f in figures:
        for ax in f.fig.axes:
            if ax.get_visible():
                drawn = sum(len(line.get_xdata()) for line in ax.get_lines()) + len(ax.collections) + len(ax.patches)
                assert drawn > 0, f"{f.title}: an axes with no data ({ax.get_title()})"
    assert "Correctness per implementation and row count" in alts
    assert not any("nothing timed" in a or a.startswith("Time per call") for a in alts), alts

    # no label the receipt contradicts
    public = doc["public_workload_reproduction"]
    if public["published_example"] is None:
        labels = " | ".join(alts + titles + captions).replace("no published example", "")
        assert "published example" not in labels, labels
    assert not any(re.search(r"\bnone\b", t) for t in titles), titles  # no GPU "none"
    assert any("CPU (functional check)" in t for t in titles), titles
    for drift in (doc["paired_aiperf"]["drift"],
                  doc["evidence"]["public"]["cpu"]["paired_aiperf"]["drift"]):
        flagged, clean, unchecked = _drift_counts(drift)
        assert (f"{flagged} flagged, {clean} checked and not flagged, {unchecked} could not run") in text

    # each section's reason once: in the head, not again under the evidence
    head, evidence = text.split("Qualification boundary", 1)
    reasons = [doc[k]["reason"] for k in ("custom_kernel", "paired_aiperf", "public_workload_reproduction")]
    for reason in reasons:
        assert reason in head and reason not in evidence, reason[:80]

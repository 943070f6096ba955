"""The report as a person sees it: each committed receipt kind rendered by ``infercrane report`` and opened in
headless Chromium. The screenshot is not blank, every image on the page loaded, and the receipt's decision text is
on the page. Chromium is Debian's ``chromium`` package, installed on CI by ``.ci/run``; elsewhere without it these
tests skip."""
from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from report_browser import loaded_dom, screenshot

from infercrane.cli import main

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

BENCH = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
KINDS = {
    "kernel-screen-v3": BENCH / "2026-12-01-h200-kernel-two-ops/fused_add_rmsnorm.json",
    "kernel-screen-v2": BENCH / "2026-12-01-h200-kernel/kernel-screen.json",
    "serving-ab": BENCH / "2026-12-01-h200-serving/seed-paired-eager-vs-compiled.json",
    "serving-two-drivers": BENCH / "2026-12-01-h200-serving/seed-paired-compiled-two-drivers.json",
    "serving-public": BENCH / "2026-12-01-h200-serving/public-1000-compiled.json",
    "poc": BENCH / "2026-12-01-h200-poc/poc.json",
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

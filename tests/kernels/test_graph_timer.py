"""benchmarks/graph_timer.py: reading a screen's graph cells from its receipt, and the level-matched comparison."""
from __future__ import annotations

import json

import pytest

from bench_scripts import load_script


def _receipt(tmp_path, medians_by_trial):
    """A receipt holding one graph cell of 'triton' at one row: per trial, graphs with the given medians."""
    from infercrane.kernels.harness.placement import draw

    blocks = []
    for t, meds in enumerate(medians_by_trial):
        graphs, samples = [], []
        for g, m in enumerate(meds):
            graphs.append({"condition": draw(7, t * len(meds) + g).model_dump(), "first_sample": 3 * g, "samples": 3})
            samples += [m, m, m]
        blocks.append({"trial": t, "graphs": graphs, "samples_us": samples, "rejected": []})
    doc = {"result": {"spec": {"op": "fused_add_rmsnorm"}, "implementations": [
        {"key": "triton", "timings": [{"mode": "graph", "rows": 1, "calls_per_sample": 800, "blocks": blocks},
                                      {"mode": "launch", "rows": 1, "calls_per_sample": 200, "blocks": []}]}]}}
    path = tmp_path / "k.json"
    path.write_text(json.dumps(doc))
    return path


def test_cells_calls_and_conditions_come_from_the_receipt(tmp_path):
    gt = load_script("graph_timer")
    cells, screen, op = gt.receipt_cells(_receipt(tmp_path, [[1.0, 1.2], [1.0, 1.0]]))
    assert op == "fused_add_rmsnorm" and list(cells) == [("triton", 1)]
    assert cells[("triton", 1)]["calls"] == 800
    assert [[c["index"] for c in t] for t in cells[("triton", 1)]["trials"]] == [[0, 1], [2, 3]]
    assert screen[("triton", 1)] == {0: 1.0, 1: 1.2, 2: 1.0, 3: 1.0}


def test_levels_are_matched_level_to_level(tmp_path):
    gt = load_script("graph_timer")
    _, screen, _ = gt.receipt_cells(_receipt(tmp_path, [[1.07, 1.25], [1.25, 1.25]]))
    # the standalone run saw the two levels in other proportions: the means differ, the levels agree
    records = [{"impl": "triton", "rows": 1, "index": i, "median_us": m} for i, m in
               enumerate([1.07, 1.07, 1.07, 1.25])]
    [row] = gt.compare(records, screen)
    assert row["difference"] == pytest.approx((1.07 + 3 * 1.25) / (3 * 1.07 + 1.25) - 1.0)
    assert abs(row["difference"]) > gt.COMPARE_LIMIT
    assert row["level_matched"] == pytest.approx(0.0) and row["within_limit"]
    off = [{"impl": "triton", "rows": 1, "index": i, "median_us": 1.15} for i in range(4)]
    [row] = gt.compare(off, screen)
    assert not row["within_limit"]  # a timer that reads between the levels matches neither

"""``benchmarks/receipt_paths.py``: two receipts' field paths outside provenance, and what one lacks."""
from __future__ import annotations

import json

from bench_scripts import load_script


def test_paths_fold_list_positions_and_skip_provenance(tmp_path):
    mod = load_script("receipt_paths")
    doc = {"a": {"b": [{"c": 1}, {"c": 2, "d": None}]}, "provenance": {"x": 1}, "content_sha256": "h"}
    assert mod.field_paths(doc) == {".a.b[].c", ".a.b[].d"}
    other = {"a": {"b": [{"c": 1}]}, "e": 3, "provenance": {"y": 2}}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    (tmp_path / "b.json").write_text(json.dumps(other))
    lines = mod.compare(str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert lines[0].endswith("only in the first: 1; only in the second: 1")
    assert lines[1:] == ["  only in the first: .a.b[].d", "  only in the second: .e"]

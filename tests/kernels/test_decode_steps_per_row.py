"""A decode step per row count: each decision row's Amdahl ceiling divides by the step of its own decode batch, a row
without a step gets no ceiling, the receipt re-decides itself from its steps, and `kernel decide --per-row` reads the
steps from a serving receipt's TPOT at concurrency = rows. One-step receipts stay as they were."""
from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from evidence import archived
from test_harness_runner import GOOD, _synthetic_device

from infercrane.cli import main
from infercrane.decide.policy import load_policy
from infercrane.kernels.receipt import build_document
from infercrane.hashing import HASH_FIELD, config_hash, content_hash
from infercrane.receipts.models_v3 import DecodeStep
from infercrane.receipts.validate import check_document, load_receipt

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
H200_KERNEL = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")
H200_PAIRED = REPO / "docs/benchmarks/2026-12-01-h200-serving/seed-paired-eager-vs-compiled.json"
PROV = {
    "infercrane_version": "0.1.0", "git_commit": None, "git_dirty": None,
    "command_line": ["infercrane", "kernel", "screen"], "config": {}, "config_sha256": config_hash({}), "run_id": "r1",
    "hardware": {"gpu": "synthetic", "compute_capability": "9.0", "cpu": "x", "cpu_count": 2, "host": "h",
                 "platform": "linux"},
    "software": {"torch": "2"},
}


def _prov() -> dict:
    """PROV stamped now: a receipt is recorded after the screen it holds."""
    return PROV | {"recorded_at": datetime.now(timezone.utc).isoformat()}


def _rehash(doc):
    doc = {k: v for k, v in doc.items() if k != HASH_FIELD}
    doc[HASH_FIELD] = content_hash(doc)
    return doc


@pytest.fixture
def timed_result(monkeypatch):
    from infercrane.kernels.harness.runner import screen
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

    _synthetic_device(monkeypatch, [])
    spec = FusedAddRMSNormSpec(hidden_size=128, eps=1e-6, rows=(8, 64), num_layers=28)
    return screen(spec, ["eager"], modes=["graph"], trials=4, samples_per_trial=4, candidate=GOOD, isolate=False)


def test_each_row_divides_by_its_own_step(timed_result):
    steps = [DecodeStep(ms=2.0, rows=8, source="test: c=8"), DecodeStep(ms=4.0, rows=64, source="test: c=64")]
    doc = _rehash(build_document(timed_result, load_policy("kernel"), provenance=_prov(), model_source="test",
                                 decode_step=steps))
    assert check_document(doc)[1] == []
    assert doc["decode_step"] is None and [s["rows"] for s in doc["decode_steps"]] == [8, 64]
    by_rows = {a["rows"]: a for a in doc["amdahl"]}
    assert by_rows[8]["decode_step_ms"] == 2.0 and by_rows[64]["decode_step_ms"] == 4.0
    assert by_rows[8]["decode_step_source"] == "test: c=8"
    # the same op time is a larger share of the shorter step
    assert by_rows[8]["op_share"] / by_rows[8]["baseline_t_us"] > by_rows[64]["op_share"] / by_rows[64]["baseline_t_us"]
    edited = copy.deepcopy(doc)
    edited["decode_steps"][1]["ms"] = 8.0
    assert any(p.startswith("amdahl") for p, _ in check_document(_rehash(edited))[1])


def test_a_row_without_a_step_has_no_ceiling(timed_result):
    doc = _rehash(build_document(timed_result, load_policy("kernel"), provenance=_prov(), model_source="test",
                                 decode_step=[DecodeStep(ms=2.0, rows=8, source="test: c=8")]))
    assert check_document(doc)[1] == []
    assert [a["rows"] for a in doc["amdahl"]] == [8]


def test_one_step_receipts_keep_their_shape(timed_result):
    doc = _rehash(build_document(timed_result, load_policy("kernel"), provenance=_prov(), model_source="test",
                                 decode_step=DecodeStep(ms=2.0, source="user: --decode-step-ms")))
    assert "decode_steps" not in doc and check_document(doc)[1] == []
    assert {a["decode_step_ms"] for a in doc["amdahl"]} == {2.0} and len(doc["amdahl"]) == 2


@pytest.mark.parametrize("steps,words", [
    ({"decode_step": {"ms": 2.0, "source": "x"}, "decode_steps": [{"ms": 2.0, "source": "x", "rows": 8}]},
     "both given"),
    ({"decode_steps": [{"ms": 2.0, "source": "x"}]}, "names the row count"),
    ({"decode_steps": [{"ms": 2.0, "source": "x", "rows": 8}, {"ms": 3.0, "source": "y", "rows": 8}]},
     "more than once"),
    ({"decode_step": {"ms": 2.0, "source": "x", "rows": 8}}, "goes in decode_steps"),
])
def test_inconsistent_steps_do_not_validate(timed_result, steps, words):
    doc = build_document(timed_result, load_policy("kernel"), provenance=_prov(), model_source="test")
    doc = _rehash(doc | steps)
    problems = check_document(doc)[1]
    assert any(words in m for _, m in problems), problems


def test_kernel_decide_per_row_reads_the_serving_receipt(tmp_path):
    out = tmp_path / "per-row.json"
    assert main(["kernel", "decide", str(H200_KERNEL), "--serving-receipt", str(H200_PAIRED), "--per-row",
                 "--out", str(out)]) == 0
    doc = load_receipt(out).document
    runs = json.loads(H200_PAIRED.read_text())["runs"]
    assert [s["rows"] for s in doc["decode_steps"]] == [1, 8, 32]  # the concurrencies the serving receipt ran
    for s in doc["decode_steps"]:
        assert f"concurrency {s['rows']}" in s["source"] and "recipe 'compiled'" in s["source"]
        assert any(r["concurrency"] == s["rows"] and r["recipe"] == "compiled" for r in runs)
    assert sorted(a["rows"] for a in doc["amdahl"]) == [1, 8, 32]


def test_per_row_needs_a_serving_receipt(tmp_path, capsys):
    assert main(["kernel", "decide", str(H200_KERNEL), "--per-row", "--decode-step-ms", "2",
                 "--out", str(tmp_path / "x.json")]) == 2
    assert "--per-row reads one decode step per row count from a serving receipt" in capsys.readouterr().err

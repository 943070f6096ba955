"""`infercrane serve decide`: a finished serving receipt decided again from its raw runs, without re-measuring.
The H200 receipts under docs/benchmarks/ are the inputs: re-deciding one with the packaged policy reproduces its
statistics and decision exactly; another policy changes the verdict and the provenance says where it came from."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.errors import InputError
from infercrane.receipts.validate import load_receipt
from infercrane.serving.receipt import plan_result_from_receipt

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "2026-12-01-h200-serving"
AB = DOCS / "seed-paired-eager-vs-compiled.json"
BENCH = DOCS / "seed-paired-compiled-two-drivers.json"


def test_redeciding_with_the_same_policy_reproduces_the_paired_block(tmp_path: Path) -> None:
    out = tmp_path / "again.json"
    # the receipt's own bootstrap (2000 resamples, one seed for every statistic): the packaged policy draws more
    # resamples and a seed per statistic since
    same = tmp_path / "same.yaml"
    same.write_text("schema_version: infercrane.serving-policy/v1\nbootstrap_resamples: 2000\n"
                    "per_statistic_seed: false\n")
    assert main(["serve", "decide", str(AB), "--out", str(out), "--policy", str(same)]) == 0
    old, new = load_receipt(AB).document, load_receipt(out).document
    labels = ("interval_method", "test_method", "verdict_rule")  # recorded since; the old receipt predates them
    for s in new["paired_aiperf"]["statistics"]:
        assert s["interval_method"].startswith("percentile bootstrap") and s["test_method"].startswith("Mann-Whitney")
        assert "TOST" in s["verdict_rule"]
    strip = lambda block: {**{k: v for k, v in block.items() if k != "drift"},  # noqa: E731
                           "statistics": [{k: v for k, v in s.items() if k not in labels} for s in block["statistics"]]}
    assert strip(new["paired_aiperf"]) == old["paired_aiperf"]
    drift = {(d["recipe"], d["concurrency"]): d for d in new["paired_aiperf"]["drift"]}  # recorded since
    assert set(drift) == {(r, c) for r in ("eager", "compiled") for c in (1, 8, 32)}
    assert all(d["first_run_index"] == 0 and d["last_run_index"] == 4 for d in drift.values())
    assert new["runs"] == old["runs"] and new["engines"] == old["engines"] and new["model"] == old["model"]
    cfg = new["provenance"]["config"]
    assert cfg["decided_from"] == {"receipt": str(AB), "receipt_sha256": old["content_sha256"],
                                   "which_was_decided_from": None}
    assert new["provenance"]["run_id"] == old["provenance"]["run_id"]
    assert new["provenance"]["hardware"] == old["provenance"]["hardware"]


def test_another_policy_changes_the_verdict(tmp_path: Path) -> None:
    policy = tmp_path / "strict.yaml"
    policy.write_text("schema_version: infercrane.serving-policy/v1\nmin_runs_per_arm: 6\n")
    out = tmp_path / "strict.json"
    assert main(["serve", "decide", str(AB), "--out", str(out), "--policy", str(policy)]) == 0
    pa = load_receipt(out).document["paired_aiperf"]
    assert load_receipt(AB).document["paired_aiperf"]["decision_code"] == "accept"
    assert pa["decision_code"] == "inconclusive"


def test_a_bench_receipt_gets_the_drivers_agreement_at_every_concurrency(tmp_path: Path) -> None:
    policy = tmp_path / "loose.yaml"
    policy.write_text("schema_version: infercrane.serving-policy/v1\ndriver_agreement_percent: 20\n")
    out = tmp_path / "bench.json"
    assert main(["serve", "decide", str(BENCH), "--out", str(out), "--policy", str(policy)]) == 0
    doc = load_receipt(out).document
    agreement = doc["bench"]["driver_agreement"]
    assert sorted({a["concurrency"] for a in agreement}) == [1, 8, 32]
    assert all(a["target_percent"] == 20 for a in agreement)
    assert all(a["within_target"] == (abs(a["difference_percent"]) <= 20) for a in agreement)
    assert doc.get("public_workload_reproduction") is None  # three concurrencies: not the seed's one-point block


def test_an_incomplete_or_foreign_receipt_is_refused() -> None:
    doc = json.loads(AB.read_text())
    with pytest.raises(InputError, match="incomplete"):
        plan_result_from_receipt(doc | {"complete": False, "incomplete_reason": "interrupted"})
    prov = doc["provenance"] | {"config": doc["provenance"]["config"] | {"command": "kernel screen"}}
    with pytest.raises(InputError, match="not a serving receipt"):
        plan_result_from_receipt(doc | {"provenance": prov})


def test_a_run_that_cannot_be_rebuilt_exactly_is_refused() -> None:
    doc = json.loads(AB.read_text())
    doc["runs"][0]["status"] = "failed"  # an ok run's numbers with a failed status: no RunMetrics gives that
    with pytest.raises(InputError, match=r"runs\[0\] cannot be rebuilt exactly"):
        plan_result_from_receipt(doc)

"""Prediction against measurement, on the committed H200 kernel and paired receipts (the PoC's), with the paired
A/B's intervals replaced to stand for a kernel A/B's."""
from __future__ import annotations

import copy
import io
import json
import tarfile
from pathlib import Path

import pytest

from infercrane.decide.prediction import predict_against_measurement, qualifier

TAR = Path(__file__).resolve().parents[2] / "docs/benchmarks/2026-12-01-h200-poc/poc-evidence.tar.xz"


@pytest.fixture(scope="module")
def receipts():
    with tarfile.open(TAR) as tf:
        read = lambda name: json.load(io.TextIOWrapper(tf.extractfile(name)))  # noqa: E731
        return read("./poc/kernel.json"), read("./poc/paired.json")


def _with_interval(serving, lo, hi):
    doc = copy.deepcopy(serving)
    for s in doc["paired_aiperf"]["statistics"]:
        if s["metric"] == "output_tok_s":
            s.update(ci_low=lo, ci_high=hi, ratio_b_over_a=(lo + hi) / 2)
    return doc


def _predict(kernel, serving):
    return predict_against_measurement(kernel, serving, candidate="triton", incumbent="torch_compile",
                                       calls_per_step=56, input_tokens=128)


def test_the_prediction_is_amdahl_on_arm_as_decode_step(receipts):
    kernel, serving = receipts
    out = _predict(kernel, _with_interval(serving, 0.99, 1.01))
    assert out["arm_a"] == "eager" and [r["concurrency"] for r in out["concurrencies"]] == [1, 8, 32]
    row = out["concurrencies"][0]
    a = row["amdahl"]
    # the decode step is the median of eager's TPOT p50 at c = 1; the op times are the kernel screen's trial-level
    # geometric means at 1 row, graph mode
    tpots = sorted(r["tpot_p50_ms"] for r in serving["runs"] if r["recipe"] == "eager" and r["concurrency"] == 1)
    assert a["decode_step_ms"] == tpots[len(tpots) // 2]
    comp = next(c for c in kernel["result"]["comparisons"] if c["candidate"] == "triton"
                and c["reference"] == "torch_compile" and c["rows"] == 1 and c["mode"] == "graph")
    assert a["candidate_t_us"] == comp["speedup"]["candidate_t_us"]
    assert row["predicted_ratio"] == pytest.approx(1 + a["expected_gain_percent"] / 100)
    # a gain of a few hundredths of a percent inside a ±1 % interval: consistent, and it confirms nothing
    assert row["verdict"] == "CONSISTENT" and row["informative"] is False
    # prefill: 128 rows were screened (the prompt alone), 128 x c beyond c = 1 were not
    assert [s["rows"] for s in row["prefill"]["steps"]] == [128]
    assert [s["rows"] for s in out["concurrencies"][1]["prefill"]["steps"]] == [128]


def test_a_measurement_below_the_prediction_says_so(receipts):
    kernel, serving = receipts
    rows = _predict(kernel, _with_interval(serving, 0.90, 0.95))["concurrencies"]
    assert {r["verdict"] for r in rows} == {"BELOW"}
    # an interval wider than the predicted effect still refutes a prediction it does not hold
    assert all(not r["informative"] and qualifier(r) == "prediction outside the interval" for r in rows)


def test_a_wide_consistent_reading_is_said_to_confirm_nothing(receipts):
    kernel, serving = receipts
    rows = _predict(kernel, _with_interval(serving, 0.80, 1.20))["concurrencies"]
    assert {r["verdict"] for r in rows} == {"CONSISTENT"} and not any(r["informative"] for r in rows)
    assert {qualifier(r, long=True) for r in rows} == {"the interval is wider than the predicted effect"}
    assert qualifier({"verdict": "CONSISTENT", "informative": True}) == ""


def test_rows_the_screen_lacks_give_no_prediction(receipts):
    kernel, serving = receipts
    doc = copy.deepcopy(serving)
    for r in doc["runs"]:
        r["concurrency"] = 64 if r["concurrency"] == 32 else r["concurrency"]
    for s in doc["paired_aiperf"]["statistics"]:
        s["concurrency"] = 64 if s["concurrency"] == 32 else s["concurrency"]
    last = _predict(kernel, doc)["concurrencies"][-1]
    assert last["concurrency"] == 64 and last["verdict"] == "NO PREDICTION" and last["predicted_ratio"] is None
    assert "at 64 rows" in last["why"]

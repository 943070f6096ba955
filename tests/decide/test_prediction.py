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


def _read():
    with tarfile.open(TAR) as tf:
        read = lambda name: json.load(io.TextIOWrapper(tf.extractfile(name)))  # noqa: E731
        return read("./poc/kernel.json"), read("./poc/paired.json")


def _with_verdicts(kernel):
    """The committed screen's comparisons as they would read without flags: each with its speedup's verdict (the
    committed ones are FLAGGED, by the timers' disagreement, and a prediction reads only comparisons with a
    verdict)."""
    doc = copy.deepcopy(kernel)
    for c in doc["result"]["comparisons"]:
        c.update(flags=[], verdict=c["speedup"]["verdict"])
    return doc


@pytest.fixture(scope="module")
def receipts():
    kernel, serving = _read()
    return _with_verdicts(kernel), serving


@pytest.fixture(scope="module")
def committed():
    return _read()


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


def _pair(kernel, rows):
    return next(c for c in kernel["result"]["comparisons"] if c["candidate"] == "triton"
                and c["reference"] == "torch_compile" and c["rows"] == rows and c["mode"] == "graph")


def test_a_comparison_without_a_verdict_predicts_nothing(committed, receipts):
    """Only comparisons with a verdict are read: the committed screen's are FLAGGED (its timers disagreed), so no
    concurrency is predicted, each saying why; an INSUFFICIENT one (too few trials) reads the same."""
    kernel, serving = committed
    assert {_pair(kernel, r)["verdict"] for r in (1, 8, 32)} == {"FLAGGED"}
    rows = _predict(kernel, _with_interval(serving, 0.99, 1.01))["concurrencies"]
    for row in rows:
        assert row["verdict"] == "NO PREDICTION" and row["predicted_ratio"] is None
        assert row["why"] == (f"the kernel comparison of triton against torch_compile at {row['concurrency']} rows "
                              "(graph mode) carries no verdict (FLAGGED), so it predicts nothing")
        assert "amdahl" not in row
    short = copy.deepcopy(receipts[0])
    _pair(short, 8)["verdict"] = "INSUFFICIENT"
    _pair(short, 128)["verdict"] = "FLAGGED"  # a prefill row without a verdict is left out
    rows = _predict(short, _with_interval(serving, 0.99, 1.01))["concurrencies"]
    assert [r["verdict"] for r in rows] == ["CONSISTENT", "NO PREDICTION", "CONSISTENT"]
    assert "carries no verdict (INSUFFICIENT)" in rows[1]["why"]
    assert rows[0]["prefill"]["steps"] == []


def test_a_block_records_that_it_reads_verdicts_only_and_an_older_block_derives_as_written(committed):
    from infercrane.decide.prediction import derive_prediction, kernel_in_serving, used_comparisons

    kernel, serving = committed
    block = kernel_in_serving(kernel, serving, candidate="triton", incumbent="torch_compile", calls_per_step=56,
                              input_tokens=128, kernel_source="kernel.json")
    inputs = block["inputs"]
    # every comparison of the pair is embedded with its verdict; the prediction reads those with one
    assert inputs["verdicts_only"] is True
    assert inputs["kernel_comparisons"] == used_comparisons(kernel, "triton", "torch_compile", "graph")
    assert {c["verdict"] for c in inputs["kernel_comparisons"]} >= {"FLAGGED"}
    assert {r["verdict"] for r in block["prediction"]["concurrencies"]} == {"NO PREDICTION"}
    # a block written before the rule (no verdicts_only) is derived again from every comparison it embeds, as it was
    older = {k: v for k, v in inputs.items() if k != "verdicts_only"}
    again = derive_prediction(older, serving)
    assert all(r["predicted_ratio"] is not None for r in again["concurrencies"])

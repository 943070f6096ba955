"""The semantic-quality gate end to end: ``serve ab`` against two test servers whose toy model runs a norm kernel
(``--norm-kernel``): a kernel that ignores eps fails the gate and the A/B is rejected whatever its speed; a correct
kernel passes; ``receipt validate`` derives the gate again from the engines' recorded answers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.receipts.validate import load_receipt
from tests.receipt_edits import problems

pytestmark = pytest.mark.slow
KERNELS = Path(__file__).with_name("wrong_kernels.py")


def _recipe(path: Path, name: str, model: Path, itl_ms: int, norm_kernel: str | None = None) -> Path:
    extra = f', "--norm-kernel", "{norm_kernel}"' if norm_kernel else ""
    path.write_text(
        "schema_version: infercrane.serving-recipe/v1\n"
        f"name: {name}\nengine: testserver\nmodel: {model}\n"
        f'engine_args: ["--ttft-ms", "2", "--itl-ms", "{itl_ms}"{extra}]\nenv: {{}}\nworkarounds: []\n')
    return path


def _policy(path: Path) -> Path:
    # 25 items per task (100): with every answer right and unchanged, non-inferiority at 0.1 needs 25 items
    path.write_text("schema_version: infercrane.serving-policy/v1\nquality:\n  items_per_task: 25\n  seed: 3\n"
                    "  max_tokens: 16\n  accuracy_margin: 0.1\n  confidence: 0.95\n  top_logprobs: 5\n  max_divergence_gap: 1.0\n"
                    "  max_logprob_difference: 0.5\n")
    return path


def _ab(tmp_path: Path, stand_in_dir: Path, kernel: str, name: str) -> dict:
    a = _recipe(tmp_path / f"{name}-a.yaml", "incumbent", stand_in_dir, 4)
    b = _recipe(tmp_path / f"{name}-b.yaml", "candidate", stand_in_dir, 2, f"{KERNELS}:{kernel}")
    out = tmp_path / f"{name}.json"
    rc = main(["serve", "ab", str(a), str(b), "--runs", "3", "--concurrency", "2", "--request-count", "8",
               "--order", "sequential", "--quality-gate", "on", "--policy", str(_policy(tmp_path / "policy.yaml")),
               "--out", str(out)])
    assert rc == 0
    return load_receipt(out).document | {"_path": str(out)}


def test_a_kernel_that_ignores_eps_fails_the_gate_and_is_rejected(tmp_path: Path, stand_in_dir: Path,
                                                                    offline_env) -> None:
    doc = _ab(tmp_path, stand_in_dir, "fused_add_rmsnorm_eps_ignored", "wrong")
    gate = doc["quality_gate"]
    assert gate["ran"] is True and gate["verdict"] == "FAIL"
    assert (gate["reference"], gate["candidate"]) == ("incumbent", "candidate")
    assert gate["items"]["items"] == 100 and gate["items"]["seed"] == 3
    assert gate["accuracy"]["reference"] == 1.0 and gate["accuracy"]["candidate"] < 0.9
    assert gate["logprob"]["verdict"] == "FAIL"
    pa = doc["paired_aiperf"]
    assert pa["decision_code"] == "reject" and "fails the semantic-quality gate" in pa["decision"]
    assert pa["reason"].startswith("quality gate failed:")
    assert "semantic quality gated" in doc["qualification_boundary"]
    assert doc["provenance"]["config"]["options"]["quality_gate"] == {"mode": "on", "run": True,
                                                                     "why": "asked (--quality-gate on)"}
    answers = {e["recipe"]: e["quality_answers"] for e in doc["engines"]}
    assert len(answers["incumbent"]["answers"]) == 100 and all(a["logprobs"] for a in answers["candidate"]["answers"])


def test_a_correct_kernel_passes_and_validation_derives_the_gate_again(tmp_path: Path, stand_in_dir: Path,
                                                                        offline_env) -> None:
    doc = _ab(tmp_path, stand_in_dir, "fused_add_rmsnorm_correct", "right")
    gate = doc["quality_gate"]
    assert gate["verdict"] == "PASS" and gate["token_agreement"]["identical_items"] == 100
    assert gate["logprob"]["max_abs_difference"] == 0.0
    assert doc["paired_aiperf"]["decision_code"] != "reject" or "quality" not in doc["paired_aiperf"]["reason"]
    path = Path(doc["_path"])
    # an edited answer: the gate derived again no longer matches the receipt's
    raw = json.loads(path.read_text())
    cand = next(e for e in raw["engines"] if e["recipe"] == "candidate")
    cand["quality_answers"]["answers"][0]["text"] = " wrong"
    cand["quality_answers"]["answers"][0]["tokens"][0] = 7
    found = problems(raw)
    assert any("quality_gate" in where for where, _ in found), found

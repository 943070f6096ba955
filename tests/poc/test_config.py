"""The PoC config: the shipped ones load; a bad name (recipe, workload, op, implementation, GPU type) or a bad
combination is one line naming the field and the fix, before anything runs or is written."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from infercrane.cli import main
from infercrane.poc.config import CONFIGS_DIR, load_config, shipped_configs


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_the_shipped_configs_load():
    assert {"seed-reproduction", "functional"} <= set(shipped_configs())
    seed, _ = load_config("seed-reproduction")
    assert seed.model == "Qwen/Qwen3-0.6B" and seed.gpu == "any"
    assert seed.kernel.candidates == ["triton", "cuda"]
    assert seed.kernel.baselines == ["eager", "torch_compile", "vllm_vendor"]
    assert seed.paired.recipes == ["eager", "compiled"] and seed.paired.workload == "seed-paired"
    assert seed.paired.runs == 4 and seed.public.runs == 12  # 12 and 12 window pairs: above the policy's min_pairs
    public = seed.public.workload_overrides()  # the public shape in windows of three rounds of 100 requests
    assert public["request_count"] == 300 and public["warmup_requests"] == 100  # and one round of warm-up
    assert "window_s" not in public and "warmup_s" not in public
    assert seed.paired.workload_overrides()["window_s"] == 8
    assert seed.public.recipes == ["balanced", "throughput"] and seed.public.workload == "public-1000"
    functional, _ = load_config("functional")
    assert functional.functional and functional.paired.recipes == ["testserver", "testserver-fast"]


def _config(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    data = yaml.safe_load((CONFIGS_DIR / "functional.yaml").read_text())
    edit(data)
    path = tmp_path / "poc.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        *head, last = path.split(".")
        for k in head:
            d = d[k]
        d[last] = value
    return edit


BAD: dict[str, tuple[Callable[[dict], None], list[str]]] = {
    "op": (_set("kernel.op", "fused_softmax"), ["kernel.op", "unknown operator 'fused_softmax'", "fused_add_rmsnorm"]),
    "candidate": (_set("kernel.candidates", ["triton", "cutlass"]), ["kernel", "'cutlass'", "give candidates among"]),
    "baseline as candidate": (_set("kernel.candidates", ["eager"]), ["'eager' is not a candidate"]),
    "GPU type": (_set("gpu", "h900"), ["gpu", "unknown GPU type 'h900'", "give any", "h100"]),
    "recipe": (_set("paired.recipes", ["testserver", "testserver-turbo"]),
               ["paired.recipes[1] 'testserver-turbo'", "no recipe named 'testserver-turbo'", "shipped recipes:"]),
    "workload": (_set("public.workload", "public-9000"),
                 ["public.workload 'public-9000'", "no workload named", "shipped workloads:"]),
    "public sweep": (_set("public.concurrency", [1, 4]), ["public.workload", "one concurrency point",
                                                          "public.concurrency: [N]"]),
    "counted baseline left out": (_set("kernel.baselines", ["eager", "torch_compile"]),
                                  ["kernel.baselines", "counts vllm_vendor", "add it"]),
    "unknown key": (_set("serving.warmup", 3), ["serving.warmup", "unknown key"]),
    "one recipe": (_set("paired.recipes", ["testserver"]), ["paired.recipes"]),
    "same recipe twice": (_set("public.recipes", ["testserver", "testserver"]), ["two different recipes"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_config_is_one_line_before_anything_runs(name, tmp_path, monkeypatch, capsys):
    edit, words = BAD[name]
    path = _config(tmp_path, edit)
    monkeypatch.chdir(tmp_path)
    assert main(["poc", str(path)]) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    for w in words:
        assert w in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()  # nothing written: not even a stand-in


@pytest.mark.skipif(_cuda(), reason="checks a machine without a GPU")
def test_a_gpu_config_on_a_cpu_machine_says_what_to_run_instead(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["poc", "seed-reproduction"]) == 3
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert "needs a CUDA GPU" in line and "infercrane poc functional" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(_cuda(), reason="checks a machine without a GPU")
def test_without_a_config_a_cpu_machine_runs_the_functional_poc():
    from infercrane.commands.poc import default_config

    name, why = default_config()
    assert name == "functional" and "no CUDA GPU" in why


def test_an_out_with_sections_asks_for_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "kernel.json").write_text("{}")
    assert main(["poc", "functional", "--out", str(tmp_path / "p.json")]) == 2
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert "already holds section receipts (kernel)" in line and f"--resume {tmp_path / 'p.json'}" in line


def test_resume_of_nothing_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["poc", "functional", "--resume", str(tmp_path / "nowhere")]) == 2
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert "no PoC run there" in line


def test_a_relative_recipe_path_is_read_beside_the_config(tmp_path):
    from infercrane.poc.config import resolve_ref

    (tmp_path / "mine.yaml").write_text("x: 1\n")
    assert resolve_ref("mine.yaml", tmp_path / "poc.yaml") == str(tmp_path / "mine.yaml")
    assert resolve_ref("compiled", tmp_path / "poc.yaml") == "compiled"
    assert os.path.isabs(resolve_ref("mine.yaml", tmp_path / "poc.yaml"))


def test_the_committed_h200_paired_section_keeps_its_identity() -> None:
    """A field added to the workload later, at its default, leaves a recorded section's hash as it was, so that
    `poc --resume` still reuses the H200 run's paired A/B (its hash is recorded in the section receipt)."""
    import json
    import tarfile
    from pathlib import Path

    from infercrane.decide.policy import ServingPolicy
    from infercrane.poc.runner import ab_section_sha
    from infercrane.serving.recipes import Recipe
    from infercrane.serving.workload import Workload

    tar = Path(__file__).resolve().parents[2] / "docs/benchmarks/2026-12-01-h200-poc/poc-evidence.tar.xz"
    with tarfile.open(tar) as t:
        doc = json.load(t.extractfile("./poc/paired.json"))
    cfg = doc["provenance"]["config"]
    options = cfg["options"]
    canon = [Recipe.model_validate(r).canonical() | {"model": "stand-in of Qwen/Qwen3-0.6B"}
             for r in cfg["recipes"].values()]
    policy = ServingPolicy.model_validate({k: v for k, v in doc["policy"].items() if k != "workload_notes"})
    sha = ab_section_sha("paired", canon, Workload.model_validate(cfg["workload"]), options["drivers"], policy,
                         options["startup_timeout_s"], options["coresident"])
    assert sha == options["poc_section"]["sha256"]

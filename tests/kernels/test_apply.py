"""``infercrane kernel apply``: the arms it builds, the rows it screens, and its refusals before anything runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from evidence import archived

from infercrane.cli import main
from infercrane.commands.apply import MODES, kernel_recipe, screen_modes, screen_rows
from infercrane.serving.recipes import load_recipe
from infercrane.serving.workload import load_workload


def test_arm_b_is_arm_a_with_the_kernel_inside(tmp_path):
    a = load_recipe("compiled")
    b = kernel_recipe(a, "fused_add_rms_norm", "triton", None)
    assert b.name == "compiled-triton" and b.kernels == {"fused_add_rms_norm": "triton"}
    assert b.engine_args == a.engine_args and b.env == a.env and b.sha256 != a.sha256
    # the shipped recipe of the same content is the same recipe
    assert b.canonical() | {"description": ""} == load_recipe("compiled-triton").canonical() | {"description": ""}
    user = kernel_recipe(load_recipe("eager"), "rms_norm", "user", f"{tmp_path}/k.py:f")
    assert user.candidate == f"{tmp_path.resolve()}/k.py:f" and user.engine_args == ["--enforce-eager"]
    assert MODES == {"compiled": ("compiled", "torch_compile", "graph"), "eager": ("eager", "vllm_vendor", "launch")}


def test_eager_vllm_is_predicted_from_launch_mode_which_sees_the_host_cost_graph_mode_hides():
    """The committed H200 A/B of eager vLLM against eager + the Triton kernel: its own prediction, from a graph-mode
    screen, expected a small gain where the engine lost throughput (BELOW); the launch-mode times of the kernel lab's
    screen on that machine predict a loss, the direction measured."""
    from infercrane.decide.prediction import predict_against_measurement
    from infercrane.receipts.io import read_json

    bench = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
    served = read_json(bench / "2026-12-01-h200-kernel-in-vllm" / "eager-triton.json")
    used = served["kernel_in_serving"]["inputs"]
    assert (used["mode"], used["incumbent"]) == ("graph", "vllm_vendor")  # measured before eager read launch mode
    screen = read_json(archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json"))
    kw = dict(candidate="triton", incumbent="vllm_vendor", calls_per_step=used["calls_per_step"],
              input_tokens=used["input_tokens"])
    graph = predict_against_measurement(screen, served, mode="graph", **kw)
    launch = predict_against_measurement(screen, served, mode=MODES["eager"].timing, **kw)
    assert "(launch mode," in launch["note"] and "(graph mode," in graph["note"]
    for g, lo in zip(graph["concurrencies"], launch["concurrencies"]):
        assert g["predicted_ratio"] > 1.0 > lo["predicted_ratio"], (g["concurrency"], g, lo)
        assert lo["measured"]["ci_high"] < 1.0  # the engine lost throughput at every concurrency


def test_the_screen_covers_every_decode_batch_and_prefill_of_the_workload():
    assert screen_rows(load_workload("seed-paired")) == (1, 8, 32, 128, 1024, 4096)


def test_the_screen_times_each_mode_a_prediction_reads_and_the_one_the_kernel_policy_decides_on(tmp_path,
                                                                                                   monkeypatch):
    """An eager-only apply once screened launch mode alone, and the screen's preflight refused it on a GPU (the kernel
    policy decides on graph timings)."""
    import infercrane.kernels.screen as screen
    from infercrane.decide.policy import load_policy
    from infercrane.errors import InputError
    from infercrane.kernels.config import ScreenConfig
    from infercrane.report.console import console

    assert load_policy("kernel").timing_mode == "graph"
    assert screen_modes(["eager"]) == ("launch", "graph")
    assert screen_modes(["compiled"]) == ("graph",)
    assert screen_modes(["compiled", "eager"]) == ("graph", "launch")
    # the preflight as on a GPU machine (it checks the modes where the screen runs on CUDA)
    monkeypatch.setattr(screen, "_run_device", lambda device: ("cuda", "test"))
    monkeypatch.setattr(screen, "_check_memory", lambda spec, device, con: None)
    out = tmp_path / "kernel.json"

    def prepare(modes):
        cfg = ScreenConfig(op="fused_add_rmsnorm", device="cuda", impls=("triton", "vllm_vendor"), modes=modes)
        return screen.prepare_screen(cfg, out=out, con=console())

    with pytest.raises(InputError, match="decides on 'graph'"):
        prepare(("launch",))
    assert prepare(screen_modes(["eager"])).config.modes == ("launch", "graph")


@pytest.mark.parametrize("argv, code, text", [
    (["kernel", "apply", "--impl", "user"], 2, "--impl user goes with --candidate"),
    (["kernel", "apply", "--op", "silu_and_mul"], 2, "known: fused_add_rms_norm, rms_norm"),
])
def test_bad_options_are_refused_in_one_line(argv, code, text, capsys):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert text in err and len(err.strip().splitlines()) <= 2


def test_without_vllm_it_stops_before_anything_runs(tmp_path, capsys, monkeypatch):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    assert main(["kernel", "apply", "--out", str(tmp_path / "apply")]) == 3
    assert "vllm" in capsys.readouterr().err and not (tmp_path / "apply").exists()


def test_an_earlier_applys_receipts_are_never_overwritten(tmp_path, capsys):
    out = tmp_path / "apply"
    out.mkdir()
    (out / "compiled.json").write_text("{}")
    assert main(["kernel", "apply", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds the compiled receipt" in err and "--kernel-receipt" in err


def test_a_kernel_receipt_without_the_comparison_a_mode_predicts_from_is_refused(tmp_path, capsys):
    """The committed compiled A/B's screen holds triton against torch_compile in graph mode only: enough for compiled
    vLLM, not for eager (vllm_vendor, launch mode); refused before any engine starts."""
    screen = archived("2026-12-01-h200-kernel-in-vllm/evidence-compiled-triton.tar.xz/apply/kernel.json")
    argv = ["kernel", "apply", "--kernel-receipt", str(screen), "--out", str(tmp_path / "apply")]
    assert main([*argv, "--modes", "compiled", "eager"]) == 2
    err = capsys.readouterr().err
    assert "eager vLLM: triton against vllm_vendor in launch mode" in err and "compiled vLLM" not in err
    main([*argv, "--modes", "compiled"])  # goes on (here: to the vLLM preflight)
    assert "no comparison" not in capsys.readouterr().err


def test_each_concurrency_says_what_the_kernel_lab_measured_beside_the_prediction_and_the_measurement():
    """The committed eager apply on SmolLM2 (H100): the console line names why the engine should move (the kernel
    lab's verdict and per-call times the prediction read) and what it measured."""
    import json

    from infercrane.commands.apply import concurrency_line
    from tests.evidence import archived

    doc = json.loads(archived("2026-12-07-h100-real-model/apply-509a92a/apply-evidence.tar.xz/apply/eager.json")
                     .read_text())
    rows = {r["concurrency"]: r for r in doc["kernel_in_serving"]["prediction"]["concurrencies"]}
    assert concurrency_line(rows[8]) == (
        "c=8: kernel lab SLOWER (8.00 vs 7.14 us a call in launch mode), predicted B/A 0.99555, measured 0.9370 "
        "(0.9033–0.9718): BELOW (the prediction lies outside the measured interval)")
    no_lab = {k: v for k, v in rows[8].items() if k != "kernel_verdict"}
    assert concurrency_line(no_lab).startswith("c=8: predicted B/A 0.99555")

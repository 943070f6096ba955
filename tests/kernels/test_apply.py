"""``infercrane kernel apply``: the arms it builds, the rows it screens, and its refusals before anything runs."""
from __future__ import annotations

import pytest

from infercrane.cli import main
from infercrane.commands.apply import MODES, kernel_recipe, screen_rows
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
    assert MODES == {"compiled": ("compiled", "torch_compile"), "eager": ("eager", "vllm_vendor")}


def test_the_screen_covers_every_decode_batch_and_prefill_of_the_workload():
    assert screen_rows(load_workload("seed-paired")) == (1, 8, 32, 128, 1024, 4096)


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

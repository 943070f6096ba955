"""benchmarks/graph_levels_probe.py: how it splits block medians into levels, its refusal without a GPU, and (on a
GPU) that every condition yields one finite median per block."""
from __future__ import annotations

import math

import pytest

from bench_scripts import load_script


def _probe():
    return load_script("graph_levels_probe")


def test_two_levels_are_split_at_the_widest_gap():
    # the H200 screen's shape: 1.10 and 1.29 us blocks
    got = _probe().levels([1.29, 1.10, 1.28, 1.11, 1.29, 1.10])
    assert got["levels"] == 2
    assert (got["low_n"], got["high_n"]) == (3, 3)
    assert got["low_median"] == pytest.approx(1.10)
    assert got["high_median"] == pytest.approx(1.29)
    assert got["widest_gap"] == pytest.approx(1.28 / 1.11 - 1, abs=1e-4)


def test_a_spread_under_the_gap_is_one_level():
    got = _probe().levels([1.20, 1.21, 1.22, 1.215])
    assert got["levels"] == 1
    assert got["widest_gap"] < 0.05


def test_without_a_gpu_it_refuses_with_exit_2(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the refusal is for machines without one")
    assert _probe().main(["--blocks", "2"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_every_condition_gives_a_finite_median_per_block(tmp_path):
    import json

    out = tmp_path / "probe.json"
    assert _probe().main(["--blocks", "2", "--samples", "3", "--calls", "64", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["conditions"]) == set(_probe().CONDITIONS)
    for cond in result["conditions"].values():
        assert len(cond["block_median_us"]) == 2
        assert all(m > 0 and math.isfinite(m) for m in cond["block_median_us"])

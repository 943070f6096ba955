"""A timed screen whose modes leave out the one its policy decides on is refused before any worker starts: it would
measure for minutes, then decide nothing and write no receipt (seen on the H200 with --modes cold)."""
from __future__ import annotations

import pytest

from infercrane.errors import InputError


def test_modes_without_the_policys_timing_mode_are_refused_before_anything_runs(tmp_path, monkeypatch):
    import infercrane.kernels.screen as kernel
    from infercrane.kernels.config import ScreenConfig
    from infercrane.report.console import console

    monkeypatch.setattr(kernel, "_run_device", lambda device: ("cuda", "a GPU, as the screen would see it"))
    started = []
    monkeypatch.setattr(kernel, "_check_memory", lambda *a, **k: started.append("memory checked"))
    config = ScreenConfig(op="rms_norm", modes=("cold",), out=tmp_path / "s.json")
    with pytest.raises(InputError, match="the kernel policy decides on 'graph' timings") as err:
        kernel.prepare_screen(config, out=tmp_path / "s.json", con=console())
    assert "add graph to --modes" in (err.value.hint or "")
    assert started == [] and not (tmp_path / "s.json").exists()
    # with the policy's mode among them, preflight goes on
    ok = ScreenConfig(op="rms_norm", modes=("cold", "graph"), out=tmp_path / "t.json")
    kernel.prepare_screen(ok, out=tmp_path / "t.json", con=console())
    assert started == ["memory checked"]

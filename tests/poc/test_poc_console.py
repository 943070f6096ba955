"""What `infercrane poc` says before it runs anything: its kernel line describes the screen it will run, and for the
functional PoC (no GPU) that is a check with nothing timed, not timing modes and trials it will not use."""
from __future__ import annotations

import pytest

from infercrane.cli import main
from infercrane.errors import InfercraneError


class _Stop(InfercraneError):
    exit_code = 99


def test_the_functional_pocs_kernel_line_says_nothing_is_timed(tmp_path, monkeypatch, capsys) -> None:
    import infercrane.poc.runner as runner

    def stop(plan, **kw):
        raise _Stop("stopped before running (test)")

    monkeypatch.setattr(runner, "run", stop)
    monkeypatch.chdir(tmp_path)  # the stand-in goes under runs/stand-ins here
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    assert main(["poc", "functional", "--out", str(tmp_path / "run" / "poc.json")]) == 99
    lines = [" ".join(ln.split()) for ln in capsys.readouterr().out.split("[poc] ")]
    kernel = next(ln for ln in lines if ln.startswith("kernel: fused_add_rmsnorm"))
    assert "functional: nothing timed" in kernel and "checks per row count" in kernel, kernel
    assert "trials" not in kernel.replace("trials unused", ""), kernel

"""Compiles an engine logged while serving, set against the measured windows (serving/jit.py), on the H200 run's
own engine logs and receipt, and on hand-made lines."""
from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from infercrane.serving.jit import attribute, jit_events, notes

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "docs" / "benchmarks" / "2026-12-01-h200-kernel-in-vllm"
ENGINES = "./apply/compiled-artifacts/engines/"


@pytest.fixture
def utc(monkeypatch):
    """The H200 machine logged in UTC; read its stamps as that machine did."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _runs(doc: dict, arm: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(arm=r["recipe"], run_index=r["run_index"], concurrency=r["concurrency"],
                            driver=r["driver"], started_at=r["started_at"], duration_s=r["duration_s"])
            for r in doc["runs"] if r["recipe"] == arm]


def _log(tmp_path: Path, name: str) -> Path:
    with tarfile.open(RUN / "evidence-compiled-triton.tar.xz") as tar:
        data = tar.extractfile(ENGINES + name).read()
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_the_h200_runs_that_held_a_compile_are_named(tmp_path, utc):
    doc = json.loads((RUN / "compiled-triton.json").read_text())
    a = attribute(jit_events(_log(tmp_path, "coresident-compiled.log")), _runs(doc, "compiled"))
    assert a == [{"logged_at": "12-01 17:29:55", "kernel": "_topk_topp_kernel",
                  "runs": ["compiled run 0 at c=8 (aiperf)"]}]
    b = attribute(jit_events(_log(tmp_path, "coresident-compiled-triton.log")), _runs(doc, "compiled-triton"))
    assert [(r["kernel"], r["runs"]) for r in b] == [
        ("_topk_topp_kernel", ["compiled-triton run 0 at c=8 (aiperf)"]),
        ("fused_add_rmsnorm_rows", ["compiled-triton run 0 at c=32 (aiperf)"])]
    # the stalled points are the ones the receipt shows: 350.9 and 42.8 tok/s at c = 8 against > 2000 in later runs
    slow = {(r["recipe"], r["run_index"]) for r in doc["runs"]
            if r["concurrency"] == 8 and r["output_tokens_per_second"] < 1000}
    assert slow == {("compiled", 0), ("compiled-triton", 0)}
    assert notes("compiled", a) == ["compiled: vLLM logged a Triton JIT compile of _topk_topp_kernel at 12-01 17:29:55 "
                                    "inside the window of compiled run 0 at c=8 (aiperf): the compile's stall is in "
                                    "those numbers"]


def _line(stamp: str, kernel: str) -> str:
    return (f"(EngineCore pid=7) WARNING {stamp} [jit_monitor.py:103] Triton kernel JIT compilation during "
            f"inference: {kernel}. This causes a latency spike; consider extending warmup to cover this shape/config.")


def test_a_compile_between_windows_names_no_run_and_other_lines_are_not_compiles(tmp_path, utc):
    log = tmp_path / "e.log"
    log.write_text("\n".join([
        "(EngineCore pid=7) INFO 12-01 10:00:00 [jit_monitor.py:54] Kernel JIT monitor activated — Triton JIT "
        "compilations during inference will be logged as warnings.",
        _line("12-01 10:00:05", "k_inside"), _line("12-01 10:00:30", "k_between"),
        _line("12-01 10:00:40.123", "k_fraction")]) + "\n")
    run = SimpleNamespace(arm="a", run_index=0, concurrency=1, driver="aiperf",
                          started_at="2026-12-01T10:00:02+00:00", duration_s=10.0)
    late = SimpleNamespace(arm="a", run_index=1, concurrency=1, driver="aiperf",
                           started_at="2026-12-01T10:00:38.500+00:00", duration_s=5.0)
    undated = SimpleNamespace(arm="a", run_index=2, concurrency=1, driver="aiperf", started_at=None, duration_s=1.0)
    got = attribute(jit_events(log), [run, late, undated])
    assert [(r["kernel"], r["runs"]) for r in got] == [
        ("k_inside", ["a run 0 at c=1 (aiperf)"]), ("k_between", []), ("k_fraction", ["a run 1 at c=1 (aiperf)"])]
    assert len(notes("a", got)) == 2


def test_an_unreadable_log_has_no_compiles(tmp_path):
    assert jit_events(tmp_path / "missing.log") == []

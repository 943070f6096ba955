"""The screen's memory check: the byte count at the largest row count, and where the available memory comes from,
all with injected numbers (nothing is allocated, no GPU is touched)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infercrane.kernels.harness import memory
from infercrane.kernels.harness.memory import MemoryAvailable, check_memory, harness_bytes, harness_needs

GiB = 1024**3


@dataclass(frozen=True)
class FakeSpec:
    """The things the count reads, as fused residual-add + RMSNorm has them (4 row tensors + the weight)."""

    hidden_size: int = 1024
    dtype_bytes: int = 2
    ROW_TENSORS = ("x", "residual")

    def bytes_moved(self, rows: int) -> int:
        return rows * self.hidden_size * self.dtype_bytes * 4 + self.hidden_size * self.dtype_bytes

    def tensor_shape(self, name: str, rows: int) -> tuple[int, ...]:
        return (rows, self.hidden_size)


def _parts(needs: list) -> dict[str, dict[str, int]]:
    return {n.where: n.parts for n in needs}


def test_count_is_taken_at_the_largest_row_count_and_documented_parts_add_up() -> None:
    spec = FakeSpec()
    gpu, host = harness_needs(spec, [1, 8, 4096, 32], "cuda")
    assert gpu.rows == host.rows == 4096 and (gpu.where, host.where) == ("gpu", "host")
    io = spec.bytes_moved(4096)
    elements = 4096 * 1024
    # three phases (eager, reuse, graph replay) on a GPU: the worker's four sets per phase, the checker's pack,
    # copies, oracle
    assert gpu.total_bytes == 3 * 4 * io + memory.GPU_FIXED_BYTES
    assert host.total_bytes == 3 * 2 * io + 3 * io + 3 * io * 4 // 2 + 72 * elements
    assert harness_bytes(spec, [4096], "cuda") == gpu.total_bytes + host.total_bytes
    # generous: well above the inputs and outputs alone, but not absurd
    assert io * 5 < gpu.total_bytes - memory.GPU_FIXED_BYTES < io * 20 and io * 5 < host.total_bytes < io * 40


def test_a_cpu_run_holds_both_sides_in_host_memory() -> None:
    spec = FakeSpec()
    [cpu] = harness_needs(spec, [512], "cpu")
    io = spec.bytes_moved(512)
    assert cpu.where == "host" and "CUDA context and L2 flush" not in cpu.parts
    assert cpu.parts["Triton interpreter copies"] == io and cpu.parts["worker process"] == memory.CPU_FIXED_BYTES
    # two phases (eager, reuse): no graph replay on CPU
    assert cpu.parts["worker: inputs, NaN frames, poison, outputs"] == 2 * 4 * io


def _available(gpu: int | None, host: int | None) -> Any:
    def available(where: str) -> MemoryAvailable:
        return MemoryAvailable(gpu if where == "gpu" else host, f"test {where}")

    return available


def test_a_hundred_million_rows_is_refused_and_a_decode_shape_fits() -> None:
    spec = FakeSpec()
    h200 = _available(140 * GiB, 512 * GiB)
    huge = check_memory(spec, [1, 100_000_000], "cuda", available=h200)
    assert [c.fits for c in huge] == [False, False] and huge[0].need.total_bytes > 400e9
    small = check_memory(spec, [1, 8, 32, 128, 512], "cuda", available=h200)
    assert all(c.fits for c in small) and all(c.notes == [] for c in small)
    laptop = check_memory(spec, [32768], "cpu", available=_available(None, 1 * GiB))
    assert [c.fits for c in laptop] == [False]


def test_unknown_gpu_memory_skips_that_check_with_a_note() -> None:
    gpu, host = check_memory(FakeSpec(), [8], "cuda", available=_available(None, 64 * GiB))
    assert gpu.fits is None and gpu.notes == ["test gpu"] and host.fits is True


def test_available_is_asked_for_each_memory() -> None:
    asked = []

    def available(where: str) -> MemoryAvailable:
        asked.append(where)
        return MemoryAvailable(1, "test")

    assert [c.fits for c in check_memory(FakeSpec(), [8], "cpu", available=available)] == [False]
    check_memory(FakeSpec(), [8], "cuda", available=available)
    assert asked == ["host", "gpu", "host"]


def test_meminfo_available(tmp_path: Path) -> None:
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   16000000 kB\n")
    got = memory.meminfo_available(f)
    assert got.bytes == 16000000 * 1024 and "MemAvailable" in got.source
    f.write_text("MemTotal: 1 kB\n")
    assert memory.meminfo_available(f).bytes is None
    assert memory.meminfo_available(tmp_path / "absent").bytes is None
    assert memory.available_memory("host", meminfo=tmp_path / "meminfo").bytes is None


class FakeNVML:
    def __init__(self, free: dict[str, int]) -> None:
        self.free, self.calls = free, []

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return str(i)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid not in self.free:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return uuid

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(free=self.free[handle], total=self.free[handle] * 2, used=0)


@pytest.mark.parametrize("visible, expected", [(None, 10), ("", 10), ("1,0", 11), ("GPU-abc", 12)])
def test_nvml_reads_the_device_the_workers_get(visible: str | None, expected: int) -> None:
    nvml = FakeNVML({"0": 10, "1": 11, "GPU-abc": 12})
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    got = memory.available_memory("gpu", nvml=nvml, env=env)
    assert got.bytes == expected and got.source.startswith("NVML free memory of GPU")
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_failures_become_notes() -> None:
    got = memory.nvml_available(FakeNVML({"0": 1}), env={"CUDA_VISIBLE_DEVICES": "MIG-nope"})
    assert got.bytes is None and "GPU memory check skipped" in got.source

    class NoDriver(FakeNVML):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    got = memory.nvml_available(NoDriver({}), env={})
    assert got.bytes is None and "did not initialise" in got.source


def test_nvml_absent_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name: str, *a, **k):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    got = memory.nvml_available(env={})
    assert got.bytes is None and "not importable" in got.source and "skipped" in got.source

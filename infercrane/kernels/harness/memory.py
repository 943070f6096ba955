"""How much memory a screen holds at its largest row count, and how much this machine has: a row count that cannot
fit is refused before anything is allocated, with both numbers.

**The count** (``harness_needs``). The harness works on one row count at a time, in one worker at a time (idle
workers give their cached device memory back between jobs: ``session.py::WorkerSession._release_cached_memory``), so
the peak is that of the largest row count. With ``E = rows * hidden`` elements in one ``[rows, hidden]`` tensor,
``b`` bytes per element of the storage dtype, ``io = spec.bytes_moved(rows)`` (the op's byte model: every tensor it
reads and writes, once) and ``P`` checking phases (eager and reuse; plus CUDA-graph replay on a GPU:
``correctness.py::phases_for``), a correctness check holds at its peak:

* in InferCrane's own process (host memory, ``correctness.py::_check``):
  ``P * 2 * io`` the shared tensor pack (per phase: the inputs sent, every argument handed back after the call,
  the returned outputs; in ``/dev/shm`` when it has room, which is memory too);
  ``P * io`` its own copy of the inputs; ``P * io * 4 / b`` the float32 oracle's answer and as many float32
  intermediates while it runs; ``72 * E`` ``compare()`` of one output at a time (float64 copies of result and
  reference, absolute reference, difference, bound, the masked copies behind the relative error: 9 float64 arrays);
* in the implementation's worker (the device, ``execute.py``): ``P * 4 * io`` per phase the input copies on the
  device, the NaN-guarded frames the row tensors sit in, the NaN poison blocks allocated and freed before an
  out-of-place call (the caching allocator keeps them reserved) and the outputs.

Timing (``session.py::WorkerSession._do_time``) holds less on the device: the inputs, their pristine copies for
``restore`` and the outputs of the timed calls (``3 * io``), plus the cold mode's L2 flush buffer, counted in the
fixed part: ``GPU_FIXED_BYTES`` on a GPU (the worker's CUDA context and a flush buffer of twice an L2 cache).
A functional (CPU) run holds both sides in host memory, plus ``io`` for the Triton interpreter's host copies of its
arguments and ``CPU_FIXED_BYTES`` for a worker's Python with torch imported.

The count is deliberately generous (every buffer counted at once, the allocator's cache counted as held) but not
worst-case: it is meant to refuse the impossible (400 GB of inputs), not to predict the peak to the byte.

**What is available** (``available_memory``): on a GPU, the free memory NVML reports for the device the workers use
(the first of ``CUDA_VISIBLE_DEVICES``, else device 0), read without creating a CUDA context in this process; where
NVML is absent the GPU check is skipped with a note. Host memory (a CPU-only run, and InferCrane's side of a GPU
run): ``MemAvailable`` from ``/proc/meminfo``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

GiB = 1024**3
GPU_FIXED_BYTES = 1 * GiB
CPU_FIXED_BYTES = GiB // 2
COMPARE_BYTES_PER_ELEMENT = 9 * 8
Device = Literal["cuda", "cpu"]
Where = Literal["gpu", "host"]


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes a screen holds at ``rows`` (its largest row count) in one memory (``where``), in parts named as in
    the module docstring."""

    rows: int
    where: Where
    parts: dict[str, int]

    @property
    def total_bytes(self) -> int:
        return sum(self.parts.values())


@dataclass(frozen=True)
class MemoryAvailable:
    """Free bytes where the screen will allocate, and where the number came from; ``None`` when it is unknown."""

    bytes: int | None
    source: str


@dataclass(frozen=True)
class MemoryCheck:
    need: MemoryNeed
    available: MemoryAvailable
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        """True / False, or None when the available memory is unknown (the check is skipped)."""
        if self.available.bytes is None:
            return None
        return self.need.total_bytes <= self.available.bytes


def harness_needs(spec: Any, rows: Iterable[int], device: Device) -> list[MemoryNeed]:
    """What the harness holds at the largest of ``rows`` for ``spec`` (``bytes_moved(rows)``, ``tensor_shape``,
    ``dtype_bytes``): on a GPU run the GPU's part and the host's part; on a CPU run one host part holding both.
    The count is the module docstring's."""
    r = max(int(x) for x in rows)
    b = int(spec.dtype_bytes)
    elements = math.prod(spec.tensor_shape(spec.ROW_TENSORS[0], r))
    io = int(spec.bytes_moved(r))
    phases = 3 if device == "cuda" else 2  # correctness.phases_for: eager, reuse (+ graph on a GPU)
    host = {
        "shared tensor pack": phases * 2 * io,
        "checker's input copies": phases * io,
        "float32 oracle": phases * io * 4 // b,
        "float64 comparison": COMPARE_BYTES_PER_ELEMENT * elements,
    }
    worker = {"worker: inputs, NaN frames, poison, outputs": phases * 4 * io}
    if device == "cpu":
        return [MemoryNeed(r, "host", host | worker | {"Triton interpreter copies": io,
                                                       "worker process": CPU_FIXED_BYTES})]
    return [MemoryNeed(r, "gpu", worker | {"CUDA context and L2 flush": GPU_FIXED_BYTES}), MemoryNeed(r, "host", host)]


def harness_bytes(spec: Any, rows: Iterable[int], device: Device) -> int:
    """The total of ``harness_needs`` over both memories."""
    return sum(n.total_bytes for n in harness_needs(spec, rows, device))


def meminfo_available(path: str | Path = "/proc/meminfo") -> MemoryAvailable:
    """``MemAvailable`` from ``/proc/meminfo`` (kB in the file)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return MemoryAvailable(int(line.split()[1]) * 1024, f"{path} MemAvailable")
    except (OSError, ValueError, IndexError) as e:
        return MemoryAvailable(None, f"{path} unreadable ({type(e).__name__}: {e})")
    return MemoryAvailable(None, f"{path} has no MemAvailable line")


def _visible_device(env: dict[str, str]) -> str:
    """The NVML handle key of the device the workers get as ``cuda:0``: an index or a UUID."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return "0"
    return visible.split(",")[0].strip()


def nvml_available(nvml: Any = None, env: dict[str, str] | None = None) -> MemoryAvailable:
    """Free memory of the workers' GPU from NVML (``pynvml``, from nvidia-ml-py). No CUDA context is created."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except Exception as e:  # absent, or a broken install
            return MemoryAvailable(None, f"NVML is not importable ({type(e).__name__}: {e}); GPU memory check skipped")
    env = dict(os.environ) if env is None else env
    key = _visible_device(env)
    try:
        nvml.nvmlInit()
    except Exception as e:
        return MemoryAvailable(None, f"NVML did not initialise ({type(e).__name__}: {e}); GPU memory check skipped")
    try:
        if key.isdigit():
            handle = nvml.nvmlDeviceGetHandleByIndex(int(key))
        else:  # GPU-… or MIG-… UUID
            handle = nvml.nvmlDeviceGetHandleByUUID(key)
        free = int(nvml.nvmlDeviceGetMemoryInfo(handle).free)
    except Exception as e:
        return MemoryAvailable(None, f"NVML could not read device {key} ({type(e).__name__}: {e}); "
                                     "GPU memory check skipped")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return MemoryAvailable(free, f"NVML free memory of GPU {key}")


def available_memory(where: Where, *, nvml: Any = None, meminfo: str | Path = "/proc/meminfo",
                     env: dict[str, str] | None = None) -> MemoryAvailable:
    """Free memory in ``where``: the workers' GPU (NVML) or host memory (``/proc/meminfo``)."""
    return nvml_available(nvml, env) if where == "gpu" else meminfo_available(meminfo)


def check_memory(spec: Any, rows: Iterable[int], device: Device, *,
                 available: Callable[[Where], MemoryAvailable] = available_memory) -> list[MemoryCheck]:
    """What the screen needs at its largest row count against what each memory has (``available`` injectable)."""
    checks = []
    for need in harness_needs(spec, rows, device):
        avail = available(need.where)
        checks.append(MemoryCheck(need=need, available=avail, notes=[] if avail.bytes is not None else [avail.source]))
    return checks


def gib(n: int) -> str:
    return f"{n / GiB:,.1f} GiB"

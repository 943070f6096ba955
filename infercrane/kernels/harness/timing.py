"""Kernel timing on a CUDA device in three modes, each returning raw per-call times in microseconds.

The first paragraph of each ``time_<mode>`` docstring is the method sentence written into every result
(``method_sentence(mode)``), so the code and the record cannot disagree.

Common to every mode:

* **Warm-up** first: calls until at least ``WARMUP_MIN_CALLS`` calls and ``WARMUP_MIN_MS`` of wall time have run
  (compiles, autotuning, clocks ramping up all happen here).
* **In-place kernels** mutate their inputs on every call. Repeated application stays finite (the output is a
  normalized row; the residual grows at most linearly with the number of calls), but to keep every sample on the
  same data the inputs are restored from pristine copies **between** samples, outside the timed region (``restore``).
  Whether the buffers are still finite after the cell is recorded (``outputs_finite``).
* **Clocks**: the SM clock is read after warm-up, after every sample and after the cell (NVML through nvidia-ml-py,
  else ``torch.cuda.clock_rate``, else unavailable). A sample whose clock reading is below ``THROTTLE_FRACTION`` of
  the highest reading of the cell is **rejected** (kept in the raw data, flagged, left out of summaries); a cell
  with a rejected sample or a clock that fell from before to after is flagged ``throttled``.
* **Host cost** (launch mode only): the host's clock is read around the same bursts the events time
  (``HOST_METHOD``); each sample's host time per call is kept beside its event time (``host_samples_us``).
* Statistics are not computed here: the raw samples go to ``infercrane.stats``.
"""
from __future__ import annotations

import functools
import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from infercrane.decide.policy import TIMING_MODES
from infercrane.receipts.screen_result import TimingBlock

MODES: tuple[str, ...] = TIMING_MODES

WARMUP_MIN_CALLS = 10
WARMUP_MIN_MS = 25.0
TARGET_SAMPLE_US = 1000.0  # launch/graph: enough back-to-back calls that one sample lasts about this long
MAX_CALLS_PER_SAMPLE = 200
THROTTLE_FRACTION = 0.9
L2_FLUSH_MULTIPLE = 2  # cold mode writes a buffer of this many times the L2 size before each sample
# ~1 ms at 2 GHz: the GPU stays busy while the CPU enqueues the timed call (see time_cold). 200 000 cycles (~100 us)
# were too short on the H200 for torch.compile's and eager PyTorch's host side once CUPTI had been attached to the
# process (events 27 us against 3.8 us with the longer spin; benchmarks/cold_probe.py,
# docs/benchmarks/2026-12-03-h200-kernel-decides/, cold-probe-spins.jsonl), and both timers must start from the
# same queued state.
COLD_SPIN_CYCLES = 2_000_000
# Graph mode: calls per graph are sized from a graph-mode estimate (``estimate_graph``), so that a sample lasts about
# TARGET_SAMPLE_US of device time and the replay's fixed cost stays under GRAPH_FIXED_COST_MAX_FRACTION of a sample.
GRAPH_PROBE_CALLS = 16
GRAPH_FIXED_PROBE_CALLS = (8, 1024)  # calibration: empty-kernel graphs of these sizes give the replay's fixed cost
GRAPH_FIXED_REPLAYS = 25
MAX_GRAPH_CALLS = 8192
GRAPH_FIXED_COST_MAX_FRACTION = 0.01
GRAPH_FIXED_COST_SIZING_FRACTION = 0.005  # sized to half the limit: the intercept is re-estimated and noisy
# The second, independent timer of a cell (``second_timer``): milliseconds of repetition it may spend.
SECOND_TIMER_REP_MS = 20
SECOND_TIMER_SAMPLES = 5
COLD_SECOND_SPIN_CYCLES = COLD_SPIN_CYCLES  # the same queued start as the events
COLD_SECOND_SAMPLES = 25  # a cold sample is one call (~1 ms of spin): cheap, and single calls scatter more
# A cold sample is one call bracketed by two CUDA events, whose resolution is about 0.5 us (CUDA Runtime API,
# cudaEventElapsedTime): a cold cell's two timers are held to agree within that much or TIMER_AGREEMENT_MAX,
# whichever is larger; a timer that moves a ~4 us cell by more than 0.5 us still disagrees.
COLD_RESOLUTION_US = 0.5
# Cold second timers that read event timestamps, and so are held within COLD_RESOLUTION_US: the driver-API event
# pair (now) and, in receipts made before it, CUPTI's span to a marker kernel.
COLD_RESOLUTION_METHODS = ("CUDA driver API", "marker kernel")
SECOND_TIMER_METHODS = {
    "launch": "host wall clock (time.perf_counter) around the same back-to-back burst, closed by a device "
              "synchronize; median over bursts",
    "graph": "host wall clock (time.perf_counter) around back-to-back replays of the trial's last timed graph (the "
             "same graph on the same buffers, in-place inputs restored between replays), opened and closed by a "
             "device synchronize; held against that graph's own median",
    "cold": "CUDA driver API event pair (cuEventRecord / cuEventElapsedTime called through ctypes on libcuda, not "
            "torch's event API) around one call on the same buffers, after the same L2 flush and the same spin as "
            "the primary's samples, right after them in the same trial: the same quantity read through another "
            "path, so a candidate that patches torch's timing API in its worker disagrees; median over "
            "COLD_SECOND_SAMPLES samples, held within 5 % or the events' 0.5 us resolution, whichever is larger",
}
# InferCrane's own clock around each sample job (``parent_bound``): a block whose samples the worker claims took
# far less than what that clock saw, beyond the handshake cost measured on the empty kernel, is a timer fault.
PARENT_BOUND_MIN_US = 2000.0
# ... nor this share of the handshake cost itself, whose jitter grows with it: a cold sample job spins the GPU for
# about 1 ms a sample at whatever the SM clock is (on the H200 honest cold jobs ran up to 29 % over the empty kernel's).
PARENT_BOUND_REL = 0.5


# What a launch-mode block's ``host_samples_us`` are (recorded in the result as ``host_method``).
HOST_METHOD = (
    "host: perf_counter around the same burst of back-to-back calls, before synchronizing; per call = elapsed / "
    "calls. The time the host spends issuing a call (argument checks, configuration lookup, launcher, dispatch, the "
    "launch itself); where the GPU is slower than the host the launch queue fills and this reads the GPU's pace "
    "instead (then it is at most the launch time)"
)


class ClockReader:
    """SM clock in MHz from NVML (nvidia-ml-py), else ``torch.cuda.clock_rate``, else unavailable."""

    def __init__(self, device: Any) -> None:
        import torch

        self.source = "unavailable"
        self._read: Callable[[], int | None] = lambda: None
        self.max_mhz: int | None = None
        dev = torch.device(device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = None
            try:
                uuid = str(torch.cuda.get_device_properties(index).uuid)
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            except Exception:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            h = handle
            self._read = lambda: int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
            self._read()
            self.source = "nvml:nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"
            try:
                self.max_mhz = int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
            except Exception:
                self.max_mhz = None
            return
        except Exception:
            pass
        try:
            torch.cuda.clock_rate(index)
            self._read = lambda: int(torch.cuda.clock_rate(index))
            self.source = "torch.cuda.clock_rate"
        except Exception:
            self.source = "unavailable"

    def read_mhz(self) -> int | None:
        try:
            return self._read()
        except Exception:
            return None


def reject_throttled(clocks: list[int | None], before: int | None) -> list[int]:
    """Indices of samples whose clock is below ``THROTTLE_FRACTION`` of the cell's highest reading."""
    seen = [c for c in [before, *clocks] if c is not None]
    if not seen:
        return []
    floor = THROTTLE_FRACTION * max(seen)
    return [i for i, c in enumerate(clocks) if c is not None and c < floor]


def is_throttled(rejected: list[int], before: int | None, after: int | None) -> bool:
    dropped = before is not None and after is not None and after < THROTTLE_FRACTION * before
    return bool(rejected) or dropped


def calls_for_target(est_call_us: float, target_us: float = TARGET_SAMPLE_US, max_calls: int = MAX_CALLS_PER_SAMPLE) -> int:
    """Back-to-back calls per sample so that one sample lasts about ``target_us``, within [1, max_calls]."""
    if not est_call_us > 0 or not math.isfinite(est_call_us):
        return max_calls
    return max(1, min(max_calls, int(round(target_us / est_call_us))))


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def warm_up(call: Callable[[], Any], restore: Callable[[], None] | None = None) -> int:
    """Call until ``WARMUP_MIN_CALLS`` calls and ``WARMUP_MIN_MS`` of wall time; return the number of calls."""
    n = 0
    t0 = time.perf_counter()
    while n < WARMUP_MIN_CALLS or (time.perf_counter() - t0) * 1e3 < WARMUP_MIN_MS:
        if restore is not None:
            restore()
        for _ in range(10):
            call()
        n += 10
        _sync()
    if restore is not None:
        restore()
    _sync()
    return n


def estimate_call_us(call: Callable[[], Any], calls: int = 10) -> float:
    """Rough per-call time from one event-timed burst (used only to pick ``calls_per_sample``)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def _replay_us(graph: Any, restore: Callable[[], None] | None, replays: int = 3) -> float:
    import statistics

    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        if restore is not None:
            restore()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def estimate_graph(call: Callable[[], Any], restore: Callable[[], None] | None) -> tuple[float, float]:
    """Graph-mode estimate of ``(per_call_us, fixed_us)``: replay graphs of ``GRAPH_PROBE_CALLS`` and twice as many
    calls; the slope is the time per call, the intercept the replay's fixed cost. Unlike a launch-mode estimate it
    does not depend on the host's launch rate, which differs ~10x between implementations."""
    small = capture_graph(call, GRAPH_PROBE_CALLS)
    large = capture_graph(call, 2 * GRAPH_PROBE_CALLS)
    try:
        small.replay()
        large.replay()
        _sync()
        t1, t2 = _replay_us(small, restore), _replay_us(large, restore)
    finally:
        del small, large
    per_call = max((t2 - t1) / GRAPH_PROBE_CALLS, t2 / (2 * GRAPH_PROBE_CALLS) * 1e-3, 1e-3)
    fixed = max(t1 - GRAPH_PROBE_CALLS * per_call, 0.0)
    return per_call, fixed


def graph_fixed_cost(call: Callable[[], Any]) -> float:
    """The fixed cost of one graph replay, from graphs of ``GRAPH_FIXED_PROBE_CALLS`` calls of a kernel that does
    nothing: the intercept of replay time over calls, each replay time the median of ``GRAPH_FIXED_REPLAYS``. A
    per-cell intercept over small graphs is too noisy for this (seen on an H200: 0 to 48 us for the same cell)."""
    small_n, large_n = GRAPH_FIXED_PROBE_CALLS
    small, large = capture_graph(call, small_n), capture_graph(call, large_n)
    try:
        small.replay()
        large.replay()
        _sync()
        t1 = _replay_us(small, None, GRAPH_FIXED_REPLAYS)
        t2 = _replay_us(large, None, GRAPH_FIXED_REPLAYS)
    finally:
        del small, large
    per_node = (t2 - t1) / (large_n - small_n)
    return max(t1 - small_n * per_node, 0.0)


def graph_calls(per_call_us: float, fixed_us: float) -> int:
    """Calls per graph: a sample of about ``TARGET_SAMPLE_US`` and a fixed cost under the allowed fraction of it."""
    need_target = math.ceil(TARGET_SAMPLE_US / per_call_us)
    need_fixed = math.ceil(fixed_us / (GRAPH_FIXED_COST_SIZING_FRACTION * per_call_us)) if fixed_us > 0 else 1
    return int(max(1, min(MAX_GRAPH_CALLS, max(need_target, need_fixed))))


def time_launch(
    call: Callable[[], Any], *, samples: int, calls_per_sample: int, restore: Callable[[], None] | None,
    clock: ClockReader,
) -> tuple[list[float], list[int | None], list[float]]:
    """launch: CUDA events around ``calls_per_sample`` back-to-back launches from Python; per-call time = elapsed / calls; one sample per burst.

    This is what ``triton.testing.do_bench`` reports: at small rows it is bound by the host's launch rate, not by the
    kernel. Inputs of in-place kernels are restored between bursts, outside the events.

    The same bursts give the host cost of a call (``HOST_METHOD``): ``time.perf_counter_ns`` from just before the
    first call of the burst (after the start event is recorded) to just after the last call returns (before the end
    event is recorded and synchronized), divided by the calls. Returns ``(times, clocks, host)``, one of each per
    sample, in microseconds per call.
    """
    import torch

    times: list[float] = []
    clocks: list[int | None] = []
    host: list[float] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        if restore is not None:
            restore()
        start.record()
        t0 = time.perf_counter_ns()
        for _ in range(calls_per_sample):
            call()
        t1 = time.perf_counter_ns()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls_per_sample)
        host.append((t1 - t0) * 1e-3 / calls_per_sample)
        clocks.append(clock.read_mhz())
    return times, clocks, host


def capture_graph(call: Callable[[], Any], calls: int) -> Any:
    """Capture ``calls`` back-to-back calls into a ``torch.cuda.CUDAGraph`` (after warming up on a side stream)."""
    return _capture_keep_last(call, calls)[0]


def time_graph(
    call: Callable[[], Any], *, samples: int, calls_per_sample: int, restore: Callable[[], None] | None,
    clock: ClockReader,
) -> tuple[list[float], list[int | None]]:
    """graph: CUDA graphs of ``calls_per_sample`` captured calls on one set of buffers, replayed once per sample; per-call time = replay time / calls (L2 hot, no host launch cost); in a screen each trial times several graphs, each captured on new buffers under a placement condition drawn from the screen's seed (the same draws for every implementation), and the trial's figure is the mean of the graphs' medians.

    This is the cost inside a CUDA-graphed decode step. Which of two levels a ~1 us kernel's graph reads on an H200
    depends on its placement (``placement.py``), so placement is varied on purpose and enters the between-trial
    variance. In-place inputs are restored between replays, outside the events. (A single graph, as calibration
    times it: ``CellTimer`` without placements.)
    """
    graph = capture_graph(call, calls_per_sample)
    graph.replay()  # first replay uploads the graph; not timed
    _sync()
    try:
        return _replay_samples(graph, samples, calls_per_sample, restore, clock)
    finally:
        del graph


def l2_flush_bytes(device: Any) -> int:
    """``L2_FLUSH_MULTIPLE`` x the device's L2 size (at least 64 MiB if the size is not reported)."""
    import torch

    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    return max(L2_FLUSH_MULTIPLE * l2, 64 * 1024 * 1024)


def time_cold(
    call: Callable[[], Any], *, samples: int, restore: Callable[[], None] | None, clock: ClockReader,
    flush: Any,
) -> tuple[list[float], list[int | None]]:
    """cold: before each sample a buffer of at least twice the L2 size is overwritten (L2 flushed), then CUDA events time one call queued behind a short GPU spin, so the host's launch latency is not in the sample.

    The spin (``torch.cuda._sleep``, ``COLD_SPIN_CYCLES``) sits between the flush and the start event: the GPU is
    still busy while the host enqueues the call, so the sample measures the call's device time from a queued start
    rather than the host's race to launch it. In-place inputs are restored before the flush.
    """
    import torch

    times: list[float] = []
    clocks: list[int | None] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        if restore is not None:
            restore()
        flush.zero_()
        torch.cuda._sleep(COLD_SPIN_CYCLES)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
        clocks.append(clock.read_mhz())
    return times, clocks


def _second_launch(call: Callable[[], Any], calls: int, restore: Callable[[], None] | None) -> float:
    import statistics

    times = []
    for _ in range(SECOND_TIMER_SAMPLES):
        if restore is not None:
            restore()
        _sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        _sync()
        times.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(times)


def _second_graph(graph: Any, calls: int, restore: Callable[[], None] | None, sample_us: float) -> float:
    """Host wall clock around back-to-back replays of ``graph`` (``SECOND_TIMER_METHODS['graph']``)."""
    replays = max(3, int(round(SECOND_TIMER_REP_MS * 1e3 / max(sample_us, 1.0))))
    if restore is not None:
        restore()
    _sync()
    t0 = time.perf_counter()
    for _ in range(replays):
        if restore is not None:
            restore()
        graph.replay()
    _sync()
    return (time.perf_counter() - t0) * 1e6 / (replays * calls)


@functools.cache
def _libcuda() -> Any:
    """The CUDA driver library, loaded once per process (``find_library`` asks the system's linker cache)."""
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")


class _DriverEvents:
    """A timing event pair of the CUDA driver API, called through ctypes on libcuda (``SECOND_TIMER_METHODS['cold']``):
    the GPU's event timestamps read through a path other than torch's ``torch.cuda.Event``."""

    def __init__(self) -> None:
        import ctypes

        self._lib = lib = _libcuda()
        self._c = ctypes
        self._elapsed = getattr(lib, "cuEventElapsedTime_v2", None) or lib.cuEventElapsedTime
        self._destroy = getattr(lib, "cuEventDestroy_v2", None) or lib.cuEventDestroy
        self.events = []
        for _ in range(2):
            ev = ctypes.c_void_p()
            self._check(lib.cuEventCreate(ctypes.byref(ev), ctypes.c_uint(0)), "cuEventCreate")  # timing enabled
            self.events.append(ev)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} returned CUresult {rc}")

    def record(self, which: int, stream: int) -> None:
        self._check(self._lib.cuEventRecord(self.events[which], self._c.c_void_p(stream)), "cuEventRecord")

    def elapsed_us(self) -> float:
        self._check(self._lib.cuEventSynchronize(self.events[1]), "cuEventSynchronize")
        ms = self._c.c_float()
        self._check(self._elapsed(self._c.byref(ms), self.events[0], self.events[1]), "cuEventElapsedTime")
        return float(ms.value) * 1e3

    def close(self) -> None:
        for ev in self.events:
            self._destroy(ev)
        self.events = []


def _second_cold(call: Callable[[], Any], restore: Callable[[], None] | None, flush: Any) -> float:
    """The driver-API event pair around one call, after the same restore, L2 flush and spin as ``time_cold``."""
    import statistics

    import torch

    stream = int(torch.cuda.current_stream(flush.device).cuda_stream)
    torch.cuda.synchronize(flush.device)  # the runtime's context is now current in this thread, where the driver's
    pair = _DriverEvents()                # events are created
    try:
        times = []
        for _ in range(COLD_SECOND_SAMPLES):
            if restore is not None:
                restore()
            flush.zero_()
            torch.cuda._sleep(COLD_SECOND_SPIN_CYCLES)
            pair.record(0, stream)
            call()
            pair.record(1, stream)
            times.append(pair.elapsed_us())
        return statistics.median(times)
    finally:
        pair.close()


def time_second(mode: str, call: Callable[[], Any], *, calls: int, restore: Callable[[], None] | None,
                 flush: Any, graph: Any = None, sample_us: float = TARGET_SAMPLE_US) -> tuple[float | None, str | None]:
    """The cell's per-call time by an independent timer (``SECOND_TIMER_METHODS``), or ``(None, why)``. Graph mode
    times ``graph`` (the trial's last timed graph, of ``calls`` calls)."""
    try:
        if mode == "launch":
            value = _second_launch(call, calls, restore)
        elif mode == "graph":
            if graph is None:
                raise ValueError("graph mode's second timer needs the timed graph")
            value = _second_graph(graph, calls, restore, sample_us)
        else:
            value = _second_cold(call, restore, flush)
    except Exception as e:  # a missing profiler or Triton must read as "no second figure: why", never as a crash
        return None, f"{type(e).__name__}: {e}"[:500]
    finally:
        if restore is not None:
            restore()
        _sync()
    if not (value > 0 and math.isfinite(value)):
        return None, f"the second timer returned {value!r}"
    return value, None


_MODE_FUNCTIONS: dict[str, Callable[..., Any]] = {"launch": time_launch, "graph": time_graph, "cold": time_cold}


def method_sentence(mode: str) -> str:
    """The method of ``mode`` as recorded in results: the first paragraph of its timing function's docstring."""
    if mode not in _MODE_FUNCTIONS:
        raise ValueError(f"unknown timing mode {mode!r}; known: {', '.join(MODES)}")
    doc = inspect.getdoc(_MODE_FUNCTIONS[mode]) or ""
    return " ".join(doc.split("\n\n")[0].split())


@dataclass
class Placed:
    """One set of buffers to time on (and, in graph mode, its captured graph and what holds its placement)."""

    call: Callable[[], Any]
    restore: Callable[[], None] | None = None
    finite: Callable[[], bool] | None = None
    tensors: dict[str, Any] = field(default_factory=dict)
    graph: Any = None
    last: Any = None  # graph mode: what the last captured call returned (out of place: its outputs)
    holds: list[Any] = field(default_factory=list)  # the pad and the kept tiny graphs
    condition: Any = None
    offset: int | None = None


MakeCall = Callable[[int], "Placed"]


def _tiny_graph(device: Any) -> Any:
    import torch

    scratch = torch.zeros(256, device=device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scratch.add_(1.0)
    return graph, scratch


def _capture_keep_last(call: Callable[[], Any], calls: int) -> tuple[Any, Any]:
    """``capture_graph``, also returning what the last captured call returned (its outputs, out of place)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    _sync()
    graph = torch.cuda.CUDAGraph()
    last = None
    with torch.cuda.graph(graph):
        for _ in range(calls):
            last = call()
    _sync()
    return graph, last


class CellTimer:
    """One visit of one (rows, mode) cell in three steps that the parent drives one job each: ``prepare`` (warm up,
    size, and in graph mode capture every graph under its placement condition), ``sample`` (the timed samples and
    nothing else: the job InferCrane's clock brackets, ``parent_bound``) and ``finish`` (the second timer,
    finiteness, the block). ``target`` is then the buffers the timed-output check writes into and runs again.

    ``make_call(i)`` gives fresh buffers for graph ``i`` (launch and cold: one set, ``i = 0``). Graph mode with
    ``placements`` (``placement.PlacementCondition``) captures one graph per condition: the allocator's cache is
    emptied, a pad of ``pad_bytes`` is allocated and held, the buffers are made, ``freed`` tiny graphs are captured
    and freed and ``kept`` tiny graphs captured and held, then the timed graph is captured; every graph is held
    until the visit ends, and each takes ``samples`` samples. Without placements graph mode times one graph.
    """

    def __init__(self, make_call: MakeCall, *, mode: str, samples: int, device: Any, trial: int = 0,
                 clock: "ClockReader | None" = None, flush: Any = None, calls_per_sample: int | None = None,
                 graph_fixed_us: float | None = None, placements: list[Any] | None = None,
                 second_timer: bool = True) -> None:
        if mode not in _MODE_FUNCTIONS:
            raise ValueError(f"unknown timing mode {mode!r}; known: {', '.join(MODES)}")
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        self.make_call, self.mode, self.samples, self.device, self.trial = make_call, mode, samples, device, trial
        self.clock = clock or ClockReader(device)
        self.flush = flush
        self.given_calls = calls_per_sample
        self.graph_fixed_us = graph_fixed_us
        self.placements = list(placements or []) if mode == "graph" else []
        self.second_timer = second_timer
        self.placed: list[Placed] = []
        self.n_calls = 1
        self.sizing = ""
        self.warm = 0
        self.fixed_us: float | None = None
        self.before: int | None = None
        self.times: list[float] = []
        self.clocks: list[int | None] = []
        self.host: list[float] | None = None  # launch mode: host us per call of each sample (HOST_METHOD)

    @property
    def target(self) -> Placed:
        """The buffers of the last graph (graph mode) or of the cell: what the timed-output check runs on."""
        return self.placed[-1]

    # ----------------------------------------------------------------------------------------- prepare

    def prepare(self) -> dict[str, Any]:
        import torch

        first = self.make_call(0)
        self.warm = warm_up(first.call, first.restore)
        mode = self.mode
        if mode == "cold":
            self.n_calls, self.sizing = 1, "cold: one call per sample"
        elif self.given_calls is not None:
            self.n_calls, self.sizing = int(self.given_calls), "given (the cell's first trial)"
        elif mode == "graph":
            per_call, own_fixed = estimate_graph(first.call, first.restore)
            self.fixed_us = max(own_fixed, self.graph_fixed_us or 0.0)
            self.n_calls = graph_calls(per_call, self.fixed_us)
            self.sizing = (f"graph-mode estimate: {per_call:.4g} us per call, {self.fixed_us:.4g} us fixed replay "
                           f"cost -> {self.n_calls} calls (target {TARGET_SAMPLE_US:g} us a sample, fixed cost < "
                           f"{GRAPH_FIXED_COST_MAX_FRACTION:.0%}, at most {MAX_GRAPH_CALLS})")
        else:
            est = estimate_call_us(first.call)
            self.n_calls = calls_for_target(est)
            self.sizing = f"launch-mode burst of 10 calls: {est:.4g} us per call -> {self.n_calls} calls"
        if first.restore is not None:
            first.restore()
        if mode == "graph" and self.fixed_us is None:
            if self.graph_fixed_us is not None:  # the calibration's robust figure; a cell's own intercept is noisy
                self.fixed_us = self.graph_fixed_us
            else:
                _, self.fixed_us = estimate_graph(first.call, first.restore)
                if first.restore is not None:
                    first.restore()
        if mode == "cold" and self.flush is None:
            self.flush = torch.empty(l2_flush_bytes(self.device), dtype=torch.uint8, device=self.device)
        if mode != "graph":
            self.placed = [first]
        elif not self.placements:
            first.graph, first.last = _capture_keep_last(first.call, self.n_calls)
            first.graph.replay()  # the first replay uploads the graph; not timed
            self.placed = [first]
        else:
            del first
            for i, cond in enumerate(self.placements):
                self.placed.append(self._place(i, cond))
            _sync()
        return {"calls_per_sample": self.n_calls, "sizing": self.sizing, "graphs": len(self.placed)}

    def _place(self, i: int, cond: Any) -> Placed:
        import torch

        _sync()
        torch.cuda.empty_cache()
        pad = torch.empty(int(cond.pad_bytes), dtype=torch.uint8, device=self.device) if cond.pad_bytes else None
        placed = self.make_call(i)
        for _ in range(int(cond.freed)):
            g = _tiny_graph(self.device)
            del g
        kept = [_tiny_graph(self.device) for _ in range(int(cond.kept))]
        placed.graph, placed.last = _capture_keep_last(placed.call, self.n_calls)
        placed.graph.replay()  # upload; not timed
        if placed.restore is not None:
            placed.restore()
        placed.holds = [pad, kept]
        placed.condition = cond
        first = next(iter(placed.tensors.values()), None)
        placed.offset = int(first.data_ptr()) % (2 << 20) if first is not None else None
        return placed

    # ----------------------------------------------------------------------------------------- sample

    def sample(self) -> dict[str, Any]:
        """The timed samples: what InferCrane's clock brackets from outside the worker (launch mode: with the host
        time of each burst, ``HOST_METHOD``)."""
        self.before = self.clock.read_mhz()
        self.host = None
        if self.mode == "launch":
            p = self.placed[0]
            self.times, self.clocks, self.host = time_launch(p.call, samples=self.samples,
                                                             calls_per_sample=self.n_calls, restore=p.restore,
                                                             clock=self.clock)
        elif self.mode == "graph":
            self.times, self.clocks = [], []
            for p in self.placed:
                t, c = _replay_samples(p.graph, self.samples, self.n_calls, p.restore, self.clock)
                self.times += t
                self.clocks += c
        else:
            p = self.placed[0]
            self.times, self.clocks = time_cold(p.call, samples=self.samples, restore=p.restore, clock=self.clock,
                                                flush=self.flush)
        _sync()
        return {"samples_us": self.times, "sample_clock_mhz": self.clocks, "host_samples_us": self.host}

    # ----------------------------------------------------------------------------------------- finish

    def finish(self, finite_check: Callable[[], bool] | None = None) -> TimingBlock:
        import statistics

        from infercrane.receipts.screen_result import GraphPlacement

        after = self.clock.read_mhz()
        _sync()
        rejected = reject_throttled(self.clocks, self.before)
        checks = [p.finite for p in self.placed if p.finite is not None]
        if finite_check is not None:
            checks.append(finite_check)
        finite = None if not checks else all(bool(f()) for f in checks)
        reference = None
        if self.second_timer:
            last = self.placed[-1]
            sample_us = statistics.median(self.times) * self.n_calls if self.times else TARGET_SAMPLE_US
            second, second_error = time_second(self.mode, last.call, calls=self.n_calls, restore=last.restore,
                                               flush=self.flush, graph=last.graph, sample_us=sample_us)
            if self.mode == "graph" and self.placements:
                mine = self.times[-self.samples:]
                keep = [t for j, t in enumerate(mine) if len(self.times) - self.samples + j not in set(rejected)]
                reference = statistics.median(keep or mine)
        else:
            second, second_error = None, "not asked for in this trial"
        fraction = None
        if self.fixed_us is not None and self.times:
            basis = self.graph_fixed_us if self.graph_fixed_us is not None else self.fixed_us
            fraction = basis / (statistics.median(self.times) * self.n_calls)
        graphs = [GraphPlacement(condition=p.condition, first_sample=i * self.samples, samples=self.samples,
                                 input_offset_mod_2mib=p.offset)
                  for i, p in enumerate(self.placed) if p.condition is not None]
        flush_bytes = int(self.flush.numel() * self.flush.element_size()) if self.mode == "cold" else None
        return TimingBlock(
            mode=self.mode, trial=self.trial, calls_per_sample=self.n_calls, warmup_calls=self.warm,
            samples_us=self.times, sample_clock_mhz=self.clocks, host_samples_us=self.host, rejected=rejected,
            clock_before_mhz=self.before, clock_after_mhz=after, clock_source=self.clock.source,
            throttled=is_throttled(rejected, self.before, after), outputs_finite=finite, l2_flush_bytes=flush_bytes,
            sizing=self.sizing, graph_fixed_cost_us=self.fixed_us, graph_fixed_cost_fraction=fraction,
            second_timer_us=second, second_timer_method=SECOND_TIMER_METHODS[self.mode] if second is not None else None,
            second_timer_error=second_error, second_timer_reference_us=reference, graphs=graphs,
        )

    def close(self) -> None:
        self.placed = []


def _replay_samples(graph: Any, samples: int, calls: int, restore: Callable[[], None] | None,
                    clock: ClockReader) -> tuple[list[float], list[int | None]]:
    import torch

    times: list[float] = []
    clocks: list[int | None] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        if restore is not None:
            restore()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
        clocks.append(clock.read_mhz())
    return times, clocks


def parent_bound(block: TimingBlock, overhead_us: float | None) -> str | None:
    """A timer fault, or None: the worker claims its samples took ``sum(samples) * calls`` us, InferCrane's own clock
    saw ``parent_elapsed_us`` around the job that took them, and the empty kernel's job showed ``overhead_us`` of
    handshake and host work beyond its samples. What is left unexplained must not exceed what is claimed (nor
    ``PARENT_BOUND_MIN_US`` or ``PARENT_BOUND_REL`` of the handshake cost, the noise of a job's handshake): a worker
    that reads its timer 10x too fast leaves 90 % of what the parent saw unexplained."""
    if block.parent_elapsed_us is None or overhead_us is None or not block.samples_us:
        return None
    claimed = sum(block.samples_us) * block.calls_per_sample
    unexplained = block.parent_elapsed_us - overhead_us - claimed
    if unexplained > max(claimed, PARENT_BOUND_MIN_US, PARENT_BOUND_REL * overhead_us):
        return (f"timer_fault: trial {block.trial}: the worker's samples add up to {claimed:.0f} us but InferCrane's "
                f"clock saw {block.parent_elapsed_us:.0f} us around them, {unexplained:.0f} us more than that and the "
                f"measured handshake cost ({overhead_us:.0f} us): its timer cannot be trusted")
    return None


def time_cell(
    call: Callable[[], Any],
    *,
    mode: str,
    samples: int,
    device: Any,
    restore: Callable[[], None] | None = None,
    finite_check: Callable[[], bool] | None = None,
    calls_per_sample: int | None = None,
    trial: int = 0,
    clock: ClockReader | None = None,
    flush: Any = None,
    second_timer: bool = True,
    graph_fixed_us: float | None = None,
) -> TimingBlock:
    """Warm up, then take ``samples`` samples of ``call`` in ``mode`` on one set of buffers (``CellTimer`` in one
    go; graph mode times one graph); clocks read around and between samples.

    ``calls_per_sample`` is picked when not given — launch: from a launch-mode burst (what launch mode measures);
    graph: from a graph-mode estimate (``estimate_graph``, ``graph_calls``) — pass the value of the first trial to
    later trials so every trial of a cell does the same work. ``flush`` (cold) is a preallocated buffer of
    ``l2_flush_bytes`` bytes; one is allocated when not given. With ``second_timer`` a launch or graph cell is also
    timed by an independent timer (``SECOND_TIMER_METHODS``) right after its samples, so the two figures share the
    trial's conditions (cold mode: the driver-API event pair, ``time_second``).
    ``graph_fixed_us`` is the calibration's replay fixed cost: the first trial sizes its graph against the larger of
    it and the cell's own intercept; the fraction recorded is of the calibration's figure.
    """
    timer = CellTimer(lambda i: Placed(call=call, restore=restore), mode=mode, samples=samples, device=device,
                      trial=trial, clock=clock, flush=flush, calls_per_sample=calls_per_sample,
                      graph_fixed_us=graph_fixed_us, second_timer=second_timer)
    try:
        timer.prepare()
        timer.sample()
        return timer.finish(finite_check)
    finally:
        timer.close()

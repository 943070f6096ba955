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
* Statistics are not computed here: the raw samples go to ``infercrane.stats``.
"""
from __future__ import annotations

import inspect
import math
import time
from typing import Any, Callable

from infercrane.kernels.result import TimingBlock

MODES: tuple[str, ...] = ("launch", "graph", "cold")

WARMUP_MIN_CALLS = 10
WARMUP_MIN_MS = 25.0
TARGET_SAMPLE_US = 1000.0  # launch/graph: enough back-to-back calls that one sample lasts about this long
MAX_CALLS_PER_SAMPLE = 200
THROTTLE_FRACTION = 0.9
L2_FLUSH_MULTIPLE = 2  # cold mode writes a buffer of this many times the L2 size before each sample
COLD_SPIN_CYCLES = 200_000  # ~100 us at 2 GHz: GPU busy while the CPU enqueues the timed call (see time_cold)
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
SECOND_TIMER_METHODS = {
    "launch": "host wall clock (time.perf_counter) around the same back-to-back burst, closed by a device "
              "synchronize; median over bursts",
    "graph": "triton.testing.do_bench_cudagraph(fn, rep=20 ms, return_mode='median'): its own graph, sized by "
             "Triton, on its own stream",
    "cold": "CUPTI kernel time (torch.profiler): span from the call's first GPU activity to its last, after the same "
            "L2 flush and spin; median over samples; run after every trial of the worker, because once CUPTI is "
            "attached it slows every later launch and graph replay of the process (seen on an H200: +10-25 %)",
}


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
) -> tuple[list[float], list[int | None]]:
    """launch: CUDA events around ``calls_per_sample`` back-to-back launches from Python; per-call time = elapsed / calls; one sample per burst.

    This is what ``triton.testing.do_bench`` reports: at small rows it is bound by the host's launch rate, not by the
    kernel. Inputs of in-place kernels are restored between bursts, outside the events.
    """
    import torch

    times: list[float] = []
    clocks: list[int | None] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        if restore is not None:
            restore()
        start.record()
        for _ in range(calls_per_sample):
            call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls_per_sample)
        clocks.append(clock.read_mhz())
    return times, clocks


def capture_graph(call: Callable[[], Any], calls: int) -> Any:
    """Capture ``calls`` back-to-back calls into a ``torch.cuda.CUDAGraph`` (after warming up on a side stream)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    _sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    _sync()
    return graph


def time_graph(
    call: Callable[[], Any], *, samples: int, calls_per_sample: int, restore: Callable[[], None] | None,
    clock: ClockReader,
) -> tuple[list[float], list[int | None]]:
    """graph: one CUDA graph holding ``calls_per_sample`` captured calls on the same buffers, replayed once per sample; per-call time = replay time / calls (L2 hot, no host launch cost).

    This is the cost inside a CUDA-graphed decode step. The same buffers are used by every captured call (graph
    mode is defined as L2-hot); in-place inputs are restored between replays, outside the events.
    """
    import torch

    graph = capture_graph(call, calls_per_sample)
    graph.replay()  # first replay uploads the graph; not timed
    _sync()
    times: list[float] = []
    clocks: list[int | None] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        for _ in range(samples):
            if restore is not None:
                restore()
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / calls_per_sample)
            clocks.append(clock.read_mhz())
    finally:
        del graph
    return times, clocks


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


def _second_graph(call: Callable[[], Any]) -> float:
    from triton.testing import do_bench_cudagraph

    return float(do_bench_cudagraph(call, rep=SECOND_TIMER_REP_MS, return_mode="median")) * 1e3


def _second_cold(call: Callable[[], Any], restore: Callable[[], None] | None, flush: Any) -> float:
    import statistics

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    spans = []
    for _ in range(SECOND_TIMER_SAMPLES):
        if restore is not None:
            restore()
        flush.zero_()
        _sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(COLD_SPIN_CYCLES)
            call()
            _sync()
        gpu = sorted(((e.start_ns(), e.start_ns() + e.duration_ns()) for e in prof.profiler.kineto_results.events()
                      if e.device_type() == DeviceType.CUDA), key=lambda t: t[0])
        if len(gpu) < 2:
            raise RuntimeError(f"CUPTI recorded {len(gpu)} GPU activities; expected the spin and the call")
        call_part = gpu[1:]  # the first activity is the spin
        spans.append((max(e for _, e in call_part) - min(b for b, _ in call_part)) / 1e3)
    return statistics.median(spans)


def time_second(mode: str, call: Callable[[], Any], *, calls: int, restore: Callable[[], None] | None,
                 flush: Any) -> tuple[float | None, str | None]:
    """The cell's per-call time by an independent timer (``SECOND_TIMER_METHODS``), or ``(None, why)``."""
    try:
        if mode == "launch":
            value = _second_launch(call, calls, restore)
        elif mode == "graph":
            value = _second_graph(call)
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
    """Warm up, then take ``samples`` samples of ``call`` in ``mode``; clocks read around and between samples.

    ``calls_per_sample`` is picked when not given — launch: from a launch-mode burst (what launch mode measures);
    graph: from a graph-mode estimate (``estimate_graph``, ``graph_calls``) — pass the value of the first trial to
    later trials so every trial of a cell does the same work. ``flush`` (cold) is a preallocated buffer of
    ``l2_flush_bytes`` bytes; one is allocated when not given. With ``second_timer`` a launch or graph cell is also
    timed by an independent timer (``SECOND_TIMER_METHODS``) right after its samples, so the two figures share the
    trial's conditions; cold mode's second timer (CUPTI) runs after every trial instead (``time_second``).
    ``graph_fixed_us`` is the calibration's replay fixed cost: the first trial sizes its graph against the larger of
    it and the cell's own intercept; the fraction recorded is of the calibration's figure.
    """
    import torch

    if mode not in _MODE_FUNCTIONS:
        raise ValueError(f"unknown timing mode {mode!r}; known: {', '.join(MODES)}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    clock = clock or ClockReader(device)
    warm = warm_up(call, restore)
    fixed_us = None
    if mode == "cold":
        n_calls, sizing = 1, "cold: one call per sample"
    elif calls_per_sample is not None:
        n_calls, sizing = int(calls_per_sample), "given (the cell's first trial)"
    elif mode == "graph":
        per_call, own_fixed = estimate_graph(call, restore)
        fixed_us = max(own_fixed, graph_fixed_us or 0.0)
        n_calls = graph_calls(per_call, fixed_us)
        sizing = (f"graph-mode estimate: {per_call:.4g} us per call, {fixed_us:.4g} us fixed replay cost -> "
                  f"{n_calls} calls (target {TARGET_SAMPLE_US:g} us a sample, fixed cost < "
                  f"{GRAPH_FIXED_COST_MAX_FRACTION:.0%}, at most {MAX_GRAPH_CALLS})")
    else:
        est = estimate_call_us(call)
        n_calls = calls_for_target(est)
        sizing = f"launch-mode burst of 10 calls: {est:.4g} us per call -> {n_calls} calls"
    if restore is not None:
        restore()
    if mode == "graph" and fixed_us is None:
        if graph_fixed_us is not None:  # the calibration's robust figure; a cell's own intercept is noisy
            fixed_us = graph_fixed_us
        else:
            _, fixed_us = estimate_graph(call, restore)
            if restore is not None:
                restore()
    flush_bytes = None
    before = clock.read_mhz()
    if mode == "launch":
        times, clocks = time_launch(call, samples=samples, calls_per_sample=n_calls, restore=restore, clock=clock)
    elif mode == "graph":
        times, clocks = time_graph(call, samples=samples, calls_per_sample=n_calls, restore=restore, clock=clock)
    else:
        if flush is None:
            flush = torch.empty(l2_flush_bytes(device), dtype=torch.uint8, device=device)
        flush_bytes = int(flush.numel() * flush.element_size())
        times, clocks = time_cold(call, samples=samples, restore=restore, clock=clock, flush=flush)
    after = clock.read_mhz()
    _sync()
    rejected = reject_throttled(clocks, before)
    finite = None if finite_check is None else bool(finite_check())
    if mode == "cold":
        second, second_error = None, "cold: timed by CUPTI after every trial of the worker"
    elif second_timer:
        second, second_error = time_second(mode, call, calls=n_calls, restore=restore, flush=flush)
    else:
        second, second_error = None, "not asked for in this trial"
    fraction = None
    if fixed_us is not None and times:
        import statistics

        # the share of a sample the replay's fixed cost takes: of the calibration's figure where there is one
        basis = graph_fixed_us if graph_fixed_us is not None else fixed_us
        fraction = basis / (statistics.median(times) * n_calls)
    return TimingBlock(
        mode=mode, trial=trial, calls_per_sample=n_calls, warmup_calls=warm, samples_us=times,
        sample_clock_mhz=clocks, rejected=rejected, clock_before_mhz=before, clock_after_mhz=after,
        clock_source=clock.source, throttled=is_throttled(rejected, before, after),
        outputs_finite=finite, l2_flush_bytes=flush_bytes, sizing=sizing,
        graph_fixed_cost_us=fixed_us, graph_fixed_cost_fraction=fraction,
        second_timer_us=second, second_timer_method=SECOND_TIMER_METHODS[mode] if second is not None else None,
        second_timer_error=second_error,
    )

"""Timing: the pure rules on CPU; the three modes and calibration on a GPU (no timed assertions)."""
from __future__ import annotations

import pytest

from infercrane.kernels.harness import timing as T


def test_calls_for_target_is_bounded():
    assert T.calls_for_target(5.0, target_us=1000.0, max_calls=200) == 200
    assert T.calls_for_target(50.0, target_us=1000.0) == 20
    assert T.calls_for_target(5000.0, target_us=1000.0) == 1
    assert T.calls_for_target(0.0) == T.MAX_CALLS_PER_SAMPLE
    assert T.calls_for_target(float("nan")) == T.MAX_CALLS_PER_SAMPLE


def test_throttled_samples_are_rejected_against_the_cell_peak():
    clocks = [1980, 1980, 1500, None, 1975]
    assert T.reject_throttled(clocks, before=1980) == [2]
    assert T.reject_throttled([None, None], before=None) == []
    assert T.is_throttled([2], 1980, 1980)
    assert T.is_throttled([], 1980, 1400)
    assert not T.is_throttled([], 1980, 1960)
    assert not T.is_throttled([], None, None)


@pytest.mark.parametrize("mode", T.MODES)
def test_method_sentences_come_from_the_docstrings(mode):
    sentence = T.method_sentence(mode)
    assert sentence.startswith(f"{mode}:") and "\n" not in sentence
    with pytest.raises(ValueError, match="unknown timing mode"):
        T.method_sentence("warm")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", T.MODES)
def test_each_mode_gives_positive_samples_for_eager_and_in_place(mode):
    import torch

    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec
    from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager

    dev = torch.device("cuda")
    x, r, w = FusedAddRMSNormSpec(hidden_size=1024, eps=1e-6).make_inputs(8, dev, seed=0, scale=1.0).values()
    block = T.time_cell(lambda: fused_add_rmsnorm_eager(x, r, w, 1e-6), mode=mode, samples=5, device=dev)
    assert len(block.samples_us) == 5 and all(t > 0 for t in block.samples_us)
    assert block.mode == mode and block.calls_per_sample >= 1 and block.warmup_calls >= T.WARMUP_MIN_CALLS
    assert (block.l2_flush_bytes is not None) == (mode == "cold")
    assert block.outputs_finite is None
    if mode == "launch":  # the host's time per call of each burst, beside its event time
        assert len(block.host_samples_us) == 5 and all(0 < t < float("inf") for t in block.host_samples_us)
    else:
        assert block.host_samples_us is None

    # in place, with inputs restored between samples
    x0, r0 = x.clone(), r.clone()

    def in_place():
        out, res = fused_add_rmsnorm_eager(x, r, w, 1e-6)
        x.copy_(out)
        r.copy_(res)

    def restore():
        x.copy_(x0)
        r.copy_(r0)

    block = T.time_cell(in_place, mode=mode, samples=3, device=dev, restore=restore,
                        finite_check=lambda: bool(torch.isfinite(x).all() and torch.isfinite(r).all()),
                        calls_per_sample=4)
    assert all(t > 0 for t in block.samples_us) and block.outputs_finite is True
    assert block.calls_per_sample == (1 if mode == "cold" else 4)


@pytest.mark.gpu
def test_cold_second_timer_reads_the_events_quantity_through_the_driver_even_when_torch_events_are_patched(
        monkeypatch):
    import torch

    from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

    dev = torch.device("cuda")
    x, r, w = FusedAddRMSNormSpec(hidden_size=1024, eps=1e-6).make_inputs(512, dev, seed=0, scale=1.0).values()
    flush = torch.empty(T.l2_flush_bytes(dev), dtype=torch.uint8, device=dev)
    for _ in range(20):
        fused_add_rmsnorm_eager(x, r, w, 1e-6)
    call = lambda: fused_add_rmsnorm_eager(x, r, w, 1e-6)  # noqa: E731

    class _NoClock:
        def read_mhz(self):
            return None

    import statistics

    events = statistics.median(T.time_cold(call, samples=25, restore=None, clock=_NoClock(), flush=flush)[0])
    second, why = T.time_second("cold", call, calls=1, restore=None, flush=flush)
    assert why is None and second is not None
    from infercrane.kernels.harness.runner import TIMER_AGREEMENT_MAX

    assert abs(events - second) <= max(TIMER_AGREEMENT_MAX * second, T.COLD_RESOLUTION_US), (events, second)

    class _Fast(torch.cuda.Event):
        def elapsed_time(self, end):
            return super().elapsed_time(end) / 10.0

    monkeypatch.setattr(torch.cuda, "Event", _Fast)
    fooled = statistics.median(T.time_cold(call, samples=25, restore=None, clock=_NoClock(), flush=flush)[0])
    unfooled, _ = T.time_second("cold", call, calls=1, restore=None, flush=flush)
    assert fooled < events / 5 and abs(unfooled - second) <= max(0.2 * second, T.COLD_RESOLUTION_US)


@pytest.mark.gpu
def test_calibration_records_floors_bandwidth_and_device():
    from infercrane.kernels.harness.calibration import calibrate

    cal = calibrate("cuda", list(T.MODES), samples=5)
    assert [b.mode for b in cal.floors] == list(T.MODES)
    assert [b.mode for b in cal.dispatcher_floors] == list(T.MODES)
    assert all(t > 0 for b in cal.floors + cal.dispatcher_floors for t in b.samples_us)
    assert cal.floor_kernel.startswith("triton:") and cal.dispatcher_floor_kernel.startswith("torch:")
    assert cal.copy_bandwidth.median_gbps > 0 and len(cal.copy_bandwidth.samples_gbps) > 1
    assert cal.device.type == "cuda" and cal.device.sm_count and cal.device.compute_capability
    assert cal.device.l2_cache_bytes and cal.device.l2_cache_bytes > 0


class _FakeClock:
    source = "fake"
    max_mhz = 1980

    def __init__(self, readings):
        self._readings = list(readings)

    def read_mhz(self):
        return self._readings.pop(0) if self._readings else 1980


@pytest.fixture
def fake_cuda(monkeypatch):
    """Just enough of torch.cuda for the timing control flow to run on CPU: events read the host clock, graphs
    replay what was captured. It checks the bookkeeping (warm-up, restores, calls per sample, clocks), not times."""
    import contextlib
    import time

    import torch

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3

    class Stream:
        def wait_stream(self, other):
            pass

    captured = []

    class Graph:
        def __init__(self):
            self.calls = []

        def replay(self):
            for fn in self.calls:
                fn()

    @contextlib.contextmanager
    def graph(g):
        captured.append(g)
        yield

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: Stream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    return captured


@pytest.mark.parametrize("mode", T.MODES)
def test_time_cell_bookkeeping_with_a_fake_device(fake_cuda, mode):
    import torch

    counts = {"calls": 0, "restores": 0}

    def call():
        counts["calls"] += 1

    def restore():
        counts["restores"] += 1

    clock = _FakeClock([1980, 1980, 1980, 1500, 1980, 1700])  # before, 4 samples, after
    flush = torch.empty(1024, dtype=torch.uint8)
    block = T.time_cell(call, mode=mode, samples=4, device="cpu", restore=restore, finite_check=lambda: True,
                        calls_per_sample=3, trial=2, clock=clock, flush=flush)
    assert block.trial == 2 and block.mode == mode and len(block.samples_us) == 4
    assert all(t >= 0 for t in block.samples_us)
    assert block.calls_per_sample == (1 if mode == "cold" else 3)
    assert block.warmup_calls >= T.WARMUP_MIN_CALLS and counts["calls"] >= block.warmup_calls
    assert counts["restores"] >= 4  # inputs restored before every sample
    assert block.clock_before_mhz == 1980 and block.sample_clock_mhz == [1980, 1980, 1500, 1980]
    assert block.rejected == [2] and block.throttled and block.clock_after_mhz == 1700
    assert block.outputs_finite is True and block.clock_source == "fake"
    assert (block.l2_flush_bytes == 1024) == (mode == "cold")
    # the host's time per call: launch mode only, one per sample, beside the samples
    if mode == "launch":
        assert len(block.host_samples_us) == 4 and all(t >= 0 for t in block.host_samples_us)
    else:
        assert block.host_samples_us is None


def test_launch_mode_host_time_brackets_the_calls_of_a_burst_and_nothing_else(fake_cuda, monkeypatch):
    """A fake host clock that only the calls (3 us each), the restores (1 ms each) and the events' record and
    synchronize (0.5 ms each) move: the host time per call is the calls' alone, so the bracket opens after the start
    event and the restore and closes before the end event is recorded and synchronized."""
    import torch

    ns = {"now": 0}
    monkeypatch.setattr(T.time, "perf_counter_ns", lambda: ns["now"])
    events = torch.cuda.Event

    class SlowEvent(events):
        def record(self, stream=None):
            ns["now"] += 500_000
            super().record(stream)

        def synchronize(self):
            ns["now"] += 500_000

    monkeypatch.setattr(torch.cuda, "Event", SlowEvent)

    def call():
        ns["now"] += 3_000

    def restore():
        ns["now"] += 1_000_000

    block = T.time_cell(call, mode="launch", samples=5, device="cpu", restore=restore, calls_per_sample=7,
                        clock=_FakeClock([]), second_timer=False)
    assert block.calls_per_sample == 7 and block.host_samples_us == [3.0] * 5
    assert len(block.samples_us) == 5


def test_graph_mode_places_every_graph_of_a_trial_under_its_condition(fake_cuda, monkeypatch):
    import torch

    from infercrane.kernels.harness.placement import draw

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    made, calls = [], {"n": 0}

    def make(i):
        x = torch.zeros(4)
        made.append(i)

        def call():
            calls["n"] += 1

        return T.Placed(call=call, tensors={"x": x})

    conds = [draw(5, i) for i in range(3)]
    timer = T.CellTimer(make, mode="graph", samples=4, device="cpu", trial=1, clock=_FakeClock([]),
                        calls_per_sample=2, placements=conds, graph_fixed_us=1.0)
    info = timer.prepare()
    assert info == {"calls_per_sample": 2, "sizing": "given (the cell's first trial)", "graphs": 3}
    assert made == [0, 0, 1, 2]  # warm-up buffers, then one set per graph
    assert len(fake_cuda) == 3 + sum(c.freed + c.kept for c in conds)  # timed graphs plus the tiny ones
    got = timer.sample()
    assert len(got["samples_us"]) == 12
    block = timer.finish()
    assert [g.condition for g in block.graphs] == conds
    assert [(g.first_sample, g.samples) for g in block.graphs] == [(0, 4), (4, 4), (8, 4)]
    assert block.second_timer_us is not None and block.second_timer_reference_us is not None
    assert block.figure_us() is not None and len(block.graph_medians()) == 3

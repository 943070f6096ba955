"""The screen end to end: a functional CPU run on tiny shapes, input errors, and a timed GPU run."""
from __future__ import annotations

from pathlib import Path

import pytest

from infercrane.kernels.harness.correctness import phases_for

from infercrane.errors import InputError
from infercrane.kernels.harness.runner import ScreenResult, screen
from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

FIXTURES = Path(__file__).parent / "fixtures"
SPEC = FusedAddRMSNormSpec(hidden_size=256, eps=1e-6, rows=(1, 8))
GOOD = f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm"


def _functional_only():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU functional run")


def test_without_a_gpu_the_screen_is_functional():
    _functional_only()
    res = screen(SPEC, ["eager"], rows=[2], isolate=False, checks=1)
    assert res.run_kind == "functional" and "no CUDA device" in res.run_kind_reason


def test_functional_screen_end_to_end(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    calls = []
    res = screen(SPEC, ["eager", "vllm_vendor", "cuda"], candidate=GOOD, device="cpu",
                 progress=lambda d, t, s: calls.append((d, t, s)))
    assert res.run_kind == "functional" and "correctness only" in res.run_kind_reason
    assert res.modes == [] and res.methods == {} and res.calibration is None and res.comparisons == []
    assert [i.key for i in res.implementations] == ["eager", "vllm_vendor", "cuda", "user"]
    for key in ("eager", "user"):
        impl = res.implementation(key)
        assert impl.status == "ok" and [c.rows for c in impl.correctness] == [1, 8]
        # 3 checks, each in every phase a CPU runs (eager, reuse)
        assert all(c.passed and len(c.checks) == 3 * len(phases_for("cpu")) for c in impl.correctness)
        assert impl.timings == []
    for key in ("vllm_vendor", "cuda"):
        impl = res.implementation(key)
        assert impl.status == "skipped" and not impl.available and impl.skip_reason
    user = res.implementation("user")
    assert user.kind == "candidate" and user.in_place is False and user.provenance["sha256"]
    # progress: monotonic, ends complete
    assert calls and calls[-1][0] == calls[-1][1]
    assert [d for d, _, _ in calls] == sorted(d for d, _, _ in calls)
    # everything a receipt needs survives a JSON round trip
    again = ScreenResult.model_validate_json(res.model_dump_json())
    assert again == res
    assert res.tolerance.rtol > 0 and res.base_seed == 0 and res.software["torch"]


def test_functional_screen_fails_a_cheating_candidate():
    res = screen(SPEC, ["eager"], candidate=f"{FIXTURES / 'cheaters.py'}:cached_result", isolate=False,
                 device="cpu")
    user = res.implementation("user")
    assert user.status == "failed" and user.failure == "incorrect"
    # the cache answers the reuse phase of the very first check (the same buffers, new contents) with a stale result
    assert "check 0 reuse" in user.error and user.correctness and not user.correctness[0].passed


def test_triton_runs_under_the_interpreter_in_a_functional_screen(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    res = screen(SPEC, ["triton"], isolate=False, checks=2, device="cpu")
    triton = res.implementation("triton")
    if triton.status == "skipped":
        pytest.skip(f"Triton kernel unavailable: {triton.skip_reason}")
    assert triton.status == "ok", triton.error
    assert triton.in_place is True


@pytest.mark.parametrize("kwargs,match", [
    ({"impl_keys": ["eager", "flash"]}, "known keys"),
    ({"modes": ["warm"]}, "known modes"),
    ({"rows": [0]}, "positive"),
    ({"trials": 0}, "trials"),
    ({"samples_per_trial": 1}, "samples_per_trial"),
    ({"candidate": "nowhere/at_all.py:fn"}, "does not exist"),
    ({"candidate": "kernel.py"}, "PATH.py:FUNCTION"),
    ({"device": "tpu"}, "device"),
])
def test_bad_input_fails_before_any_worker(kwargs, match):
    with pytest.raises(InputError, match=match):
        screen(SPEC, **{"impl_keys": ["eager"], **kwargs})


def test_an_undeclared_candidate_whose_contract_is_unclear_is_an_input_error(tmp_path):
    p = tmp_path / "k.py"
    p.write_text("def k(x, r, w, eps):\n    x.add_(1)\n    return x, r\n")  # returns, and writes its input too
    with pytest.raises(InputError, match="cannot tell which calling contract") as e:
        screen(SPEC, ["eager"], candidate=f"{p}:k", isolate=False)
    assert "out of place" in str(e.value) and "in place" in str(e.value)
    with pytest.raises(InputError, match="no function 'missing'"):
        screen(SPEC, ["eager"], candidate=f"{p}:missing", isolate=False)


@pytest.mark.gpu
def test_timed_screen_on_gpu():
    res = screen(FusedAddRMSNormSpec(hidden_size=1024, eps=1e-6, rows=(1, 512)), ["eager", "triton"],
                 modes=["launch", "graph", "cold"], trials=3, samples_per_trial=5,
                 candidate=f"{FIXTURES / 'cheaters.py'}:honest_in_place", checks=2)
    assert res.run_kind == "timed" and res.calibration is not None
    assert set(res.methods) == {"launch", "graph", "cold"}
    for impl in res.implementations:
        if impl.status == "skipped":
            continue
        assert impl.status == "ok", impl.error
        assert {(c.rows, c.mode) for c in impl.timings} == {(r, m) for r in (1, 512) for m in res.modes}
        for cell in impl.timings:
            assert len(cell.blocks) == 3 and all(t > 0 for b in cell.blocks for t in b.samples_us)
            assert cell.second_timer_us and cell.second_timer_method, cell.flags
            assert all(b.sizing for b in cell.blocks)
            assert cell.achieved_gbps and cell.achieved_gbps > 0 and cell.bandwidth_note
            if cell.mode == "launch":  # the host's time per call of every burst, summarized beside the time
                assert all(len(b.host_samples_us) == len(b.samples_us) for b in cell.blocks)
                assert cell.host_summary.median > 0 and cell.host_bound is not None
            else:
                assert cell.host_summary is None and all(b.host_samples_us is None for b in cell.blocks)
    ok = [i for i in res.implementations if i.status == "ok"]
    expected = {(c.key, o.key, r, m) for c in ok if c.kind == "candidate" for o in ok if o.key != c.key
                for r in (1, 512) for m in res.modes}
    assert {(c.candidate, c.reference, c.rows, c.mode) for c in res.comparisons} == expected
    for c in res.comparisons:
        assert c.speedup.ci_lo <= c.speedup.ratio <= c.speedup.ci_hi and c.speedup.trial_ids == [0, 1, 2]
    ScreenResult.model_validate_json(res.model_dump_json())


def _synthetic_device(monkeypatch, order: list, fail_at: tuple | None = None):
    """Stand in for a GPU: correctness on CPU tensors, synthetic timing blocks and calibration (no clocks read)."""
    import torch

    from infercrane.kernels.harness import runner, session as isolation
    from infercrane.kernels.harness.calibration import Calibration, CopyBandwidth, DeviceInfo
    from infercrane.kernels.harness.timing import TimingBlock

    from infercrane.kernels.harness import correctness

    monkeypatch.setattr(runner, "resolve_device", lambda device: ("cuda", "synthetic device for the test"))
    monkeypatch.setattr(correctness, "phases_for", lambda device_type: ["eager"])  # no graph replay on CPU tensors
    monkeypatch.setattr(isolation.WorkerSession, "_device", lambda self, name: torch.device("cpu"))
    # the parent bound compares a worker's samples with InferCrane's own clock around the job: here the samples are
    # made up and the clock is real, so on a loaded machine it called an honest synthetic worker a timer fault (the
    # bound itself: tests/kernels/test_placement_and_bounds.py)
    from infercrane.kernels.harness import timing

    monkeypatch.setattr(timing, "parent_bound", lambda block, overhead_us: None)
    base_us = {"eager": 10.0, "torch_compile": 10.0, "user": 5.0}

    # launch mode carries the host's time per call of each burst: a fixed cost per implementation
    host_us = {"eager": 12.0, "torch_compile": 4.0, "user": 3.0}

    def block(mode, trial, samples, t_us, calls, key=None):
        host = host_us.get(key, 0.1)
        return TimingBlock(mode=mode, trial=trial, calls_per_sample=calls, warmup_calls=10,
                           samples_us=[t_us * (1 + 0.01 * (i % 3)) for i in range(samples)],
                           sample_clock_mhz=[1980] * samples, clock_before_mhz=1980, clock_after_mhz=1980,
                           host_samples_us=[host * (1 + 0.01 * (i % 2)) for i in range(samples)]
                           if mode == "launch" else None,
                           clock_source="synthetic", throttled=False, outputs_finite=None,
                           second_timer_us=t_us * 1.01, second_timer_method="synthetic second timer")

    # A visit is four jobs (session.py): time (prepare), sample, finish, verify. The fake keeps the block between
    # them, and answers verify as an honest worker does: the implementation run on the parent's inputs.
    def fake_time(self, job):
        if job.get("empty"):  # the handshake cost, in the calibration worker
            self._fake = block(job["mode"], job["trial"], job["samples"], 0.2, 100)
            return {"calls_per_sample": 100}
        key = self.impl.key
        order.append((job["trial"], job["rows"], job["mode"], key))
        if fail_at and (key, job["trial"]) == fail_at:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        t_us = base_us[key] * (1 + job["rows"] / 64)
        self._fake = block(job["mode"], job["trial"], job["samples"], t_us, job.get("calls_per_sample") or 7, key)
        return {"calls_per_sample": self._fake.calls_per_sample}

    def fake_sample(self, job):
        return {"samples_us": self._fake.samples_us, "sample_clock_mhz": self._fake.sample_clock_mhz,
                "host_samples_us": self._fake.host_samples_us}

    def fake_finish(self, job):
        return self._fake.model_dump(mode="json")

    def fake_verify(self, job):
        from infercrane.kernels.harness.tensor_pack import TensorPack

        pack = TensorPack.open(job["pack"])
        try:
            spec, rows = self.spec, job["rows"]
            t = {n: pack.tensor(f"in.verify.{n}").clone() for n in spec.INPUTS}
            out = self.fn(*spec.arguments(t, bool(self.in_place)))
            if not self.in_place:
                for name, o in zip(spec.RETURNS.returns, out if isinstance(out, tuple) else (out,)):
                    pack.tensor(f"ret.verify.{name}").copy_(o)
            for n in spec.INPUTS:
                pack.tensor(f"after.verify.{n}").copy_(t[n])
        finally:
            pack.close()
        return {"error": None, "calls": 1}

    def fake_calibrate(self, job):
        return Calibration(
            device=DeviceInfo(type="cuda", name="synthetic", compute_capability="9.0", l2_cache_bytes=1 << 20,
                              sm_count=132),
            floor_kernel="synthetic", floors=[block(m, 0, 5, 0.2, 100) for m in job["modes"]],
            copy_bandwidth=CopyBandwidth(method="synthetic", bytes_per_copy=2 << 30, samples_gbps=[4000.0] * 3,
                                         median_gbps=4000.0),
            clock_source="synthetic", clock_before_mhz=1980, clock_after_mhz=1980,
        ).model_dump(mode="json")

    monkeypatch.setattr(isolation.WorkerSession, "_do_time", fake_time)
    monkeypatch.setattr(isolation.WorkerSession, "_do_sample", fake_sample)
    monkeypatch.setattr(isolation.WorkerSession, "_do_finish", fake_finish)
    monkeypatch.setattr(isolation.WorkerSession, "_do_verify", fake_verify)
    monkeypatch.setattr(isolation.WorkerSession, "_do_calibrate", fake_calibrate)


def test_timed_orchestration_with_a_synthetic_device(monkeypatch):
    order: list = []
    _synthetic_device(monkeypatch, order)
    spec = FusedAddRMSNormSpec(hidden_size=256, eps=1e-6, rows=(8, 4096))
    calls = []
    res = screen(spec, ["eager"], modes=["launch", "graph"], trials=3, samples_per_trial=4, candidate=GOOD,
                 isolate=False, progress=lambda d, t, s: calls.append((d, t)))
    assert res.run_kind == "timed" and res.calibration.device.name == "synthetic"
    assert set(res.methods) == {"launch", "graph"} and all(res.methods.values())
    # interleaved: in every trial each cell visits both implementations, the order rotating per trial
    firsts = [[k for (t, r, m, k) in order if t == trial][0] for trial in range(3)]
    assert firsts == ["eager", "user", "eager"]
    assert len(order) == 3 * 2 * 2 * 2
    for impl in res.implementations:
        assert impl.status == "ok"
        for cell in impl.timings:
            assert len(cell.blocks) == 3 and len(cell.kept_samples_us) == 12 and cell.n_rejected == 0
            assert cell.calls_per_sample == 7 and all(b.calls_per_sample == 7 for b in cell.blocks)
            assert cell.summary.n == 12 and cell.bytes_moved == spec.bytes_moved(cell.rows)
            assert cell.achieved_gbps == pytest.approx(cell.bytes_moved / cell.summary.median / 1e3)
    small = res.implementation("eager").timings[0]
    big = [c for c in res.implementation("eager").timings if c.rows == 4096][0]
    assert small.pct_of_copy_bandwidth is None and "served from L2" in small.bandwidth_note  # 16 KiB < 2 x L2
    assert big.pct_of_copy_bandwidth is not None
    # comparisons: the candidate against the baseline in every cell, with the policy's CI and band
    assert {(c.candidate, c.reference, c.rows, c.mode) for c in res.comparisons} == {
        ("user", "eager", r, m) for r in (8, 4096) for m in ("launch", "graph")}
    for c in res.comparisons:
        assert c.speedup.ratio == pytest.approx(2.0, rel=0.05) and c.verdict.value == "FASTER"
        assert c.same_margin == res.comparison_policy["same_margin"]
    assert calls[-1][0] == calls[-1][1]
    ScreenResult.model_validate_json(res.model_dump_json())


def test_launch_cells_carry_the_host_cost_per_call_and_whether_it_bounds_the_launch_time(monkeypatch):
    from infercrane.kernels.harness.runner import HOST_BOUND_FRACTION
    from infercrane.kernels.harness.timing import HOST_METHOD

    _synthetic_device(monkeypatch, [])
    spec = FusedAddRMSNormSpec(hidden_size=256, eps=1e-6, rows=(8, 4096))
    res = screen(spec, ["eager"], modes=["launch", "graph"], trials=3, samples_per_trial=4, candidate=GOOD,
                 isolate=False)
    assert res.host_method == HOST_METHOD and res.host_method.startswith("host: perf_counter around the same burst")
    bound = {}
    for impl in res.implementations:
        for cell in impl.timings:
            if cell.mode != "launch":
                assert cell.host_summary is None and cell.host_bound is None
                assert all(b.host_samples_us is None for b in cell.blocks)
                continue
            raw = [t for b in cell.blocks for t in b.host_samples_us]
            assert cell.host_summary.n == len(raw) == 12  # every sample kept, each with its host time
            assert cell.host_summary.median == pytest.approx(sorted(raw)[5] / 2 + sorted(raw)[6] / 2)
            assert cell.host_bound == (cell.host_summary.median >= HOST_BOUND_FRACTION * cell.summary.median)
            bound[(impl.key, cell.rows)] = cell.host_bound
    # eager: 12 us of host against 11.25-11.4 us of launch time at 8 rows (bound), against 650 us at 4096 (not);
    # the candidate: 3 us of host against about 5.6 us at 8 rows (not bound)
    assert bound == {("eager", 8): True, ("eager", 4096): False, ("user", 8): False, ("user", 4096): False}


def test_host_times_left_out_with_their_throttled_samples(monkeypatch):
    from infercrane.kernels.harness.runner import summarize_cell
    from infercrane.receipts.screen_result import TimingBlock

    block = TimingBlock(mode="launch", trial=0, calls_per_sample=10, warmup_calls=10, samples_us=[5.0, 5.0, 5.0, 9.0],
                        sample_clock_mhz=[1980, 1980, 1980, 1200], rejected=[3], host_samples_us=[1.0, 2.0, 3.0, 50.0],
                        clock_before_mhz=1980, clock_after_mhz=1980, clock_source="synthetic", throttled=True,
                        outputs_finite=None)
    cell = summarize_cell(8, "launch", [block], None, None)
    assert cell.host_summary.n == 3 and cell.host_summary.median == 2.0 and cell.host_bound is False
    every = block.model_copy(update={"rejected": [0, 1, 2, 3]})  # every sample rejected: both over all of them
    cell = summarize_cell(8, "launch", [every], None, None)
    assert cell.summary_over == "all" and cell.host_summary.n == 4 and cell.host_summary.median == 2.5
    assert cell.host_bound is False  # 2.5 < 0.9 x 5.0
    old = block.model_copy(update={"host_samples_us": None})  # a block from before host times were read
    cell = summarize_cell(8, "launch", [old], None, None)
    assert cell.host_summary is None and cell.host_bound is None


@pytest.mark.parametrize("tamper,words", [
    (lambda host: [t / 10 for t in host], "host times in the worker's block differ from those it sent"),
    (lambda host: [float("nan")] + host[1:], "does not hold together: host_samples_us.0: Input should be a finite"),
    (lambda host: host[1:], "host_samples_us for 3 samples_us: one per sample"),
])
def test_a_worker_whose_host_times_do_not_hold_together_is_a_timer_fault(monkeypatch, tamper, words):
    from infercrane.kernels.harness import session

    _synthetic_device(monkeypatch, [])
    honest_finish = session.WorkerSession._do_finish

    def finish(self, job):
        out = honest_finish(self, job)
        if self.impl.key == "user" and out["host_samples_us"]:
            out["host_samples_us"] = tamper(out["host_samples_us"])
        return out

    monkeypatch.setattr(session.WorkerSession, "_do_finish", finish)
    res = screen(SPEC, ["eager"], modes=["launch"], trials=2, samples_per_trial=3, candidate=GOOD, isolate=False)
    user = res.implementation("user")
    assert user.status == "failed" and user.failure == "timer_fault" and words in user.error, user.error
    assert res.implementation("eager").status == "ok"


def test_a_failure_while_timing_keeps_what_was_measured(monkeypatch):
    order: list = []
    _synthetic_device(monkeypatch, order, fail_at=("user", 1))
    calls = []
    res = screen(SPEC, ["eager"], modes=["launch"], trials=3, samples_per_trial=3, candidate=GOOD, isolate=False,
                 progress=lambda d, t, s: calls.append((d, t)))
    user, eager = res.implementation("user"), res.implementation("eager")
    assert user.status == "failed" and user.failure == "error" and "illegal memory access" in user.error
    assert all(len(c.blocks) == 1 for c in user.timings)  # trial 0 kept
    assert eager.status == "ok" and all(len(c.blocks) == 3 for c in eager.timings)
    assert res.comparisons == []  # a failed candidate is not compared
    assert calls[-1][0] == calls[-1][1]


def test_decision_inputs_from_a_screen(monkeypatch):
    from infercrane.decide.kernel import decide_kernel
    from infercrane.kernels.harness.compare import decision_inputs

    _synthetic_device(monkeypatch, [])
    res = screen(SPEC, ["eager"], modes=["graph"], trials=3, samples_per_trial=4, candidate=GOOD, isolate=False)
    inputs = decision_inputs(res, "user", phrase="test candidate")
    assert [s.rows for s in inputs.shapes] == [1, 8] and all(s.correct for s in inputs.shapes)
    assert {t.baseline for s in inputs.shapes for t in s.timings} == {"eager"}
    skipped = {s.baseline: s.reason for s in inputs.skipped_baselines}
    assert skipped == {"torch_compile": "not selected for this screen", "vllm_vendor": "not selected for this screen"}
    decision = decide_kernel(inputs)
    assert decision.decision == "retain" and "vLLM" in decision.reason  # faster, but the comparison is incomplete


def test_a_harness_failure_in_a_worker_is_no_verdict_on_the_candidate(monkeypatch):
    """The harness running out of memory while preparing a check is the harness's error: the implementation is marked
    failed with failure 'harness' and its decision is inconclusive, never reject."""
    from infercrane.decide.policy import load_policy
    from infercrane.kernels.harness import execute
    from infercrane.kernels.receipt import decide_all

    def oom(*args, **kw):
        raise RuntimeError("CUDA out of memory (simulated while allocating the guard buffers)")

    monkeypatch.setattr(execute, "_framed_args", oom)
    res = screen(SPEC, ["eager"], trials=1, candidate=GOOD, isolate=False, device="cpu")
    for impl in res.implementations:
        assert impl.status == "failed" and impl.failure == "harness", impl
    code, _, reason, _, _ = decide_all(res, load_policy("kernel"), None)["user"]
    assert code == "inconclusive" and "the harness failed, not the candidate" in reason

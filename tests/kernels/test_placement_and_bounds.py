"""Graph-mode placements, the parent's clock bound and the timed-output check: their rules on the CPU."""
from __future__ import annotations

import pytest

from infercrane.kernels.harness import placement as P
from infercrane.kernels.harness import timing as T
from infercrane.receipts.screen_result import GraphPlacement, TimingBlock


def _block(samples, *, calls=100, elapsed=None, graphs=None, rejected=()):
    return TimingBlock(mode="graph", trial=0, calls_per_sample=calls, warmup_calls=10, samples_us=list(samples),
                       sample_clock_mhz=[1980] * len(samples), rejected=list(rejected), clock_before_mhz=1980,
                       clock_after_mhz=1980, clock_source="fake", throttled=False, outputs_finite=None,
                       parent_elapsed_us=elapsed, graphs=graphs or [])


def test_draws_are_seeded_per_graph_and_the_same_for_every_caller():
    a = [P.draw(7, i) for i in range(40)]
    assert a == [P.draw(7, i) for i in range(40)]  # what every implementation of a trial gets
    assert a != [P.draw(8, i) for i in range(40)]
    assert all(0 <= c.pad_bytes < P.PAD_MAX_BYTES and c.pad_bytes % P.PAD_STEP_BYTES == 0 for c in a)
    assert any(c.pad_bytes == 0 for c in a) and any(c.pad_bytes > 0 for c in a)
    assert {c.freed for c in a} <= set(range(P.MAX_FREED + 1)) and {c.kept for c in a} <= {0, 1}
    assert [c.index for c in a] == list(range(40))


def test_levels_split_at_the_widest_gap_only_when_it_is_wide():
    two = P.split_levels([1.07, 1.071, 1.25, 1.249, 1.072])
    assert two.levels == 2 and two.low_n == 3 and two.high_n == 2
    assert two.low_median_us == pytest.approx(1.071) and two.high_median_us == pytest.approx(1.2495)
    one = P.split_levels([1.25, 1.26, 1.255])
    assert one.levels == 1 and one.low_median_us is None
    assert P.split_levels([1.0]).levels == 1


def test_a_graph_trial_weighs_every_placement_the_same():
    cond = [P.draw(0, i) for i in range(2)]
    graphs = [GraphPlacement(condition=cond[0], first_sample=0, samples=3),
              GraphPlacement(condition=cond[1], first_sample=3, samples=3)]
    # graph 0 at 1.0 (one sample rejected), graph 1 at 2.0: the trial's figure is the mean of the two medians
    b = _block([1.0, 1.0, 9.0, 2.0, 2.0, 2.0], graphs=graphs, rejected=[2])
    assert b.graph_medians() == [1.0, 2.0]
    assert b.figure_us() == pytest.approx(1.5)
    assert _block([1.0, 3.0, 2.0]).figure_us() == 2.0  # no graphs: the median of the kept samples


def test_the_parent_bound_catches_a_timer_that_reads_ten_times_fast():
    honest = _block([10.0] * 20, calls=100, elapsed=20_000 + 3_000)  # 20 ms of samples, 3 ms of handshake
    assert T.parent_bound(honest, overhead_us=2_900) is None
    fast = _block([1.0] * 20, calls=100, elapsed=20_000 + 3_000)  # claims 2 ms, the parent saw 23 ms
    fault = T.parent_bound(fast, overhead_us=2_900)
    assert fault and fault.startswith("timer_fault: trial 0") and "2000 us" in fault
    assert T.parent_bound(fast, overhead_us=None) is None  # no measured handshake: no claim either way
    small = _block([0.1] * 20, calls=10, elapsed=3_900)  # 20 us claimed, 1 ms unexplained: under the noise bound
    assert T.parent_bound(small, overhead_us=2_900) is None


def test_the_parent_bound_allows_for_the_jitter_of_a_long_handshake():
    # a cold job (H200): 20 samples of ~4 us, each behind a ~1 ms spin; the empty kernel's job showed 22.4 ms
    honest = _block([3.9] * 20, calls=1, elapsed=22_388 + 78 + 2_057)  # 2 ms over: the spins ran slower
    assert T.parent_bound(honest, overhead_us=22_388) is None
    slow = _block([3.9] * 20, calls=1, elapsed=22_388 + 78 + 0.6 * 22_388)  # 13 ms no sample accounts for
    fault = T.parent_bound(slow, overhead_us=22_388)
    assert fault and fault.startswith("timer_fault: trial 0")


def _fake_worker(spec, impl, *, calls, in_place, stale=False):
    """What a worker's ``verify`` job does, on CPU tensors: write the parent's inputs, run ``calls`` calls, hand back."""
    import torch

    from infercrane.kernels.harness.tensor_pack import TensorPack

    def request(job):
        pack = TensorPack.open(job["pack"])
        try:
            rows = job["rows"]
            t = {n: pack.tensor(f"in.verify.{n}").clone() for n in spec.INPUTS}
            for n in spec.buffers(in_place):
                t[n] = torch.full((rows, spec.hidden_size), float("nan"), dtype=t[spec.ROW_TENSORS[0]].dtype)
            out = None
            for _ in range(0 if stale else calls):
                out = impl(*spec.arguments(t, in_place))
            if not in_place:
                if out is None:
                    out = tuple(torch.zeros_like(t["x"]) for _ in spec.RETURNS.returns)
                for name, o in zip(spec.RETURNS.returns, out if isinstance(out, tuple) else (out,)):
                    pack.tensor(f"ret.verify.{name}").copy_(o)
            for n in [*spec.INPUTS, *spec.buffers(in_place)]:
                pack.tensor(f"after.verify.{n}").copy_(t[n])
            return {"error": None, "calls": calls}
        finally:
            pack.close()

    return request


@pytest.mark.parametrize("calls", [1, 7])
def test_the_timed_outputs_pass_for_honest_calls_in_both_contracts(calls):
    from infercrane.kernels.harness.timed_check import verify
    from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

    spec = FusedAddRMSNormSpec(hidden_size=64, eps=1e-6)

    def in_place(x, residual, weight, eps):
        out, res = fused_add_rmsnorm_eager(x, residual, weight, eps)
        residual.copy_(res)
        x.copy_(out)

    for fn, ip in ((fused_add_rmsnorm_eager, False), (in_place, True)):
        check = verify(_fake_worker(spec, fn, calls=calls, in_place=ip), spec, in_place=ip, rows=4, seed=11,
                       calls=calls)
        assert check.passed, check.failure_summary()
        assert check.calls == calls and check.tensors
        if ip and calls > 1:
            assert "repeated_reference" in check.method and [t.name for t in check.tensors] == ["out"]


@pytest.mark.parametrize("in_place", [False, True])
def test_timed_calls_that_did_no_work_are_incorrect(in_place):
    from infercrane.kernels.harness.timed_check import verify
    from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

    spec = FusedAddRMSNormSpec(hidden_size=64, eps=1e-6)
    check = verify(_fake_worker(spec, fused_add_rmsnorm_eager, calls=50, in_place=in_place, stale=True), spec,
                   in_place=in_place, rows=4, seed=3, calls=50)
    assert not check.passed
    assert check.failure_summary().startswith("timed outputs (seed 3")


def test_a_worker_error_in_the_check_is_reported_as_such():
    from infercrane.kernels.harness.timed_check import verify
    from infercrane.kernels.ops.rms_norm.spec import RMSNormSpec

    spec = RMSNormSpec(hidden_size=64, eps=1e-6)
    check = verify(lambda job: {"error": "out-of-place contract: expected out, got NoneType", "calls": 1}, spec,
                   in_place=False, rows=2, seed=1, calls=1)
    assert not check.passed and "out-of-place contract" in check.failure_summary()
    bad = verify(lambda job: "garbage", spec, in_place=False, rows=2, seed=1, calls=1)
    assert not bad.passed and "malformed" in bad.contract_error


def test_cold_mode_holds_the_events_against_cupti_plus_the_event_pairs_own_cost():
    from infercrane.kernels.harness.runner import _summarize_cell

    block = _block([4.0] * 10, calls=1).model_copy(update={
        "mode": "cold", "second_timer_us": 2.6, "second_timer_method": "CUPTI"})
    raw = _summarize_cell(1, "cold", [block], None, None, None)
    assert raw.timer_disagreement == pytest.approx(4.0 / 2.6 - 1.0) and raw.flags  # 54 %: two quantities
    held = _summarize_cell(1, "cold", [block], None, None, None, second_offset_us=1.4)
    assert held.timer_disagreement == pytest.approx(0.0) and not held.flags
    assert held.second_timer_us == 2.6 and held.second_timer_offset_us == 1.4
    off = _summarize_cell(1, "cold", [block], None, None, None, second_offset_us=0.2)
    assert off.flags and off.flags[0].startswith("timer_disagreement")  # an offset explains only its own size


def test_cold_mode_holds_the_events_against_the_driver_event_pair_within_their_resolution():
    from infercrane.kernels.harness.runner import _summarize_cell
    from infercrane.kernels.harness.timing import COLD_RESOLUTION_US, SECOND_TIMER_METHODS

    def cell(primary, second):
        block = _block([primary] * 10, calls=1).model_copy(update={
            "mode": "cold", "second_timer_us": second, "second_timer_method": SECOND_TIMER_METHODS["cold"]})
        return _summarize_cell(1, "cold", [block], None, None, None)

    near = cell(4.0, 4.0 - 0.8 * COLD_RESOLUTION_US)  # 11 % apart, but under the events' resolution
    assert not near.flags and near.second_timer_offset_us is None
    patched = cell(0.4, 4.0)  # torch's events patched to read 10x fast: the driver pair still reads 4 us
    assert patched.flags and patched.flags[0].startswith("timer_disagreement")
    assert patched.timer_disagreement == pytest.approx(-0.9)
    slow = cell(40.0, 36.0)  # beyond 5 % of a long cell, though far over 0.5 us
    assert slow.flags and "limit ±5%" in slow.flags[0]

"""The correctness check fails every cheating kernel and passes honest ones."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from infercrane.kernels.harness.correctness import check_implementation
from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec
from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager
from infercrane.kernels.user_candidate import load_candidate, parse_candidate_ref

FIXTURES = Path(__file__).parent / "fixtures"
CHEATERS = FIXTURES / "cheaters.py"
CPU_CHEATERS = runpy.run_path(str(CHEATERS))["CPU_CHEATERS"]
HIDDEN = 256


def _load(name: str):
    return load_candidate(parse_candidate_ref(f"{CHEATERS}:{name}"))


def _check(fn, in_place, rows=8, device="cpu", checks=3):
    return check_implementation(fn, FusedAddRMSNormSpec(hidden_size=HIDDEN, eps=1e-6), in_place=in_place, rows=rows,
                                device=device,
                                checks=checks)


@pytest.mark.parametrize("rows", [1, 8])
def test_eager_passes(rows):
    res = _check(fused_add_rmsnorm_eager, False, rows)
    assert res.passed, res.failure_summary()
    # three checks, each in two phases on the CPU (eager, reuse), each phase with its own seed
    assert len(res.checks) == 6 and len({c.seed for c in res.checks}) == 6
    assert [c.phase for c in res.checks] == ["eager", "reuse"] * 3
    for c in res.checks:
        for t in c.tensors:
            assert t.mismatched == 0 and t.nonfinite == 0 and t.first_bad_index is None


@pytest.mark.parametrize("name", ["honest_out_of_place", "honest_in_place"])
def test_honest_fixtures_pass(name):
    c = _load(name)
    res = _check(c.fn, c.in_place)
    assert res.passed, res.failure_summary()
    assert {c.phase for c in res.checks} == {"eager", "reuse"}


@pytest.mark.parametrize("name", CPU_CHEATERS)
def test_each_cheater_fails(name):
    c = _load(name)
    res = _check(c.fn, c.in_place)
    assert not res.passed
    assert res.failure_summary()  # a failure says what is wrong


def test_zeros_report_errors_and_first_bad_index():
    c = _load("writes_zeros")
    res = _check(c.fn, c.in_place)
    out = res.checks[0].tensors[0]
    assert out.name == "out" and not out.passed
    assert out.mismatched > out.numel // 2
    assert out.max_rel_err == pytest.approx(1.0)
    assert out.first_bad_index is not None and out.first_bad_index[0] == 0


def test_first_row_only_fails_from_row_one():
    for name in ("first_row_only", "first_row_only_in_place"):
        c = _load(name)
        assert _check(c.fn, c.in_place, rows=1).passed  # with one row it is honest
        res = _check(c.fn, c.in_place, rows=8)
        out = res.checks[0].tensors[0]
        assert not out.passed and out.first_bad_index[0] == 1


def test_a_freed_answer_is_never_read_back_on_cpu():
    # the cheater computes the answer, frees it, and returns blocks it does not write past row 0: without glibc's heap
    # perturbed, some of its outputs pass (the blocks still hold the answer); with it, none does
    c = _load("freed_answer")
    res = _check(c.fn, c.in_place, rows=8)
    assert not any(t.passed for check in res.checks for t in check.tensors)
    assert all(t.first_bad_index is not None and t.first_bad_index[0] >= 1 for check in res.checks
               for t in check.tensors)


def test_the_cpu_heap_is_perturbed_while_a_call_runs():
    torch = pytest.importorskip("torch")
    from infercrane.kernels.harness.execute import perturbed_heap

    with perturbed_heap() as on:
        if not on:
            pytest.skip("the C library is not glibc")
        for rows in (1, 8, 512):
            for _ in range(50):
                freed = torch.full((rows, HIDDEN), 3.0, dtype=torch.bfloat16)
                del freed
                fresh = torch.empty((rows, HIDDEN), dtype=torch.bfloat16)
                assert not (fresh.float() == 3.0).any()


def test_unwritten_rows_fail_on_cpu():
    # on the CPU the rows the kernel did not write read as glibc's perturbation bytes, not the oracle's answer
    c = _load("first_row_only")
    res = _check(c.fn, c.in_place, rows=8)
    out = res.checks[0].tensors[0]
    assert not out.passed and out.first_bad_index[0] >= 1
    assert out.max_abs_err > 1e38  # 0x7F7F: bfloat16's 3.39e38


@pytest.mark.gpu
def test_poisoned_allocator_shows_unwritten_rows_as_nan_on_gpu():
    c = _load("first_row_only")
    res = _check(c.fn, c.in_place, rows=8, device="cuda")
    assert res.checks[0].tensors[0].nonfinite > 0


def test_cached_result_passes_only_the_first_check():
    for name in ("cached_result", "cached_result_in_place"):
        fn = runpy.run_path(str(CHEATERS))[name]  # a fresh cache
        res = _check(fn, fn.in_place)
        # check 0 eager computes; its reuse phase and every later check get the cached values
        assert [c.passed for c in res.checks] == [True] + [False] * 5


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", ["address_cache", "address_cache_in_place", "identity_cache"])
def test_a_cache_keyed_on_the_inputs_address_or_identity_fails_the_reuse_phase(name, device):
    # fresh buffers every check never hit such a cache (eager passes); the same buffers refilled with new inputs do
    fn = runpy.run_path(str(CHEATERS))[name]  # a fresh cache
    res = _check(fn, fn.in_place, device=device)
    assert not res.passed
    assert res.checks[0].phase == "eager" and res.checks[0].passed
    reuse = [c for c in res.checks if c.phase == "reuse"]
    assert len(reuse) == 3 and not any(c.passed for c in reuse)
    first_bad = next(c for c in res.checks if not c.passed)
    assert first_bad.phase == "reuse" and first_bad.check_index == 0 and first_bad.contract_error is None
    assert not first_bad.tensors[0].passed and "reuse" in res.failure_summary()


def test_skipped_residual_write_back_is_caught_on_residual_out():
    c = _load("skips_residual_writeback")
    res = _check(c.fn, c.in_place)
    out, resid = res.checks[0].tensors
    assert out.passed and not resid.passed and resid.name == "residual_out"


def test_a_single_nan_never_passes():
    c = _load("one_nan")
    res = _check(c.fn, c.in_place)
    out = res.checks[0].tensors[0]
    assert not out.passed and out.nonfinite == 1 and out.mismatched == 1


def test_contract_violations_are_named():
    res = _check(_load("mutates_inputs").fn, False)
    assert "the call modified" in res.checks[0].contract_error
    res = _check(_load("writes_past_end").fn, True)
    assert "outside x" in res.checks[0].contract_error

    def returns_inputs(x, residual, weight, eps):
        return x, residual

    res = _check(returns_inputs, False)
    assert "shares memory" in res.checks[0].contract_error

    def returns_one(x, residual, weight, eps):
        return x

    assert "expected (out, residual_out)" in _check(returns_one, False).checks[0].contract_error


@pytest.mark.gpu
def test_side_stream_cheater_is_caught_on_gpu():
    c = _load("side_stream")
    res = _check(c.fn, c.in_place, device="cuda")
    assert not res.passed
    assert "non-default" in res.stream


@pytest.mark.gpu
@pytest.mark.parametrize("name", CPU_CHEATERS)
def test_each_cheater_fails_on_gpu(name):
    c = _load(name)
    assert not _check(c.fn, c.in_place, device="cuda").passed


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["honest_out_of_place", "honest_in_place"])
def test_honest_fixtures_pass_on_gpu(name):
    c = _load(name)
    res = _check(c.fn, c.in_place, device="cuda")
    assert res.passed, res.failure_summary()

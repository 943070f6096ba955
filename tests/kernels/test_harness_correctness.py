"""The comparison rule, tolerances as data, seeds and inputs."""
from __future__ import annotations

import pytest

from infercrane.kernels.harness import correctness as C
from infercrane.kernels.ops.fused_add_rmsnorm.spec import TOLERANCES, FusedAddRMSNormSpec

torch = pytest.importorskip("torch")


def test_tolerances_are_data_with_derivations():
    for dtype, tol in TOLERANCES.items():
        assert tol.dtype == dtype and tol.rtol > 0 and tol.atol_scale > 0
        assert tol.derivation and "atol" in tol.rule and "rtol" in tol.rule
    assert TOLERANCES["bfloat16"].rtol == pytest.approx(1.6e-2)


def test_compare_reports_first_bad_index_and_errors():
    ref = torch.ones(4, 8)
    got = ref.clone()
    got[2, 5] = 1.5
    got[3, 1] = float("inf")
    t = C.compare("out", got, ref, TOLERANCES["bfloat16"])
    assert not t.passed and t.mismatched == 2 and t.nonfinite == 1
    assert t.first_bad_index == (2, 5)
    assert t.max_abs_err == pytest.approx(0.5) and t.max_rel_err == pytest.approx(0.5)
    assert t.atol == pytest.approx(1e-2)  # atol_scale * rms(ref) with rms = 1


def test_tolerance_scales_with_the_reference():
    tol = TOLERANCES["bfloat16"]
    ref = torch.full((2, 4), 1000.0)
    assert C.compare("out", ref * (1 + 1e-2), ref, tol).passed  # 1 % off at any scale passes
    assert not C.compare("out", ref * (1 + 5e-2), ref, tol).passed
    assert not C.compare("out", ref * 0, ref, tol).passed


def test_all_nan_output_has_no_max_error():
    ref = torch.ones(2, 3)
    t = C.compare("residual_out", torch.full_like(ref, float("nan")), ref, TOLERANCES["bfloat16"])
    assert not t.passed and t.nonfinite == 6 and t.max_abs_err is None


def test_seeds_differ_per_check_and_rows_but_not_per_implementation():
    seeds = {C.check_seed(0, r, i) for r in (1, 8, 32) for i in range(3)}
    assert len(seeds) == 9
    assert C.check_seed(5, 8, 1) == C.check_seed(5, 8, 1)


def test_inputs_are_fresh_scaled_and_never_zero():
    spec = FusedAddRMSNormSpec(hidden_size=64, eps=1e-6)
    a = list(spec.make_inputs(8, "cpu", seed=1, scale=16.0).values())
    b = list(spec.make_inputs(8, "cpu", seed=2, scale=16.0).values())
    assert not torch.equal(a[0], b[0])
    for t in a:
        assert t.dtype == torch.bfloat16 and bool(torch.isfinite(t).all())
        assert float(t.float().abs().max()) > 0
    assert float(a[0].float().std()) == pytest.approx(16.0, rel=0.2)
    assert float(a[2].float().mean()) == pytest.approx(1.0, abs=0.2)  # weight ~ N(1, 0.5^2), not ones


def test_result_records_tolerance_and_stream():
    from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager

    res = C.check_implementation(fused_add_rmsnorm_eager, FusedAddRMSNormSpec(hidden_size=32, eps=1e-6), in_place=False,
                                 rows=2, checks=2)
    assert res.tolerance == TOLERANCES["bfloat16"] and res.stream.startswith("cpu")
    assert [c.input_scale for c in res.checks] == [s for s in C.CHECK_SCALES[:2] for _ in ("eager", "reuse")]
    assert [c.phase for c in res.checks] == ["eager", "reuse"] * 2 and all(c.passed for c in res.checks)
    assert len({c.seed for c in res.checks}) == 4  # the reuse phase has its own seed
    with pytest.raises(ValueError):
        C.check_implementation(fused_add_rmsnorm_eager, FusedAddRMSNormSpec(hidden_size=32, eps=1e-6), in_place=False,
                               rows=2, checks=0)


def test_phases_include_reuse_on_every_device():
    assert C.phases_for("cpu") == ["eager", "reuse"]
    assert C.phases_for("cuda") == ["eager", "reuse", "graph"]
    assert len({C.PHASE_SEED_SALTS[p] for p in C.phases_for("cuda")}) == 3


def test_a_harness_failure_is_the_harness_s_and_a_kernel_s_exception_is_the_kernel_s():
    from infercrane.kernels.harness.execute import HarnessFault, run_check
    from infercrane.kernels.harness.tensor_pack import TensorPack

    spec = FusedAddRMSNormSpec(hidden_size=32, eps=1e-6)
    entries = C.pack_entries(spec, 2, False, ["eager"])
    del entries["in.eager.x"]  # the harness cannot lay out an input it has no room for
    pack = TensorPack.create(entries)
    try:
        from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager

        with pytest.raises(HarnessFault, match="the eager check"):
            run_check(fused_add_rmsnorm_eager, spec, False, 2, "cpu", pack, ["eager"])

        def raises(x, residual, weight, eps):
            raise RuntimeError("the kernel's own failure")

        whole = TensorPack.create(C.pack_entries(spec, 2, False, ["eager"]))
        try:
            with pytest.raises(RuntimeError, match="the kernel's own failure"):
                run_check(raises, spec, False, 2, "cpu", whole, ["eager"])
        finally:
            whole.close()
    finally:
        pack.close()


def test_a_failure_after_the_kernel_ran_is_the_kernel_s():
    """CUDA reports a kernel's illegal access in a later call: once the kernel has run, a failure in the harness's
    next step is the kernel's, not the harness's."""
    from infercrane.kernels.harness.execute import HarnessFault, attribute, guarded

    fn = guarded(lambda: None)

    def harness_then_breaks():
        fn()
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access"):
        attribute(harness_then_breaks, "a check", fn)
    with pytest.raises(HarnessFault, match="before the implementation ran"):
        attribute(lambda: [][0], "a check", guarded(lambda: None))

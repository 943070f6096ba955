"""Baselines: eager matches the oracle's contract; torch.compile compiles per shape; vLLM version parsing."""
from __future__ import annotations

import pytest

from infercrane.kernels.ops import vllm_lib
from infercrane.kernels.ops.compile_per_shape import fresh_copy
from infercrane.kernels.ops.fused_add_rmsnorm import baselines

torch = pytest.importorskip("torch")


def test_eager_is_out_of_place_and_keeps_dtype():
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

    x, r, w = FusedAddRMSNormSpec(hidden_size=64, eps=1e-6).make_inputs(4, "cpu", seed=3, scale=1.0).values()
    x0, r0 = x.clone(), r.clone()
    out, res = baselines.fused_add_rmsnorm_eager(x, r, w, 1e-6)
    assert out.dtype == res.dtype == torch.bfloat16 and out.shape == x.shape
    assert torch.equal(x, x0) and torch.equal(r, r0)
    assert torch.equal(res, (x.float() + r.float()).to(torch.bfloat16))


def test_fresh_copy_has_its_own_code_object():
    f = fresh_copy(baselines.fused_add_rmsnorm_eager, "rows8")
    assert f.__code__ is not baselines.fused_add_rmsnorm_eager.__code__
    assert f.__code__.co_name.endswith("rows8")
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    w = torch.ones(16, dtype=torch.bfloat16)
    a, b = f(x, x, w, 1e-6), baselines.fused_add_rmsnorm_eager(x, x, w, 1e-6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.slow
def test_torch_compile_compiles_once_per_shape_on_cpu():
    ok, reason = baselines.BASELINES.torch_compile_available()
    if not ok:
        pytest.skip(reason)
    from infercrane.kernels.harness.correctness import check_implementation
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

    fn = baselines.BASELINES.load_torch_compile(None)
    res = check_implementation(fn, FusedAddRMSNormSpec(hidden_size=64, eps=1e-6), in_place=False, rows=2, checks=2)
    assert res.passed, res.failure_summary()
    assert fn.compiled_shapes == [((2, 64), "torch.bfloat16", "cpu")]


@pytest.mark.parametrize("path,version", [
    ("/w/vllm-0.22.1-cp38-abi3-manylinux_2_31_x86_64/vllm/_C.abi3.so", "0.22.1"),
    ("/site/vllm-0.11.0rc1.dist-info/../vllm/_C_stable_libtorch.abi3.so", "0.11.0rc1"),
    ("/opt/lib/_C.abi3.so", None),
])
def test_vllm_version_from_path(path, version):
    assert vllm_lib.vllm_version_from_path(path) == version


def test_vllm_version_from_dist_info_next_to_package(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm-0.22.1.dist-info").mkdir()
    lib = tmp_path / "vllm" / "_C.abi3.so"
    lib.write_bytes(b"")
    assert vllm_lib.vllm_version_from_path(lib) == "0.22.1"


@pytest.mark.gpu
def test_vllm_route_is_found_or_says_why():
    baselines.BASELINES.vllm_route.cache_clear()
    ok, reason = baselines.BASELINES.vllm_available()
    if ok:
        info = baselines.BASELINES.describe_vllm()
        assert info["route"] and info["vllm"]
    else:
        assert "vLLM not importable" in reason or "INFERCRANE_VLLM_OPS_LIB" in reason or "loaded" in reason

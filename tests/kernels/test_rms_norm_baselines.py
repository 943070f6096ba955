"""RMSNorm baselines and listing: eager and torch.compile against the float32 oracle on CPU, the ordered
implementation listing with its capability probes, and (GPU) vLLM's vendor kernel when vLLM or
``INFERCRANE_VLLM_OPS_LIB`` provides it. Tolerances are the spec's (``RMSNormSpec.TOLERANCES``)."""
from __future__ import annotations

import os

import pytest

from infercrane.kernels import registry
from infercrane.kernels.ops import vllm_lib
from infercrane.kernels.ops.rms_norm import baselines, candidates
from infercrane.kernels.ops.rms_norm.oracle import rms_norm_ref
from infercrane.kernels.ops.rms_norm.spec import RMSNormSpec

torch = pytest.importorskip("torch")
EPS = 1e-6


def mismatch(got, ref, dtype: str) -> str | None:
    """None when ``got`` passes the spec's rule for ``dtype``; else the count and the first bad index."""
    tol = RMSNormSpec.TOLERANCES[dtype]
    got64, ref64 = got.detach().cpu().double(), ref.detach().cpu().double()
    atol = tol.atol_scale * float(ref64.pow(2).mean().sqrt())
    ok = (got64 - ref64).abs() <= atol + tol.rtol * ref64.abs()  # NaN compares False
    if bool(ok.all()):
        return None
    first = tuple(int(i) for i in (~ok).nonzero()[0])
    return f"{int((~ok).sum())} of {got.numel()} elements fail; first bad {first}: got {float(got64[first])}, " \
           f"ref {float(ref64[first])}"


def _inputs(rows, hidden, dtype="bfloat16", seed=0, device="cpu"):
    spec = RMSNormSpec(hidden_size=hidden, eps=EPS, dtype=dtype)
    inputs = spec.make_inputs(rows, device, seed=seed, scale=1.0)
    return inputs["x"], inputs["weight"], spec.oracle(inputs)["out"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("rows,hidden", [(4, 1024), (7, 128), (3, 1000)])
def test_eager_is_out_of_place_and_matches_the_oracle(rows, hidden, dtype):
    x, w, ref = _inputs(rows, hidden, dtype, seed=rows + hidden)
    x0, w0 = x.clone(), w.clone()
    out = baselines.rms_norm_eager(x, w, EPS)
    assert out.dtype == x.dtype and out.shape == x.shape and out.data_ptr() != x.data_ptr()
    assert torch.equal(x, x0) and torch.equal(w, w0)
    assert mismatch(out, ref, dtype) is None
    assert mismatch(x, ref, dtype) is not None  # the rule rejects the untouched input


def test_eager_rounds_before_the_weight_multiply_like_vllm_native():
    """vLLM's forward_native: normalize in float32, round to the storage dtype, multiply by the weight there."""
    x, w, _ = _inputs(3, 256, seed=5)
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(torch.bfloat16)
    assert torch.equal(baselines.rms_norm_eager(x, w, EPS), normed * w)


@pytest.mark.slow
def test_torch_compile_compiles_once_per_shape_on_cpu():
    ok, reason = baselines.BASELINES.torch_compile_available()
    if not ok:
        pytest.skip(reason)
    fn = baselines.BASELINES.load_torch_compile(None)
    for rows, hidden, seed in ((2, 128, 1), (3, 128, 2), (2, 128, 3)):
        x, w, ref = _inputs(rows, hidden, seed=seed)
        x0 = x.clone()
        out = fn(x, w, EPS)
        assert torch.equal(x, x0) and out.dtype == torch.bfloat16
        assert mismatch(out, ref, "bfloat16") is None
    assert fn.compiled_shapes == [((2, 128), "torch.bfloat16", "cpu"), ((3, 128), "torch.bfloat16", "cpu")]


def test_listing_is_ordered_and_says_why_not():
    impls = candidates.implementations()
    assert tuple(i.key for i in impls) == candidates.KEYS == ("eager", "torch_compile", "vllm_vendor", "triton",
                                                              "cuda")
    by_key = {i.key: i for i in impls}
    assert [k for k, i in by_key.items() if i.in_place] == ["vllm_vendor", "triton", "cuda"]
    assert by_key["eager"].probe() == (True, "")
    assert by_key["eager"].load(None) is baselines.rms_norm_eager
    for impl in impls:
        ok, reason = impl.probe()
        assert ok or reason, f"{impl.key}: unavailable without a reason"
    if not torch.cuda.is_available():
        assert by_key["cuda"].probe()[0] is False and "GPU" in by_key["cuda"].probe()[1]
        assert by_key["vllm_vendor"].probe() == (False, "no CUDA device: vLLM's rms_norm runs on CUDA tensors only")
        assert by_key["cuda"].probe_cpu()[0] is False


def test_triton_runs_on_cpu_only_under_the_interpreter(monkeypatch):
    triton_impl = {i.key: i for i in candidates.implementations()}["triton"]
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    ok, reason = triton_impl.probe_cpu()
    assert not ok and "TRITON_INTERPRET=1" in reason
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_impl.probe_cpu() == (True, "")


def test_user_candidate_follows_its_declared_contract(tmp_path):
    from infercrane.kernels.user_candidate import CandidateRef

    path = tmp_path / "my_norm.py"
    path.write_text(
        "import torch\n"
        "IN_PLACE = True\n"
        "def norm(out, x, weight, eps):\n"
        "    xf = x.float()\n"
        "    out.copy_(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float())\n"
    )
    impl = registry.get("rms_norm", "user", candidate=CandidateRef(path, "norm"))
    assert impl.key == "user" and impl.in_place is True
    x, w, ref = _inputs(3, 128, seed=7)
    out = torch.full_like(x, float("nan"))
    assert impl.load(None)(out, x, w, EPS) is None
    assert mismatch(out, ref, "bfloat16") is None


def test_vllm_route_names_the_rms_norm_op(monkeypatch):
    """The shared route finder (``vllm_lib.resolve_vllm_op``) is asked for this op's kernel, by name."""
    seen = []
    monkeypatch.setattr(vllm_lib, "resolve_vllm_op", lambda name: seen.append(name) or (None, {}, "stub"))
    baselines.BASELINES.vllm_route.cache_clear()
    try:
        assert baselines.BASELINES.vllm_available() == (False, "stub")
        from infercrane.errors import UnavailableError

        with pytest.raises(UnavailableError, match="stub"):
            baselines.BASELINES.load_vllm(None)
    finally:
        baselines.BASELINES.vllm_route.cache_clear()
    assert seen == ["rms_norm"]


@pytest.mark.gpu
def test_vllm_vendor_kernel_matches_the_oracle():
    """vLLM's ``rms_norm(out, input, weight, epsilon)``, in place, when vLLM imports or the library is named."""
    baselines.BASELINES.vllm_route.cache_clear()
    ok, reason = baselines.BASELINES.vllm_available()
    if not ok:
        if os.environ.get(vllm_lib.VLLM_LIB_ENV, "").strip():
            pytest.fail(f"{vllm_lib.VLLM_LIB_ENV} is set but vLLM's rms_norm is unavailable: {reason}")
        pytest.skip(reason)
    info = baselines.BASELINES.describe_vllm()
    assert info["route"].endswith("rms_norm") and info["vllm"]
    fn = baselines.BASELINES.load_vllm(None)
    for rows, hidden in ((1, 1024), (512, 1024), (512, 128), (7, 1000)):
        x, w, ref = _inputs(rows, hidden, seed=rows + hidden, device="cuda")
        x0 = x.clone()
        out = torch.full_like(x, float("nan"))
        assert fn(out, x, w, EPS) is None
        torch.cuda.synchronize()
        assert torch.equal(x, x0)
        bad = mismatch(out, ref, "bfloat16")
        assert bad is None, f"vLLM rms_norm rows={rows} hidden={hidden}: {bad}"

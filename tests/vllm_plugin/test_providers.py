"""The vLLM plugin against a stand-in of vLLM 0.22.1's IR registry (``ir_stub``): registration, the kernels' results
on CPU tensors under Triton's interpreter, the in-engine gate, declines, and the record each process writes."""
from __future__ import annotations

import contextlib
import json
import sys
import textwrap
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from infercrane.vllm_plugin import selection  # noqa: E402
from infercrane.vllm_plugin.selection import KernelChoice  # noqa: E402
from infercrane.vllm_plugin.stats import read_stats  # noqa: E402

from ir_stub import native_fused_add_rms_norm, native_rms_norm, stub_ops  # noqa: E402


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _register(choice, tmp_path):
    from infercrane.vllm_plugin.providers import register_choice

    ops = stub_ops()
    stats = register_choice(choice, ops, str(tmp_path))
    op = getattr(ops, choice.vllm_op)
    op.priority = [choice.provider, "native"]
    return op, stats


def _inputs(rows, hidden=1024, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=g).to(dtype)
    res = (2 * torch.randn(rows, hidden, generator=g)).to(dtype)
    w = (1 + 0.5 * torch.randn(hidden, generator=g)).to(dtype)
    return x, res, w


def test_triton_fused_add_rms_norm_registers_and_matches_native_on_cpu(tmp_path, interpret):
    op, stats = _register(KernelChoice("fused_add_rms_norm", "triton"), tmp_path)
    assert op.impls["infercrane_triton"].inplace  # vLLM's in-place form, as its vllm_c provider
    x, res, w = _inputs(8)
    ref_out, ref_res = native_fused_add_rms_norm(x.clone(), res.clone(), w, 1e-6)
    xa, ra = x.clone(), res.clone()
    assert op.dispatch(xa, ra, w, 1e-6, None).provider == "infercrane_triton"
    out, new_res = op(xa, ra, w, 1e-6, None)
    assert out.data_ptr() == xa.data_ptr() and new_res.data_ptr() == ra.data_ptr()  # in place
    assert torch.equal(new_res, ref_res)  # one rounded sum, as native
    assert torch.allclose(out.float(), ref_out.float(), rtol=1.6e-2, atol=1e-2)
    # the in-engine gate: the first call of the shape was checked against native, and passed
    (doc,) = read_stats(tmp_path)
    assert doc["detail"]["registered"] and doc["provider"] == "infercrane_triton"
    assert doc["calls"] == 1 and doc["calls_by_shape"] == {"8x1024 bfloat16": 1}
    (check,) = doc["checks"]
    assert check["passed"] and check["shape"] == "8x1024 bfloat16" and check["against"] == "vLLM native"
    assert check["max_abs_err"] < 0.1
    # a second call of the same shape is counted, not checked again; a new shape is checked
    op(*_inputs(8, seed=1), 1e-6, None)
    op(*_inputs(3, seed=2), 1e-6, None)
    stats.write()
    (doc,) = read_stats(tmp_path)
    assert doc["calls"] == 3 and [c["shape"] for c in doc["checks"]] == ["8x1024 bfloat16", "3x1024 bfloat16"]


def test_triton_rms_norm_returns_a_new_tensor_matching_native(tmp_path, interpret):
    op, _ = _register(KernelChoice("rms_norm", "triton"), tmp_path)
    x, _, w = _inputs(4, hidden=128)
    out = op(x, w, 1e-6, None)
    assert out.data_ptr() != x.data_ptr()
    assert torch.allclose(out.float(), native_rms_norm(x, w, 1e-6).float(), rtol=1.6e-2, atol=1e-2)
    (doc,) = read_stats(tmp_path)
    assert doc["checks"][0]["passed"]


@pytest.mark.parametrize("change, reason", [
    ({"variance_size": 512}, "variance_size given"),
    ({"weight": None}, "no weight"),
    ({"dtype": torch.float32}, "dtype float32"),
    ({"strided": True}, "not contiguous"),
])
def test_what_the_kernel_cannot_take_falls_back_to_native_and_is_counted(tmp_path, interpret, change, reason):
    op, stats = _register(KernelChoice("fused_add_rms_norm", "triton"), tmp_path)
    x, res, w = _inputs(4, dtype=change.get("dtype", torch.bfloat16))
    if change.get("strided"):
        x = torch.cat([x, x], dim=1)[:, ::2]
    weight = change["weight"] if "weight" in change else w
    args = (x, res, weight, 1e-6, change.get("variance_size"))
    assert op.dispatch(*args).provider == "native"
    stats.write()
    (doc,) = read_stats(tmp_path)
    assert doc["declined"] == {reason: 1} and doc["calls"] == 0


def test_a_wrong_candidate_fails_the_in_engine_gate_with_its_error(tmp_path, interpret):
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent("""
        IN_PLACE = True
        def kernel(x, residual, weight, eps):
            residual.add_(x)
            x.copy_(residual * weight)   # forgets to normalize
    """))
    op, _ = _register(KernelChoice("fused_add_rms_norm", "user", candidate=f"{bad}:kernel"), tmp_path / "stats")
    x, res, w = _inputs(2, seed=3)
    op(x * 8, res, w, 1e-6, None)
    (doc,) = read_stats(tmp_path / "stats")
    (check,) = doc["checks"]
    assert not check["passed"]
    out = {o["name"]: o for o in check["outputs"]}
    assert out["residual_out"]["passed"] and not out["out"]["passed"]
    assert out["out"]["mismatched"] > 0 and check["max_abs_err"] > 1


def test_a_residual_drift_under_the_tolerance_passes_the_in_engine_gate(tmp_path):
    """The GPU test's wrong provider (tests/serving/wrong_kernels.py: residual out 0.8 % too large) is checked and
    passes vLLM's in-engine gate at hidden 576: what it gets wrong only the answers can show
    (tests/vllm_plugin/test_quality_gate_vllm.py)."""
    from pathlib import Path

    wrong = Path(__file__).parents[1] / "serving" / "wrong_kernels.py"
    choice = KernelChoice("fused_add_rms_norm", "user", candidate=f"{wrong}:fused_add_rmsnorm_residual_drift")
    op, _ = _register(choice, tmp_path / "stats")
    x, res, w = _inputs(64, hidden=576, seed=5)
    ref_out, ref_res = native_fused_add_rms_norm(x.clone(), res.clone(), w, 1e-5)
    out, new_res = op(x, res, w, 1e-5, None)
    (check,) = read_stats(tmp_path / "stats")[0]["checks"]
    assert check["passed"] and check["shape"].startswith("64x576")
    drift = (new_res.float() / ref_res.float())[ref_res.float().abs() > 0.5]
    assert 1.004 < drift.median().item() < 1.012  # the error is there, every call


def test_an_out_of_place_user_candidate_is_copied_into_vllms_buffers(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(textwrap.dedent("""
        import torch
        IN_PLACE = False
        def kernel(x, residual, weight, eps):
            s = x.float() + residual.float()
            out = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
            return (out.to(x.dtype) * weight), s.to(x.dtype)
    """))
    op, _ = _register(KernelChoice("fused_add_rms_norm", "user", candidate=f"{good}:kernel"), tmp_path / "s")
    x, res, w = _inputs(2)
    ref_out, ref_res = native_fused_add_rms_norm(x.clone(), res.clone(), w, 1e-6)
    out, new_res = op(x, res, w, 1e-6, None)
    assert out.data_ptr() == x.data_ptr() and torch.equal(new_res, ref_res)
    assert read_stats(tmp_path / "s")[0]["checks"][0]["passed"]


def test_the_launch_is_opaque_to_the_compiler(tmp_path, interpret):
    # traced with fake tensors (torch.compile, aot_eager): the launch is one node with a fake impl, never traced
    # into (tracing into a Triton launch needs real data pointers)
    op, _ = _register(KernelChoice("fused_add_rms_norm", "triton"), tmp_path)
    impl = op.impls["infercrane_triton"].impl_fn

    def f(x, r, w):
        return impl(x, r, w, 1e-6, None)

    x, res, w = _inputs(4)
    ref_out, ref_res = native_fused_add_rms_norm(x.clone(), res.clone(), w, 1e-6)
    out, new_res = torch.compile(f, backend="aot_eager", fullgraph=True)(x, res, w)
    assert torch.equal(new_res, ref_res)
    assert torch.allclose(out.float(), ref_out.float(), rtol=1.6e-2, atol=1e-2)


def test_a_kernel_that_cannot_load_is_recorded_and_raised(tmp_path):
    from infercrane.vllm_plugin.providers import register_choice

    with pytest.raises(Exception, match="does not exist"):
        register_choice(KernelChoice("rms_norm", "user", candidate=f"{tmp_path}/missing.py:k"), stub_ops(),
                        str(tmp_path))
    (doc,) = read_stats(tmp_path)
    assert "registration failed" in doc["errors"][0] and "registered" not in doc["detail"]


def test_register_does_nothing_without_the_environment_and_registers_with_it(tmp_path, monkeypatch, interpret):
    import infercrane.vllm_plugin as plugin

    ops = stub_ops()
    fake_vllm = SimpleNamespace(ir=SimpleNamespace(ops=ops))
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    monkeypatch.setattr(plugin, "_registered", [])
    monkeypatch.delenv(selection.ENV_KERNELS, raising=False)
    plugin.register()
    assert list(ops.fused_add_rms_norm.impls) == ["native"]
    monkeypatch.setenv(selection.ENV_KERNELS, selection.encode([KernelChoice("fused_add_rms_norm", "triton")]))
    monkeypatch.setenv(selection.ENV_STATS, str(tmp_path))
    plugin.register()
    plugin.register()  # vLLM may load plugins more than once per process
    assert list(ops.fused_add_rms_norm.impls) == ["native", "infercrane_triton"]
    assert json.loads((next(tmp_path.glob("*.json"))).read_text())["detail"]["registered"]


def test_selection_names():
    assert selection.vllm_op_of("fused_add_rmsnorm") == "fused_add_rms_norm"
    assert selection.vllm_op_of("rms_norm") == "rms_norm"
    with pytest.raises(ValueError, match="known: fused_add_rms_norm, rms_norm"):
        selection.vllm_op_of("silu_and_mul")
    with pytest.raises(ValueError, match="needs a candidate"):
        KernelChoice("rms_norm", "user")
    choices = [KernelChoice("rms_norm", "cuda"), KernelChoice("fused_add_rms_norm", "user", candidate="k.py:f")]
    assert selection.decode(selection.encode(choices)) == choices


def test_what_a_provider_records_is_what_the_proof_reads(tmp_path, interpret):
    from infercrane.serving.kernels import proof, why_failed
    from infercrane.vllm_plugin.selection import kernel_sources_sha256

    choice = KernelChoice("fused_add_rms_norm", "triton",
                          source_sha256=kernel_sources_sha256("fused_add_rms_norm", "triton", None))
    op, stats = _register(choice, tmp_path)
    op(*_inputs(8), 1e-6, None)
    op(*_inputs(8, seed=4), 1e-6, 64)  # declined: variance_size
    stats.write()
    log = ("INFO Final IR op priority after setting platform defaults: "
           "IrOpPriorityConfig(rms_norm=['native'], fused_add_rms_norm=['infercrane_triton', 'native'])")
    doc = proof(choice, log, read_stats(tmp_path))
    assert doc["failed_stage"] is None and doc["ran"] and doc["gate_passed"]
    assert doc["calls"] == 1 and doc["declined"] == {"variance_size given": 1}
    assert doc["priority"] == ["infercrane_triton", "native"] and doc["checks"][0]["passed"]
    assert doc["engine_sources_match"]
    # an engine that imported other kernel sources than InferCrane hashed is not the candidate asked for
    other = proof(KernelChoice("fused_add_rms_norm", "triton", source_sha256="0" * 64), log, read_stats(tmp_path))
    assert other["failed_stage"] == "registration" and "other sources" in why_failed(other)


def test_the_package_declares_the_plugin_vllm_loads():
    import importlib
    import tomllib
    from pathlib import Path

    from infercrane.serving.kernels import PLUGIN_ENTRY

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    entry = meta["project"]["entry-points"]["vllm.general_plugins"]["infercrane"]
    assert entry == PLUGIN_ENTRY  # the record InferCrane writes for an engine that lacks the installed package
    module, fn = entry.split(":")
    assert callable(getattr(importlib.import_module(module), fn))


@contextlib.contextmanager
def _compiles(impl: str):
    """The compiles of ``impl``'s kernel inside the block: Triton's JIT hook (as vLLM's JIT monitor uses it), or the
    CUDA kernel's record of NVRTC compiles."""
    seen: list[str] = []
    if impl == "cuda":
        from infercrane.kernels.ops.fused_add_rmsnorm import cuda_kernel

        before = len(cuda_kernel._COMPILED)
        yield seen
        seen.extend(str(c["options"]) for c in cuda_kernel._COMPILED[before:])
        return
    from triton import knobs

    previous = knobs.runtime.jit_post_compile_hook

    def hook(**kwargs):
        seen.append(getattr(kwargs.get("fn"), "name", "?"))
        return previous(**kwargs) if previous is not None else None

    knobs.runtime.jit_post_compile_hook = hook
    try:
        yield seen
    finally:
        knobs.runtime.jit_post_compile_hook = previous


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_on_a_gpu_the_provider_prewarms_checks_and_runs_inside_a_cuda_graph(tmp_path, impl):
    from infercrane.vllm_plugin.providers import prewarm_rows

    op, stats = _register(KernelChoice("fused_add_rms_norm", impl), tmp_path)
    x, res, w = (t.cuda() for t in _inputs(8192))
    op(x, res, w, 1e-6, None)  # the profiling run's shape: prewarms the decode sizes, checks this shape
    stats.write()
    (doc,) = read_stats(tmp_path)
    assert doc["detail"]["prewarmed_rows"]["1024 bfloat16"] == list(prewarm_rows(8192))
    assert doc["checks"][0]["passed"] and not doc["errors"]
    assert doc["checks"][0]["slowdown"] > 0 and doc["checks"][0]["too_slow"] is False  # timed on CUDA
    prefill = (897, 1025, 2049, 2306, 3207, 4095, 8191)
    with _compiles(impl) as compiled:  # prefill sizes met while serving compile nothing more
        for rows in prefill:
            op(*(t.cuda() for t in _inputs(rows, seed=rows)), 1e-6, None)
        torch.cuda.synchronize()
    assert compiled == [], compiled
    xs, rs, ws = (t.cuda() for t in _inputs(4, seed=9))
    ref_out, ref_res = native_fused_add_rms_norm(xs.clone(), rs.clone(), ws, 1e-6)
    sx, sr = xs.clone(), rs.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # a first call of this shape under capture: counted as captured, not checked
        op(sx, sr, ws, 1e-6, None)
    sx.copy_(xs)
    sr.copy_(rs)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(sr, ref_res) and torch.allclose(sx.float(), ref_out.float(), rtol=1.6e-2, atol=1e-2)
    stats.write()
    (doc,) = read_stats(tmp_path)
    # the first call of each shape outside capture is checked against native, in the order met; the call under
    # capture is not
    assert doc["calls_captured"] == 1
    assert [c["shape"] for c in doc["checks"]] == [f"{rows}x1024 bfloat16" for rows in (8192, *prefill)]
    assert all(c["passed"] for c in doc["checks"])


def test_the_plugin_keeps_vllms_lowering_lines_beside_its_records(tmp_path):
    import logging

    import infercrane.vllm_plugin as plugin

    log = logging.getLogger(plugin.LOWERING_LOGGER)
    before, level = list(log.handlers), log.level
    try:
        plugin._record_lowering(str(tmp_path))
        log.debug("Selected implementations: %s", "fused_add_rms_norm=infercrane_triton*55,native")
        log.debug("VllmIRLoweringPass lowered 56 vLLM IR nodes")
        for h in log.handlers:
            h.flush()
        (f,) = tmp_path.glob("lowering-*.log")
        assert f.read_text().splitlines() == ["Selected implementations: fused_add_rms_norm=infercrane_triton*55,native"]
    finally:
        for h in log.handlers[len(before):]:
            h.close()
        log.handlers[:] = before
        log.setLevel(level)


@pytest.mark.parametrize("hidden, top", [(1024, 8192), (128, 131072), (4096, 8192)])
def test_the_prewarm_meets_every_configuration_infercranes_kernels_compile_up_to_the_first_calls_rows(hidden, top):
    """Each distinct compiled configuration (Triton constexprs and warps; CUDA -D defines) over 1..top rows is met by
    one of the prewarmed row counts, for both ops and both kernels: nothing is left to compile while serving."""
    from infercrane.kernels.ops.fused_add_rmsnorm import cuda_kernel as fused_cuda, triton_kernel as fused_triton
    from infercrane.kernels.ops.rms_norm import cuda_kernel as rms_cuda, triton_kernel as rms_triton
    from infercrane.vllm_plugin.providers import PREWARM_ROWS, prewarm_rows

    def triton_key(module):
        return lambda rows: tuple(sorted((k, v) for k, v in module.triton_config(rows, hidden).items() if k != "grid"))

    def cuda_key(fn):
        return lambda rows: tuple(fn(rows, hidden)["defines"])

    warm = prewarm_rows(top)
    assert set(PREWARM_ROWS) <= set(warm) and max(warm) == top and len(warm) < 64
    for key in (triton_key(fused_triton), triton_key(rms_triton),
                cuda_key(lambda r, h: fused_cuda.cuda_config(r, h, num_sms=132)), cuda_key(rms_cuda.cuda_config)):
        needed = {key(rows) for rows in range(1, top + 1, 1 if top <= 8192 else 7)} | {key(top)}
        assert needed <= {key(rows) for rows in warm}


@pytest.mark.parametrize("body, error", [
    ("raise ValueError('unsupported hidden size')", "ValueError: unsupported hidden size"),
    # out of place, the wrong shape: the copy into vLLM's buffer fails
    ("return x.new_zeros(3, 5), residual", "RuntimeError: The size of tensor a (1024) must match"),
])
def test_a_candidate_that_raises_inside_the_engine_is_recorded_and_the_error_propagates(tmp_path, body, error):
    bad = tmp_path / "bad.py"
    bad.write_text(f"IN_PLACE = False\ndef kernel(x, residual, weight, eps):\n    {body}\n")
    op, _ = _register(KernelChoice("fused_add_rms_norm", "user", candidate=f"{bad}:kernel"), tmp_path / "stats")
    x, res, w = _inputs(4, seed=5)
    with pytest.raises(Exception) as got:
        op(x, res, w, 1e-6, None)
    (doc,) = read_stats(tmp_path / "stats")
    (recorded,) = doc["errors"]
    assert recorded.startswith("the kernel raised at 4x1024 bfloat16: ") and error in recorded
    assert type(got.value).__name__ in recorded


def test_calls_after_an_inputs_first_are_counted_under_its_shape_and_written_at_powers_of_two(tmp_path, interpret):
    op, stats = _register(KernelChoice("fused_add_rms_norm", "triton"), tmp_path)
    eight, three = _inputs(8), _inputs(3, seed=2)
    for _ in range(4):
        op(*eight, 1e-6, None)
    (doc,) = read_stats(tmp_path)  # the 4th call is a power of two: on disk without an explicit write
    assert doc["calls"] == 4 and doc["calls_by_shape"] == {"8x1024 bfloat16": 4} and len(doc["checks"]) == 1
    op(*three, 1e-6, None)
    op(*eight, 1e-6, None)
    op(eight[0].view(2, 4, 1024), eight[1].view(2, 4, 1024), eight[2], 1e-6, None)  # same rows, another shape
    stats.write()
    (doc,) = read_stats(tmp_path)
    assert doc["calls"] == 7 and doc["calls_captured"] == 0
    assert doc["calls_by_shape"] == {"8x1024 bfloat16": 6, "3x1024 bfloat16": 1}
    assert [c["shape"] for c in doc["checks"]] == ["8x1024 bfloat16", "3x1024 bfloat16"]


@pytest.mark.parametrize("tracing_mode", ["symbolic", "fake", "real"])
def test_make_fx_tracing_sees_one_opaque_node_and_runs_the_body_only_on_real_tensors(tmp_path, interpret,
                                                                                       monkeypatch, tracing_mode):
    """vLLM's IR lowering pass traces an implementation with make_fx on fake tensors with symbolic shapes, outside
    Dynamo (torch.compiler.is_compiling() is False there): the launch must still be the opaque op. Compiled vLLM
    failed to start when the body ran there (its call counter hashed a SymInt)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from infercrane.vllm_plugin import providers

    op, _ = _register(KernelChoice("fused_add_rms_norm", "triton"), tmp_path)
    impl = op.impls["infercrane_triton"].impl_fn
    name = "infercrane::fused_add_rms_norm_triton"
    bodies = []
    monkeypatch.setattr(providers._LIVE[name], "launch_body", lambda *a: bodies.append(a))
    graph = make_fx(lambda x, r, w: impl(x, r, w, 1e-6, None), tracing_mode=tracing_mode)(*_inputs(4))
    launches = [n for n in graph.graph.nodes if n.op == "call_function"
                and str(n.target).startswith("infercrane.fused_add_rms_norm_triton")]
    assert len(launches) == 1
    assert len(bodies) == (1 if tracing_mode == "real" else 0)  # real tensors: make_fx runs the op, once


def test_outside_tracing_the_launch_skips_the_custom_ops_dispatch(tmp_path, interpret, monkeypatch):
    """Eager calls run the launch body directly (the same body: counted, gated); only a traced call goes through
    the opaque op (the test above)."""
    from infercrane.vllm_plugin import providers

    op, _ = _register(KernelChoice("fused_add_rms_norm", "triton"), tmp_path)
    impl = op.impls["infercrane_triton"].impl_fn
    name = "infercrane::fused_add_rms_norm_triton"
    through_op = []
    real_op = providers._OPS[name]
    monkeypatch.setitem(providers._OPS, name, lambda *a: through_op.append(a) or real_op(*a))
    bodies = []
    live = providers._LIVE[name]
    monkeypatch.setattr(live, "launch_body", lambda *a: bodies.append(a) or type(live).launch_body(live, *a))
    x, res, w = _inputs(2)
    ref_out, ref_res = native_fused_add_rms_norm(x.clone(), res.clone(), w, 1e-6)
    out, new_res = impl(x, res, w, 1e-6, None)
    assert len(bodies) == 1 and through_op == []
    assert torch.equal(new_res, ref_res) and torch.allclose(out.float(), ref_out.float(), rtol=1.6e-2, atol=1e-2)

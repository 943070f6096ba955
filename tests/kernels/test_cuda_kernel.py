"""InferCrane's handwritten CUDA fused residual-add + RMSNorm.

On CPU: NVRTC (``cuda.bindings.nvrtc``, no driver) compiles ``fused_add_rmsnorm.cu`` to PTX for ``compute_90`` and
the tests read the PTX: both entry points, 16-byte global accesses, no local-memory stack, the block-level
reduction only where a row spans several warps; a broken source raises an error carrying NVRTC's log.
On a GPU (``@pytest.mark.gpu``): the CUDA and Triton kernels against the float32 oracle for rows 1..2048 and
several hidden sizes, misaligned tensors, fp16, and inside a captured CUDA graph (rule in ``conftest.py``).
"""
from __future__ import annotations

import re

import pytest

from infercrane.errors import InputError, UnavailableError
from infercrane.kernels.ops.fused_add_rmsnorm import cuda_kernel as ck

V4_LOAD = re.compile(r"ld\.global(\.nc)?(\.L1::\w+)?\.v4\.(u32|b32)")
V4_STORE = re.compile(r"st\.global\.v4\.(u32|b32)")


def _nvrtc_ready() -> tuple[bool, str]:
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except Exception as e:
        return False, f"cuda.bindings.nvrtc not importable: {e}"
    if not ck.cuda_include_dirs():
        return False, "no directory with cuda_bf16.h (nvidia-cuda-runtime wheel or CUDA toolkit)"
    return True, ""


_NVRTC_OK, _NVRTC_WHY = _nvrtc_ready()
needs_nvrtc = pytest.mark.skipif(not _NVRTC_OK, reason=_NVRTC_WHY or "nvrtc ready")


def _entry(ptx: str, name: str) -> str:
    """The PTX text of one entry point."""
    start = ptx.index(f".entry {name}(")
    nxt = ptx.find(".entry ", start + 1)
    return ptx[start:] if nxt < 0 else ptx[start:nxt]


# ----------------------------------------------------------------------------------------- CPU: PTX via NVRTC


@needs_nvrtc
def test_ptx_for_qwen3_hidden_has_entry_points_and_16_byte_accesses():
    # one warp per row, 4 rows per block: 4 vectors per thread
    ptx = ck.compile_ptx(1024, "compute_90", rows=32768, threads_per_row=32, rows_per_block=4)
    assert ".target sm_90" in ptx
    for dtype, name in ck.ENTRY_POINTS.items():
        body = _entry(ptx, name)
        # x and residual: 4 vectors each per thread; weight 4 more (plain loads, see the source)
        assert len(V4_LOAD.findall(body)) >= 12, f"{dtype}: expected 16-byte loads"
        assert len(V4_STORE.findall(body)) >= 8, f"{dtype}: expected 16-byte stores (out and residual)"
        assert ".local" not in body, f"{dtype}: register array spilled to local memory"
        assert "shfl.sync.bfly" in body
        assert "bar.sync" not in body, "one warp per row at hidden 1024 needs no block barrier"
        assert "cvt.rn.bf16" in body if dtype == "bfloat16" else "cvt.rn.f16" in body


@needs_nvrtc
@pytest.mark.parametrize("rows", [1, 2048, 32768])
def test_default_issues_every_load_before_any_math(rows):
    """Weight, x and residual loads all precede the first arithmetic (one memory latency per block), the
    weight's first and not read-only (``ld.global.nc`` is sunk by ptxas to its use, after the reduction)."""
    cfg = ck.cuda_config(rows, 1024)
    assert (cfg["threads_per_row"], cfg["rows_per_block"], cfg["vectors_per_thread"]) == (128, 1, 1)
    lines = _entry(ck.compile_ptx(1024, rows=rows), ck.ENTRY_POINTS["bfloat16"]).splitlines()
    loads = [i for i, line in enumerate(lines) if re.search(r"ld\.global", line)]
    first_math = min(i for i, line in enumerate(lines) if re.search(r"\b(add|mul|fma)(\.rn)?(\.ftz)?\.f32", line))
    assert len(loads) == 3 and max(loads) < first_math
    assert "ld.global.nc" not in lines[loads[0]] and "ld.global.v4" in lines[loads[0]]
    assert sum("bar.sync" in line for line in lines) == 1, "one barrier: a single shared-memory exchange"
    assert any("rsqrt.approx" in line for line in lines) and not any("div." in line for line in lines)


@needs_nvrtc
def test_one_pass_grid_has_no_loop_and_persistent_grid_loops():
    one = _entry(ck.compile_ptx(1024, rows=512), ck.ENTRY_POINTS["bfloat16"])
    loop = _entry(ck.compile_ptx(1024, rows=512, persistent_blocks_per_sm=2), ck.ENTRY_POINTS["bfloat16"])
    assert "nctaid" not in one and "nctaid" in loop  # the grid-stride step reads gridDim


@needs_nvrtc
@pytest.mark.parametrize("rows", [1, 32768])
@pytest.mark.parametrize("hidden", [896, 1000, 2048, 3584, 4096, 5120, 8192, 16384])
def test_ptx_compiles_for_model_hiddens_with_16_byte_accesses(hidden, rows):
    ptx = ck.compile_ptx(hidden, rows=rows)
    body = _entry(ptx, ck.ENTRY_POINTS["bfloat16"])
    assert V4_LOAD.search(body) and V4_STORE.search(body)
    assert ".local" not in body
    cfg = ck.cuda_config(rows, hidden)
    # a row spanning several warps reduces through shared memory behind a barrier
    assert ("bar.sync" in body) == (cfg["threads_per_row"] > 32)


@needs_nvrtc
def test_odd_hidden_falls_back_to_scalar_accesses():
    # hidden 1001: rows start at 2-byte-aligned addresses, so 16-byte accesses would be misaligned
    cfg = ck.cuda_config(1, 1001)
    assert cfg["vec"] == 1 and cfg["guarded"]
    body = _entry(ck.compile_ptx(1001), ck.ENTRY_POINTS["bfloat16"])
    assert not V4_LOAD.search(body)
    assert "ld.global.u16" in body or "ld.global.b16" in body


@needs_nvrtc
@pytest.mark.parametrize("config", [
    {"threads_per_row": 128, "rows_per_block": 1},  # 4 warps per row: block reduction
    {"threads_per_row": 16, "rows_per_block": 4},  # two rows per warp: sub-warp shuffles
    {"threads_per_row": 32, "rows_per_block": 8, "vec": 4},  # 8-byte accesses
])
def test_ptx_compiles_for_config_overrides(config):
    ptx = ck.compile_ptx(1024, "compute_90", **config)
    body = _entry(ptx, ck.ENTRY_POINTS["bfloat16"])
    assert f".maxntid {config['threads_per_row'] * config['rows_per_block']}, 1, 1" in body
    if config.get("vec", 8) == 8:
        assert V4_LOAD.search(body)
    else:
        assert "ld.global.v2" in body and not V4_LOAD.search(body)


@needs_nvrtc
def test_broken_source_raises_with_the_nvrtc_log():
    broken = ck.read_source().replace("const float inv_rms = rsqrtf(", "const float inv_rms = rsqrtf(undeclared_name + ")
    assert broken != ck.read_source()
    with pytest.raises(ck.CudaCompileError) as info:
        ck.compile_ptx(1024, source=broken)
    err = info.value
    assert "undeclared_name" in err.log and "error" in err.log
    assert "undeclared_name" in str(err)
    assert "-DIC_HIDDEN=1024" in err.options


@needs_nvrtc
def test_static_assert_guards_bad_defines():
    # the source's own check, reached only when the Python-side validation is bypassed
    src = ck.read_source()
    options = ("-arch=compute_90", *ck.BASE_OPTIONS, "-DIC_HIDDEN=1024", "-DIC_VEC=8", "-DIC_THREADS_PER_ROW=24",
               "-DIC_ROWS_PER_BLOCK=4", f"-I{ck.cuda_include_dirs()[0]}")
    with pytest.raises(ck.CudaCompileError, match="power of two"):
        ck.nvrtc_compile_ptx(src, options)


def test_compile_ptx_refuses_a_bad_arch():
    with pytest.raises(InputError, match="arch"):
        ck.compile_ptx(1024, "hopper")


def test_missing_headers_are_reported_as_unavailable(monkeypatch):
    monkeypatch.setattr(ck, "cuda_include_dirs", lambda: [])
    with pytest.raises(UnavailableError, match="cuda_bf16.h"):
        ck.compile_ptx(1024)


# ----------------------------------------------------------------------------------------- CPU: configuration


@pytest.mark.parametrize("hidden", [64, 896, 1000, 1001, 1024, 2048, 3584, 4096, 5120, 8192, 16384, 65536])
@pytest.mark.parametrize("rows", [1, 8, 512, 2048, 32768])
def test_config_heuristic_is_consistent(rows, hidden):
    cfg = ck.cuda_config(rows, hidden)
    tpr, rpb, vec = cfg["threads_per_row"], cfg["rows_per_block"], cfg["vec"]
    assert hidden % vec == 0 and vec == (8 if hidden % 8 == 0 else vec)
    assert tpr & (tpr - 1) == 0 and cfg["threads_per_block"] == tpr * rpb
    assert cfg["threads_per_block"] % 32 == 0 and cfg["threads_per_block"] <= 1024
    assert 1 <= cfg["vectors_per_thread"] <= ck.MAX_VECTORS_PER_THREAD
    assert tpr * cfg["vectors_per_thread"] * vec >= hidden
    assert cfg["grid"] * rpb >= rows > (cfg["grid"] - 1) * rpb
    assert cfg["defines"] == [f"-DIC_HIDDEN={hidden}", f"-DIC_VEC={vec}", f"-DIC_THREADS_PER_ROW={tpr}",
                              f"-DIC_ROWS_PER_BLOCK={rpb}", "-DIC_PERSISTENT=0"]


def test_config_at_qwen3_hidden():
    # latency regime: one 16-byte vector per thread, 4 warps per row
    cfg = ck.cuda_config(1, 1024)
    assert (cfg["vec"], cfg["threads_per_row"], cfg["vectors_per_thread"], cfg["rows_per_block"]) == (8, 128, 1, 1)
    # bandwidth regime: the same shape (CUDA_DEFAULTS), one row-block per block
    cfg = ck.cuda_config(32768, 1024)
    assert (cfg["threads_per_row"], cfg["vectors_per_thread"], cfg["rows_per_block"]) == (128, 1, 1)
    assert cfg["persistent_blocks_per_sm"] is None and cfg["grid"] == 32768


def test_defaults_table_drives_the_heuristic(monkeypatch):
    """Switching a regime is one edit of CUDA_DEFAULTS."""
    table = [dict(d) for d in ck.CUDA_DEFAULTS]
    table[-1] |= {"vectors_per_thread": 4, "block_threads": 128, "persistent_blocks_per_sm": 8}
    monkeypatch.setattr(ck, "CUDA_DEFAULTS", tuple(table))
    cfg = ck.cuda_config(32768, 1024, num_sms=132)
    assert (cfg["threads_per_row"], cfg["rows_per_block"], cfg["grid"]) == (32, 4, 132 * 8)
    assert "-DIC_PERSISTENT=1" in cfg["defines"]
    assert ck.cuda_config(8, 1024)["threads_per_row"] == 128


def test_persistent_grid_is_capped_by_the_sm_count():
    cfg = ck.cuda_config(32768, 1024, num_sms=132, threads_per_row=32, rows_per_block=4, persistent_blocks_per_sm=8)
    assert cfg["grid"] == 132 * 8
    assert ck.cuda_config(64, 1024, num_sms=132, persistent_blocks_per_sm=8)["grid"] == 64


def test_alignment_limits_the_vector_width():
    assert ck._align_elems(0x1000, 0x2000, 0x3000) == 8
    assert ck._align_elems(0x1000, 0x2008, 0x3000) == 4
    assert ck._align_elems(0x1004, 0x2000, 0x3000) == 2
    assert ck._align_elems(0x1002, 0x2000, 0x3000) == 1
    assert ck.cuda_config(1, 1024, align_elems=2)["vec"] == 2


@pytest.mark.parametrize("kwargs,match", [
    ({"threads": 32}, "unknown CUDA config keys"),
    ({"threads_per_row": 48}, "power of two"),
    ({"threads_per_row": 16, "rows_per_block": 1}, "multiple of 32"),
    ({"threads_per_row": 1024, "rows_per_block": 2}, "multiple of 32 and <= 1024"),
    ({"vec": 8, "threads_per_row": 32}, None),  # fine
    ({"vec": 3}, "vec must be"),
    ({"threads_per_row": 4, "rows_per_block": 8}, "vectors per thread"),
])
def test_bad_config_is_refused(kwargs, match):
    if match is None:
        assert ck.cuda_config(8, 1024, **kwargs)["vec"] == 8
        return
    with pytest.raises(InputError, match=match):
        ck.cuda_config(8, 1024, **kwargs)


def test_hidden_too_wide_is_refused():
    with pytest.raises(InputError, match="hidden <= 65536"):
        ck.cuda_config(1, 131072)


def test_cpu_tensors_are_refused_before_any_gpu_work():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 64).bfloat16()
    with pytest.raises(InputError, match="CUDA tensors"):
        ck.fused_add_rmsnorm_cuda(x, x.clone(), torch.ones(64, dtype=torch.bfloat16), 1e-6)


def test_available_says_why_not():
    ok, reason = ck.available()
    assert isinstance(ok, bool)
    if not ok:
        assert reason and ("cupy" in reason.lower() or "cuda" in reason.lower())


# ----------------------------------------------------------------------------------------- GPU


GPU_ROWS = [1, 8, 32, 128, 512, 2048]
GPU_HIDDENS = [1024, 896, 1000, 2048, 3584, 4096, 5120, 8192]


def _impls():
    from infercrane.kernels.ops.fused_add_rmsnorm import triton_kernel as tk

    return {"cuda": (ck.fused_add_rmsnorm_cuda, ck.available), "triton": (tk.fused_add_rmsnorm_triton, tk.available)}


def _kernel(name):
    fn, available = _impls()[name]
    ok, reason = available()
    if not ok:
        pytest.skip(f"{name} kernel unavailable: {reason}")
    return fn


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("hidden", GPU_HIDDENS)
def test_gpu_matches_oracle(rmsnorm_checks, impl, hidden):
    fn = _kernel(impl)
    for rows in GPU_ROWS:
        case = rmsnorm_checks.run_and_check(fn, rows, hidden, "bfloat16", device="cuda", seed=rows * 977 + hidden,
                                            label=impl)
        rmsnorm_checks.assert_unwritten_fails(case)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("rows,hidden", [(1, 1024), (300, 1000), (64, 4096)])
def test_gpu_fp16_matches_oracle(rmsnorm_checks, impl, rows, hidden):
    rmsnorm_checks.run_and_check(_kernel(impl), rows, hidden, "float16", device="cuda", seed=rows + hidden, label=impl)


@pytest.mark.gpu
@pytest.mark.parametrize("impl,config", [
    ("cuda", {"threads_per_row": 128, "rows_per_block": 1}),
    ("cuda", {"threads_per_row": 16, "rows_per_block": 4}),
    ("cuda", {"threads_per_row": 32, "rows_per_block": 4, "persistent_blocks_per_sm": 1}),
    ("cuda", {"threads_per_row": 128, "rows_per_block": 2, "persistent_blocks_per_sm": 1}),  # barrier in a loop
    ("cuda", {"threads_per_row": 32, "rows_per_block": 8, "vec": 4}),
    ("cuda", {"threads_per_row": 128, "rows_per_block": 1, "weight_ldg": True}),
    ("cuda", {"threads_per_row": 32, "rows_per_block": 4, "persistent_blocks_per_sm": 1024, "weight_ldg": True}),
    ("triton", {"variant": "fused", "block_n": 1024, "rows_per_program": 4, "num_warps": 4}),
    ("triton", {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 1}),
    ("triton", {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 4, "round_by_bits": True}),
    ("triton", {"variant": "chunked", "block_n": 256, "rows_per_program": 1, "num_warps": 2}),
    ("triton", {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 4, "pdl": True}),
    ("triton", {"variant": "fused", "block_n": 1024, "rows_per_program": 2, "num_warps": 4, "evict": True}),
])
def test_gpu_config_variants_match_oracle(rmsnorm_checks, impl, config):
    fn = _kernel(impl)
    for rows in (1, 7, 513, 2048):  # 7 and 513: rows not divisible by rows per block/program
        rmsnorm_checks.run_and_check(fn, rows, 1024, device="cuda", seed=rows, label=f"{impl} {config}",
                                     config=config)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_gpu_misaligned_tensors(rmsnorm_checks, impl):
    """Views starting 2 bytes into an allocation: 16-byte accesses would fault; the kernels must narrow them."""
    import torch

    from infercrane.kernels.ops.fused_add_rmsnorm.oracle import fused_add_rmsnorm_ref

    fn = _kernel(impl)
    rows, hidden = 5, 1024
    g = torch.Generator().manual_seed(5)
    flat_x = torch.randn(rows * hidden + 8, generator=g).bfloat16().cuda()
    flat_r = torch.randn(rows * hidden + 8, generator=g).bfloat16().cuda()
    x = flat_x[1:1 + rows * hidden].view(rows, hidden)
    r = flat_r[1:1 + rows * hidden].view(rows, hidden)
    w = (torch.randn(hidden, generator=g) + 0.5).bfloat16().cuda()
    assert x.data_ptr() % 16 == 2
    ref_out, ref_res = fused_add_rmsnorm_ref(x.cpu(), r.cpu(), w.cpu(), 1e-6)
    fn(x, r, w, 1e-6)
    torch.cuda.synchronize()
    rtol, atol = rmsnorm_checks.tolerances["bfloat16"]["out"]
    assert torch.equal(r.float().cpu(), ref_res)
    assert bool(((x.float().cpu() - ref_out).abs() <= atol + rtol * ref_out.abs()).all())


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("rows", [1, 512])
def test_gpu_cuda_graph_capture_replays_on_new_inputs(rmsnorm_checks, impl, rows):
    """Captured on static tensors, replayed after they are refilled: only a launch on the capture stream passes."""
    import torch

    fn = _kernel(impl)
    warm = rmsnorm_checks.make_case(rows, 1024, device="cuda", seed=11)
    fn(warm.x, warm.residual, warm.weight, warm.eps)  # compile and load outside the capture
    torch.cuda.synchronize()
    static = rmsnorm_checks.make_case(rows, 1024, device="cuda", seed=12)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(static.x, static.residual, static.weight, static.eps)
    fresh = rmsnorm_checks.make_case(rows, 1024, device="cuda", seed=13)
    static.x.copy_(fresh.x)
    static.residual.copy_(fresh.residual)
    static.weight.copy_(fresh.weight)
    static.ref_out, static.ref_residual = fresh.ref_out, fresh.ref_residual
    static.x_in, static.residual_in = fresh.x_in, fresh.residual_in
    graph.replay()
    torch.cuda.synchronize()
    rmsnorm_checks.check_case(static, f"{impl} graph replay")


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_gpu_runs_on_the_current_stream(rmsnorm_checks, impl):
    """Inputs written on a side stream, kernel called on it, no synchronization in between."""
    import torch

    fn = _kernel(impl)
    case = rmsnorm_checks.make_case(2048, 1024, device="cuda", seed=21)
    src_x, src_r = case.x.clone(), case.residual.clone()
    case.x.fill_(0.0)
    case.residual.fill_(0.0)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000)  # keep the side stream busy so a launch elsewhere would race ahead
        case.x.copy_(src_x)
        case.residual.copy_(src_r)
        fn(case.x, case.residual, case.weight, case.eps)
    side.synchronize()
    rmsnorm_checks.check_case(case, f"{impl} side stream")

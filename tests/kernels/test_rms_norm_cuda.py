"""InferCrane's handwritten CUDA RMSNorm (and, on a GPU, the Triton one beside it).

On CPU: NVRTC (``cuda.bindings.nvrtc``, no driver) compiles ``rms_norm.cu`` to PTX for ``compute_90`` at the
screened shapes and the tests read the PTX: both entry points, 16-byte global accesses (scalar ones for an odd
width), no local-memory stack, the weight's and x's loads before any arithmetic, the block-level reduction only
where a row spans several warps; a broken source raises an error carrying NVRTC's log.
On a GPU (``@pytest.mark.gpu``): the CUDA and Triton kernels against the float32 oracle on random inputs, on a
non-default current stream, misaligned tensors, fp16, config variants, and inside a captured CUDA graph replayed on
new inputs. Tolerances are the spec's (``RMSNormSpec.TOLERANCES``), the oracle is ``rms_norm.oracle.rms_norm_ref``.
"""
from __future__ import annotations

import re

import pytest

from infercrane.errors import InputError, UnavailableError
from infercrane.kernels.ops.rms_norm import cuda_kernel as ck
from infercrane.kernels.ops.rms_norm.spec import BANDWIDTH_ROWS, DEFAULT_ROWS, RMSNormSpec

V4_LOAD = re.compile(r"ld\.global(\.nc)?(\.L1::\w+)?\.v4\.(u32|b32)")
V4_STORE = re.compile(r"st\.global\.v4\.(u32|b32)")
EPS = 1e-6


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


def _first_math(lines: list[str]) -> int:
    return min(i for i, line in enumerate(lines) if re.search(r"\b(add|mul|fma)(\.rn)?(\.ftz)?\.f32", line))


# ----------------------------------------------------------------------------------------- CPU: PTX via NVRTC


@needs_nvrtc
@pytest.mark.parametrize("hidden", [1024, 128])
@pytest.mark.parametrize("rows", sorted(set(DEFAULT_ROWS + BANDWIDTH_ROWS)))
def test_ptx_at_the_screened_shapes(hidden, rows):
    """Qwen3's final norm (1024) and q/k norms (128) at every screened row count: both entry points, one 16-byte
    load of the weight and one of x per thread, both before any arithmetic, one 16-byte store, no spills."""
    cfg = ck.cuda_config(rows, hidden)
    ptx = ck.compile_ptx(hidden, "compute_90", rows=rows)
    assert ".target sm_90" in ptx
    for dtype, name in ck.ENTRY_POINTS.items():
        body = _entry(ptx, name)
        lines = body.splitlines()
        loads = [i for i, line in enumerate(lines) if "ld.global" in line]
        assert len(loads) == 2 and all(V4_LOAD.search(lines[i]) for i in loads), f"{dtype}: two 16-byte loads"
        assert max(loads) < _first_math(lines), f"{dtype}: a load issued after arithmetic"
        assert "ld.global.nc" not in body, "plain loads (a read-only load is sunk towards its use)"
        assert len(V4_STORE.findall(body)) == 1 and ".local" not in body
        assert f".maxntid {cfg['threads_per_block']}, 1, 1" in body
        lanes = min(cfg["threads_per_row"], 32)
        assert body.count("shfl.sync.bfly") == lanes.bit_length() - 1, "log2(lanes per row) shuffle steps"
        assert body.count("bar.sync") == (1 if cfg["block_reduction"] else 0)
        assert "cvt.rn.bf16x2.f32" in body if dtype == "bfloat16" else "cvt.rn.f16x2.f32" in body
        assert "rsqrt.approx" in body and "div." not in body


@needs_nvrtc
def test_weight_is_loaded_first():
    """Source order puts the weight's load ahead of x's (its address comes from the third parameter)."""
    body = _entry(ck.compile_ptx(1024, rows=1), ck.ENTRY_POINTS["bfloat16"])
    wreg = re.search(r"ld\.param\.u64\s+(%rd\d+), \[rms_norm_bf16_param_2\]", body).group(1)
    first = re.search(r"ld\.global\.v4\.u32 \{[^}]*\}, \[(%rd\d+)\]", body).group(1)
    assert first == wreg or re.search(rf"add\.s64\s+{re.escape(first)}, {re.escape(wreg)},", body)


@needs_nvrtc
@pytest.mark.parametrize("rows", [1, 32768])
@pytest.mark.parametrize("hidden", [64, 896, 1000, 2048, 3584, 4096, 5120, 8192, 16384, 65536])
def test_ptx_compiles_for_model_widths_with_16_byte_accesses(hidden, rows):
    body = _entry(ck.compile_ptx(hidden, rows=rows), ck.ENTRY_POINTS["bfloat16"])
    assert V4_LOAD.search(body) and V4_STORE.search(body)
    assert ".local" not in body
    cfg = ck.cuda_config(rows, hidden)
    assert ("bar.sync" in body) == cfg["block_reduction"] == (cfg["threads_per_row"] > 32)


@needs_nvrtc
def test_odd_width_falls_back_to_scalar_accesses():
    # hidden 1001: rows start at 2-byte-aligned addresses, so 16-byte accesses would be misaligned
    cfg = ck.cuda_config(1, 1001)
    assert cfg["vec"] == 1 and cfg["guarded"]
    body = _entry(ck.compile_ptx(1001), ck.ENTRY_POINTS["bfloat16"])
    assert not V4_LOAD.search(body) and "ld.global.u16" in body
    # hidden 1004: 8-byte accesses
    assert ck.cuda_config(1, 1004)["vec"] == 4
    assert "ld.global.v2.u32" in _entry(ck.compile_ptx(1004), ck.ENTRY_POINTS["bfloat16"])


@needs_nvrtc
@pytest.mark.parametrize("hidden,config", [
    (1024, {"threads_per_row": 32, "rows_per_block": 4}),  # one warp per row, 4 vectors per thread: no barrier
    (1024, {"threads_per_row": 64, "rows_per_block": 2}),  # two warps per row, two rows: barrier, 2-row exchange
    (128, {"threads_per_row": 32, "rows_per_block": 4, "vec": 4}),  # one warp per q/k row, 8-byte accesses
    (128, {"threads_per_row": 16, "rows_per_block": 16}),  # 256 threads, 16 rows per block
])
def test_ptx_compiles_for_config_overrides(hidden, config):
    body = _entry(ck.compile_ptx(hidden, "compute_90", **config), ck.ENTRY_POINTS["bfloat16"])
    assert f".maxntid {config['threads_per_row'] * config['rows_per_block']}, 1, 1" in body
    assert ".local" not in body
    assert ("bar.sync" in body) == (config["threads_per_row"] > 32)
    if config.get("vec", 8) == 8:
        assert V4_LOAD.search(body)
    else:
        assert "ld.global.v2" in body and not V4_LOAD.search(body)


@needs_nvrtc
def test_broken_source_raises_with_the_nvrtc_log():
    line = "const float inv_rms = rsqrtf("
    broken = ck.read_source().replace(line, line + "undeclared_name + ")
    assert broken != ck.read_source()
    with pytest.raises(ck.nvrtc.CudaCompileError) as info:
        ck.compile_ptx(1024, source=broken)
    err = info.value
    assert "undeclared_name" in err.log and "error" in err.log
    assert "-DIC_HIDDEN=1024" in err.options


@needs_nvrtc
def test_static_assert_guards_bad_defines():
    # the source's own check, reached only when the Python-side validation is bypassed
    options = ("-arch=compute_90", *ck.BASE_OPTIONS, "-DIC_HIDDEN=1024", "-DIC_VEC=8", "-DIC_THREADS_PER_ROW=24",
               "-DIC_ROWS_PER_BLOCK=4", f"-I{ck.cuda_include_dirs()[0]}")
    with pytest.raises(ck.nvrtc.CudaCompileError, match="power of two"):
        ck.nvrtc.nvrtc_compile_ptx(ck.read_source(), options, "rms_norm.cu")


def test_compile_ptx_refuses_a_bad_arch():
    with pytest.raises(InputError, match="arch"):
        ck.compile_ptx(1024, "hopper")


def test_missing_headers_are_reported_as_unavailable(monkeypatch):
    monkeypatch.setattr(ck, "cuda_include_dirs", lambda: [])
    with pytest.raises(UnavailableError, match="cuda_bf16.h"):
        ck.compile_ptx(1024)


# ----------------------------------------------------------------------------------------- CPU: configuration


@pytest.mark.parametrize("hidden", [8, 64, 128, 896, 1000, 1001, 1024, 2048, 4096, 8192, 16384, 65536])
@pytest.mark.parametrize("rows", [1, 8, 512, 2048, 32768])
def test_config_heuristic_is_consistent(rows, hidden):
    cfg = ck.cuda_config(rows, hidden)
    tpr, rpb, vec = cfg["threads_per_row"], cfg["rows_per_block"], cfg["vec"]
    assert hidden % vec == 0 and (vec == 8 or hidden % 8 != 0)
    assert tpr & (tpr - 1) == 0 and cfg["threads_per_block"] == tpr * rpb
    assert cfg["threads_per_block"] % 32 == 0 and cfg["threads_per_block"] <= 1024
    assert 1 <= cfg["vectors_per_thread"] <= ck.MAX_VECTORS_PER_THREAD
    assert tpr * cfg["vectors_per_thread"] * vec >= hidden
    assert cfg["grid"] * rpb >= rows > (cfg["grid"] - 1) * rpb
    assert cfg["defines"] == [f"-DIC_HIDDEN={hidden}", f"-DIC_VEC={vec}", f"-DIC_THREADS_PER_ROW={tpr}",
                              f"-DIC_ROWS_PER_BLOCK={rpb}"]


def test_config_at_qwen3_widths():
    def shape(rows, hidden):
        c = ck.cuda_config(rows, hidden)
        return c["vec"], c["threads_per_row"], c["vectors_per_thread"], c["rows_per_block"], c["grid"]

    # final norm: one 16-byte vector per thread, 4 warps per row, one row per block in both regimes
    assert shape(1, 1024) == (8, 128, 1, 1, 1)
    assert shape(32768, 1024) == (8, 128, 1, 1, 32768)
    # q/k norms: 16 threads (one vector each) per row, two rows per warp; 2 rows per block, 8 beyond SMALL_ROWS
    assert shape(512, 128) == (8, 16, 1, 2, 256)
    assert shape(32768, 128) == (8, 16, 1, 8, 4096)


def test_defaults_table_drives_the_heuristic(monkeypatch):
    """Switching a regime is one edit of CUDA_DEFAULTS."""
    table = [dict(d) for d in ck.CUDA_DEFAULTS]
    table[-1] |= {"vectors_per_thread": 4, "block_threads": 128}
    monkeypatch.setattr(ck, "CUDA_DEFAULTS", tuple(table))
    cfg = ck.cuda_config(32768, 1024)
    assert (cfg["threads_per_row"], cfg["rows_per_block"], cfg["vectors_per_thread"]) == (32, 4, 4)
    assert ck.cuda_config(8, 1024)["threads_per_row"] == 128


def test_alignment_limits_the_vector_width():
    assert ck.nvrtc.align_elems(0x1000, 0x2000, 0x3000) == 8
    assert ck.nvrtc.align_elems(0x1000, 0x2008, 0x3000) == 4
    assert ck.nvrtc.align_elems(0x1004, 0x2000, 0x3000) == 2
    assert ck.nvrtc.align_elems(0x1002, 0x2000, 0x3000) == 1
    assert ck.cuda_config(1, 1024, align_elems=2)["vec"] == 2


@pytest.mark.parametrize("kwargs,match", [
    ({"threads": 32}, "unknown CUDA config keys"),
    ({"threads_per_row": 48}, "power of two"),
    ({"threads_per_row": 16, "rows_per_block": 1}, "multiple of 32"),
    ({"threads_per_row": 1024, "rows_per_block": 2}, "multiple of 32 and <= 1024"),
    ({"vec": 3}, "vec must be"),
    ({"threads_per_row": 4, "rows_per_block": 8}, "vectors per thread"),
])
def test_bad_config_is_refused(kwargs, match):
    with pytest.raises(InputError, match=match):
        ck.cuda_config(8, 1024, **kwargs)


def test_width_too_wide_is_refused():
    with pytest.raises(InputError, match="hidden <= 65536"):
        ck.cuda_config(1, 131072)


def test_cpu_tensors_are_refused_before_any_gpu_work():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 64).bfloat16()
    with pytest.raises(InputError, match="CUDA tensors"):
        ck.rms_norm_cuda(torch.empty_like(x), x, torch.ones(64, dtype=torch.bfloat16), EPS)
    with pytest.raises(InputError, match="dtype must be one of"):
        ck.rms_norm_cuda(torch.empty_like(x.float()), x.float(), torch.ones(64), EPS)


def test_available_says_why_not():
    ok, reason = ck.available()
    assert isinstance(ok, bool)
    if not ok:
        assert reason and ("cupy" in reason.lower() or "cuda" in reason.lower())


# ----------------------------------------------------------------------------------------- GPU


GPU_ROWS = [1, 8, 32, 128, 512, 2048]
GPU_HIDDENS = [1024, 128, 64, 896, 1000, 4096, 8192]


def _kernel(name):
    from infercrane.kernels.ops.rms_norm import triton_kernel as tk

    fn, available = {"cuda": (ck.rms_norm_cuda, ck.available), "triton": (tk.rms_norm_triton, tk.available)}[name]
    ok, reason = available()
    if not ok:
        pytest.fail(f"{name} kernel unavailable on a GPU machine: {reason}")
    return fn


def _mismatch(got, ref, dtype: str) -> str | None:
    """None when ``got`` passes the spec's rule; else max abs error and the first bad index."""
    import torch

    tol = RMSNormSpec.TOLERANCES[dtype]
    got64, ref64 = got.detach().cpu().double(), ref.detach().cpu().double()
    atol = tol.atol_scale * float(ref64.pow(2).mean().sqrt())
    err = (got64 - ref64).abs()
    ok = err <= atol + tol.rtol * ref64.abs()  # NaN compares False
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()
    first = tuple(int(i) for i in bad[0])
    return (f"{bad.shape[0]} of {got.numel()} elements fail (rtol {tol.rtol}, atol {atol:.3g}); first bad {first}: "
            f"got {float(got64[first])}, ref {float(ref64[first])}")


def _problem(rows, hidden, dtype="bfloat16", seed=0):
    """Spec inputs generated on the GPU, a NaN-poisoned out between NaN guard rows, the oracle's answer."""
    import torch

    spec = RMSNormSpec(hidden_size=hidden, eps=EPS, dtype=dtype)
    inputs = spec.make_inputs(rows, "cuda", seed=seed, scale=1.0)
    buf = torch.full((rows + 2, hidden), float("nan"), dtype=inputs["x"].dtype, device="cuda")
    return inputs["x"], inputs["weight"], buf, buf[1:1 + rows], spec.oracle(inputs)["out"]


def _check(label, x, w, buf, out, ref, x0, dtype="bfloat16"):
    import torch

    problems = []
    if not torch.equal(x, x0):
        problems.append("x was modified")
    if not bool(torch.isnan(torch.cat([buf[:1], buf[-1:]])).all()):
        problems.append("wrote outside its rows")
    bad = _mismatch(out, ref, dtype)
    if bad:
        problems.append(bad)
    assert not problems, f"{label}: " + "; ".join(problems)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("hidden", GPU_HIDDENS)
def test_gpu_matches_oracle_on_the_current_stream(impl, hidden):
    """Inputs, call and read-back on a fresh non-default current stream, kept busy before the inputs are written:
    a kernel launched on another stream would read them before they exist, or be read before it finishes."""
    import torch

    fn = _kernel(impl)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for rows in GPU_ROWS:
            torch.cuda._sleep(2_000_000)  # keep the stream busy: a launch on another stream would race ahead
            x, w, buf, out, ref = _problem(rows, hidden, seed=rows * 977 + hidden)
            x0 = x.clone()
            assert fn(out, x, w, EPS) is None
            stream.synchronize()
            _check(f"{impl} rows={rows} hidden={hidden}", x, w, buf, out, ref, x0)
            assert _mismatch(x, ref, "bfloat16") is not None  # the rule rejects the untouched input


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("rows,hidden", [(1, 1024), (300, 1000), (512, 128)])
def test_gpu_fp16_matches_oracle(impl, rows, hidden):
    import torch

    fn = _kernel(impl)
    x, w, buf, out, ref = _problem(rows, hidden, "float16", seed=rows + hidden)
    x0 = x.clone()
    fn(out, x, w, EPS)
    torch.cuda.synchronize()
    _check(f"{impl} fp16", x, w, buf, out, ref, x0, "float16")


@pytest.mark.gpu
@pytest.mark.parametrize("impl,hidden,config", [
    ("cuda", 1024, {"threads_per_row": 32, "rows_per_block": 4}),
    ("cuda", 1024, {"threads_per_row": 64, "rows_per_block": 2}),
    ("cuda", 1024, {"threads_per_row": 32, "rows_per_block": 8, "vec": 4}),
    ("cuda", 128, {"threads_per_row": 32, "rows_per_block": 4, "vec": 4}),
    ("cuda", 128, {"threads_per_row": 16, "rows_per_block": 16}),
    ("triton", 1024, {"variant": "fused", "block_n": 1024, "rows_per_program": 4, "num_warps": 4}),
    ("triton", 1024, {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 4,
                      "round_by_bits": True}),
    ("triton", 128, {"variant": "fused", "block_n": 128, "rows_per_program": 16, "num_warps": 4}),
    ("triton", 1024, {"variant": "chunked", "block_n": 256, "rows_per_program": 1, "num_warps": 2}),
])
def test_gpu_config_variants_match_oracle(impl, hidden, config):
    import torch

    fn = _kernel(impl)
    for rows in (1, 7, 513, 2048):  # 7 and 513: rows not divisible by rows per block/program
        x, w, buf, out, ref = _problem(rows, hidden, seed=rows)
        x0 = x.clone()
        fn(out, x, w, EPS, config=config)
        torch.cuda.synchronize()
        _check(f"{impl} {config} rows={rows}", x, w, buf, out, ref, x0)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_gpu_misaligned_tensors(impl):
    """Views starting 2 bytes into an allocation: 16-byte accesses would fault; the kernels must narrow them."""
    import torch

    from infercrane.kernels.ops.rms_norm.oracle import rms_norm_ref

    fn = _kernel(impl)
    rows, hidden = 5, 1024
    g = torch.Generator().manual_seed(5)
    flat_x = torch.randn(rows * hidden + 8, generator=g).bfloat16().cuda()
    flat_o = torch.full((rows * hidden + 8,), float("nan"), dtype=torch.bfloat16, device="cuda")
    x = flat_x[1:1 + rows * hidden].view(rows, hidden)
    out = flat_o[1:1 + rows * hidden].view(rows, hidden)
    w = (torch.randn(hidden, generator=g) + 0.5).bfloat16().cuda()
    assert x.data_ptr() % 16 == 2 and out.data_ptr() % 16 == 2
    fn(out, x, w, EPS)
    torch.cuda.synchronize()
    assert _mismatch(out, rms_norm_ref(x, w, EPS), "bfloat16") is None


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_gpu_out_may_alias_x(impl):
    """vLLM callers sometimes normalize in place (out is x): every element is read before anything is written."""
    import torch

    fn = _kernel(impl)
    x, w, _, _, ref = _problem(64, 1024, seed=9)
    fn(x, x, w, EPS)
    torch.cuda.synchronize()
    assert _mismatch(x, ref, "bfloat16") is None


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("rows,hidden", [(1, 1024), (512, 1024), (512, 128)])
def test_gpu_cuda_graph_capture_replays_on_new_inputs(impl, rows, hidden):
    """Captured on static tensors, replayed after they are refilled: only a launch on the capture stream, reading
    the buffers at replay time, passes."""
    import torch

    fn = _kernel(impl)
    x, w, _, out, _ = _problem(rows, hidden, seed=11)
    fn(out, x, w, EPS)  # compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(out, x, w, EPS)
    for seed in (12, 13):
        fresh_x, fresh_w, _, _, ref = _problem(rows, hidden, seed=seed)
        x.copy_(fresh_x)
        w.copy_(fresh_w)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        bad = _mismatch(out, ref, "bfloat16")
        assert bad is None, f"{impl} graph replay (seed {seed}): {bad}"

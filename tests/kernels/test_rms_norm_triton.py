"""InferCrane's Triton RMSNorm, checked against the float32 oracle (``rms_norm.oracle.rms_norm_ref``).

On CPU the kernels run under Triton's interpreter: a module fixture sets ``TRITON_INTERPRET=1`` for these tests
only and restores it afterwards (``triton_kernel`` wraps its bodies lazily, once per mode). The compiled kernel is
checked without a GPU through its PTX for sm_90. Tolerances are the spec's (``RMSNormSpec.TOLERANCES``, rule
``|got - ref| <= atol_scale * rms(ref) + rtol * |ref|``, NaN never passes); the kernel rounds once from float32, which
``test_rounds_once_from_float32`` holds it to more tightly. GPU runs of this kernel are in ``test_rms_norm_cuda.py``.
"""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from infercrane.errors import InputError  # noqa: E402
from infercrane.kernels.ops.rms_norm import triton_kernel as tk  # noqa: E402
from infercrane.kernels.ops.rms_norm.oracle import rms_norm_ref  # noqa: E402
from infercrane.kernels.ops.rms_norm.spec import RMSNormSpec  # noqa: E402

EPS = 1e-6
GUARD_ROWS = 1


@pytest.fixture(scope="module", autouse=True)
def _interpret():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        yield


def mismatch(got, ref, dtype: str) -> str | None:
    """None when ``got`` passes the spec's rule for ``dtype``; else max abs/rel error and the first bad index."""
    tol = RMSNormSpec.TOLERANCES[dtype]
    got64, ref64 = got.detach().cpu().double(), ref.double()
    atol = tol.atol_scale * float(ref64.pow(2).mean().sqrt())
    err = (got64 - ref64).abs()
    ok = err <= atol + tol.rtol * ref64.abs()  # NaN compares False
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()
    first = tuple(int(i) for i in bad[0])
    finite = torch.isfinite(err)
    max_abs = float(err[finite].max()) if bool(finite.any()) else float("nan")
    return (f"{bad.shape[0]} of {got.numel()} elements fail (rtol {tol.rtol}, atol {atol:.3g}); max abs err "
            f"{max_abs:.3g}; first bad index {first}: got {float(got64[first])}, ref {float(ref64[first])}")


def run_case(fn, rows: int, hidden: int, dtype: str = "bfloat16", seed: int = 0, **kwargs):
    """Fresh spec inputs; ``out`` a view between NaN guard rows of a NaN-filled buffer; one in-place call; full check.

    Returns ``(out, x, ref)``."""
    spec = RMSNormSpec(hidden_size=hidden, eps=EPS, dtype=dtype)
    inputs = spec.make_inputs(rows, "cpu", seed=seed, scale=1.0)
    x, w = inputs["x"], inputs["weight"]
    x0, w0 = x.clone(), w.clone()
    buf = torch.full((rows + 2 * GUARD_ROWS, hidden), float("nan"), dtype=x.dtype)
    out = buf[GUARD_ROWS:GUARD_ROWS + rows]
    assert fn(out, x, w, EPS, **kwargs) is None
    ref = spec.oracle(inputs)["out"]
    problems = []
    if not torch.equal(x, x0) or not torch.equal(w, w0):
        problems.append("x or weight was modified")
    if not bool(torch.isnan(torch.cat([buf[:GUARD_ROWS], buf[GUARD_ROWS + rows:]])).all()):
        problems.append("wrote outside its rows (a guard row changed)")
    if bool(torch.isnan(out).any()):
        problems.append(f"{int(torch.isnan(out).sum())} elements of out left unwritten (NaN)")
    bad = mismatch(out, ref, dtype)
    if bad:
        problems.append(bad)
    assert not problems, f"rows={rows} hidden={hidden} {dtype}: " + "; ".join(problems)
    return out, x, ref


CASES = [
    # rows, hidden, dtype, config override (None: the heuristic)
    (1, 1024, "bfloat16", None),
    (3, 1024, "bfloat16", None),
    (4, 128, "bfloat16", None),  # q/k norm width: two rows per program
    (5, 128, "bfloat16", None),  # ... with a masked last row
    (4, 1000, "bfloat16", None),  # non-power-of-two width: masked columns
    (2, 1001, "bfloat16", None),  # odd width: rows start at unaligned addresses
    (5, 896, "bfloat16", None),
    (3, 1024, "float16", None),
    (3, 1024, "float32", None),
    (3, 128, "float32", None),
    (2, 20480, "bfloat16", None),  # wider than MAX_FUSED_BLOCK_N: the chunked kernel
    (6, 1024, "bfloat16", {"variant": "fused", "block_n": 1024, "rows_per_program": 4, "num_warps": 4}),
    (9, 128, "bfloat16", {"variant": "fused", "block_n": 128, "rows_per_program": 8, "num_warps": 2}),
    (3, 1000, "bfloat16", {"variant": "chunked", "block_n": 256, "rows_per_program": 1, "num_warps": 2}),
]


@pytest.mark.parametrize("rows,hidden,dtype,config", CASES, ids=lambda v: str(v) if not isinstance(v, dict) else
                         f"{v['variant']}-r{v['rows_per_program']}-b{v['block_n']}")
def test_matches_oracle(rows, hidden, dtype, config):
    out, x, ref = run_case(tk.rms_norm_triton, rows, hidden, dtype, seed=rows * 7919 + hidden, config=config)
    assert mismatch(x, ref, dtype) is not None, "the rule must reject an output that is just the input"


@pytest.mark.parametrize("hidden", [128, 1024])
def test_rounds_once_from_float32(hidden):
    """float32 inside and one round-to-nearest-even: the output is the oracle rounded once, up to reduction order."""
    out, _, ref = run_case(tk.rms_norm_triton, 16, hidden, "bfloat16", seed=hidden)
    exact = (out == ref.to(torch.bfloat16)).float().mean().item()
    assert exact >= 0.999, f"only {exact:.4%} of elements equal the once-rounded oracle"


def test_fresh_inputs_give_fresh_outputs():
    """Two different problems through the same kernel: no cached result can pass both."""
    a, _, _ = run_case(tk.rms_norm_triton, 2, 512, seed=1)
    b, _, _ = run_case(tk.rms_norm_triton, 2, 512, seed=2)
    assert not torch.equal(a, b)


def test_check_rejects_a_kernel_that_computes_one_row():
    def first_row_only(out, x, weight, eps):
        tk.rms_norm_triton(out[:1], x[:1], weight, eps)

    with pytest.raises(AssertionError, match="unwritten"):
        run_case(first_row_only, 3, 256, seed=3)


def test_check_rejects_a_kernel_that_ignores_the_weight():
    def no_weight(out, x, weight, eps):
        tk.rms_norm_triton(out, x, torch.ones_like(weight), eps)

    with pytest.raises(AssertionError, match="fail"):
        run_case(no_weight, 3, 256, seed=4)


def test_zero_rows_is_a_no_op():
    x = torch.empty(0, 1024, dtype=torch.bfloat16)
    assert tk.rms_norm_triton(torch.empty_like(x), x, torch.ones(1024, dtype=torch.bfloat16), EPS) is None


def test_leading_dimensions_are_rows():
    x = torch.randn(2, 3, 128).bfloat16()
    w = (torch.randn(128) + 1).bfloat16()
    out = torch.full_like(x, float("nan"))
    tk.rms_norm_triton(out, x, w, EPS)
    assert mismatch(out, rms_norm_ref(x, w, EPS), "bfloat16") is None


@pytest.mark.parametrize("hidden", [64, 128, 896, 1000, 1024, 2048, 4096, 8192, 16384, 20480, 65536])
@pytest.mark.parametrize("rows", [1, 8, 32, 128, 512, 2048, 8192, 32768])
def test_config_heuristic_is_consistent(rows, hidden):
    cfg = tk.triton_config(rows, hidden)
    bn, rpp, nw = cfg["block_n"], cfg["rows_per_program"], cfg["num_warps"]
    for v in (bn, rpp, nw):
        assert v > 0 and v & (v - 1) == 0
    assert 1 <= nw <= 16 and rpp <= tk.MAX_ROWS_PER_PROGRAM
    assert cfg["grid"] * rpp >= rows > (cfg["grid"] - 1) * rpp
    if cfg["variant"] == "fused":
        assert hidden <= bn < 2 * hidden and bn <= tk.MAX_FUSED_BLOCK_N
        # every thread owns at least one 16-byte vector (8 bf16) of its tile
        assert rpp * bn >= 32 * nw * 8
        assert cfg["masked"] == (bn != hidden or rows % rpp != 0)
    else:
        assert hidden > tk.MAX_FUSED_BLOCK_N and rpp == 1 and cfg["masked"]
    if rows <= 512 and hidden >= 256:  # decode-sized batches of wide rows: one row per program
        assert rpp == 1


def test_config_at_qwen3_widths():
    base = {"variant": "fused", "round_by_bits": False, "masked": False, "int64_offsets": False}
    assert tk.triton_config(1, 1024) == base | {"block_n": 1024, "rows_per_program": 1, "num_warps": 4,
                                                "hidden": 1024, "grid": 1}
    assert tk.triton_config(512, 128) == base | {"block_n": 128, "rows_per_program": 2, "num_warps": 1,
                                                 "hidden": 128, "grid": 256}
    assert tk.triton_config(32768, 128) | {} == base | {"block_n": 128, "rows_per_program": 16, "num_warps": 4,
                                                        "hidden": 128, "grid": 2048}
    assert tk.triton_config(2**21, 1024)["int64_offsets"] is True


def test_defaults_table_drives_the_heuristic(monkeypatch):
    """Switching a regime is one edit of TRITON_DEFAULTS."""
    rows = [dict(d) for d in tk.TRITON_DEFAULTS]
    rows[0] |= {"tile_elems": 1024, "elems_per_thread": 4}
    monkeypatch.setattr(tk, "TRITON_DEFAULTS", tuple(rows))
    cfg = tk.triton_config(8, 128)
    assert (cfg["rows_per_program"], cfg["num_warps"]) == (8, 8)


@pytest.mark.parametrize("bad,match", [
    ({"variant": "fused", "block_n": 512, "num_warps": 4}, "block_n >= hidden"),
    ({"variant": "fused", "block_n": 1024, "num_warps": 3}, "power of two"),
    ({"variant": "warp", "block_n": 1024, "num_warps": 4}, "variant"),
    ({"variant": "fused", "block_n": 1024, "num_warps": 4, "stages": 2}, "unknown Triton config keys"),
    ({"variant": "fused", "num_warps": 4}, "needs 'block_n'"),
    ({"variant": "chunked", "block_n": 256, "rows_per_program": 2, "num_warps": 4}, "one row per program"),
])
def test_bad_config_is_refused(bad, match):
    x = torch.randn(2, 1024).bfloat16()
    with pytest.raises(InputError, match=match):
        tk.rms_norm_triton(torch.empty_like(x), x, torch.ones(1024, dtype=torch.bfloat16), EPS, config=bad)


def test_bad_inputs_are_refused():
    w = torch.ones(64, dtype=torch.bfloat16)
    x = torch.randn(4, 64).bfloat16()
    out = torch.empty_like(x)
    with pytest.raises(InputError, match="same shape"):
        tk.rms_norm_triton(torch.empty(4, 32, dtype=torch.bfloat16), x, w, EPS)
    with pytest.raises(InputError, match="weight must have shape"):
        tk.rms_norm_triton(out, x, torch.ones(32, dtype=torch.bfloat16), EPS)
    with pytest.raises(InputError, match="share one dtype"):
        tk.rms_norm_triton(out.half(), x, w, EPS)
    with pytest.raises(InputError, match="dtype must be one of"):
        tk.rms_norm_triton(out.double(), x.double(), w.double(), EPS)
    with pytest.raises(InputError, match="contiguous"):
        xt = torch.randn(64, 4).bfloat16().t()
        tk.rms_norm_triton(torch.empty(4, 64, dtype=torch.bfloat16), xt, w, EPS)
    with pytest.raises(InputError, match="eps must be positive"):
        tk.rms_norm_triton(out, x, w, 0.0)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.randn(2, 64).bfloat16()
    with pytest.raises(InputError, match="TRITON_INTERPRET=1"):
        tk.rms_norm_triton(torch.empty_like(x), x, torch.ones(64, dtype=torch.bfloat16), EPS)


# ----------------------------------------------------------------------------------------- compiled, no GPU


def _ptx_or_skip(*args, **kwargs):
    from infercrane.errors import UnavailableError

    try:
        return tk.compile_ptx(*args, **kwargs)
    except UnavailableError as e:
        pytest.skip(str(e))


V4_LD = re.compile(r"ld\.global(\.\w+)*\.v4\.b32")
V4_ST = re.compile(r"st\.global(\.\w+)*\.v4\.b32")


@pytest.mark.parametrize("rows", [1, 512, 32768])
@pytest.mark.parametrize("hidden", [64, 128, 896, 1000, 1024, 4096, 5120, 16384])
def test_compiled_for_sm90_with_16_byte_accesses(hidden, rows):
    """The real compiler (not the interpreter) for sm_90, no GPU needed: every global access 16 bytes, no spills."""
    ptx = _ptx_or_skip(hidden, rows, arch=90)
    assert V4_LD.search(ptx) and V4_ST.search(ptx), "expected 16-byte global loads and stores"
    accesses = re.findall(r"\b(?:ld|st)\.global[.\w]*", ptx)
    assert accesses and all(".v4." in a for a in accesses), f"a narrower global access: {sorted(set(accesses))}"
    assert ".local" not in ptx


@pytest.mark.parametrize("rows", [1, 512, 32768])
def test_compiled_narrow_rows_reduce_without_a_barrier(rows):
    """At head_dim 128 a row lies within one warp: shuffles only, and the weight needs no layout conversion."""
    ptx = _ptx_or_skip(128, rows, arch=90)
    assert "bar.sync" not in ptx and "shfl.sync.bfly" in ptx


def test_loads_are_issued_before_any_arithmetic():
    ptx = _ptx_or_skip(1024, 1, arch=90)
    lines = ptx.splitlines()
    loads = [i for i, line in enumerate(lines) if "ld.global" in line]
    first_math = min(i for i, line in enumerate(lines) if re.search(r"\b(add|mul|fma)\.(rn\.)?f32", line))
    assert len(loads) == 2 and max(loads) < first_math


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_compiled_other_dtypes(dtype):
    ptx = _ptx_or_skip(1024, 8, arch=90, dtype=dtype)
    assert V4_LD.search(ptx) and V4_ST.search(ptx) and ".local" not in ptx


def test_compiled_odd_width_and_chunked_variants():
    ptx = _ptx_or_skip(1001, 4)  # rows start 2 bytes apart from 16-byte alignment: scalar accesses
    assert not V4_LD.search(ptx) and re.search(r"ld\.global(\.\w+)*\.b16", ptx)
    assert tk.triton_config(1, 20480)["variant"] == "chunked"
    ptx = _ptx_or_skip(20480, 1)
    assert V4_LD.search(ptx) and V4_ST.search(ptx)


def test_available_under_interpreter():
    assert tk.available() == (True, "")
    info = tk.describe()
    assert info["interpret"] is True and len(info["source_sha256"]) == 64


def test_unavailable_without_device_says_why(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the kernel is available without the interpreter")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    ok, reason = tk.available()
    assert not ok and "CUDA" in reason and "TRITON_INTERPRET" in reason

"""InferCrane's Triton fused residual-add + RMSNorm, checked against the float32 oracle.

On CPU the kernels run under Triton's interpreter: a module fixture sets ``TRITON_INTERPRET=1`` for these tests
only and restores it afterwards. ``triton.jit`` reads that variable when it wraps a function, and
``triton_kernel`` wraps its kernel bodies lazily, once per mode, so the order in which test modules import
Triton does not matter. The comparison rule and tolerances are in ``tests/kernels/conftest.py``.
"""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from infercrane.errors import InputError  # noqa: E402
from infercrane.kernels.ops.fused_add_rmsnorm import triton_kernel as tk  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _interpret():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        yield


CASES = [
    # rows, hidden, dtype, config override (None: the heuristic)
    (1, 1024, "bfloat16", None),
    (3, 1024, "bfloat16", None),
    (5, 896, "bfloat16", None),  # masked columns, power-of-two block 1024
    (4, 1000, "bfloat16", None),  # masked columns, non-power-of-two hidden
    (2, 1001, "bfloat16", None),  # odd hidden: rows start at unaligned addresses
    (3, 1024, "float16", None),
    (6, 1024, "bfloat16", {"variant": "fused", "block_n": 1024, "rows_per_program": 4, "num_warps": 4}),  # masked rows
    # pdl/evict are compiled-mode features: the interpreter runs the same body without them
    (3, 1024, "bfloat16", {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 4, "pdl": True,
                           "evict": True}),
    (8, 256, "bfloat16", {"variant": "fused", "block_n": 256, "rows_per_program": 4, "num_warps": 2}),
    (3, 1000, "bfloat16", {"variant": "chunked", "block_n": 256, "rows_per_program": 1, "num_warps": 2}),
]


@pytest.mark.parametrize("rows,hidden,dtype,config", CASES, ids=lambda v: str(v) if not isinstance(v, dict) else
                         f"{v['variant']}-r{v['rows_per_program']}-b{v['block_n']}")
def test_matches_oracle(rmsnorm_checks, rows, hidden, dtype, config):
    case = rmsnorm_checks.run_and_check(tk.fused_add_rmsnorm_triton, rows, hidden, dtype,
                                        seed=rows * 7919 + hidden, label="triton", config=config)
    rmsnorm_checks.assert_unwritten_fails(case)


def test_fresh_inputs_give_fresh_outputs(rmsnorm_checks):
    """Two different problems through the same compiled kernel: no cached result can pass both."""
    a = rmsnorm_checks.run_and_check(tk.fused_add_rmsnorm_triton, 2, 512, seed=1, label="triton")
    b = rmsnorm_checks.run_and_check(tk.fused_add_rmsnorm_triton, 2, 512, seed=2, label="triton")
    assert not torch.equal(a.x, b.x)


def test_check_rejects_a_kernel_that_computes_one_row(rmsnorm_checks):
    def first_row_only(x, residual, weight, eps):
        tk.fused_add_rmsnorm_triton(x[:1], residual[:1], weight, eps)

    with pytest.raises(AssertionError, match="fail"):
        rmsnorm_checks.run_and_check(first_row_only, 3, 256, seed=3)


def test_zero_rows_is_a_no_op():
    x = torch.empty(0, 1024, dtype=torch.bfloat16)
    assert tk.fused_add_rmsnorm_triton(x, x.clone(), torch.ones(1024, dtype=torch.bfloat16), 1e-6) is None


@pytest.mark.parametrize("hidden", [64, 896, 1000, 1024, 2048, 3584, 4096, 5120, 8192, 16384, 20480, 65536])
@pytest.mark.parametrize("rows", [1, 8, 32, 128, 512, 2048, 8192, 32768])
def test_config_heuristic_is_consistent(rows, hidden):
    cfg = tk.triton_config(rows, hidden)
    bn, rpp, nw = cfg["block_n"], cfg["rows_per_program"], cfg["num_warps"]
    for v in (bn, rpp, nw):
        assert v > 0 and v & (v - 1) == 0
    assert 1 <= nw <= 16
    assert cfg["grid"] * rpp >= rows > (cfg["grid"] - 1) * rpp
    if cfg["variant"] == "fused":
        assert hidden <= bn < 2 * hidden and bn <= tk.MAX_FUSED_BLOCK_N
        # every thread owns at least one 16-byte vector (8 bf16) of its tile
        assert rpp * bn >= 32 * nw * 8 or nw == 1
        assert cfg["masked"] == (bn != hidden or rows % rpp != 0)
    else:
        assert hidden > tk.MAX_FUSED_BLOCK_N and rpp == 1 and cfg["masked"]
    if rows <= 512:  # decode-sized batches: one row per program spreads rows over the SMs
        assert rpp == 1


def test_config_at_qwen3_hidden():
    assert tk.triton_config(1, 1024) | {} == {
        "variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 4, "round_by_bits": False,
        "pdl": False, "evict": False, "hidden": 1024, "grid": 1, "masked": False, "int64_offsets": False,
    }
    assert tk.triton_config(32768, 1024)["int64_offsets"] is False
    assert tk.triton_config(2**21, 1024)["int64_offsets"] is True


@pytest.mark.parametrize("bad,match", [
    ({"variant": "fused", "block_n": 512, "num_warps": 4}, "block_n >= hidden"),
    ({"variant": "fused", "block_n": 1024, "num_warps": 3}, "power of two"),
    ({"variant": "warp", "block_n": 1024, "num_warps": 4}, "variant"),
    ({"variant": "fused", "block_n": 1024, "num_warps": 4, "stages": 2}, "unknown Triton config keys"),
    ({"variant": "chunked", "block_n": 256, "rows_per_program": 2, "num_warps": 4}, "one row per program"),
])
def test_bad_config_is_refused(bad, match):
    x = torch.randn(2, 1024).bfloat16()
    with pytest.raises(InputError, match=match):
        tk.fused_add_rmsnorm_triton(x, x.clone(), torch.ones(1024, dtype=torch.bfloat16), 1e-6, config=bad)


def test_bad_inputs_are_refused():
    w = torch.ones(64, dtype=torch.bfloat16)
    x = torch.randn(4, 64).bfloat16()
    with pytest.raises(InputError, match="same shape"):
        tk.fused_add_rmsnorm_triton(x, torch.randn(4, 32).bfloat16(), w, 1e-6)
    with pytest.raises(InputError, match="weight must have shape"):
        tk.fused_add_rmsnorm_triton(x, x.clone(), torch.ones(32, dtype=torch.bfloat16), 1e-6)
    with pytest.raises(InputError, match="share one dtype"):
        tk.fused_add_rmsnorm_triton(x, x.clone().half(), w, 1e-6)
    with pytest.raises(InputError, match="dtype must be one of"):
        tk.fused_add_rmsnorm_triton(x.float(), x.float(), w.float(), 1e-6)
    with pytest.raises(InputError, match="contiguous"):
        xt = torch.randn(64, 4).bfloat16().t()
        tk.fused_add_rmsnorm_triton(xt, xt.clone(), w, 1e-6)
    with pytest.raises(InputError, match="eps must be positive"):
        tk.fused_add_rmsnorm_triton(x, x.clone(), w, 0.0)


def _ptx_or_skip(*args, **kwargs):
    from infercrane.errors import UnavailableError

    try:
        return tk.compile_ptx(*args, **kwargs)
    except UnavailableError as e:
        pytest.skip(str(e))


V4 = re.compile(r"(ld|st)\.global\.v4\.b32")


@pytest.mark.parametrize("rows", [1, 32768])
@pytest.mark.parametrize("hidden", [896, 1000, 1024, 4096, 5120, 16384])
def test_compiled_for_sm90_with_16_byte_accesses(hidden, rows):
    """The real compiler (not the interpreter) for sm_90, no GPU needed: vectorized, no local-memory spills."""
    ptx = _ptx_or_skip(hidden, rows, arch=90)
    ops = {m.group(1) for m in V4.finditer(ptx)}
    assert ops == {"ld", "st"}, "expected 16-byte global loads and stores"
    assert ".local" not in ptx


def test_defaults_table_drives_the_heuristic(monkeypatch):
    """Switching a regime is one edit of TRITON_DEFAULTS."""
    rows = [dict(d) for d in tk.TRITON_DEFAULTS]
    rows[0] |= {"pdl": True, "elems_per_thread": 4}
    monkeypatch.setattr(tk, "TRITON_DEFAULTS", tuple(rows))
    cfg = tk.triton_config(8, 1024)
    assert cfg["pdl"] is True and cfg["num_warps"] == 8 and cfg["rows_per_program"] == 1
    assert tk.triton_config(32768, 1024)["pdl"] is False


@pytest.mark.parametrize("config,rows", [
    ({"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 4, "pdl": True}, 1),
    ({"variant": "fused", "block_n": 1024, "rows_per_program": 2, "num_warps": 4, "evict": True}, 32768),
])
def test_compiled_pdl_and_evict_variants(config, rows):
    ptx = _ptx_or_skip(1024, rows, arch=90, config=config)
    assert re.search(r"ld\.global(\.L\d::\w+)*\.v4\.b32", ptx) and re.search(r"st\.global\.v4\.b32", ptx)
    if config.get("pdl"):
        # the wait precedes every global load: the previous grid's writes are visible to all of them
        assert ptx.index("griddepcontrol.wait") < ptx.index("ld.global")
        assert "griddepcontrol.launch_dependents" in ptx
    else:
        assert "griddepcontrol" not in ptx
    if config.get("evict"):
        assert "L2::evict_first" in ptx and "L2::evict_last" in ptx


def test_weight_load_is_issued_first():
    """All three loads precede any arithmetic; the weight's comes first in the PTX."""
    ptx = _ptx_or_skip(1024, 1, arch=90)
    loads = [i for i, line in enumerate(ptx.splitlines()) if "ld.global" in line]
    first_math = min(i for i, line in enumerate(ptx.splitlines()) if re.search(r"\b(add|mul|fma)\.(rn\.)?f32", line))
    assert len(loads) == 3 and max(loads) < first_math


def test_pdl_and_evict_refused_for_chunked():
    x = torch.randn(2, 1024).bfloat16()
    with pytest.raises(InputError, match="fused Triton variant only"):
        tk.fused_add_rmsnorm_triton(x, x.clone(), torch.ones(1024, dtype=torch.bfloat16), 1e-6,
                                    config={"variant": "chunked", "block_n": 256, "num_warps": 2, "pdl": True})


def test_compiled_odd_hidden_and_chunked_variants():
    ptx = _ptx_or_skip(1001, 4)  # rows start 2 bytes apart from 16-byte alignment: scalar accesses
    assert not V4.search(ptx) and re.search(r"ld\.global\.b16", ptx)
    ptx = _ptx_or_skip(20480, 1)  # wider than MAX_FUSED_BLOCK_N: the chunked two-pass kernel
    assert tk.triton_config(1, 20480)["variant"] == "chunked"
    assert {m.group(1) for m in V4.finditer(ptx)} == {"ld", "st"}


def test_available_under_interpreter():
    assert tk.available() == (True, "")


def test_unavailable_without_device_says_why(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the kernel is available without the interpreter")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    ok, reason = tk.available()
    assert not ok and "CUDA" in reason and "TRITON_INTERPRET" in reason

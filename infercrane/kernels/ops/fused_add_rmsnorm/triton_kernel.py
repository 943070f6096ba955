"""InferCrane's Triton fused residual-add + RMSNorm (in place, vLLM's contract).

``fused_add_rmsnorm_triton(x, residual, weight, eps) -> None``: afterwards ``residual`` holds
``x + residual`` (rounded once to the storage dtype) and ``x`` holds ``rmsnorm(residual) * weight``.
The kernel launches on torch's current stream (Triton's default), so it can be captured in a CUDA graph.

Method: each program keeps whole rows in registers, so x and residual are read from global memory
once and out and the new residual written once (the byte floor of ``spec.FusedAddRMSNormSpec``).
``triton_config(rows, hidden)`` picks the tile: ``block_n`` = next power of two >= hidden (masked
past ``hidden``; 16-byte loads and stores whenever hidden is a multiple of 8), one row per program for
decode-sized batches and several rows per program beyond ``MANY_ROWS`` rows, and ``num_warps`` such
that each thread owns at least one 16-byte vector per row. Rows wider than ``MAX_FUSED_BLOCK_N`` use
a two-pass chunked kernel instead (one extra read of the stored sum).

Triton is imported only when a kernel is launched; ``available()`` reports why it cannot run.
Under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (Triton's interpreter), which is how
CI checks them against the oracle.
"""
from __future__ import annotations

import functools
import os
from typing import Any

from infercrane.errors import InputError

# Widest row kept entirely in registers (elements). Beyond it the chunked two-pass kernel runs.
MAX_FUSED_BLOCK_N = 16384
# Chunk width of the two-pass kernel.
CHUNK_BLOCK_N = 4096
# Widest tile (rows_per_program * block_n) the heuristic builds for many rows.
_MAX_TILE = 4096
# Beyond this many rows a launch is bandwidth-bound: fewer, fatter programs (several rows each).
MANY_ROWS = 2048
_CONFIG_KEYS = ("variant", "block_n", "rows_per_program", "num_warps", "round_by_bits", "pdl", "evict")

# The defaults ``triton_config`` picks, one row per regime: the first whose ``max_rows`` is >= rows (None: any).
#   tile_elems: rows_per_program * block_n the program aims for (1 row when a row alone is that wide or wider)
#   elems_per_thread: elements each thread owns (8 = one 16-byte vector; 16 = two) -> num_warps
#   pdl: programmatic dependent launch (see _triton_source); evict: L2 eviction hints (see _triton_source)
# To switch a regime to another measured variant, edit its row (e.g. pdl=True where it wins).
TRITON_DEFAULTS: tuple[dict[str, Any], ...] = (
    {"max_rows": MANY_ROWS, "tile_elems": 1, "elems_per_thread": 8, "pdl": False, "evict": False},
    {"max_rows": None, "tile_elems": _MAX_TILE // 2, "elems_per_thread": 16, "pdl": False, "evict": False},
)
SUPPORTED_DTYPES = ("bfloat16", "float16")


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def available() -> tuple[bool, str]:
    """(True, "") when Triton imports and there is a CUDA device or ``TRITON_INTERPRET=1``."""
    try:
        import triton  # noqa: F401
    except Exception as e:  # ImportError, or a broken install raising something else
        return False, f"triton is not importable: {type(e).__name__}: {e}"
    if _interpret():
        return True, ""
    try:
        import torch
    except Exception as e:
        return False, f"torch is not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return False, "no CUDA device visible to torch (set TRITON_INTERPRET=1 to run on CPU tensors)"
    return True, ""


def describe() -> dict[str, Any]:
    """What a result records about this implementation: Triton's version, the source's hash, the mode."""
    import hashlib
    from pathlib import Path

    src = Path(__file__).with_name("_triton_source.py")
    info: dict[str, Any] = {
        "source": src.name,
        "source_sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
        "interpret": _interpret(),
        "max_fused_block_n": MAX_FUSED_BLOCK_N,
        "launch": "Triton's default: torch.cuda.current_stream()",
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as e:
        info["triton"] = f"unavailable: {type(e).__name__}"
    return info


def _next_pow2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length()


def triton_config(rows: int, hidden: int) -> dict[str, Any]:
    """Launch configuration the heuristic picks for ``rows`` x ``hidden`` (16-bit dtypes).

    * ``block_n``: next power of two >= ``hidden`` (``variant="fused"``), or ``CHUNK_BLOCK_N`` for
      rows wider than ``MAX_FUSED_BLOCK_N`` (``variant="chunked"``).
    * ``rows_per_program``, ``num_warps``, ``pdl``, ``evict``: from the ``TRITON_DEFAULTS`` row for
      ``rows``: 1 row per program up to ``MANY_ROWS`` rows (every row its own program spreads a decode
      batch over the SMs); beyond, enough rows that a tile holds about ``_MAX_TILE/2`` elements (fewer,
      fatter programs). ``num_warps`` = tile elements / (32 threads * elements per thread): 8 elements
      (one 16-byte vector) up to ``MANY_ROWS`` rows, 16 beyond; clamped to [1, 16].

    The returned dict also records ``grid`` (programs launched), ``masked`` and ``int64_offsets``.
    """
    rows = int(rows)
    hidden = int(hidden)
    if rows < 0 or hidden <= 0:
        raise InputError(f"rows must be >= 0 and hidden > 0, got rows={rows}, hidden={hidden}")
    block_n = _next_pow2(hidden)
    if block_n > MAX_FUSED_BLOCK_N:
        return _finish({"variant": "chunked", "block_n": CHUNK_BLOCK_N, "rows_per_program": 1, "num_warps": 8},
                       rows, hidden)
    regime = next(d for d in TRITON_DEFAULTS if d["max_rows"] is None or rows <= d["max_rows"])
    rows_per_program = max(1, min(8, int(regime["tile_elems"]) // block_n))
    tile = rows_per_program * block_n
    num_warps = max(1, min(16, tile // (32 * int(regime["elems_per_thread"]))))
    return _finish({"variant": "fused", "block_n": block_n, "rows_per_program": rows_per_program,
                    "num_warps": num_warps, "pdl": bool(regime["pdl"]), "evict": bool(regime["evict"])},
                   rows, hidden)


def _finish(cfg: dict[str, Any], rows: int, hidden: int) -> dict[str, Any]:
    """Validate a (possibly user-given) config and add the derived launch fields."""
    unknown = sorted(set(cfg) - set(_CONFIG_KEYS) - {"grid", "masked", "int64_offsets", "hidden"})
    if unknown:
        raise InputError(f"unknown Triton config keys {unknown}; known: {list(_CONFIG_KEYS)}")
    variant = cfg.get("variant", "fused")
    if variant not in ("fused", "chunked"):
        raise InputError(f"Triton config variant must be 'fused' or 'chunked', got {variant!r}")
    block_n = int(cfg["block_n"])
    rpp = int(cfg.get("rows_per_program", 1))
    num_warps = int(cfg["num_warps"])
    for name, v in (("block_n", block_n), ("rows_per_program", rpp), ("num_warps", num_warps)):
        if v <= 0 or v & (v - 1):
            raise InputError(f"Triton config {name} must be a positive power of two, got {v}")
    if num_warps > 32:
        raise InputError(f"Triton config num_warps must be <= 32, got {num_warps}")
    if variant == "fused" and block_n < hidden:
        raise InputError(f"fused Triton config needs block_n >= hidden ({hidden}), got {block_n}")
    if variant == "chunked" and rpp != 1:
        raise InputError("chunked Triton config handles one row per program (rows_per_program=1)")
    if variant == "chunked" and (cfg.get("pdl") or cfg.get("evict")):
        raise InputError("pdl and evict apply to the fused Triton variant only")
    out = {"variant": variant, "block_n": block_n, "rows_per_program": rpp, "num_warps": num_warps,
           "round_by_bits": bool(cfg.get("round_by_bits", False)), "pdl": bool(cfg.get("pdl", False)),
           "evict": bool(cfg.get("evict", False))}
    out["hidden"] = hidden
    out["grid"] = -(-rows // rpp)
    out["masked"] = bool(variant == "chunked" or block_n != hidden or rows % rpp != 0)
    out["int64_offsets"] = bool(rows * hidden >= 2**31)
    return out


@functools.lru_cache(maxsize=4096)
def _cached_config(rows: int, hidden: int) -> tuple[tuple[str, Any], ...]:
    return tuple(triton_config(rows, hidden).items())


@functools.lru_cache(maxsize=2)
def _kernels(interpret: bool) -> tuple[Any, Any]:
    """JIT-wrap the kernel bodies once per mode (compiled, or interpreted on CPU under TRITON_INTERPRET=1)."""
    import triton

    from infercrane.kernels.ops.fused_add_rmsnorm import _triton_source as src

    # triton.jit reads TRITON_INTERPRET when it wraps: the cache key ``interpret`` mirrors that.
    return (
        triton.jit(src.fused_add_rmsnorm_rows, do_not_specialize=["n_rows"]),
        triton.jit(src.fused_add_rmsnorm_chunked, do_not_specialize=["n_rows"]),
    )


def _bf16() -> Any:
    import torch

    return torch.bfloat16


def compile_ptx(hidden: int, rows: int = 1, arch: int = 90, dtype: str = "bfloat16",
                config: dict[str, Any] | None = None) -> str:
    """PTX of the Triton kernel for ``rows`` x ``hidden`` on ``sm_<arch>``, compiled without a GPU.

    Runs Triton's full compile (its bundled ``ptxas`` included) for a CUDA target, with the specializations a
    launch on 16-byte aligned tensors gets, and the configuration ``triton_config`` picks (or ``config``).
    What CPU CI uses to check the compiled kernel: 16-byte global accesses, both variants compile. Raises
    UnavailableError when this Triton cannot compile for that target without a device.
    """
    from infercrane.errors import UnavailableError

    if dtype not in SUPPORTED_DTYPES:
        raise InputError(f"dtype must be one of {SUPPORTED_DTYPES}, got {dtype}")
    cfg = dict(_cached_config(rows, hidden)) if config is None else _finish(dict(config), rows, hidden)
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.runtime.jit import JITFunction

        from infercrane.kernels.ops.fused_add_rmsnorm import _triton_source as src

        ty = {"bfloat16": "*bf16", "float16": "*fp16"}[dtype]
        signature = {"x_ptr": ty, "res_ptr": ty, "w_ptr": ty, "n_rows": "i32", "eps": "fp32",
                     "HIDDEN": "constexpr", "BLOCK_N": "constexpr", "INT64": "constexpr", "ROUND_BY_BITS": "constexpr"}
        constexprs: dict[str, Any] = {"HIDDEN": hidden, "BLOCK_N": cfg["block_n"], "INT64": cfg["int64_offsets"],
                                      "ROUND_BY_BITS": bool(cfg["round_by_bits"] and dtype == "bfloat16")}
        if cfg["variant"] == "fused":
            fn = JITFunction(src.fused_add_rmsnorm_rows, do_not_specialize=["n_rows"])
            signature |= {"ROWS": "constexpr", "MASKED": "constexpr", "PDL": "constexpr", "EVICT": "constexpr"}
            constexprs |= {"ROWS": cfg["rows_per_program"], "MASKED": cfg["masked"], "PDL": cfg["pdl"],
                           "EVICT": cfg["evict"]}
        else:
            fn = JITFunction(src.fused_add_rmsnorm_chunked, do_not_specialize=["n_rows"])
        signature = {name: signature[name] for name in fn.arg_names}
        aligned = [["tt.divisibility", 16]]
        attrs = {(0,): aligned, (1,): aligned, (2,): aligned}
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", arch, 32),
                                  # enable_fp_fusion: what a launch gets by default, said explicitly
                                  options={"num_warps": cfg["num_warps"], "enable_fp_fusion": True})
        return compiled.asm["ptx"]
    except (ImportError, AttributeError, TypeError, KeyError) as e:
        raise UnavailableError(f"Triton {getattr(triton, '__version__', '?')} cannot compile for sm_{arch} here: "
                               f"{type(e).__name__}: {e}") from e


def check_inputs(x: Any, residual: Any, weight: Any) -> tuple[int, int]:
    """Validate the in-place contract; return ``(rows, hidden)``. Raises InputError naming the problem."""
    if tuple(x.shape) != tuple(residual.shape):
        raise InputError(f"x and residual must have the same shape, got {tuple(x.shape)} and {tuple(residual.shape)}")
    if x.dim() < 1:
        raise InputError("x must have at least one dimension [..., hidden]")
    hidden = int(x.shape[-1])
    if weight.dim() != 1 or int(weight.shape[0]) != hidden:
        raise InputError(f"weight must have shape [{hidden}], got {tuple(weight.shape)}")
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype not in SUPPORTED_DTYPES:
        raise InputError(f"dtype must be one of {SUPPORTED_DTYPES}, got {dtype}")
    if residual.dtype != x.dtype or weight.dtype != x.dtype:
        raise InputError(
            f"x, residual and weight must share one dtype, got {x.dtype}, {residual.dtype}, {weight.dtype}"
        )
    if not (x.device == residual.device == weight.device):
        raise InputError(f"x, residual and weight must be on one device, got {x.device}, {residual.device}, "
                         f"{weight.device}")
    for name, t in (("x", x), ("residual", residual), ("weight", weight)):
        if not t.is_contiguous():
            raise InputError(f"{name} must be contiguous (call .contiguous() first)")
    if hidden == 0:
        raise InputError("hidden size must be positive")
    return int(x.numel()) // hidden, hidden


def fused_add_rmsnorm_triton(
    x: Any, residual: Any, weight: Any, eps: float, *, config: dict[str, Any] | None = None
) -> None:
    """In place: ``residual <- x + residual``; ``x <- rmsnorm(residual) * weight``. Returns None.

    ``x``, ``residual``: contiguous ``[..., hidden]`` bf16/fp16 tensors; ``weight``: ``[hidden]`` of
    the same dtype. ``config`` overrides the heuristic (keys of ``triton_config``'s result: ``variant``,
    ``block_n``, ``rows_per_program``, ``num_warps``, ``round_by_bits``, ``pdl``, ``evict``); used to tune
    and record variants. ``pdl`` launches with programmatic dependent launch (Triton's ``launch_pdl``; Hopper
    and newer). ``round_by_bits`` rounds bf16 with integer RNE instead of ``cvt.rn`` (same result; the
    interpreter always uses it).
    """
    rows, hidden = check_inputs(x, residual, weight)
    if not eps > 0:
        raise InputError(f"eps must be positive, got {eps}")
    if rows == 0:
        return
    interpret = _interpret()
    if x.device.type != "cuda" and not interpret:
        raise InputError(f"the Triton kernel needs CUDA tensors (got {x.device}); set TRITON_INTERPRET=1 for CPU")
    cfg = dict(_cached_config(rows, hidden)) if config is None else _finish(dict(config), rows, hidden)
    rows_kernel, chunked_kernel = _kernels(interpret)
    grid = (cfg["grid"],)
    # The interpreter truncates on a float32 -> bf16 cast; integer RNE gives what cvt.rn gives on a GPU.
    round_by_bits = x.dtype == _bf16() and (interpret or cfg["round_by_bits"])
    if cfg["variant"] == "fused":
        # The interpreter has no grids to overlap: PDL and cache hints are compiled-mode features.
        pdl = bool(cfg["pdl"]) and not interpret
        extra = {"launch_pdl": True} if pdl else {}
        rows_kernel[grid](
            x, residual, weight, rows, float(eps),
            HIDDEN=hidden, BLOCK_N=cfg["block_n"], ROWS=cfg["rows_per_program"], MASKED=cfg["masked"],
            INT64=cfg["int64_offsets"], ROUND_BY_BITS=round_by_bits, PDL=pdl,
            EVICT=bool(cfg["evict"]) and not interpret, num_warps=cfg["num_warps"], **extra,
        )
    else:
        chunked_kernel[grid](
            x, residual, weight, rows, float(eps),
            HIDDEN=hidden, BLOCK_N=cfg["block_n"], INT64=cfg["int64_offsets"], ROUND_BY_BITS=round_by_bits,
            num_warps=cfg["num_warps"],
        )

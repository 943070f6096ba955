"""InferCrane's Triton RMSNorm (in place, vLLM's ``rms_norm(out, input, weight, epsilon)`` contract).

``rms_norm_triton(out, x, weight, eps) -> None``: afterwards ``out`` holds
``x * rsqrt(mean(x^2) + eps) * weight`` (float32 inside, rounded once to the storage dtype); ``x`` and
``weight`` are untouched. The kernel launches on torch's current stream (Triton's default), so it can be
captured in a CUDA graph.

Method: each program keeps whole rows in registers, so x is read from global memory once and ``out``
written once (the byte floor of ``spec.RMSNormSpec``). ``triton_config(rows, hidden)`` picks the tile:
``block_n`` = next power of two >= hidden (masked past ``hidden``; 16-byte accesses whenever a row is a
multiple of 16 bytes), ``rows_per_program`` such that a program's tile holds at least one warp of 16-byte
vectors (several rows per program for narrow rows such as the q/k norms at head_dim 128, and more rows
per program beyond ``MANY_ROWS`` rows), and ``num_warps`` such that each thread owns one 16-byte vector
per row-tile up to ``MANY_ROWS`` rows, two beyond. Rows wider than ``MAX_FUSED_BLOCK_N`` use a two-pass
chunked kernel instead (x read twice).

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
# Most rows one program handles.
MAX_ROWS_PER_PROGRAM = 16
# Beyond this many rows a launch is bandwidth-bound: fewer, fatter programs.
MANY_ROWS = 2048
_CONFIG_KEYS = ("variant", "block_n", "rows_per_program", "num_warps", "round_by_bits")

# The defaults ``triton_config`` picks, one row per regime: the first whose ``max_rows`` is >= rows (None: any).
#   tile_elems: rows_per_program * block_n the program aims for (one row when a row alone is that wide or wider)
#   elems_per_thread: 16-bit elements each thread owns (8 = one 16-byte vector; 16 = two) -> num_warps
# At hidden 1024: 1 row, 4 warps up to MANY_ROWS rows (fused add+RMSNorm's measured best shape), 2 rows, 4 warps
# beyond. At head_dim 128: 2 rows, 1 warp (each thread one 16-byte vector); 16 rows, 4 warps beyond.
# To switch a regime to another measured variant, edit its row.
TRITON_DEFAULTS: tuple[dict[str, Any], ...] = (
    {"max_rows": MANY_ROWS, "tile_elems": 256, "elems_per_thread": 8},
    {"max_rows": None, "tile_elems": 2048, "elems_per_thread": 16},
)
SUPPORTED_DTYPES = ("bfloat16", "float16", "float32")


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
    """Launch configuration the heuristic picks for ``rows`` x ``hidden``.

    * ``block_n``: next power of two >= ``hidden`` (``variant="fused"``), or ``CHUNK_BLOCK_N`` for
      rows wider than ``MAX_FUSED_BLOCK_N`` (``variant="chunked"``).
    * ``rows_per_program``: ``tile_elems // block_n`` of the ``TRITON_DEFAULTS`` row for ``rows``, in
      [1, ``MAX_ROWS_PER_PROGRAM``]: one row per program at hidden >= 256 for decode-sized batches (every
      row its own program spreads a batch over the SMs), two at head_dim 128 so a warp's threads each hold
      a 16-byte vector; beyond ``MANY_ROWS`` rows, tiles of about 2048 elements (fewer, fatter programs).
    * ``num_warps`` = tile elements / (32 threads * elements per thread), clamped to [1, 16].

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
    rows_per_program = max(1, min(MAX_ROWS_PER_PROGRAM, int(regime["tile_elems"]) // block_n))
    tile = rows_per_program * block_n
    num_warps = max(1, min(16, tile // (32 * int(regime["elems_per_thread"]))))
    return _finish({"variant": "fused", "block_n": block_n, "rows_per_program": rows_per_program,
                    "num_warps": num_warps}, rows, hidden)


def _finish(cfg: dict[str, Any], rows: int, hidden: int) -> dict[str, Any]:
    """Validate a (possibly user-given) config and add the derived launch fields."""
    unknown = sorted(set(cfg) - set(_CONFIG_KEYS) - {"grid", "masked", "int64_offsets", "hidden"})
    if unknown:
        raise InputError(f"unknown Triton config keys {unknown}; known: {list(_CONFIG_KEYS)}")
    variant = cfg.get("variant", "fused")
    if variant not in ("fused", "chunked"):
        raise InputError(f"Triton config variant must be 'fused' or 'chunked', got {variant!r}")
    for name in ("block_n", "num_warps"):
        if name not in cfg:
            raise InputError(f"Triton config needs {name!r}; known keys: {list(_CONFIG_KEYS)}")
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
    out: dict[str, Any] = {"variant": variant, "block_n": block_n, "rows_per_program": rpp, "num_warps": num_warps,
                           "round_by_bits": bool(cfg.get("round_by_bits", False))}
    out["hidden"] = hidden
    out["grid"] = -(-rows // rpp)
    out["masked"] = bool(variant == "chunked" or block_n != hidden or rows % rpp != 0)
    out["int64_offsets"] = bool(out["grid"] * rpp * hidden >= 2**31)  # offsets of the last tile's masked rows too
    return out


@functools.lru_cache(maxsize=4096)
def _cached_config(rows: int, hidden: int) -> tuple[tuple[str, Any], ...]:
    return tuple(triton_config(rows, hidden).items())


@functools.lru_cache(maxsize=2)
def _kernels(interpret: bool) -> tuple[Any, Any]:
    """JIT-wrap the kernel bodies once per mode (compiled, or interpreted on CPU under TRITON_INTERPRET=1)."""
    import triton

    from infercrane.kernels.ops.rms_norm import _triton_source as src

    # triton.jit reads TRITON_INTERPRET when it wraps: the cache key ``interpret`` mirrors that.
    return (
        triton.jit(src.rms_norm_rows, do_not_specialize=["n_rows"]),
        triton.jit(src.rms_norm_chunked, do_not_specialize=["n_rows"]),
    )


def compile_ptx(hidden: int, rows: int = 1, arch: int = 90, dtype: str = "bfloat16",
                config: dict[str, Any] | None = None) -> str:
    """PTX of the Triton kernel for ``rows`` x ``hidden`` on ``sm_<arch>``, compiled without a GPU.

    Runs Triton's full compile (its bundled ``ptxas`` included) for a CUDA target, with the specializations a
    launch on 16-byte aligned tensors gets, and the configuration ``triton_config`` picks (or ``config``).
    What CPU CI uses to check the compiled kernel (16-byte global accesses, both variants compile). Raises
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

        from infercrane.kernels.ops.rms_norm import _triton_source as src

        ty = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}[dtype]
        signature = {"out_ptr": ty, "x_ptr": ty, "w_ptr": ty, "n_rows": "i32", "eps": "fp32",
                     "HIDDEN": "constexpr", "BLOCK_N": "constexpr", "INT64": "constexpr", "ROUND_BY_BITS": "constexpr"}
        constexprs: dict[str, Any] = {"HIDDEN": hidden, "BLOCK_N": cfg["block_n"], "INT64": cfg["int64_offsets"],
                                      "ROUND_BY_BITS": bool(cfg["round_by_bits"] and dtype == "bfloat16")}
        if cfg["variant"] == "fused":
            fn = JITFunction(src.rms_norm_rows, do_not_specialize=["n_rows"])
            signature |= {"ROWS": "constexpr", "MASKED": "constexpr"}
            constexprs |= {"ROWS": cfg["rows_per_program"], "MASKED": cfg["masked"]}
        else:
            fn = JITFunction(src.rms_norm_chunked, do_not_specialize=["n_rows"])
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


def check_inputs(out: Any, x: Any, weight: Any, supported: tuple[str, ...] = SUPPORTED_DTYPES) -> tuple[int, int]:
    """Validate the in-place contract ``(out, x, weight)``; return ``(rows, hidden)``. Raises InputError naming the
    problem."""
    if x.dim() < 1:
        raise InputError("x must have at least one dimension [..., hidden]")
    if tuple(out.shape) != tuple(x.shape):
        raise InputError(f"out and x must have the same shape, got {tuple(out.shape)} and {tuple(x.shape)}")
    hidden = int(x.shape[-1])
    if hidden == 0:
        raise InputError("hidden size must be positive")
    if weight.dim() != 1 or int(weight.shape[0]) != hidden:
        raise InputError(f"weight must have shape [{hidden}], got {tuple(weight.shape)}")
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype not in supported:
        raise InputError(f"dtype must be one of {supported}, got {dtype}")
    if out.dtype != x.dtype or weight.dtype != x.dtype:
        raise InputError(f"out, x and weight must share one dtype, got {out.dtype}, {x.dtype}, {weight.dtype}")
    if not (out.device == x.device == weight.device):
        raise InputError(f"out, x and weight must be on one device, got {out.device}, {x.device}, {weight.device}")
    for name, t in (("out", out), ("x", x), ("weight", weight)):
        if not t.is_contiguous():
            raise InputError(f"{name} must be contiguous (call .contiguous() first)")
    return int(x.numel()) // hidden, hidden


def rms_norm_triton(out: Any, x: Any, weight: Any, eps: float, *, config: dict[str, Any] | None = None) -> None:
    """In place: ``out <- x * rsqrt(mean(x^2) + eps) * weight``. Returns None; ``x`` and ``weight`` are untouched.

    ``out``, ``x``: contiguous ``[..., hidden]`` bf16/fp16/fp32 tensors of one shape; ``weight``: ``[hidden]``
    of the same dtype. ``config`` overrides the heuristic (keys of ``triton_config``'s result: ``variant``,
    ``block_n``, ``rows_per_program``, ``num_warps``, ``round_by_bits``); used to tune and record variants.
    ``round_by_bits`` rounds bf16 with integer RNE instead of ``cvt.rn`` (same result; the interpreter always
    uses it).
    """
    import torch

    rows, hidden = check_inputs(out, x, weight)
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
    round_by_bits = x.dtype == torch.bfloat16 and (interpret or cfg["round_by_bits"])
    if cfg["variant"] == "fused":
        rows_kernel[grid](
            out, x, weight, rows, float(eps),
            HIDDEN=hidden, BLOCK_N=cfg["block_n"], ROWS=cfg["rows_per_program"], MASKED=cfg["masked"],
            INT64=cfg["int64_offsets"], ROUND_BY_BITS=round_by_bits, num_warps=cfg["num_warps"],
        )
    else:
        chunked_kernel[grid](
            out, x, weight, rows, float(eps),
            HIDDEN=hidden, BLOCK_N=cfg["block_n"], INT64=cfg["int64_offsets"], ROUND_BY_BITS=round_by_bits,
            num_warps=cfg["num_warps"],
        )

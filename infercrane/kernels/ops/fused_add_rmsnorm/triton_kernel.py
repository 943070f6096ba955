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
a two-pass chunked kernel instead (one extra read of the stored sum). The fused kernel can also wait for the
previous grid with programmatic dependent launch (``pdl``) and hint L2 eviction (``evict``). What the row-wise
Triton kernels share (availability, validation, the compile without a GPU, the launch, the interpreter on CPU):
``infercrane.kernels.ops.triton_rowwise``.
"""
from __future__ import annotations

from typing import Any

from infercrane.errors import InputError
from infercrane.kernels.ops import triton_rowwise
from infercrane.kernels.ops.triton_rowwise import CHUNK_BLOCK_N, MANY_ROWS, MAX_FUSED_BLOCK_N, available

__all__ = ["CHUNK_BLOCK_N", "KERNELS", "MANY_ROWS", "MAX_FUSED_BLOCK_N", "MAX_ROWS_PER_PROGRAM", "SUPPORTED_DTYPES",
           "TRITON_DEFAULTS", "available", "check_inputs", "compile_ptx", "describe", "fused_add_rmsnorm_triton",
           "triton_config"]

# Widest tile (rows_per_program * block_n) the heuristic builds for many rows.
_MAX_TILE = 4096
# Most rows one program handles.
MAX_ROWS_PER_PROGRAM = 8
_FLAGS = ("pdl", "evict")
_CONFIG_KEYS = ("variant", "block_n", "rows_per_program", "num_warps", "round_by_bits", *_FLAGS)

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


def triton_config(rows: int, hidden: int) -> dict[str, Any]:
    """Launch configuration the heuristic picks for ``rows`` x ``hidden`` (16-bit dtypes), ``triton_rowwise.pick``
    from ``TRITON_DEFAULTS``: 1 row per program up to ``MANY_ROWS`` rows (every row its own program spreads a
    decode batch over the SMs); beyond, enough rows that a tile holds about ``_MAX_TILE/2`` elements (fewer,
    fatter programs), 8 elements per thread (one 16-byte vector) up to ``MANY_ROWS`` rows, 16 beyond; ``pdl`` and
    ``evict`` from the same row.

    The returned dict also records ``grid`` (programs launched), ``masked`` and ``int64_offsets``.
    """
    cfg, regime = triton_rowwise.pick(rows, hidden, TRITON_DEFAULTS, max_rows_per_program=MAX_ROWS_PER_PROGRAM)
    if regime is not None:
        cfg |= {flag: bool(regime[flag]) for flag in _FLAGS}
    return _finish(cfg, int(rows), int(hidden))


def _finish(cfg: dict[str, Any], rows: int, hidden: int) -> dict[str, Any]:
    """Validate a (possibly user-given) config and add the derived launch fields (``triton_rowwise.finish``)."""
    out = triton_rowwise.finish(cfg, rows, hidden, config_keys=_CONFIG_KEYS, flags=_FLAGS)
    if out["variant"] == "chunked" and (out["pdl"] or out["evict"]):
        raise InputError("pdl and evict apply to the fused Triton variant only")
    out["int64_offsets"] = bool(rows * hidden >= 2**31)
    return out


def compile_ptx(hidden: int, rows: int = 1, arch: int = 90, dtype: str = "bfloat16",
                config: dict[str, Any] | None = None) -> str:
    """PTX for ``rows`` x ``hidden`` on ``sm_<arch>`` (``TritonKernels.compile_ptx``, no GPU), ``pdl`` and
    ``evict`` included: what CPU CI uses to check the compiled kernel (16-byte global accesses, every variant
    compiles)."""
    return KERNELS.compile_ptx(hidden, rows, arch, dtype, config)


def check_inputs(x: Any, residual: Any, weight: Any) -> tuple[int, int]:
    """Validate the in-place contract; return ``(rows, hidden)``. Raises InputError naming the problem."""
    return triton_rowwise.check_inputs({"x": x, "residual": residual}, weight, SUPPORTED_DTYPES)


def _rows_arguments(cfg: dict[str, Any], interpreted: bool) -> dict[str, Any]:
    """The fused body's ``PDL`` and ``EVICT`` at a launch, and Triton's ``launch_pdl`` with ``PDL``. The interpreter
    has no grids to overlap: PDL and cache hints are compiled-mode features."""
    pdl = bool(cfg["pdl"]) and not interpreted
    return {"PDL": pdl, "EVICT": bool(cfg["evict"]) and not interpreted, **({"launch_pdl": True} if pdl else {})}


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
    if config is None and KERNELS.launch_cached((x, residual, weight), eps):  # a repeat call: checked at its key's first
        return
    rows, hidden = check_inputs(x, residual, weight)
    KERNELS.launch((x, residual, weight), rows, hidden, eps, config)


KERNELS = triton_rowwise.TritonKernels(
    "infercrane.kernels.ops.fused_add_rmsnorm._triton_source", "fused_add_rmsnorm_rows", "fused_add_rmsnorm_chunked",
    SUPPORTED_DTYPES, heuristic=triton_config, finish=_finish,
    rows_constants=lambda cfg: {"PDL": cfg["pdl"], "EVICT": cfg["evict"]}, rows_arguments=_rows_arguments)
describe = KERNELS.describe

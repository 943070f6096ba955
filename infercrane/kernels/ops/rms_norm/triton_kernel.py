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
chunked kernel instead (x read twice). What the row-wise Triton kernels share (availability, validation, the
compile without a GPU, the launch, the interpreter on CPU): ``infercrane.kernels.ops.triton_rowwise``.
"""
from __future__ import annotations

from typing import Any

from infercrane.kernels.ops import triton_rowwise
from infercrane.kernels.ops.triton_rowwise import CHUNK_BLOCK_N, MANY_ROWS, MAX_FUSED_BLOCK_N, available

__all__ = ["CHUNK_BLOCK_N", "KERNELS", "MANY_ROWS", "MAX_FUSED_BLOCK_N", "MAX_ROWS_PER_PROGRAM", "SUPPORTED_DTYPES",
           "TRITON_DEFAULTS", "available", "check_inputs", "compile_ptx", "describe", "rms_norm_triton",
           "triton_config"]

# Most rows one program handles.
MAX_ROWS_PER_PROGRAM = 16
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


def triton_config(rows: int, hidden: int) -> dict[str, Any]:
    """Launch configuration the heuristic picks for ``rows`` x ``hidden`` (``triton_rowwise.pick`` from
    ``TRITON_DEFAULTS``): one row per program at hidden >= 256 for decode-sized batches (every row its own program
    spreads a batch over the SMs), two at head_dim 128 so a warp's threads each hold a 16-byte vector; beyond
    ``MANY_ROWS`` rows, tiles of about 2048 elements (fewer, fatter programs), at most ``MAX_ROWS_PER_PROGRAM`` rows.

    The returned dict also records ``grid`` (programs launched), ``masked`` and ``int64_offsets``.
    """
    cfg, _ = triton_rowwise.pick(rows, hidden, TRITON_DEFAULTS, max_rows_per_program=MAX_ROWS_PER_PROGRAM)
    return _finish(cfg, int(rows), int(hidden))


def _finish(cfg: dict[str, Any], rows: int, hidden: int) -> dict[str, Any]:
    """Validate a (possibly user-given) config and add the derived launch fields (``triton_rowwise.finish``)."""
    out = triton_rowwise.finish(cfg, rows, hidden, config_keys=_CONFIG_KEYS)
    out["int64_offsets"] = bool(out["grid"] * out["rows_per_program"] * hidden >= 2**31)  # the last tile's masked rows
    return out


def compile_ptx(hidden: int, rows: int = 1, arch: int = 90, dtype: str = "bfloat16",
                config: dict[str, Any] | None = None) -> str:
    """PTX of the Triton kernel for ``rows`` x ``hidden`` on ``sm_<arch>`` at the configuration ``triton_config``
    picks (or ``config``), compiled without a GPU (``TritonKernels.compile_ptx``): what CPU CI uses to check the
    compiled kernel (16-byte global accesses, both variants compile)."""
    return KERNELS.compile_ptx(hidden, rows, arch, dtype, config)


def check_inputs(out: Any, x: Any, weight: Any, supported: tuple[str, ...] = SUPPORTED_DTYPES) -> tuple[int, int]:
    """Validate the in-place contract ``(out, x, weight)``; return ``(rows, hidden)``. Raises InputError naming the
    problem."""
    return triton_rowwise.check_inputs({"out": out, "x": x}, weight, supported)


def rms_norm_triton(out: Any, x: Any, weight: Any, eps: float, *, config: dict[str, Any] | None = None) -> None:
    """In place: ``out <- x * rsqrt(mean(x^2) + eps) * weight``. Returns None; ``x`` and ``weight`` are untouched.

    ``out``, ``x``: contiguous ``[..., hidden]`` bf16/fp16/fp32 tensors of one shape; ``weight``: ``[hidden]``
    of the same dtype. ``config`` overrides the heuristic (keys of ``triton_config``'s result: ``variant``,
    ``block_n``, ``rows_per_program``, ``num_warps``, ``round_by_bits``); used to tune and record variants.
    ``round_by_bits`` rounds bf16 with integer RNE instead of ``cvt.rn`` (same result; the interpreter always
    uses it).
    """
    if config is None and KERNELS.launch_cached((out, x, weight), eps):  # a repeat call: checked at its key's first
        return
    rows, hidden = check_inputs(out, x, weight)
    KERNELS.launch((out, x, weight), rows, hidden, eps, config)


KERNELS = triton_rowwise.TritonKernels("infercrane.kernels.ops.rms_norm._triton_source", "rms_norm_rows",
                                       "rms_norm_chunked", SUPPORTED_DTYPES, heuristic=triton_config, finish=_finish)
describe = KERNELS.describe

"""InferCrane's handwritten CUDA C++ fused residual-add + RMSNorm, compiled at run time by NVRTC.

``fused_add_rmsnorm_cuda(x, residual, weight, eps) -> None`` is in place (vLLM's contract): afterwards
``residual`` holds ``x + residual`` (rounded once to bf16/fp16) and ``x`` holds
``rmsnorm(residual) * weight``. The source is ``fused_add_rmsnorm.cu`` next to this file, with the row-wise norms'
shared device code (``../rowwise.cuh``) put in.

Method (what the row-wise kernels share, the GPU path through CuPy on torch's current stream and the PTX path
through NVRTC without a GPU: ``infercrane.kernels.ops.cuda_rowwise``; NVRTC and CuPy themselves:
``infercrane.kernels.ops.nvrtc``):
* ``cuda_config(rows, hidden)`` chooses the compile-time shape (``-D`` defines) from the ``CUDA_DEFAULTS``
  table: each thread owns one vector of a row (4 warps per row at hidden 1024); a block-level reduction only when
  a row spans several warps; optionally a persistent grid (``persistent_blocks_per_sm``) and the weight read
  through ``__ldg`` (``weight_ldg``), kept to measure them.
* ``compile_ptx(hidden, arch)``: the PTX of that configuration (both entry points), what CPU CI checks.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from infercrane.errors import InputError
from infercrane.kernels.ops import cuda_rowwise, nvrtc
from infercrane.kernels.ops.cuda_rowwise import MAX_VECTORS_PER_THREAD, SMALL_ROWS
# Re-exported: the op-neutral NVRTC/CuPy machinery (``infercrane.kernels.ops.nvrtc``) under this module's names.
from infercrane.kernels.ops.nvrtc import BASE_OPTIONS, CudaCompileError, cuda_include_dirs, nvrtc_compile_ptx
from infercrane.kernels.ops.nvrtc import cupy_device_available as available

__all__ = ["BASE_OPTIONS", "CONFIG_KEYS", "CUDA_DEFAULTS", "CudaCompileError", "ENTRY_POINTS", "KERNEL",
           "MAX_VECTORS_PER_THREAD", "SMALL_ROWS", "SOURCE_PATH", "available", "compile_ptx", "cuda_config",
           "cuda_include_dirs", "describe", "fused_add_rmsnorm_cuda", "nvrtc_compile_ptx", "read_source"]

SOURCE_PATH = Path(__file__).with_name("fused_add_rmsnorm.cu")
ENTRY_POINTS: dict[str, str] = {"bfloat16": "fused_add_rmsnorm_bf16", "float16": "fused_add_rmsnorm_fp16"}
CONFIG_KEYS = (*cuda_rowwise.SHAPE_KEYS, "persistent_blocks_per_sm", "weight_ldg")
# The defaults ``cuda_config`` picks, one row per regime: the first whose ``max_rows`` is >= rows (None: any).
#   vectors_per_thread: 16-byte vectors each thread owns per row -> threads_per_row = next pow2(hidden/8/v)
#   block_threads: threads per block the rows of a block add up to (rows_per_block = block_threads // tpr, >= 1)
#   persistent_blocks_per_sm: None = one row-block per block; k = a grid of k blocks per SM looping over rows
# One vector per thread is the only shape whose SASS issues the weight load with x and residual (with several
# vectors ptxas schedules the weight loads after the first uses of x/residual); at hidden 1024 both regimes
# are then 128 threads per row, one row per block (cuda/t128r1). Edit a row to switch a regime.
CUDA_DEFAULTS: tuple[dict[str, Any], ...] = (
    {"max_rows": SMALL_ROWS, "vectors_per_thread": 1, "block_threads": 32, "persistent_blocks_per_sm": None},
    {"max_rows": None, "vectors_per_thread": 1, "block_threads": 128, "persistent_blocks_per_sm": None},
)
KERNEL = cuda_rowwise.CudaKernel(SOURCE_PATH, ENTRY_POINTS)
_COMPILED = KERNEL.compiled  # the configurations compiled so far (``describe()``)
_align_elems = nvrtc.align_elems
read_source = KERNEL.read_source
describe = KERNEL.describe


def cuda_config(
    rows: int,
    hidden: int,
    *,
    align_elems: int = 8,
    num_sms: int | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Launch and compile configuration for ``rows`` x ``hidden`` of a 16-bit dtype: ``cuda_rowwise.row_shape``
    from ``CUDA_DEFAULTS`` (overrides: ``vec``, ``threads_per_row``, ``rows_per_block``), then this kernel's own:

    * ``persistent_blocks_per_sm`` (override, else the regime's): None launches ``cdiv(rows, rows_per_block)``
      blocks (one pass, the kernel compiled without a loop); an integer caps the grid at ``num_sms *
      persistent_blocks_per_sm`` and blocks loop over rows (``-DIC_PERSISTENT=1``).
    * ``weight_ldg`` (override): False (default) reads the weight with a plain load issued with x and residual;
      True with ``__ldg`` (kept to measure: ptxas sinks that load past the reduction).

    Derived fields: ``grid`` and ``defines``.
    """
    cfg, regime = cuda_rowwise.row_shape(rows, hidden, CUDA_DEFAULTS, align_elems=align_elems, overrides=overrides,
                                         config_keys=CONFIG_KEYS)
    grid = -(-int(rows) // cfg["rows_per_block"])
    persistent = overrides.get("persistent_blocks_per_sm", regime["persistent_blocks_per_sm"])
    if persistent is not None:
        persistent = int(persistent)
        if persistent <= 0:
            raise InputError(f"persistent_blocks_per_sm must be positive, got {persistent}")
        if num_sms is not None:
            grid = min(grid, int(num_sms) * persistent)
    cfg["persistent_blocks_per_sm"] = persistent
    cfg["weight_ldg"] = bool(overrides.get("weight_ldg", False))
    cfg["grid"] = grid
    cfg["defines"] = cuda_rowwise.defines(cfg) + [f"-DIC_PERSISTENT={0 if persistent is None else 1}"] + (
        ["-DIC_WEIGHT_NC=1"] if cfg["weight_ldg"] else [])
    return cfg


def compile_ptx(hidden: int, arch: str = "compute_90", *, rows: int = 1, source: str | None = None,
                **config: Any) -> str:
    """PTX of ``fused_add_rmsnorm.cu`` for ``hidden`` and ``arch`` (e.g. ``compute_90``) at ``cuda_config(rows,
    hidden, **config)`` (overrides: ``vec``, ``threads_per_row``, ``rows_per_block``, ...). ``source`` replaces the
    file's text (to check a variant); see ``cuda_rowwise.CudaKernel.compile_ptx``."""
    return KERNEL.compile_ptx(cuda_config(rows, hidden, **config), arch, source, cuda_include_dirs())


def fused_add_rmsnorm_cuda(
    x: Any, residual: Any, weight: Any, eps: float, *, config: dict[str, Any] | None = None
) -> None:
    """In place: ``residual <- x + residual``; ``x <- rmsnorm(residual) * weight``. Returns None.

    ``x``, ``residual``: contiguous ``[..., hidden]`` bf16/fp16 CUDA tensors; ``weight``: ``[hidden]``
    of the same dtype. Launches on ``torch.cuda.current_stream()`` (so inside ``torch.cuda.graph`` it is
    captured). ``config`` overrides ``cuda_config``'s choices (``vec``, ``threads_per_row``,
    ``rows_per_block``, ``persistent_blocks_per_sm``). The first call per configuration compiles.
    """
    from infercrane.kernels.ops.fused_add_rmsnorm.triton_kernel import check_inputs

    rows, hidden = check_inputs(x, residual, weight)
    KERNEL.launch((x, residual, weight), rows, hidden, eps, config,
                  lambda align, num_sms: cuda_config(rows, hidden, align_elems=align, num_sms=num_sms,
                                                     **(config or {})))

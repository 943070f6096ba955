"""InferCrane's handwritten CUDA C++ RMSNorm (no residual), compiled at run time by NVRTC.

``rms_norm_cuda(out, x, weight, eps) -> None`` is in place (vLLM's ``rms_norm(out, input, weight, epsilon)``
contract): afterwards ``out`` holds ``x * rsqrt(mean(x^2) + eps) * weight`` (float32 inside, rounded once to
bf16/fp16); ``x`` and ``weight`` are untouched. The source is ``rms_norm.cu`` next to this file, with the row-wise
norms' shared device code (``../rowwise.cuh``) put in. ``nvrtc``'s machinery is re-exported under this module's
names (``available``, ``cuda_include_dirs``, ``BASE_OPTIONS``).

Method (what the row-wise kernels share, the GPU path through CuPy on torch's current stream and the PTX path
through NVRTC without a GPU: ``infercrane.kernels.ops.cuda_rowwise``):
* ``cuda_config(rows, hidden)`` chooses the compile-time shape (``-D`` defines) from the ``CUDA_DEFAULTS``
  table: one vector per thread of a row, scalar 16-bit accesses (``vec`` = 1) where nothing wider fits. At hidden
  1024 that is 128 threads (4 warps) per row, one row per block, a block-level reduction behind one barrier (the
  shape measured best for fused add+RMSNorm on an H200); at head_dim 128 (the q/k norms) 16 threads per row, two
  rows per warp, shuffles only.
* ``compile_ptx(hidden, arch, rows=...)``: the PTX of that configuration (both entry points), what CPU CI checks.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from infercrane.kernels.ops import cuda_rowwise, nvrtc
from infercrane.kernels.ops.cuda_rowwise import MAX_VECTORS_PER_THREAD, SMALL_ROWS
from infercrane.kernels.ops.nvrtc import BASE_OPTIONS, cuda_include_dirs

__all__ = ["BASE_OPTIONS", "CONFIG_KEYS", "CUDA_DEFAULTS", "ENTRY_POINTS", "KERNEL", "MAX_VECTORS_PER_THREAD",
           "SMALL_ROWS", "SOURCE_PATH", "SUPPORTED_DTYPES", "available", "compile_ptx", "cuda_config",
           "cuda_include_dirs", "describe", "read_source", "rms_norm_cuda"]

SOURCE_PATH = Path(__file__).with_name("rms_norm.cu")
ENTRY_POINTS: dict[str, str] = {"bfloat16": "rms_norm_bf16", "float16": "rms_norm_fp16"}
SUPPORTED_DTYPES = tuple(ENTRY_POINTS)
CONFIG_KEYS = cuda_rowwise.SHAPE_KEYS
# The defaults ``cuda_config`` picks, one row per regime: the first whose ``max_rows`` is >= rows (None: any).
#   vectors_per_thread: vectors each thread owns per row -> threads_per_row = next pow2(hidden / vec / v)
#   block_threads: threads per block the rows of a block add up to (rows_per_block = block_threads // tpr, >= 1)
# One vector per thread issues both loads back to back (fused add+RMSNorm's SASS finding). Hidden 1024: 128
# threads per row, one row per block in both regimes. Head_dim 128: 16 threads per row, 2 rows per block of one
# warp for decode-sized batches (many small blocks spread over the SMs), 8 rows per 128-thread block beyond.
# Edit a row to switch a regime.
CUDA_DEFAULTS: tuple[dict[str, Any], ...] = (
    {"max_rows": SMALL_ROWS, "vectors_per_thread": 1, "block_threads": 32},
    {"max_rows": None, "vectors_per_thread": 1, "block_threads": 128},
)
KERNEL = cuda_rowwise.CudaKernel(SOURCE_PATH, ENTRY_POINTS)
available = nvrtc.cupy_device_available
read_source = KERNEL.read_source
describe = KERNEL.describe


def cuda_config(rows: int, hidden: int, *, align_elems: int = 8, **overrides: Any) -> dict[str, Any]:
    """Launch and compile configuration for ``rows`` x ``hidden`` of a 16-bit dtype: ``cuda_rowwise.row_shape``
    from ``CUDA_DEFAULTS`` (overrides: ``vec``, ``threads_per_row``, ``rows_per_block``), then
    ``block_reduction`` (a row spans several warps), ``grid`` (= cdiv(rows, rows_per_block): one row-block per
    block) and ``defines``."""
    cfg, _ = cuda_rowwise.row_shape(rows, hidden, CUDA_DEFAULTS, align_elems=align_elems, overrides=overrides,
                                    config_keys=CONFIG_KEYS)
    cfg["block_reduction"] = cfg["threads_per_row"] > 32
    cfg["grid"] = -(-int(rows) // cfg["rows_per_block"])
    cfg["defines"] = cuda_rowwise.defines(cfg)
    return cfg


def compile_ptx(hidden: int, arch: str = "compute_90", *, rows: int = 1, source: str | None = None,
                **config: Any) -> str:
    """PTX of ``rms_norm.cu`` for ``hidden`` and ``arch`` (e.g. ``compute_90``) at ``cuda_config(rows, hidden,
    **config)``: ``rows`` picks the regime (latency-bound up to ``SMALL_ROWS``, bandwidth-bound beyond).
    ``source`` replaces the file's text (to check a variant); see ``cuda_rowwise.CudaKernel.compile_ptx``."""
    return KERNEL.compile_ptx(cuda_config(rows, hidden, **config), arch, source, cuda_include_dirs())


def rms_norm_cuda(out: Any, x: Any, weight: Any, eps: float, *, config: dict[str, Any] | None = None) -> None:
    """In place: ``out <- x * rsqrt(mean(x^2) + eps) * weight``. Returns None; ``x`` and ``weight`` are untouched.

    ``out``, ``x``: contiguous ``[..., hidden]`` bf16/fp16 CUDA tensors of one shape; ``weight``: ``[hidden]`` of
    the same dtype. Launches on ``torch.cuda.current_stream()`` (so inside ``torch.cuda.graph`` it is captured).
    ``config`` overrides ``cuda_config``'s choices (``vec``, ``threads_per_row``, ``rows_per_block``). The first
    call per configuration compiles.
    """
    from infercrane.kernels.ops.rms_norm.triton_kernel import check_inputs

    rows, hidden = check_inputs(out, x, weight, supported=SUPPORTED_DTYPES)
    KERNEL.launch((out, x, weight), rows, hidden, eps, config,
                  lambda align, _: cuda_config(rows, hidden, align_elems=align, **(config or {})))

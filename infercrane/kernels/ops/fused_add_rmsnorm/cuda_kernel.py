"""InferCrane's handwritten CUDA C++ fused residual-add + RMSNorm, compiled at run time by NVRTC.

``fused_add_rmsnorm_cuda(x, residual, weight, eps) -> None`` is in place (vLLM's contract): afterwards
``residual`` holds ``x + residual`` (rounded once to bf16/fp16) and ``x`` holds
``rmsnorm(residual) * weight``. The source is ``fused_add_rmsnorm.cu`` next to this file.

Method:
* ``cuda_config(rows, hidden)`` chooses the compile-time shape (``-D`` defines) from the
  ``CUDA_DEFAULTS`` table: 16-byte accesses (``vec`` = 8 elements) whenever hidden and the tensors'
  alignment allow; ``threads_per_row`` so each thread owns one vector of a row (4 warps per row at
  hidden 1024); a block-level reduction only when a row spans several warps.
* On a GPU the source is compiled through CuPy (``cupy.RawModule``; CuPy targets the device's own
  ``sm_XY``, adds ``-ftz=true`` and caches the binary on disk), once per (device, arch, config, dtype),
  and launched on torch's *current* stream with raw ``data_ptr()`` arguments, so it runs in order
  with torch's work and is captured by ``torch.cuda.graph``. Call it once before a capture: compiling
  and loading a module is not a stream operation and must not happen while a graph is captured.
* ``compile_ptx(hidden, arch)`` compiles the same source to PTX with NVRTC through
  ``cuda.bindings.nvrtc`` and no GPU (headers from the ``nvidia-cuda-runtime`` wheel or a CUDA
  toolkit): what CPU CI checks.

The op-neutral part (NVRTC, CuPy compile and cache, torch's stream for CuPy, pointer alignment) is
``infercrane.kernels.ops.nvrtc``; this module holds the source, its configuration and the launch.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from infercrane.errors import InputError
from infercrane.kernels.ops import nvrtc
# Re-exported: the op-neutral NVRTC/CuPy machinery (``infercrane.kernels.ops.nvrtc``) under this module's names.
from infercrane.kernels.ops.nvrtc import (  # noqa: F401
    BASE_OPTIONS,
    CudaCompileError,
    cuda_include_dirs,
    nvrtc_compile_ptx,
)
from infercrane.kernels.ops.nvrtc import cupy_device_available as available  # noqa: F401
from infercrane.kernels.ops.nvrtc import next_pow2 as _next_pow2  # noqa: F401
from infercrane.kernels.ops.nvrtc import pow2_divisor as _pow2_divisor

SOURCE_PATH = Path(__file__).with_name("fused_add_rmsnorm.cu")
ENTRY_POINTS: dict[str, str] = {"bfloat16": "fused_add_rmsnorm_bf16", "float16": "fused_add_rmsnorm_fp16"}
CONFIG_KEYS = ("vec", "threads_per_row", "rows_per_block", "persistent_blocks_per_sm", "weight_ldg")
# Most vectors one thread may own in a row (the source's static_assert; at 16, ptxas spills at hidden 1024):
# hidden <= 8 elements * 1024 threads * 8 vectors = 65536.
MAX_VECTORS_PER_THREAD = 8
# Up to this many rows the launch is latency-bound (one wave of blocks); beyond it, bandwidth-bound.
SMALL_ROWS = 2048
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


def cuda_config(
    rows: int,
    hidden: int,
    *,
    align_elems: int = 8,
    num_sms: int | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Launch and compile configuration for ``rows`` x ``hidden`` of a 16-bit dtype.

    Defaults (each may be overridden by keyword: ``vec``, ``threads_per_row``, ``rows_per_block``,
    ``persistent_blocks_per_sm``):

    * ``vec``: elements per access, the largest of 8/4/2/1 dividing ``hidden`` and ``align_elems``
      (the pointers' alignment in elements); 8 means 16-byte ``ld/st.global.v4``.
    * ``threads_per_row``: next power of two >= (hidden / vec) / v, so a thread owns about v vectors,
      v = ``vectors_per_thread`` of the ``CUDA_DEFAULTS`` row for ``rows`` (1 in both regimes: 128
      threads at hidden 1024); clamped to [1, 1024].
    * ``rows_per_block``: ``block_threads`` of that row / ``threads_per_row`` (at least 1).
    * ``weight_ldg``: False (default) reads the weight with a plain load issued with x and residual;
      True with ``__ldg`` (kept to measure: ptxas sinks that load past the reduction).
    * ``persistent_blocks_per_sm``: None launches ``cdiv(rows, rows_per_block)`` blocks (one pass, the
      kernel compiled without a loop); an integer caps the grid at ``num_sms * persistent_blocks_per_sm``
      and blocks loop over rows (``-DIC_PERSISTENT=1``).

    Derived fields: ``threads_per_block``, ``vectors_per_thread``, ``guarded`` (the last vector of some
    threads lies past the row), ``grid``, ``vec_bytes``, ``hidden``, ``defines``.
    """
    unknown = sorted(set(overrides) - set(CONFIG_KEYS))
    if unknown:
        raise InputError(f"unknown CUDA config keys {unknown}; known: {list(CONFIG_KEYS)}")
    rows = int(rows)
    hidden = int(hidden)
    if rows < 0 or hidden <= 0:
        raise InputError(f"rows must be >= 0 and hidden > 0, got rows={rows}, hidden={hidden}")
    vec = int(overrides.get("vec") or _pow2_divisor(hidden, min(8, _pow2_divisor(max(1, align_elems), 8))))
    if vec not in (1, 2, 4, 8) or hidden % vec:
        raise InputError(f"vec must be 1, 2, 4 or 8 and divide hidden={hidden}, got {vec}")
    nvec = hidden // vec
    regime = next(d for d in CUDA_DEFAULTS if d["max_rows"] is None or rows <= d["max_rows"])
    tpr = overrides.get("threads_per_row")
    target_vpt = int(regime["vectors_per_thread"])
    tpr = int(tpr) if tpr is not None else min(1024, _next_pow2(-(-nvec // target_vpt)))
    if tpr <= 0 or tpr & (tpr - 1) or tpr > 1024:
        raise InputError(f"threads_per_row must be a power of two <= 1024, got {tpr}")
    vpt = -(-nvec // tpr)
    if vpt > MAX_VECTORS_PER_THREAD:
        raise InputError(
            f"hidden={hidden} needs {vpt} vectors per thread at threads_per_row={tpr} (max "
            f"{MAX_VECTORS_PER_THREAD}); the CUDA kernel supports hidden <= {8 * 1024 * MAX_VECTORS_PER_THREAD}"
        )
    rpb = overrides.get("rows_per_block")
    if rpb is None:
        rpb = max(1, int(regime["block_threads"]) // tpr)
    rpb = int(rpb)
    threads = tpr * rpb
    if rpb <= 0 or threads % 32 or threads > 1024:
        raise InputError(
            f"threads per block (threads_per_row * rows_per_block = {tpr} * {rpb}) must be a multiple of 32 "
            f"and <= 1024"
        )
    grid = -(-rows // rpb)
    persistent = overrides.get("persistent_blocks_per_sm", regime["persistent_blocks_per_sm"])
    if persistent is not None:
        persistent = int(persistent)
        if persistent <= 0:
            raise InputError(f"persistent_blocks_per_sm must be positive, got {persistent}")
        if num_sms is not None:
            grid = min(grid, int(num_sms) * persistent)
    cfg = {
        "hidden": hidden,
        "vec": vec,
        "vec_bytes": vec * 2,
        "threads_per_row": tpr,
        "rows_per_block": rpb,
        "threads_per_block": threads,
        "vectors_per_thread": vpt,
        "guarded": bool(nvec % tpr),
        "persistent_blocks_per_sm": persistent,
        "weight_ldg": bool(overrides.get("weight_ldg", False)),
        "grid": grid,
    }
    cfg["defines"] = list(_defines(cfg))
    return cfg


def _defines(cfg: dict[str, Any]) -> tuple[str, ...]:
    return (
        f"-DIC_HIDDEN={cfg['hidden']}",
        f"-DIC_VEC={cfg['vec']}",
        f"-DIC_THREADS_PER_ROW={cfg['threads_per_row']}",
        f"-DIC_ROWS_PER_BLOCK={cfg['rows_per_block']}",
        f"-DIC_PERSISTENT={0 if cfg['persistent_blocks_per_sm'] is None else 1}",
    ) + (("-DIC_WEIGHT_NC=1",) if cfg.get("weight_ldg") else ())


@functools.lru_cache(maxsize=1)
def read_source() -> str:
    """The CUDA C++ source, read once."""
    return SOURCE_PATH.read_text()


def describe() -> dict[str, Any]:
    """What a result records about this implementation: the source's hash, options, configurations compiled."""
    import hashlib

    info: dict[str, Any] = {
        "source": SOURCE_PATH.name,
        "source_sha256": hashlib.sha256(read_source().encode()).hexdigest(),
        "base_options": list(BASE_OPTIONS),
        "compiled": [dict(c) for c in _COMPILED],
        "launch": nvrtc.STREAM_NOTE,
    }
    info.update(nvrtc.toolchain())
    return info


# ---------------------------------------------------------------------------------------------------
# CPU path: NVRTC through cuda.bindings (no driver, no GPU): ``infercrane.kernels.ops.nvrtc``.
# ---------------------------------------------------------------------------------------------------


def compile_ptx(hidden: int, arch: str = "compute_90", *, rows: int = 1, source: str | None = None,
                **config: Any) -> str:
    """PTX of ``fused_add_rmsnorm.cu`` for ``hidden`` and ``arch`` (e.g. ``compute_90``), compiled by NVRTC.

    The configuration is ``cuda_config(rows, hidden, **config)``: ``rows`` picks the heuristic's regime
    (latency-bound up to ``SMALL_ROWS``, bandwidth-bound beyond); ``config`` takes its override keys
    (``vec``, ``threads_per_row``, ``rows_per_block``). ``source`` replaces the file's text (to check a
    variant). Both entry points are in the PTX.
    Raises UnavailableError when NVRTC or the CUDA headers are missing; CudaCompileError (with the
    NVRTC log) on a compile error.
    """
    cfg = cuda_config(rows, hidden, **config)
    return nvrtc.compile_ptx_for(read_source() if source is None else source, SOURCE_PATH.name, arch,
                                 cfg["defines"], cuda_include_dirs())


# ---------------------------------------------------------------------------------------------------
# GPU path: CuPy compiles (NVRTC, device arch) and launches on torch's current stream.
# ---------------------------------------------------------------------------------------------------

_COMPILED: list[dict[str, Any]] = []
_LAUNCH: dict[tuple[Any, ...], tuple[Any, tuple[int], tuple[int]]] = {}
_device_info = nvrtc.device_info
_stream = nvrtc.current_stream
_align_elems = nvrtc.align_elems


def _function(device_index: int, arch: str, cfg: dict[str, Any], dtype: str) -> Any:
    """The compiled entry point for ``cfg`` on ``device_index`` (``nvrtc.load_function``), recorded when compiled."""
    fn, options, compiled_now = nvrtc.load_function(device_index, arch, read_source(), SOURCE_PATH.name,
                                                    cfg["defines"], ENTRY_POINTS[dtype], BASE_OPTIONS)
    if compiled_now:
        _COMPILED.append({"device": device_index, "arch": arch, "dtype": dtype, "options": list(options),
                          "entry": ENTRY_POINTS[dtype]})
    return fn


def fused_add_rmsnorm_cuda(
    x: Any, residual: Any, weight: Any, eps: float, *, config: dict[str, Any] | None = None
) -> None:
    """In place: ``residual <- x + residual``; ``x <- rmsnorm(residual) * weight``. Returns None.

    ``x``, ``residual``: contiguous ``[..., hidden]`` bf16/fp16 CUDA tensors; ``weight``: ``[hidden]``
    of the same dtype. Launches on ``torch.cuda.current_stream()`` (so inside ``torch.cuda.graph`` it is
    captured). ``config`` overrides ``cuda_config``'s choices (``vec``, ``threads_per_row``,
    ``rows_per_block``, ``persistent_blocks_per_sm``). The first call per configuration compiles.
    """
    import numpy as np
    import torch

    from infercrane.kernels.ops.fused_add_rmsnorm.triton_kernel import check_inputs

    rows, hidden = check_inputs(x, residual, weight)
    if not eps > 0:
        raise InputError(f"eps must be positive, got {eps}")
    if x.device.type != "cuda":
        raise InputError(f"the CUDA kernel needs CUDA tensors, got {x.device}")
    if rows == 0:
        return
    if rows >= 2**31:
        raise InputError(f"the CUDA kernel takes fewer than 2**31 rows, got {rows}")
    dtype = str(x.dtype).removeprefix("torch.")
    device_index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    xp, rp, wp = x.data_ptr(), residual.data_ptr(), weight.data_ptr()
    align = _align_elems(xp, rp, wp)
    key = (device_index, rows, hidden, dtype, align, None if config is None else tuple(sorted(config.items())))
    launch = _LAUNCH.get(key)
    if launch is None:
        arch, num_sms = _device_info(device_index)
        cfg = cuda_config(rows, hidden, align_elems=align, num_sms=num_sms, **(config or {}))
        if cfg["vec"] > align:
            raise InputError(f"config vec={cfg['vec']} needs {cfg['vec_bytes']}-byte aligned tensors; these are "
                             f"aligned to {align * 2} bytes")
        launch = (_function(device_index, arch, cfg, dtype), (cfg["grid"],), (cfg["threads_per_block"],))
        _LAUNCH[key] = launch
    fn, grid, block = launch
    stream = _stream(device_index, torch.cuda.current_stream(x.device).cuda_stream)
    fn(grid, block, (np.uint64(xp), np.uint64(rp), np.uint64(wp), np.int32(rows), np.float32(eps)), stream=stream)

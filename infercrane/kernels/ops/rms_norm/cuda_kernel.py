"""InferCrane's handwritten CUDA C++ RMSNorm (no residual), compiled at run time by NVRTC.

``rms_norm_cuda(out, x, weight, eps) -> None`` is in place (vLLM's ``rms_norm(out, input, weight, epsilon)``
contract): afterwards ``out`` holds ``x * rsqrt(mean(x^2) + eps) * weight`` (float32 inside, rounded once to
bf16/fp16); ``x`` and ``weight`` are untouched. The source is ``rms_norm.cu`` next to this file.

Method:
* ``cuda_config(rows, hidden)`` chooses the compile-time shape (``-D`` defines) from the ``CUDA_DEFAULTS``
  table: 16-byte accesses (``vec`` = 8 elements) whenever the width and the tensors' alignment allow, else the
  widest of 4/2/1 that fits (1: scalar 16-bit accesses); ``threads_per_row`` so each thread owns one vector of a
  row; several rows per block when a row needs fewer threads than a block holds. At hidden 1024 that is 128
  threads (4 warps) per row, one row per block, a block-level reduction behind one barrier (the shape measured
  best for fused add+RMSNorm on an H200); at head_dim 128 (the q/k norms) 16 threads per row, two rows per
  warp, shuffles only.
* On a GPU the source is compiled through CuPy (``infercrane.kernels.ops.nvrtc.load_function``) once per
  (device, arch, config, dtype), and launched on torch's *current* stream with raw ``data_ptr()`` arguments, so it
  runs in order with torch's work and is captured by ``torch.cuda.graph``. Call it once before a capture:
  compiling and loading a module is not a stream operation and must not happen while a graph is captured.
* ``compile_ptx(hidden, arch, rows=...)`` compiles the same source to PTX with NVRTC through
  ``cuda.bindings.nvrtc`` and no GPU (headers from the ``nvidia-cuda-runtime`` wheel or a CUDA toolkit):
  what CPU CI checks.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from infercrane.errors import InputError
from infercrane.kernels.ops import nvrtc
from infercrane.kernels.ops.nvrtc import BASE_OPTIONS, cuda_include_dirs

SOURCE_PATH = Path(__file__).with_name("rms_norm.cu")
ENTRY_POINTS: dict[str, str] = {"bfloat16": "rms_norm_bf16", "float16": "rms_norm_fp16"}
SUPPORTED_DTYPES = tuple(ENTRY_POINTS)
CONFIG_KEYS = ("vec", "threads_per_row", "rows_per_block")
# Most vectors one thread may own in a row (the source's static_assert): hidden <= 8 * 1024 * 8 = 65536.
MAX_VECTORS_PER_THREAD = 8
# Up to this many rows the launch is latency-bound (one wave of blocks); beyond it, bandwidth-bound.
SMALL_ROWS = 2048
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

available = nvrtc.cupy_device_available


def cuda_config(rows: int, hidden: int, *, align_elems: int = 8, **overrides: Any) -> dict[str, Any]:
    """Launch and compile configuration for ``rows`` x ``hidden`` of a 16-bit dtype.

    Defaults (each may be overridden by keyword: ``vec``, ``threads_per_row``, ``rows_per_block``):

    * ``vec``: elements per access, the largest of 8/4/2/1 dividing ``hidden`` and ``align_elems`` (the
      pointers' alignment in elements); 8 means 16-byte ``ld/st.global.v4``, 1 scalar 16-bit accesses.
    * ``threads_per_row``: next power of two >= (hidden / vec) / v, so a thread owns about v vectors,
      v = ``vectors_per_thread`` of the ``CUDA_DEFAULTS`` row for ``rows``; at most 1024.
    * ``rows_per_block``: ``block_threads`` of that row / ``threads_per_row`` (at least 1).

    Derived fields: ``threads_per_block``, ``vectors_per_thread``, ``guarded`` (the last vector of some threads
    lies past the row), ``block_reduction`` (a row spans several warps), ``grid`` (= cdiv(rows,
    rows_per_block): one row-block per block), ``vec_bytes``, ``hidden``, ``defines``.
    """
    unknown = sorted(set(overrides) - set(CONFIG_KEYS))
    if unknown:
        raise InputError(f"unknown CUDA config keys {unknown}; known: {list(CONFIG_KEYS)}")
    rows = int(rows)
    hidden = int(hidden)
    if rows < 0 or hidden <= 0:
        raise InputError(f"rows must be >= 0 and hidden > 0, got rows={rows}, hidden={hidden}")
    align_cap = nvrtc.pow2_divisor(max(1, int(align_elems)), 8)
    vec = int(overrides.get("vec") or nvrtc.pow2_divisor(hidden, align_cap))
    if vec not in (1, 2, 4, 8) or hidden % vec:
        raise InputError(f"vec must be 1, 2, 4 or 8 and divide hidden={hidden}, got {vec}")
    nvec = hidden // vec
    regime = next(d for d in CUDA_DEFAULTS if d["max_rows"] is None or rows <= d["max_rows"])
    tpr = overrides.get("threads_per_row")
    target_vpt = int(regime["vectors_per_thread"])
    tpr = int(tpr) if tpr is not None else min(1024, nvrtc.next_pow2(-(-nvec // target_vpt)))
    if tpr <= 0 or tpr & (tpr - 1) or tpr > 1024:
        raise InputError(f"threads_per_row must be a power of two <= 1024, got {tpr}")
    vpt = -(-nvec // tpr)
    if vpt > MAX_VECTORS_PER_THREAD:
        raise InputError(
            f"hidden={hidden} needs {vpt} vectors per thread at threads_per_row={tpr} (max "
            f"{MAX_VECTORS_PER_THREAD}); the CUDA kernel supports hidden <= {8 * 1024 * MAX_VECTORS_PER_THREAD}"
        )
    rpb = overrides.get("rows_per_block")
    rpb = int(rpb) if rpb is not None else max(1, int(regime["block_threads"]) // tpr)
    threads = tpr * rpb
    if rpb <= 0 or threads % 32 or threads > 1024:
        raise InputError(
            f"threads per block (threads_per_row * rows_per_block = {tpr} * {rpb}) must be a multiple of 32 "
            f"and <= 1024"
        )
    cfg: dict[str, Any] = {
        "hidden": hidden,
        "vec": vec,
        "vec_bytes": vec * 2,
        "threads_per_row": tpr,
        "rows_per_block": rpb,
        "threads_per_block": threads,
        "vectors_per_thread": vpt,
        "guarded": bool(nvec % tpr),
        "block_reduction": tpr > 32,
        "grid": -(-rows // rpb),
    }
    cfg["defines"] = [f"-DIC_HIDDEN={hidden}", f"-DIC_VEC={vec}", f"-DIC_THREADS_PER_ROW={tpr}",
                      f"-DIC_ROWS_PER_BLOCK={rpb}"]
    return cfg


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


def compile_ptx(hidden: int, arch: str = "compute_90", *, rows: int = 1, source: str | None = None,
                **config: Any) -> str:
    """PTX of ``rms_norm.cu`` for ``hidden`` and ``arch`` (e.g. ``compute_90``), compiled by NVRTC without a GPU.

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


def _function(device_index: int, arch: str, cfg: dict[str, Any], dtype: str) -> Any:
    """The compiled entry point for ``cfg`` on ``device_index``, recorded in ``describe()`` when compiled."""
    fn, options, compiled_now = nvrtc.load_function(device_index, arch, read_source(), SOURCE_PATH.name,
                                                    cfg["defines"], ENTRY_POINTS[dtype], BASE_OPTIONS)
    if compiled_now:
        _COMPILED.append({"device": device_index, "arch": arch, "dtype": dtype, "options": list(options),
                          "entry": ENTRY_POINTS[dtype]})
    return fn


def rms_norm_cuda(out: Any, x: Any, weight: Any, eps: float, *, config: dict[str, Any] | None = None) -> None:
    """In place: ``out <- x * rsqrt(mean(x^2) + eps) * weight``. Returns None; ``x`` and ``weight`` are untouched.

    ``out``, ``x``: contiguous ``[..., hidden]`` bf16/fp16 CUDA tensors of one shape; ``weight``: ``[hidden]`` of
    the same dtype. Launches on ``torch.cuda.current_stream()`` (so inside ``torch.cuda.graph`` it is captured).
    ``config`` overrides ``cuda_config``'s choices (``vec``, ``threads_per_row``, ``rows_per_block``). The first
    call per configuration compiles.
    """
    import numpy as np
    import torch

    from infercrane.kernels.ops.rms_norm.triton_kernel import check_inputs

    rows, hidden = check_inputs(out, x, weight, supported=SUPPORTED_DTYPES)
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
    op, xp, wp = out.data_ptr(), x.data_ptr(), weight.data_ptr()
    align = nvrtc.align_elems(op, xp, wp)
    key = (device_index, rows, hidden, dtype, align, None if config is None else tuple(sorted(config.items())))
    launch = _LAUNCH.get(key)
    if launch is None:
        arch, _ = nvrtc.device_info(device_index)
        cfg = cuda_config(rows, hidden, align_elems=align, **(config or {}))
        if cfg["vec"] > align:
            raise InputError(f"config vec={cfg['vec']} needs {cfg['vec_bytes']}-byte aligned tensors; these are "
                             f"aligned to {align * 2} bytes")
        launch = (_function(device_index, arch, cfg, dtype), (cfg["grid"],), (cfg["threads_per_block"],))
        _LAUNCH[key] = launch
    fn, grid, block = launch
    stream = nvrtc.current_stream(device_index, torch.cuda.current_stream(x.device).cuda_stream)
    fn(grid, block, (np.uint64(op), np.uint64(xp), np.uint64(wp), np.int32(rows), np.float32(eps)), stream=stream)

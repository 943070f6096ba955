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
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from infercrane.errors import InfercraneError, InputError, UnavailableError

SOURCE_PATH = Path(__file__).with_name("fused_add_rmsnorm.cu")
ENTRY_POINTS: dict[str, str] = {"bfloat16": "fused_add_rmsnorm_bf16", "float16": "fused_add_rmsnorm_fp16"}
CONFIG_KEYS = ("vec", "threads_per_row", "rows_per_block", "persistent_blocks_per_sm", "weight_ldg")
# Options common to every compile (the target architecture is added per path).
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17",)
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


class CudaCompileError(InfercraneError):
    """NVRTC rejected the source. ``log`` is NVRTC's log; ``options`` the compile options."""

    def __init__(self, message: str, *, log: str, options: tuple[str, ...]) -> None:
        super().__init__(f"{message}\n--- NVRTC log ---\n{log.strip()}\n--- options: {' '.join(options)}",
                         hint="fix the CUDA source or the -D configuration named in the options")
        self.log = log
        self.options = options


def available() -> tuple[bool, str]:
    """(True, "") when CuPy imports and a CUDA device is present; otherwise (False, reason)."""
    try:
        import cupy
    except Exception as e:
        return False, f"cupy is not importable (install cupy-cuda13x): {type(e).__name__}: {e}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"no usable CUDA driver/device for CuPy: {type(e).__name__}: {e}"
    if n < 1:
        return False, "no CUDA device present"
    try:
        import torch
    except Exception as e:
        return False, f"torch is not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device (the kernel launches on torch's current stream)"
    return True, ""


def _next_pow2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length()


def _pow2_divisor(n: int, cap: int) -> int:
    """Largest power of two <= cap that divides n."""
    v = cap
    while v > 1 and n % v:
        v //= 2
    return v


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
        "launch": "torch.cuda.current_stream() wrapped by CuPy (Stream.from_external, else ExternalStream); raw data_ptr() "
                  "arguments",
    }
    try:
        import cupy

        info["cupy"] = cupy.__version__
        info["nvrtc"] = ".".join(str(v) for v in cupy.cuda.nvrtc.getVersion())
    except Exception as e:
        info["cupy"] = f"unavailable: {type(e).__name__}"
    return info


# ---------------------------------------------------------------------------------------------------
# CPU path: NVRTC through cuda.bindings (no driver, no GPU).
# ---------------------------------------------------------------------------------------------------

def cuda_include_dirs() -> list[str]:
    """Directories holding ``cuda_bf16.h``: the nvidia-cuda-runtime wheel's, then a CUDA toolkit's."""
    candidates: list[Path] = []
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
        for loc in (spec.submodule_search_locations or []) if spec else []:
            candidates += [Path(loc) / "cu13" / "include", Path(loc) / "cuda_runtime" / "include"]
    except (ImportError, ValueError):
        pass
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    out: list[str] = []
    for c in candidates:
        if (c / "cuda_bf16.h").is_file() and str(c) not in out:
            out.append(str(c))
    return out


def _nvrtc_check(result: Any, what: str) -> None:
    from cuda.bindings import nvrtc

    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise UnavailableError(f"NVRTC {what} failed: {result}")


def nvrtc_compile_ptx(source: str, options: tuple[str, ...], name: str = "fused_add_rmsnorm.cu") -> str:
    """Compile CUDA C++ ``source`` to PTX with NVRTC (``cuda.bindings.nvrtc``); no GPU needed.

    Raises UnavailableError when cuda-bindings or the NVRTC library is missing, and CudaCompileError
    carrying NVRTC's log when the source does not compile.
    """
    try:
        from cuda.bindings import nvrtc
    except Exception as e:
        raise UnavailableError(
            f"cuda.bindings.nvrtc is not importable: {type(e).__name__}: {e}",
            hint="pip install 'cuda-bindings>=13,<14' nvidia-cuda-nvrtc nvidia-cuda-runtime (extra 'nvrtc')",
        ) from e
    try:
        err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    except Exception as e:  # the NVRTC shared library could not be loaded
        raise UnavailableError(
            f"the NVRTC library could not be loaded: {type(e).__name__}: {e}",
            hint="pip install nvidia-cuda-nvrtc (CUDA 13), or put a CUDA toolkit's libnvrtc on the loader path",
        ) from e
    _nvrtc_check(err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (compile_result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        err, log_size = nvrtc.nvrtcGetProgramLogSize(prog)
        _nvrtc_check(err, "nvrtcGetProgramLogSize")
        log_buf = b" " * log_size
        (err,) = nvrtc.nvrtcGetProgramLog(prog, log_buf)
        _nvrtc_check(err, "nvrtcGetProgramLog")
        log = log_buf.rstrip(b"\x00 ").decode(errors="replace")
        if compile_result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CudaCompileError(f"NVRTC could not compile {name} ({compile_result.name})", log=log,
                                   options=tuple(options))
        err, ptx_size = nvrtc.nvrtcGetPTXSize(prog)
        _nvrtc_check(err, "nvrtcGetPTXSize")
        ptx_buf = b" " * ptx_size
        (err,) = nvrtc.nvrtcGetPTX(prog, ptx_buf)
        _nvrtc_check(err, "nvrtcGetPTX")
        return ptx_buf.rstrip(b"\x00").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


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
    if not isinstance(arch, str) or not arch.startswith(("compute_", "sm_")):
        raise InputError(f"arch must look like 'compute_90' or 'sm_90', got {arch!r}")
    cfg = cuda_config(rows, hidden, **config)
    includes = cuda_include_dirs()
    if not includes:
        raise UnavailableError(
            "cuda_bf16.h was not found (no nvidia/cu13/include in site-packages, no $CUDA_PATH/include, "
            "no /usr/local/cuda/include)",
            hint="pip install nvidia-cuda-runtime (CUDA 13) or set CUDA_PATH to a CUDA toolkit",
        )
    options = (f"-arch={arch}", *BASE_OPTIONS, *cfg["defines"], f"-I{includes[0]}")
    return nvrtc_compile_ptx(read_source() if source is None else source, options)


# ---------------------------------------------------------------------------------------------------
# GPU path: CuPy compiles (NVRTC, device arch) and launches on torch's current stream.
# ---------------------------------------------------------------------------------------------------

_FUNCTIONS: dict[tuple[Any, ...], Any] = {}
_COMPILED: list[dict[str, Any]] = []
_STREAMS: dict[tuple[int, int], Any] = {}
_LAUNCH: dict[tuple[Any, ...], tuple[Any, tuple[int], tuple[int]]] = {}


@functools.lru_cache(maxsize=None)
def _device_info(index: int) -> tuple[str, int]:
    """(``sm_XY``, multiprocessor count) of CUDA device ``index``."""
    import torch

    props = torch.cuda.get_device_properties(index)
    return f"sm_{props.major}{props.minor}", int(props.multi_processor_count)


def _function(device_index: int, arch: str, cfg: dict[str, Any], dtype: str) -> Any:
    """The compiled entry point for ``cfg`` on ``device_index``, compiled by CuPy on first use.

    CuPy adds the device's ``-arch=sm_XY``, ``-ftz=true`` and its CUDA header directory itself. Only if that
    compile cannot find a CUDA header is it retried with ``-I`` for each directory ``cuda_include_dirs()`` finds.
    """
    key = (device_index, arch, tuple(cfg["defines"]), dtype)
    fn = _FUNCTIONS.get(key)
    if fn is not None:
        return fn
    import cupy

    source = read_source()
    attempts = [()] + [(f"-I{d}",) for d in cuda_include_dirs()]
    failure: tuple[str, tuple[str, ...]] | None = None
    for extra in attempts:
        options = (*BASE_OPTIONS, *cfg["defines"], *extra)
        try:
            with cupy.cuda.Device(device_index):
                kernel = cupy.RawModule(code=source, options=options).get_function(ENTRY_POINTS[dtype])
                # the device's compiled function: compiles now (errors surface here), launches with less overhead
                fn = getattr(kernel, "kernel", kernel)
        except cupy.cuda.compiler.CompileException as e:
            failure = (str(e), options)
            if "cuda_bf16.h" in str(e) or "cuda_fp16.h" in str(e):
                continue  # a header directory problem: try the next -I
            break
        except RuntimeError as e:
            if "CUDA headers" in str(e) or "include" in str(e).lower():
                failure = (str(e), options)
                continue
            raise
        _FUNCTIONS[key] = fn
        _COMPILED.append({"device": device_index, "arch": arch, "dtype": dtype, "options": list(options),
                          "entry": ENTRY_POINTS[dtype]})
        return fn
    assert failure is not None
    log, options = failure
    if "CUDA headers" in log or "cuda_bf16.h" in log:
        raise UnavailableError(
            f"CuPy could not find the CUDA headers to compile fused_add_rmsnorm.cu: {log.strip()[:500]}",
            hint="set CUDA_PATH to a CUDA 13 toolkit, or pip install nvidia-cuda-runtime (CUDA 13 headers)",
        )
    raise CudaCompileError("CuPy/NVRTC could not compile fused_add_rmsnorm.cu", log=log, options=options)


def _stream(device_index: int, stream_ptr: int) -> Any:
    s = _STREAMS.get((device_index, stream_ptr))
    if s is None:
        import cupy

        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        if from_external is not None:  # CuPy >= 14: the CUDA stream protocol; ExternalStream is deprecated there
            s = from_external(_StreamHandle(stream_ptr))
        else:
            s = cupy.cuda.ExternalStream(stream_ptr, device_index)
        _STREAMS[(device_index, stream_ptr)] = s
    return s


class _StreamHandle:
    """A raw ``cudaStream_t`` exposed through the CUDA stream protocol (``__cuda_stream__`` -> (version, handle))."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


def _align_elems(*ptrs: int) -> int:
    """Alignment, in 16-bit elements (at most 8 = 16 bytes), that every pointer has."""
    combined = 0
    for p in ptrs:
        combined |= p
    elems = 8
    while elems > 1 and combined % (2 * elems):
        elems //= 2
    return elems


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

"""Run-time compiled CUDA C++ kernels, for any op: NVRTC without a GPU, CuPy on one, torch's current stream.

* **CPU (no driver, no GPU)**: ``nvrtc_compile_ptx(source, options)`` compiles CUDA C++ to PTX through
  ``cuda.bindings.nvrtc``, with the headers of the ``nvidia-cuda-runtime`` wheel or a CUDA toolkit
  (``cuda_include_dirs``); ``compile_ptx_for`` adds the architecture and the ``-D`` defines. What CPU CI checks.
* **GPU**: ``load_function`` compiles a source with CuPy (``cupy.RawModule``: CuPy targets the device's own
  ``sm_XY``, adds ``-ftz=true`` and caches the binary on disk), once per (device, arch, source, options, entry
  point), and returns the device function. ``current_stream`` wraps torch's *current* stream for CuPy, so a
  launch runs in order with torch's work and is captured by ``torch.cuda.graph``. Compiling and loading a module is
  not a stream operation: call a kernel once before capturing it.

Each kernel module (``ops/<op>/cuda_kernel.py``) keeps its own source, configuration and launch; this module
holds only what does not depend on the op. CuPy, torch and cuda.bindings are imported inside the functions only.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

from infercrane.errors import InfercraneError, InputError, UnavailableError

# Options common to every compile (the target architecture is added per path).
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17",)
HEADERS_MISSING = ("cuda_bf16.h was not found (no nvidia/cu13/include in site-packages, no $CUDA_PATH/include, "
                   "no /usr/local/cuda/include)")
HEADERS_HINT = "pip install nvidia-cuda-runtime (CUDA 13) or set CUDA_PATH to a CUDA toolkit"


class CudaCompileError(InfercraneError):
    """NVRTC rejected the source. ``log`` is NVRTC's log; ``options`` the compile options."""

    def __init__(self, message: str, *, log: str, options: tuple[str, ...]) -> None:
        super().__init__(f"{message}\n--- NVRTC log ---\n{log.strip()}\n--- options: {' '.join(options)}",
                         hint="fix the CUDA source or the -D configuration named in the options")
        self.log = log
        self.options = options


def cupy_device_available() -> tuple[bool, str]:
    """(True, "") when CuPy imports, a CUDA device is present and torch sees it; otherwise (False, reason)."""
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
    return torch_sees_cuda("torch sees no CUDA device (the kernel launches on torch's current stream)")


def torch_sees_cuda(no_device: str) -> tuple[bool, str]:
    """(True, "") when torch imports and sees a CUDA device; otherwise (False, why): ``no_device`` when it sees
    none."""
    try:
        import torch
    except Exception as e:
        return False, f"torch is not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return False, no_device
    return True, ""


def next_pow2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length()


def pow2_divisor(n: int, cap: int) -> int:
    """Largest power of two <= cap that divides n."""
    v = cap
    while v > 1 and n % v:
        v //= 2
    return v


def align_elems(*ptrs: int, elem_bytes: int = 2) -> int:
    """Alignment, in elements of ``elem_bytes`` (at most 16 bytes' worth), that every pointer has."""
    combined = 0
    for p in ptrs:
        combined |= p
    elems = 16 // elem_bytes
    while elems > 1 and combined % (elem_bytes * elems):
        elems //= 2
    return elems


def toolchain() -> dict[str, Any]:
    """CuPy's and its NVRTC's versions, for a kernel's ``describe()``."""
    info: dict[str, Any] = {}
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


def _nvrtc_bindings() -> Any:
    """``cuda.bindings.nvrtc``; UnavailableError (with what to install) when it does not import."""
    try:
        from cuda.bindings import nvrtc
    except Exception as e:
        raise UnavailableError(
            f"cuda.bindings.nvrtc is not importable: {type(e).__name__}: {e}",
            hint="pip install 'cuda-bindings>=13,<14' nvidia-cuda-nvrtc nvidia-cuda-runtime (extra 'nvrtc')",
        ) from e
    return nvrtc


def _library_missing(e: Exception) -> UnavailableError:
    return UnavailableError(
        f"the NVRTC library could not be loaded: {type(e).__name__}: {e}",
        hint="pip install nvidia-cuda-nvrtc (CUDA 13), or put a CUDA toolkit's libnvrtc on the loader path")


def ptx_compile_available() -> tuple[bool, str]:
    """Whether CUDA C++ can be compiled to PTX here without a GPU (``compile_ptx_for``): ``cuda.bindings.nvrtc``
    imports, the NVRTC library loads and ``cuda_bf16.h`` is found. ``(True, "")`` or ``(False, reason)``: the one
    check ``infercrane kernel list`` and a functional screen both read, so what the list predicts is what the screen
    does."""
    try:
        nvrtc = _nvrtc_bindings()
    except UnavailableError as e:
        return False, e.message
    try:
        nvrtc.nvrtcVersion()
    except Exception as e:  # the NVRTC shared library could not be loaded
        return False, _library_missing(e).message
    if not cuda_include_dirs():
        return False, HEADERS_MISSING
    return True, ""


def nvrtc_compile_ptx(source: str, options: tuple[str, ...], name: str = "kernel.cu") -> str:
    """Compile CUDA C++ ``source`` to PTX with NVRTC (``cuda.bindings.nvrtc``); no GPU needed.

    Raises UnavailableError when cuda-bindings or the NVRTC library is missing, and CudaCompileError
    carrying NVRTC's log when the source does not compile.
    """
    nvrtc = _nvrtc_bindings()
    try:
        err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    except Exception as e:  # the NVRTC shared library could not be loaded
        raise _library_missing(e) from e
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


def compile_ptx_for(source: str, name: str, arch: str, defines: list[str] | tuple[str, ...],
                    include_dirs: list[str], base_options: tuple[str, ...] = BASE_OPTIONS) -> str:
    """PTX of ``source`` for ``arch`` (``compute_90`` or ``sm_90``) with ``-D`` ``defines``, headers from the first of
    ``include_dirs``. Raises InputError for a malformed arch, UnavailableError when no header directory is given."""
    if not isinstance(arch, str) or not arch.startswith(("compute_", "sm_")):
        raise InputError(f"arch must look like 'compute_90' or 'sm_90', got {arch!r}")
    if not include_dirs:
        raise UnavailableError(HEADERS_MISSING, hint=HEADERS_HINT)
    options = (f"-arch={arch}", *base_options, *defines, f"-I{include_dirs[0]}")
    return nvrtc_compile_ptx(source, options, name)


# ---------------------------------------------------------------------------------------------------
# GPU path: CuPy compiles (NVRTC, device arch) and launches on torch's current stream.
# ---------------------------------------------------------------------------------------------------

_FUNCTIONS: dict[tuple[Any, ...], tuple[Any, tuple[str, ...]]] = {}
_STREAMS: dict[tuple[int, int], Any] = {}


@functools.lru_cache(maxsize=None)
def device_info(index: int) -> tuple[str, int]:
    """(``sm_XY``, multiprocessor count) of CUDA device ``index``."""
    import torch

    props = torch.cuda.get_device_properties(index)
    return f"sm_{props.major}{props.minor}", int(props.multi_processor_count)


def load_function(device_index: int, arch: str, source: str, name: str, defines: list[str] | tuple[str, ...],
                  entry: str, base_options: tuple[str, ...] = BASE_OPTIONS) -> tuple[Any, tuple[str, ...], bool]:
    """``(function, options, compiled_now)``: the entry point ``entry`` of ``source`` (called ``name`` in messages)
    compiled by CuPy for ``device_index`` with ``defines``, from a process-wide cache after the first call.

    CuPy adds the device's ``-arch=sm_XY``, ``-ftz=true`` and its CUDA header directory itself. Only if that
    compile cannot find a CUDA header is it retried with ``-I`` for each directory ``cuda_include_dirs()`` finds.
    """
    key = (device_index, arch, name, hashlib.sha256(source.encode()).hexdigest(), tuple(defines), entry)
    hit = _FUNCTIONS.get(key)
    if hit is not None:
        return hit[0], hit[1], False
    import cupy

    attempts = [()] + [(f"-I{d}",) for d in cuda_include_dirs()]
    failure: tuple[str, tuple[str, ...]] | None = None
    for extra in attempts:
        options = (*base_options, *defines, *extra)
        try:
            with cupy.cuda.Device(device_index):
                kernel = cupy.RawModule(code=source, options=options).get_function(entry)
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
        _FUNCTIONS[key] = (fn, options)
        return fn, options, True
    if failure is None:  # unreachable: the loop either returns or records why it did not
        raise UnavailableError(f"CuPy did not compile {name} and gave no reason")
    log, options = failure
    if "CUDA headers" in log or "cuda_bf16.h" in log:
        raise UnavailableError(
            f"CuPy could not find the CUDA headers to compile {name}: {log.strip()[:500]}",
            hint="set CUDA_PATH to a CUDA 13 toolkit, or pip install nvidia-cuda-runtime (CUDA 13 headers)",
        )
    raise CudaCompileError(f"CuPy/NVRTC could not compile {name}", log=log, options=options)


def current_stream(device_index: int, stream_ptr: int) -> Any:
    """A CuPy stream object for the raw ``cudaStream_t`` ``stream_ptr`` (torch's current stream), cached."""
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


STREAM_NOTE = ("torch.cuda.current_stream() wrapped by CuPy (Stream.from_external, else ExternalStream); raw "
               "data_ptr() arguments")

"""The baselines a user would pick for fused residual-add + RMSNorm.

* ``eager``: plain PyTorch ops, storage dtype in and out, float32 inside, the way vLLM's native (non-custom-op)
  path computes it: add in float32, round the sum to the storage dtype as the new residual, normalize the float32
  sum, round, multiply by the weight in the storage dtype. Out of place.
* ``torch_compile``: ``torch.compile(eager, dynamic=False, fullgraph=True)`` (Inductor, default mode), compiled
  afresh for every row count: each row count gets its own code object, so every shape owns one compiled graph and
  no shape can fall back to eager through Dynamo's recompile limit. This is what a compiled vLLM runs (vLLM turns
  its custom ops off under Inductor). Out of place.
* ``vllm_vendor``: vLLM's CUDA kernel ``fused_add_rms_norm(input, residual, weight, epsilon)``. In place: ``input``
  becomes the output and ``residual`` becomes ``input + residual``. Found through ``vllm._custom_ops`` when vLLM
  imports; otherwise through the kernel library of a vLLM wheel named by ``INFERCRANE_VLLM_OPS_LIB``
  (``torch.ops.load_library`` then ``torch.ops._C.fused_add_rms_norm``).

torch is imported inside the functions only.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import types
from pathlib import Path
from typing import Any, Callable

VLLM_LIB_ENV = "INFERCRANE_VLLM_OPS_LIB"
VLLM_VERSION_ENV = "INFERCRANE_VLLM_VERSION"
VLLM_LIB_NAMES = ("_C_stable_libtorch.abi3.so", "_C.abi3.so")
COMPILE_SETTINGS = "torch.compile(fn, dynamic=False, fullgraph=True), Inductor default mode, one compile per row count"


# --------------------------------------------------------------------------------------------- eager


def fused_add_rmsnorm_eager(x: Any, residual: Any, weight: Any, eps: float) -> tuple[Any, Any]:
    """Out of place: ``(out, residual_out)`` in the storage dtype, computed in float32 as vLLM's native path does."""
    import torch

    summed = x.to(torch.float32) + residual.to(torch.float32)
    residual_out = summed.to(x.dtype)
    variance = summed.pow(2).mean(dim=-1, keepdim=True)
    out = (summed * torch.rsqrt(variance + eps)).to(x.dtype) * weight
    return out, residual_out


def eager_available() -> tuple[bool, str]:
    try:
        import torch  # noqa: F401
    except Exception as e:
        return False, f"torch is not importable: {type(e).__name__}: {e}"
    return True, ""


def load_eager(spec: Any) -> Callable[..., Any]:
    return fused_add_rmsnorm_eager


# --------------------------------------------------------------------------------------------- torch.compile


def _cxx_compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def torch_compile_available() -> tuple[bool, str]:
    """CUDA: available when torch and Triton import. CPU: available for the functional (correctness) run when a C++
    compiler is on PATH, since Inductor's CPU backend compiles C++; it is slow to compile but checks the same graph."""
    try:
        import torch
    except Exception as e:
        return False, f"torch is not importable: {type(e).__name__}: {e}"
    if not hasattr(torch, "compile"):
        return False, f"torch {torch.__version__} has no torch.compile"
    if torch.cuda.is_available():
        try:
            import triton  # noqa: F401
        except Exception as e:
            return False, f"Inductor's CUDA backend needs Triton, which is not importable: {type(e).__name__}: {e}"
        return True, ""
    if _cxx_compiler() is None:
        return False, "no CUDA device, and no C++ compiler (g++/c++/clang++ or $CXX) for Inductor's CPU backend"
    return True, ""


def _fresh_copy(fn: Callable[..., Any], tag: str) -> Callable[..., Any]:
    """A new function object with its own code object, so Dynamo keeps a separate cache for it."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{tag}")
    copy = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = f"{fn.__qualname__}_{tag}"
    return copy


class PerShapeCompiled:
    """Compiles the eager function once per input shape on first use; later calls reuse that shape's graph.

    The first call for a shape pays the compile; the harness's correctness checks and warm-up make that call, so
    no compile falls inside a timed region.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        self._compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}

    @property
    def compiled_shapes(self) -> list[tuple[Any, ...]]:
        return list(self._compiled)

    def __call__(self, x: Any, residual: Any, weight: Any, eps: float) -> Any:
        key = (tuple(x.shape), str(x.dtype), x.device.type)
        compiled = self._compiled.get(key)
        if compiled is None:
            import torch

            tag = "rows" + "x".join(str(d) for d in x.shape)
            compiled = torch.compile(_fresh_copy(self._fn, tag), dynamic=False, fullgraph=True)
            self._compiled[key] = compiled
        return compiled(x, residual, weight, eps)


def load_torch_compile(spec: Any) -> Callable[..., Any]:
    return PerShapeCompiled(fused_add_rmsnorm_eager)


def describe_torch_compile() -> dict[str, str]:
    import torch

    return {"settings": COMPILE_SETTINGS, "torch": torch.__version__}


# --------------------------------------------------------------------------------------------- vLLM vendor kernel


def vllm_version_from_path(path: str | os.PathLike[str]) -> str | None:
    """vLLM's version from a wheel file name or a ``vllm-X.Y.Z.dist-info`` next to the library's package folder."""
    p = Path(path)
    for part in p.parts:
        m = re.match(r"^vllm-(\d+\.\d+(?:\.\d+)?[^-/]*?)(?:\.dist-info|-|$)", part)
        if m:
            return m.group(1)
    package_dir = p.parent
    for info in sorted(package_dir.parent.glob("vllm-*.dist-info")):
        m = re.match(r"^vllm-(.+)\.dist-info$", info.name)
        if m:
            return m.group(1)
    return None


@functools.lru_cache(maxsize=1)
def _vllm_route() -> tuple[Callable[..., Any] | None, dict[str, str], str]:
    """Find vLLM's kernel: ``(fn, info, "")`` or ``(None, {}, reason)``. Cached: loading a library is once-only."""
    try:
        import torch
    except Exception as e:
        return None, {}, f"torch is not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return None, {}, "no CUDA device: vLLM's fused_add_rms_norm runs on CUDA tensors only"
    try:
        import vllm
        from vllm import _custom_ops as vllm_ops

        fn = vllm_ops.fused_add_rms_norm
        return fn, {"route": "vllm._custom_ops.fused_add_rms_norm", "vllm": str(vllm.__version__),
                    "vllm_file": str(getattr(vllm, "__file__", ""))}, ""
    except Exception as e:
        import_error = f"{type(e).__name__}: {e}"
    lib = os.environ.get(VLLM_LIB_ENV, "").strip()
    if not lib:
        return None, {}, (
            f"vLLM not importable ({import_error}); to use the kernel library of a vLLM wheel without importing "
            f"vLLM, set {VLLM_LIB_ENV} to its {' or '.join(VLLM_LIB_NAMES)}"
        )
    path = Path(lib).expanduser()
    if not path.is_file():
        return None, {}, f"vLLM not importable ({import_error}) and {VLLM_LIB_ENV}={lib} is not a file"
    try:
        torch.ops.load_library(str(path))
    except Exception as e:
        return None, {}, (
            f"vLLM not importable ({import_error}); loading {path} failed: {type(e).__name__}: {e} "
            "(a library built for another torch/CUDA version does not load)"
        )
    try:
        op = torch.ops._C.fused_add_rms_norm
    except (AttributeError, RuntimeError) as e:
        return None, {}, f"loaded {path} but it registers no torch.ops._C.fused_add_rms_norm ({type(e).__name__}: {e})"
    version = os.environ.get(VLLM_VERSION_ENV, "").strip() or vllm_version_from_path(path)
    return op, {
        "route": f"torch.ops.load_library({path.name}) -> torch.ops._C.fused_add_rms_norm",
        "library": str(path),
        "vllm": version or "unknown",
        "vllm_version_source": (
            VLLM_VERSION_ENV if os.environ.get(VLLM_VERSION_ENV, "").strip() else ("path" if version else "unknown")
        ),
        "vllm_import_error": import_error,
    }, ""


def vllm_available() -> tuple[bool, str]:
    fn, _, reason = _vllm_route()
    return (fn is not None), reason


def load_vllm(spec: Any) -> Callable[..., Any]:
    fn, _, reason = _vllm_route()
    if fn is None:
        from infercrane.errors import UnavailableError

        raise UnavailableError(f"vLLM's vendor kernel is unavailable: {reason}")
    return fn


def describe_vllm() -> dict[str, str]:
    return dict(_vllm_route()[1])

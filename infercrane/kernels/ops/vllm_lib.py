"""Finding one of vLLM's vendor kernels, for any op whose baseline is vLLM's own CUDA kernel.

Two routes, tried in order:

1. ``vllm._custom_ops.<name>`` when vLLM imports (its Python wrapper around ``torch.ops._C.<name>``);
2. otherwise the kernel library of a vLLM wheel named by ``INFERCRANE_VLLM_OPS_LIB`` (one of
   ``VLLM_LIB_NAMES``): ``torch.ops.load_library`` (once per path per process) then ``torch.ops._C.<name>``. The
   version comes from ``INFERCRANE_VLLM_VERSION``, else from the library's path (wheel folder or dist-info).

``resolve_vllm_op(name)`` returns ``(fn, info, "")`` or ``(None, {}, reason)`` and never raises; callers cache it
(``rowwise.Baselines`` does, once per process for each op). torch is imported inside the functions only.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Callable

VLLM_LIB_ENV = "INFERCRANE_VLLM_OPS_LIB"
VLLM_VERSION_ENV = "INFERCRANE_VLLM_VERSION"
VLLM_LIB_NAMES = ("_C_stable_libtorch.abi3.so", "_C.abi3.so")

Route = tuple["Callable[..., Any] | None", dict[str, str], str]


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


@functools.lru_cache(maxsize=None)
def _load_library(path: str) -> str:
    """``torch.ops.load_library(path)`` once per path per process (a failure raises and is not cached)."""
    import torch

    torch.ops.load_library(path)
    return ""


def resolve_vllm_op(name: str) -> Route:
    """Find vLLM's kernel ``name`` (e.g. ``"rms_norm"``): ``(fn, info, "")`` or ``(None, {}, reason)``."""
    try:
        import torch
    except Exception as e:
        return None, {}, f"torch is not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return None, {}, f"no CUDA device: vLLM's {name} runs on CUDA tensors only"
    try:
        import vllm
        from vllm import _custom_ops as vllm_ops

        fn = getattr(vllm_ops, name)
        return fn, {"route": f"vllm._custom_ops.{name}", "vllm": str(vllm.__version__),
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
        _load_library(str(path))
    except Exception as e:
        return None, {}, (
            f"vLLM not importable ({import_error}); loading {path} failed: {type(e).__name__}: {e} "
            "(a library built for another torch/CUDA version does not load)"
        )
    try:
        op = getattr(torch.ops._C, name)
    except (AttributeError, RuntimeError) as e:
        return None, {}, f"loaded {path} but it registers no torch.ops._C.{name} ({type(e).__name__}: {e})"
    version = os.environ.get(VLLM_VERSION_ENV, "").strip() or vllm_version_from_path(path)
    return op, {
        "route": f"torch.ops.load_library({path.name}) -> torch.ops._C.{name}",
        "library": str(path),
        "vllm": version or "unknown",
        "vllm_version_source": (
            VLLM_VERSION_ENV if os.environ.get(VLLM_VERSION_ENV, "").strip() else ("path" if version else "unknown")
        ),
        "vllm_import_error": import_error,
    }, ""


def route_available(route: Route) -> tuple[bool, str]:
    """``available()`` of a resolved route."""
    fn, _, reason = route
    return (fn is not None), reason


def route_kernel(route: Route) -> Callable[..., Any]:
    """The kernel of a resolved route; UnavailableError with the route's reason when there is none."""
    fn, _, reason = route
    if fn is None:
        from infercrane.errors import UnavailableError

        raise UnavailableError(f"vLLM's vendor kernel is unavailable: {reason}")
    return fn

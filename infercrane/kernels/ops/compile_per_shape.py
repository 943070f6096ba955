"""The ``torch.compile`` baseline's machinery, for any op: one compiled graph per input shape.

``PerShapeCompiled(fn)`` compiles ``torch.compile(fn, dynamic=False, fullgraph=True)`` (Inductor, default mode)
afresh for every shape of the first argument (the ``[rows, hidden]`` row tensor of every op here): each shape gets
its own code object (``fresh_copy``), so every shape owns one compiled graph and no shape can fall back to eager
through Dynamo's recompile limit. This is what a compiled vLLM runs (vLLM turns its custom ops off under Inductor).

torch is imported inside the functions only.
"""
from __future__ import annotations

import os
import shutil
import types
from typing import Any, Callable

COMPILE_SETTINGS = "torch.compile(fn, dynamic=False, fullgraph=True), Inductor default mode, one compile per row count"


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


def fresh_copy(fn: Callable[..., Any], tag: str) -> Callable[..., Any]:
    """A new function object with its own code object, so Dynamo keeps a separate cache for it."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{tag}")
    copy = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = f"{fn.__qualname__}_{tag}"
    return copy


class PerShapeCompiled:
    """Compiles the eager function once per shape of its first argument on first use; later calls reuse that graph.

    The first call for a shape pays the compile; the harness's correctness checks and warm-up make that call, so
    no compile falls inside a timed region.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        self._compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}

    @property
    def compiled_shapes(self) -> list[tuple[Any, ...]]:
        return list(self._compiled)

    def __call__(self, x: Any, *rest: Any) -> Any:
        key = (tuple(x.shape), str(x.dtype), x.device.type)
        compiled = self._compiled.get(key)
        if compiled is None:
            import torch

            tag = "rows" + "x".join(str(d) for d in x.shape)
            compiled = torch.compile(fresh_copy(self._fn, tag), dynamic=False, fullgraph=True)
            self._compiled[key] = compiled
        return compiled(x, *rest)


def describe_torch_compile() -> dict[str, str]:
    import torch

    return {"settings": COMPILE_SETTINGS, "torch": torch.__version__}

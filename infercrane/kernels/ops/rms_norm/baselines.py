"""The baselines a user would pick for RMSNorm (no residual).

* ``eager``: plain PyTorch ops the way vLLM's native (non-custom-op) path computes ``RMSNorm.forward_native``
  without a residual: cast x to float32, ``x * rsqrt(mean(x^2) + eps)`` in float32, round to the storage dtype,
  multiply by the weight in the storage dtype. Out of place: ``fn(x, weight, eps) -> out``.
* ``torch_compile``: ``torch.compile(eager, dynamic=False, fullgraph=True)`` (Inductor, default mode), compiled
  afresh for every row count (``infercrane.kernels.ops.compile_per_shape``): what a compiled vLLM runs (vLLM turns
  its custom ops off under Inductor). Out of place.
* ``vllm_vendor``: vLLM's CUDA kernel ``rms_norm(out, input, weight, epsilon)``. In place: ``fn(out, x, weight,
  eps) -> None``, ``out`` holds the result, ``x`` is untouched. Found through ``vllm._custom_ops.rms_norm`` when
  vLLM imports; otherwise ``torch.ops._C.rms_norm`` from the kernel library of a vLLM wheel named by
  ``INFERCRANE_VLLM_OPS_LIB`` (``infercrane.kernels.ops.vllm_lib``).

torch is imported inside the functions only.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from infercrane.kernels.ops.compile_per_shape import COMPILE_SETTINGS, PerShapeCompiled, describe_torch_compile
from infercrane.kernels.ops.compile_per_shape import torch_compile_available
from infercrane.kernels.ops.vllm_lib import VLLM_LIB_ENV, resolve_vllm_op, route_available, route_kernel

__all__ = ["COMPILE_SETTINGS", "VLLM_LIB_ENV", "VLLM_OP", "describe_torch_compile", "describe_vllm",
           "eager_available", "load_eager", "load_torch_compile", "load_vllm", "rms_norm_eager",
           "torch_compile_available", "vllm_available"]
VLLM_OP = "rms_norm"


# --------------------------------------------------------------------------------------------- eager


def rms_norm_eager(x: Any, weight: Any, eps: float) -> Any:
    """Out of place: ``out`` in the storage dtype, computed in float32 as vLLM's native path does."""
    import torch

    xf = x.to(torch.float32)
    variance = xf.pow(2).mean(dim=-1, keepdim=True)
    return (xf * torch.rsqrt(variance + eps)).to(x.dtype) * weight


def eager_available() -> tuple[bool, str]:
    try:
        import torch  # noqa: F401
    except Exception as e:
        return False, f"torch is not importable: {type(e).__name__}: {e}"
    return True, ""


def load_eager(spec: Any) -> Callable[..., Any]:
    return rms_norm_eager


# --------------------------------------------------------------------------------------------- torch.compile


def load_torch_compile(spec: Any) -> Callable[..., Any]:
    return PerShapeCompiled(rms_norm_eager)


# --------------------------------------------------------------------------------------------- vLLM vendor kernel


@functools.lru_cache(maxsize=1)
def _vllm_route() -> tuple[Callable[..., Any] | None, dict[str, str], str]:
    """vLLM's ``rms_norm``, found once per process (loading a library is once-only)."""
    return resolve_vllm_op(VLLM_OP)


def vllm_available() -> tuple[bool, str]:
    return route_available(_vllm_route())


def load_vllm(spec: Any) -> Callable[..., Any]:
    return route_kernel(_vllm_route())


def describe_vllm() -> dict[str, str]:
    return dict(_vllm_route()[1])

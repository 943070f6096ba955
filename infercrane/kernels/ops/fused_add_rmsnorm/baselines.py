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

The op-neutral machinery lives in ``infercrane.kernels.ops.compile_per_shape`` (the per-shape compile) and
``infercrane.kernels.ops.vllm_lib`` (finding a vLLM kernel); this module binds them to this op.
torch is imported inside the functions only.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from infercrane.kernels.ops.compile_per_shape import COMPILE_SETTINGS, PerShapeCompiled, describe_torch_compile
from infercrane.kernels.ops.compile_per_shape import fresh_copy as _fresh_copy  # noqa: F401 (tests use this name)
from infercrane.kernels.ops.compile_per_shape import torch_compile_available
from infercrane.kernels.ops.vllm_lib import (  # noqa: F401 (re-exported: this module's public names)
    VLLM_LIB_ENV,
    VLLM_LIB_NAMES,
    VLLM_VERSION_ENV,
    resolve_vllm_op,
    route_available,
    route_kernel,
    vllm_version_from_path,
)

__all__ = ["COMPILE_SETTINGS", "PerShapeCompiled", "VLLM_LIB_ENV", "VLLM_LIB_NAMES", "VLLM_VERSION_ENV",
           "describe_torch_compile", "describe_vllm", "eager_available", "fused_add_rmsnorm_eager", "load_eager",
           "load_torch_compile", "load_vllm", "torch_compile_available", "vllm_available", "vllm_version_from_path"]
VLLM_OP = "fused_add_rms_norm"


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
# (``infercrane.kernels.ops.compile_per_shape``: availability, one compiled graph per row count)


def load_torch_compile(spec: Any) -> Callable[..., Any]:
    return PerShapeCompiled(fused_add_rmsnorm_eager)


# --------------------------------------------------------------------------------------------- vLLM vendor kernel
# (``infercrane.kernels.ops.vllm_lib``: the two routes to vLLM's kernels)


@functools.lru_cache(maxsize=1)
def _vllm_route() -> tuple[Callable[..., Any] | None, dict[str, str], str]:
    """vLLM's ``fused_add_rms_norm``, found once per process (loading a library is once-only)."""
    return resolve_vllm_op(VLLM_OP)


def vllm_available() -> tuple[bool, str]:
    return route_available(_vllm_route())


def load_vllm(spec: Any) -> Callable[..., Any]:
    return route_kernel(_vllm_route())


def describe_vllm() -> dict[str, str]:
    return dict(_vllm_route()[1])

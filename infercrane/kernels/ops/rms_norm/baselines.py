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

The machinery (the per-shape compile, finding vLLM's kernel) is shared by the row-wise ops
(``infercrane.kernels.ops.rowwise.Baselines``); this module writes the eager function and binds it. torch is imported
inside the functions only.
"""
from __future__ import annotations

from typing import Any

from infercrane.kernels.ops.rowwise import Baselines

VLLM_OP = "rms_norm"


def rms_norm_eager(x: Any, weight: Any, eps: float) -> Any:
    """Out of place: ``out`` in the storage dtype, computed in float32 as vLLM's native path does."""
    import torch

    xf = x.to(torch.float32)
    variance = xf.pow(2).mean(dim=-1, keepdim=True)
    return (xf * torch.rsqrt(variance + eps)).to(x.dtype) * weight


BASELINES = Baselines(rms_norm_eager, VLLM_OP)

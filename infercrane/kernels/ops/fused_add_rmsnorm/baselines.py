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

The machinery (the per-shape compile, finding vLLM's kernel) is shared by the row-wise ops
(``infercrane.kernels.ops.rowwise.Baselines``); this module writes the eager function and binds it. torch is imported
inside the functions only.
"""
from __future__ import annotations

from typing import Any

from infercrane.kernels.ops.rowwise import Baselines

VLLM_OP = "fused_add_rms_norm"


def fused_add_rmsnorm_eager(x: Any, residual: Any, weight: Any, eps: float) -> tuple[Any, Any]:
    """Out of place: ``(out, residual_out)`` in the storage dtype, computed in float32 as vLLM's native path does."""
    import torch

    summed = x.to(torch.float32) + residual.to(torch.float32)
    residual_out = summed.to(x.dtype)
    variance = summed.pow(2).mean(dim=-1, keepdim=True)
    out = (summed * torch.rsqrt(variance + eps)).to(x.dtype) * weight
    return out, residual_out


BASELINES = Baselines(fused_add_rmsnorm_eager, VLLM_OP)

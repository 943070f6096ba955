"""The one float32 oracle for fused residual-add + RMSNorm.

Tests, the screening runner and every benchmark import this function; nobody re-declares it.
It mirrors vLLM's CUDA kernel: the bf16 sum ``x + residual`` is rounded to the storage dtype
(that rounded value is what vLLM writes back as the new residual, and what it normalizes),
then the normalization runs in float32.
"""
from __future__ import annotations

import torch


def fused_add_rmsnorm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(out, residual_out)`` in float32 for inputs of any float dtype.

    ``residual_out`` is ``x + residual`` computed in float32 and rounded once to the inputs' dtype, as the
    kernels store it; ``out = residual_out * rsqrt(mean(residual_out**2) + eps) * weight`` in float32.
    """
    summed = (x.float() + residual.float()).to(x.dtype).float()
    inv_rms = torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps)
    out = summed * inv_rms * weight.float()
    return out, summed

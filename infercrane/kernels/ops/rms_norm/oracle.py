"""The one float32 oracle for RMSNorm (no residual).

Tests, the screening runner and every benchmark import this function; nobody re-declares it.
"""
from __future__ import annotations

import torch


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``out = x * rsqrt(mean(x**2) + eps) * weight`` in float32 for inputs of any float dtype."""
    xf = x.float()
    inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return xf * inv_rms * weight.float()

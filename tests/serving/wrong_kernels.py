"""Norm kernels for the test server's ``--norm-kernel PATH.py:FUNCTION`` and vLLM's user-candidate provider (tests
only): two wrong, two correct.

Each follows InferCrane's in-place contract of fused residual-add + RMSNorm: ``fn(x, residual, weight, eps) -> None``,
afterwards ``residual`` holds ``x + residual`` and ``x`` holds ``rmsnorm(residual) * weight``.
"""
from __future__ import annotations

import torch

IN_PLACE = True


def fused_add_rmsnorm_eps_ignored(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Wrong: normalizes by ``rsqrt(mean(residual^2))``, without ``eps``."""
    residual.add_(x)
    summed = residual.float()
    x.copy_(summed * torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True)) * weight.float())


def fused_add_rmsnorm_correct(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Correct: InferCrane's eager baseline (vLLM's native path), written back in place."""
    from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager

    out, residual_out = fused_add_rmsnorm_eager(x, residual, weight, eps)
    residual.copy_(residual_out)
    x.copy_(out)


def fused_add_rmsnorm_bf16_rounded(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Correct within bfloat16 rounding: the eager baseline with its output rounded to bfloat16 (relative error up
    to 2^-9), as a kernel that stores its output in bfloat16."""
    fused_add_rmsnorm_correct(x, residual, weight, eps)
    x.copy_(x.to(torch.bfloat16).float())


RESIDUAL_DRIFT = 1 + 2 ** -7


def fused_add_rmsnorm_residual_drift(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                                     eps: float) -> None:
    """Wrong by less than any one call can show: the new residual comes out scaled by 1 + 2^-7 (0.8 %, under the
    bfloat16 tolerance of 1.6e-2 relative that vLLM's in-engine gate and the kernel lab allow), the normalized output
    right for that residual (RMSNorm does not see a scale). Layer after layer the residual stream grows by that
    factor (about 1.6x over SmolLM2's 60 norms), so earlier layers outweigh later ones: only the answers can tell."""
    summed = (residual.float() + x.float()) * RESIDUAL_DRIFT
    residual.copy_(summed)
    x.copy_(summed * torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float())

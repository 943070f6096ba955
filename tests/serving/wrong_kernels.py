"""Norm kernels for the test server's ``--norm-kernel PATH.py:FUNCTION`` (tests only): one wrong, two correct.

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


_SEEN: set[tuple[int, ...]] = set()


def fused_add_rmsnorm_wrong_after_first(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                                        eps: float) -> None:
    """Wrong where only the answers can tell: exact on the first call of each shape (the call vLLM's in-engine gate
    checks against its native implementation), then it leaves the weight out (``x <- rmsnorm(residual)``)."""
    shape = tuple(x.shape)
    if shape not in _SEEN:
        _SEEN.add(shape)
        fused_add_rmsnorm_correct(x, residual, weight, eps)
        return
    residual.add_(x)
    summed = residual.float()
    x.copy_(summed * torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps))

"""Every implementation of RMSNorm (no residual) that the kernel lab screens, in screening order: baselines first
(what a user would otherwise run), then InferCrane's own kernels (``infercrane.kernels.ops.rowwise``); a user's
candidate file is added by ``infercrane.kernels.user_candidate``.

Contracts (``spec.RMSNormSpec``): out of place ``fn(x, weight, eps) -> out`` (eager, torch.compile); in place
``fn(out, x, weight, eps) -> None`` (vLLM's kernel and InferCrane's).
"""
from __future__ import annotations

from pathlib import Path

from infercrane.kernels.op import Implementation
from infercrane.kernels.ops.rowwise import STANDARD_KEYS, standard_implementations
from infercrane.kernels.ops.rms_norm import baselines

KEYS: tuple[str, ...] = STANDARD_KEYS


def implementations() -> tuple[Implementation, ...]:
    """The built-in implementations, in the order of ``KEYS``."""
    return standard_implementations(
        "infercrane.kernels.ops.rms_norm", Path(__file__).resolve().parent, baselines.BASELINES, op="rms_norm",
        eager_note="plain torch ops, float32 inside, rounded before the weight multiply (vLLM's forward_native)")

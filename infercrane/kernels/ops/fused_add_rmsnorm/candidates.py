"""Every implementation of fused residual-add + RMSNorm that the kernel lab screens, in screening order: baselines
first (what a user would otherwise run), then InferCrane's own kernels (``infercrane.kernels.ops.rowwise``); a
user's candidate file is added by ``infercrane.kernels.user_candidate``."""
from __future__ import annotations

from pathlib import Path

from infercrane.kernels.op import Implementation
from infercrane.kernels.ops.fused_add_rmsnorm import baselines
from infercrane.kernels.ops.rowwise import STANDARD_KEYS, standard_implementations

KEYS: tuple[str, ...] = STANDARD_KEYS


def implementations() -> tuple[Implementation, ...]:
    """The built-in implementations, in the order of ``KEYS``."""
    return standard_implementations(
        "infercrane.kernels.ops.fused_add_rmsnorm", Path(__file__).resolve().parent,
        baselines.BASELINES, op="fused_add_rmsnorm",
        eager_note="plain torch ops in the storage dtype, float32 inside (vLLM's native path)")

"""Fused residual-add + RMSNorm as vLLM's IR op ``fused_add_rms_norm`` (vLLM 0.22.1, ``vllm/ir/ops/layernorm.py``).

What the provider (``infercrane.vllm_plugin.providers``) cannot read from the spec: vLLM's signatures. The launch is
the spec's in-place contract ``(x, residual, weight, eps)`` under vLLM's names, writing both buffers as vLLM's
``vllm_c`` provider does; the implementation returns them. No postponed annotations: ``torch.library`` and vLLM read
these signatures.
"""
from typing import Any, Callable, Optional

from torch import Tensor

MUTATES = ("x", "x_residual")  # the launch's arguments it writes, by vLLM's names
INPLACE = True  # what vLLM's register_impl is told


def launch_function(body: Callable[..., None]) -> Callable[..., None]:
    """The opaque launch around ``body``."""
    def launch(x: Tensor, x_residual: Tensor, weight: Tensor, epsilon: float) -> None:
        body(x, x_residual, weight, epsilon)
    return launch


def functions(launch: Any, takes: Callable[..., bool]) -> tuple[Callable[..., Any], Callable[..., bool]]:
    """The implementation vLLM registers (the native's exact signature) and its ``supports_args``; ``takes(x, others,
    weight, variance_size)`` says whether the provider takes a call."""
    def fused_add_rms_norm(x: Tensor, x_residual: Tensor, weight: Optional[Tensor], epsilon: float,
                           variance_size: Optional[int] = None) -> tuple[Tensor, Tensor]:
        launch(x, x_residual, weight, epsilon)
        return x, x_residual

    def supports_args(x, x_residual, weight, epsilon, variance_size=None) -> bool:
        return takes(x, (x_residual,), weight, variance_size)

    return fused_add_rms_norm, supports_args

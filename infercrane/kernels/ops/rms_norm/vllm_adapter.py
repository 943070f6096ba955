"""RMSNorm as vLLM's IR op ``rms_norm`` (vLLM 0.22.1, ``vllm/ir/ops/layernorm.py``).

What the provider (``infercrane.vllm_plugin.providers``) cannot read from the spec: vLLM's signatures. The launch is
the spec's in-place contract ``(out, x, weight, eps)``; the implementation vLLM calls allocates ``out`` and returns it.
No postponed annotations: ``torch.library`` and vLLM read these signatures.
"""
from typing import Any, Callable, Optional

import torch
from torch import Tensor

MUTATES = ("out",)  # the launch's arguments it writes, by vLLM's names
INPLACE = False  # what vLLM's register_impl is told: it returns a new tensor


def launch_function(body: Callable[..., None]) -> Callable[..., None]:
    """The opaque launch around ``body``."""
    def launch(out: Tensor, x: Tensor, weight: Tensor, epsilon: float) -> None:
        body(out, x, weight, epsilon)
    return launch


def functions(launch: Any, takes: Callable[..., bool]) -> tuple[Callable[..., Any], Callable[..., bool]]:
    """The implementation vLLM registers (the native's exact signature) and its ``supports_args``; ``takes(x, others,
    weight, variance_size)`` says whether the provider takes a call."""
    def rms_norm(x: Tensor, weight: Optional[Tensor], epsilon: float, variance_size: Optional[int] = None) -> Tensor:
        out = torch.empty_like(x)
        launch(out, x, weight, epsilon)
        return out

    def supports_args(x, weight, epsilon, variance_size=None) -> bool:
        return takes(x, (), weight, variance_size)

    return rms_norm, supports_args

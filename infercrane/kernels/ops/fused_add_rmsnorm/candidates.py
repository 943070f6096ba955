"""Every implementation of fused residual-add + RMSNorm that the kernel lab screens, in screening order.

Baselines first (what a user would otherwise run), then InferCrane's own kernels; a user's candidate file is added
by ``user_implementation``. InferCrane's kernels live in sibling modules that are imported by module path only when
probed or loaded, so a module that is missing or broken shows as "skipped: <reason>".
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from infercrane.kernels.ops.fused_add_rmsnorm import baselines
from infercrane.kernels.registry import Implementation


_HERE = Path(__file__).resolve().parent
_PKG = "infercrane.kernels.ops.fused_add_rmsnorm"

KEYS: tuple[str, ...] = ("eager", "torch_compile", "vllm_vendor", "triton", "cuda")


def _module_available(module: str, attr: str) -> Callable[[], tuple[bool, str]]:
    def available() -> tuple[bool, str]:
        try:
            mod = importlib.import_module(f"{_PKG}.{module}")
        except ImportError as e:
            return False, f"{_PKG}.{module} is not importable: {e}"
        if not hasattr(mod, attr):
            return False, f"{_PKG}.{module} defines no {attr}()"
        probe = getattr(mod, "available", None)
        if probe is None:
            return False, f"{_PKG}.{module} defines no available()"
        ok, reason = probe()
        return bool(ok), reason

    return available


def _module_loader(module: str, attr: str) -> Callable[[Any], Callable[..., Any]]:
    def load(spec: Any) -> Callable[..., Any]:
        return getattr(importlib.import_module(f"{_PKG}.{module}"), attr)

    return load


def _module_describe(module: str) -> Callable[[], dict[str, str]]:
    """The module's own ``describe()`` (source hash, configurations compiled so far ...), if it has one."""

    def describe() -> dict[str, str]:
        import json

        fn = getattr(importlib.import_module(f"{_PKG}.{module}"), "describe", None)
        if fn is None:
            return {}
        return {str(k): v if isinstance(v, str) else json.dumps(v, default=str) for k, v in fn().items()}

    return describe


def _cuda_available() -> tuple[bool, str]:
    # The handwritten kernel compiles with NVRTC and launches through CuPy: it needs a device, whatever the module says.
    try:
        import torch
    except Exception as e:
        return False, f"torch is not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return False, "no GPU: the handwritten CUDA kernel (NVRTC via CuPy) runs on a CUDA device only"
    return _module_available("cuda_kernel", "fused_add_rmsnorm_cuda")()


def _cuda_only() -> tuple[bool, str]:
    return False, "functional run on CPU tensors: this kernel runs on a CUDA device only"


def _triton_on_cpu() -> tuple[bool, str]:
    import os

    if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes"):
        return True, ""
    return False, "functional run on CPU tensors: Triton runs on CPU only under TRITON_INTERPRET=1"


def implementations() -> tuple[Implementation, ...]:
    """The built-in implementations, in the order of ``KEYS``."""
    impls = (
        Implementation(
            key="eager",
            label="PyTorch eager",
            kind="baseline",
            in_place=False,
            source=f"{_HERE / 'baselines.py'}::fused_add_rmsnorm_eager",
            available=baselines.eager_available,
            load=baselines.load_eager,
            notes=("plain torch ops in the storage dtype, float32 inside (vLLM's native path)",),
        ),
        Implementation(
            key="torch_compile",
            label="torch.compile(dynamic=False)",
            kind="baseline",
            in_place=False,
            source=f"{_HERE / 'baselines.py'}::fused_add_rmsnorm_eager via torch.compile",
            available=baselines.torch_compile_available,
            load=baselines.load_torch_compile,
            notes=(
                "fresh compile per row count (own code object per shape, dynamic=False, fullgraph=True)",
                "compile happens on the first call of a shape: in the correctness checks and warm-up, never timed",
            ),
            describe=baselines.describe_torch_compile,
        ),
        Implementation(
            key="vllm_vendor",
            label="vLLM fused_add_rms_norm (vendor CUDA kernel)",
            kind="baseline",
            in_place=True,
            source="vllm._custom_ops.fused_add_rms_norm, or torch.ops._C.fused_add_rms_norm from "
            f"${baselines.VLLM_LIB_ENV}",
            available=baselines.vllm_available,
            load=baselines.load_vllm,
            describe=baselines.describe_vllm,
            runs_on_cpu=_cuda_only,
        ),
        Implementation(
            key="triton",
            label="InferCrane Triton kernel",
            kind="candidate",
            in_place=True,
            source=f"{_HERE / 'triton_kernel.py'}::fused_add_rmsnorm_triton",
            available=_module_available("triton_kernel", "fused_add_rmsnorm_triton"),
            load=_module_loader("triton_kernel", "fused_add_rmsnorm_triton"),
            describe=_module_describe("triton_kernel"),
            runs_on_cpu=_triton_on_cpu,
        ),
        Implementation(
            key="cuda",
            label="InferCrane handwritten CUDA kernel (NVRTC via CuPy)",
            kind="candidate",
            in_place=True,
            source=f"{_HERE / 'cuda_kernel.py'}::fused_add_rmsnorm_cuda",
            available=_cuda_available,
            load=_module_loader("cuda_kernel", "fused_add_rmsnorm_cuda"),
            describe=_module_describe("cuda_kernel"),
            runs_on_cpu=_cuda_only,
        ),
    )
    if tuple(i.key for i in impls) != KEYS:  # the listing and KEYS are one order; keep them so
        raise RuntimeError("candidates.implementations() is out of step with KEYS")
    return impls

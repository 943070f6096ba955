"""What the row-wise norm ops of InferCrane share: their baselines (``Baselines``: eager PyTorch, torch.compile and
vLLM's kernel, bound to an op's eager function and vLLM op name) and their listing: those baselines, then InferCrane's
Triton and CUDA kernels, in that order (``STANDARD_KEYS``).

An op's ``baselines.py`` writes its eager function and binds it (``BASELINES = Baselines(eager, vllm_op)``); its
``candidates.py`` calls ``standard_implementations`` with its package, those baselines and its notes.
InferCrane's kernels live in sibling modules of the op that are imported by module path only when probed or loaded,
so a module that is missing or broken shows as "skipped: <reason>". An op whose implementations differ writes its own
listing of ``op.Implementation``.

What their kernels share sits next to this module: ``cuda_rowwise.py`` (configuration, compile and launch) with
``rowwise.cuh`` (device code) for the handwritten CUDA kernels, ``triton_rowwise.py`` (availability, configuration,
compile and launch) with ``_triton_rowwise_source.py`` (device helpers) for the Triton kernels.
"""
from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path
from typing import Any, Callable

from infercrane.kernels.op import Implementation
from infercrane.kernels.ops import triton_rowwise, vllm_lib
from infercrane.kernels.ops.compile_per_shape import PerShapeCompiled, describe_torch_compile, torch_compile_available
from infercrane.kernels.ops.nvrtc import torch_sees_cuda
from infercrane.receipts.screen_result import Tolerance

STANDARD_KEYS: tuple[str, ...] = ("eager", "torch_compile", "vllm_vendor", "triton", "cuda")
# Row counts (tokens in flight) a row-wise norm is screened at: decode-sized batches by default, and the
# memory-bandwidth regime on request. An op's spec.py names them as its DEFAULT_ROWS and BANDWIDTH_ROWS.
DEFAULT_ROWS: tuple[int, ...] = (1, 8, 32, 128, 512)
BANDWIDTH_ROWS: tuple[int, ...] = (2048, 8192, 32768)


def norm_tolerances(roundings: int, bf16_bound: str, fp16_bound: str) -> dict[str, Tolerance]:
    """The row-wise norms' tolerances, one rule for each (u = unit roundoff of the storage dtype; bf16 keeps 8
    significant bits, u = 2^-8; fp16 u = 2^-11). A kernel that computes in float32 rounds the stored output once
    (<= u relative); vLLM's CUDA kernels and their native paths round intermediates too, ``roundings`` times in all
    for the op (<= ``bf16_bound`` and ``fp16_bound`` relative, as the op derives them). rtol is two ulps (bf16
    1.6e-2, 2 * 2^-7 ... 2^-6; fp16 2e-3, ~4u), which leaves headroom without admitting a wrong kernel. atol: where
    ``ref`` is near 0 (weight near 0, or cancellation) the rounding error of the intermediates (magnitude ~
    rms(out)) is absolute, so atol = scale * rms(ref). fp32: no storage rounding; reduction order only."""
    return {
        "bfloat16": Tolerance(dtype="bfloat16", rtol=1.6e-2, atol_scale=1e-2,
                              derivation=f"bf16 u=2^-8; up to {roundings} roundings in vLLM-style kernels "
                                         f"(<={bf16_bound}); rtol = 2 ulp = 1.6e-2; atol = 1e-2 * rms(ref) for "
                                         "near-zero elements"),
        "float16": Tolerance(dtype="float16", rtol=2e-3, atol_scale=1e-3,
                             derivation=f"fp16 u=2^-11; up to {roundings} roundings (<={fp16_bound}); rtol = 2e-3; "
                                        "atol = 1e-3 * rms(ref)"),
        "float32": Tolerance(dtype="float32", rtol=1e-5, atol_scale=1e-5,
                             derivation="fp32: reduction order only; rtol = 1e-5; atol = 1e-5 * rms(ref)"),
    }


def torch_importable() -> tuple[bool, str]:
    try:
        importlib.import_module("torch")  # importable is all that is asked
    except Exception as e:
        return False, f"torch is not importable: {type(e).__name__}: {e}"
    return True, ""


class Baselines:
    """An op's three baselines: ``eager`` (its PyTorch function, out of place), ``torch.compile`` of it
    (``compile_per_shape``: one compiled graph per row count) and vLLM's kernel named ``vllm_op`` (``vllm_lib``: found
    once per process, ``vllm_route``; loading a library is once-only)."""

    VLLM_LIB_ENV = vllm_lib.VLLM_LIB_ENV
    eager_available = staticmethod(torch_importable)
    torch_compile_available = staticmethod(torch_compile_available)
    describe_torch_compile = staticmethod(describe_torch_compile)

    def __init__(self, eager: Callable[..., Any], vllm_op: str) -> None:
        self.eager, self.vllm_op = eager, vllm_op
        self.vllm_route = functools.lru_cache(maxsize=1)(lambda: vllm_lib.resolve_vllm_op(vllm_op))

    def load_eager(self, spec: Any) -> Callable[..., Any]:
        return self.eager

    def load_torch_compile(self, spec: Any) -> Callable[..., Any]:
        return PerShapeCompiled(self.eager)

    def vllm_available(self) -> tuple[bool, str]:
        return vllm_lib.route_available(self.vllm_route())

    def load_vllm(self, spec: Any) -> Callable[..., Any]:
        return vllm_lib.route_kernel(self.vllm_route())

    def describe_vllm(self) -> dict[str, str]:
        return dict(self.vllm_route()[1])


def module_available(package: str, module: str, attr: str) -> Callable[[], tuple[bool, str]]:
    def available() -> tuple[bool, str]:
        try:
            mod = importlib.import_module(f"{package}.{module}")
        except ImportError as e:
            return False, f"{package}.{module} is not importable: {e}"
        if not hasattr(mod, attr):
            return False, f"{package}.{module} defines no {attr}()"
        probe = getattr(mod, "available", None)
        if probe is None:
            return False, f"{package}.{module} defines no available()"
        ok, reason = probe()
        return bool(ok), reason

    return available


def module_loader(package: str, module: str, attr: str) -> Callable[[Any], Callable[..., Any]]:
    def load(spec: Any) -> Callable[..., Any]:
        return getattr(importlib.import_module(f"{package}.{module}"), attr)

    return load


def module_describe(package: str, module: str) -> Callable[[], dict[str, str]]:
    """The module's own ``describe()`` (source hash, configurations compiled so far ...), if it has one."""

    def describe() -> dict[str, str]:
        fn = getattr(importlib.import_module(f"{package}.{module}"), "describe", None)
        if fn is None:
            return {}
        return {str(k): v if isinstance(v, str) else json.dumps(v, default=str) for k, v in fn().items()}

    return describe


def cuda_available(package: str, attr: str) -> Callable[[], tuple[bool, str]]:
    """The handwritten kernel compiles with NVRTC and launches through CuPy: it needs a device, whatever the module
    says."""
    def available() -> tuple[bool, str]:
        ok, why_not = torch_sees_cuda("no GPU: the handwritten CUDA kernel (NVRTC via CuPy) runs on a CUDA device only")
        return module_available(package, "cuda_kernel", attr)() if ok else (False, why_not)

    return available


def cuda_only() -> tuple[bool, str]:
    return False, "functional run on CPU tensors: this kernel runs on a CUDA device only"


def triton_on_cpu() -> tuple[bool, str]:
    if triton_rowwise.interpret():
        return True, ""
    return False, "functional run on CPU tensors: Triton runs on CPU only under TRITON_INTERPRET=1"


def standard_implementations(package: str, here: Path, baselines: Baselines, *, op: str,
                             eager_note: str) -> tuple[Implementation, ...]:
    """The five implementations of ``STANDARD_KEYS``: ``baselines`` (the op's ``baselines.BASELINES``, its eager
    function ``baselines.<op>_eager``) provides eager, torch.compile and vLLM's kernel; the op's
    ``triton_kernel.<op>_triton`` and ``cuda_kernel.<op>_cuda`` are InferCrane's kernels."""
    vllm_name = baselines.vllm_op
    impls = (
        Implementation(
            key="eager", label="PyTorch eager", kind="baseline", in_place=False,
            source=f"{here / 'baselines.py'}::{op}_eager", available=baselines.eager_available,
            load=baselines.load_eager, notes=(eager_note,),
        ),
        Implementation(
            key="torch_compile", label="torch.compile(dynamic=False)", kind="baseline", in_place=False,
            source=f"{here / 'baselines.py'}::{op}_eager via torch.compile",
            available=baselines.torch_compile_available, load=baselines.load_torch_compile,
            notes=(
                "fresh compile per row count (own code object per shape, dynamic=False, fullgraph=True)",
                "compile happens on the first call of a shape: in the correctness checks and warm-up, never timed",
            ),
            describe=baselines.describe_torch_compile,
        ),
        Implementation(
            key="vllm_vendor", label=f"vLLM {vllm_name} (vendor CUDA kernel)", kind="baseline", in_place=True,
            source=f"vllm._custom_ops.{vllm_name}, or torch.ops._C.{vllm_name} from ${baselines.VLLM_LIB_ENV}",
            available=baselines.vllm_available, load=baselines.load_vllm, describe=baselines.describe_vllm,
            runs_on_cpu=cuda_only,
        ),
        Implementation(
            key="triton", label="InferCrane Triton kernel", kind="candidate", in_place=True,
            source=f"{here / 'triton_kernel.py'}::{op}_triton",
            available=module_available(package, "triton_kernel", f"{op}_triton"),
            load=module_loader(package, "triton_kernel", f"{op}_triton"),
            describe=module_describe(package, "triton_kernel"), runs_on_cpu=triton_on_cpu,
        ),
        Implementation(
            key="cuda", label="InferCrane handwritten CUDA kernel (NVRTC via CuPy)", kind="candidate", in_place=True,
            source=f"{here / 'cuda_kernel.py'}::{op}_cuda", available=cuda_available(package, f"{op}_cuda"),
            load=module_loader(package, "cuda_kernel", f"{op}_cuda"), describe=module_describe(package, "cuda_kernel"),
            runs_on_cpu=cuda_only,
        ),
    )
    assert tuple(i.key for i in impls) == STANDARD_KEYS  # one order: the listing and its keys
    return impls

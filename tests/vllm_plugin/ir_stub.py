"""A stand-in for vLLM 0.22.1's IR op registry (``vllm.ir.op``), written for these tests: the parts of
``register_impl`` a provider must satisfy, and priority dispatch.

What it holds a provider to, as vLLM 0.22.1 does: ``register_impl(provider, *, supported=True, supports_args=None,
inplace=False)`` returns a decorator; the provider name is not reserved (``native``, ``unfused``) and matches
``[a-z_][a-z_0-9]*``; the implementation's schema (``torch.library.infer_schema``, which needs annotations) equals
the native's; ``supports_args`` has no keyword-only parameters and the native's parameter names and defaults;
``inplace`` only on ops that allow it. Dispatch walks the priority list and takes the first supported provider whose
``supports_args`` accepts the arguments (the last, native, accepts all). The native implementations are the
computations of ``vllm/ir/ops/layernorm.py`` written again: float32 inside, the new residual rounded to the dtype.
"""
from __future__ import annotations

import inspect
import re
from types import SimpleNamespace
from typing import Any, Callable

import torch
from torch import Tensor
from torch.library import infer_schema

RESERVED = ("native", "unfused")


class StubImpl:
    def __init__(self, provider: str, fn: Callable[..., Any], supported: bool,
                 supports_args: Callable[..., bool] | None, inplace: bool) -> None:
        self.provider, self.impl_fn, self.supported = provider, fn, supported
        self._supports_args, self.inplace = supports_args, inplace

    def supports_args(self, *args: Any) -> bool:
        return True if self._supports_args is None else self._supports_args(*args)


class StubIrOp:
    def __init__(self, name: str, native: Callable[..., Any], allow_inplace: bool) -> None:
        self.name, self.allow_inplace = name, allow_inplace
        self.signature = inspect.signature(native)
        self.schema = infer_schema(native, mutates_args=[])
        self.impls = {"native": StubImpl("native", native, True, None, False)}
        self.priority: list[str] = ["native"]

    def register_impl(self, provider: str, *, supported: bool = True,
                      supports_args: Callable[..., bool] | None = None, inplace: bool = False):
        assert provider not in RESERVED, f"provider name {provider} is reserved"
        assert re.match(r"^[a-z_][a-z_0-9]*$", provider), f"bad provider name {provider}"
        assert not inplace or self.allow_inplace, f"{self.name} takes no in-place implementation"

        def decorate(fn: Callable[..., Any]) -> StubImpl:
            assert provider not in self.impls, f"{provider} already registered"
            schema = infer_schema(fn, mutates_args=[])
            if schema != self.schema:
                raise ValueError(f"schema {schema} != native {self.schema}")
            if supports_args is not None:
                params = inspect.signature(supports_args).parameters
                assert not any(p.kind == p.KEYWORD_ONLY for p in params.values())
                assert [(p.name, p.default) for p in params.values()] == \
                    [(p.name, p.default) for p in self.signature.parameters.values()], "supports_args signature"
            impl = StubImpl(provider, fn, supported, supports_args, inplace)
            self.impls[provider] = impl
            return impl

        return decorate

    def dispatch(self, *args: Any) -> StubImpl:
        for name in self.priority:
            impl = self.impls[name]
            if impl.supported and impl.supports_args(*args):
                return impl
        return self.impls["native"]

    def __call__(self, *args: Any) -> Any:
        return self.dispatch(*args).impl_fn(*args)


def native_fused_add_rms_norm(x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float,
                              variance_size: int | None = None) -> tuple[Tensor, Tensor]:
    dtype = x.dtype
    s = x.to(torch.float32) + x_residual.to(torch.float32)
    residual = s.to(dtype)
    var = (s if variance_size is None else s[..., :variance_size]).pow(2).mean(dim=-1, keepdim=True)
    out = s * torch.rsqrt(var + epsilon)
    if weight is not None:
        out = out.to(weight.dtype) * weight
    return out.to(dtype), residual


def native_rms_norm(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
    dtype = x.dtype
    s = x.to(torch.float32)
    var = (s if variance_size is None else s[..., :variance_size]).pow(2).mean(dim=-1, keepdim=True)
    out = s * torch.rsqrt(var + epsilon)
    if weight is not None:
        out = out.to(weight.dtype) * weight
    return out.to(dtype)


def stub_ops() -> SimpleNamespace:
    """A fresh ``vllm.ir.ops`` namespace with both layernorm ops."""
    return SimpleNamespace(fused_add_rms_norm=StubIrOp("fused_add_rms_norm", native_fused_add_rms_norm, True),
                           rms_norm=StubIrOp("rms_norm", native_rms_norm, False))



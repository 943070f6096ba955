"""Correctness checks shared by the tests of InferCrane's fused residual-add + RMSNorm kernels.

Comparison rule (per output, elementwise, against ``oracle.fused_add_rmsnorm_ref``):
``|out - ref| <= atol + rtol * |ref|``, and every element finite. NaN never passes.

* ``residual`` (the stored sum): exact, ``atol = rtol = 0``. Kernel and oracle both add two 16-bit values in
  float32 and round once to the storage dtype (round to nearest even), so the bits must agree.
* ``out``: bf16 ``rtol = 2**-7`` (twice bf16's unit roundoff 2**-8: one rounding of the result plus float32
  differences in the reduction order and ``rsqrt``, which are ~1e-7 relative); fp16 ``rtol = 2**-10`` (twice
  fp16's unit roundoff 2**-11). ``atol = 1e-5`` covers results that round to zero or to subnormals.

These are deliberately stricter than the screen's ``infercrane.kernels.harness.correctness.TOLERANCES``: the screen
must admit vendor kernels that round up to three times (vLLM's), while InferCrane's own kernels round once and are
held to that here.

In-place kernels write their outputs over their inputs, so "poisoned outputs" are checked two ways: the
tensors sit inside NaN-filled guard rows (an out-of-bounds write shows as a changed guard), and every element
is compared with the oracle after the call; ``assert_unwritten_fails`` proves the comparison would catch an
element the kernel left untouched (the inputs themselves must fail it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest

# (rtol, atol) per dtype and output.
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "bfloat16": {"out": (2.0**-7, 1e-5), "residual": (0.0, 0.0)},
    "float16": {"out": (2.0**-10, 1e-5), "residual": (0.0, 0.0)},
}
GUARD_ROWS = 1


@dataclass
class Case:
    """One fresh problem: guarded buffers, the views the kernel gets, the oracle's answer."""

    rows: int
    hidden: int
    dtype_name: str
    eps: float
    buf_x: Any
    buf_res: Any
    x: Any
    residual: Any
    weight: Any
    x_in: Any
    residual_in: Any
    ref_out: Any
    ref_residual: Any


def make_case(rows: int, hidden: int, dtype_name: str = "bfloat16", device: str = "cpu", seed: int = 0,
              eps: float = 1e-6) -> Case:
    """Random inputs (never zeros: x ~ N(0,1), residual ~ N(0, 2^2), weight ~ N(0,1) + 0.5) in NaN guard rows."""
    import torch

    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=g)
    res = 2.0 * torch.randn(rows, hidden, generator=g)
    w = torch.randn(hidden, generator=g) + 0.5
    buf_x = torch.full((rows + 2 * GUARD_ROWS, hidden), float("nan"), dtype=dtype, device=device)
    buf_res = torch.full((rows + 2 * GUARD_ROWS, hidden), float("nan"), dtype=dtype, device=device)
    xv = buf_x[GUARD_ROWS:GUARD_ROWS + rows]
    rv = buf_res[GUARD_ROWS:GUARD_ROWS + rows]
    xv.copy_(x.to(dtype))
    rv.copy_(res.to(dtype))
    weight = w.to(dtype).to(device)
    from infercrane.kernels.ops.fused_add_rmsnorm.oracle import fused_add_rmsnorm_ref

    ref_out, ref_res = fused_add_rmsnorm_ref(xv.cpu(), rv.cpu(), weight.cpu(), eps)
    return Case(rows, hidden, dtype_name, eps, buf_x, buf_res, xv, rv, weight, xv.cpu().clone(), rv.cpu().clone(),
                ref_out, ref_res)


def _compare(name: str, got: Any, ref: Any, rtol: float, atol: float) -> str | None:
    """None when ``got`` passes the rule; otherwise a message with max abs/rel error and the first bad index."""
    import torch

    got = got.float().cpu()
    err = (got - ref).abs()
    ok = torch.isfinite(got) & (err <= atol + rtol * ref.abs())
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()
    first = tuple(int(i) for i in bad[0])
    finite = torch.isfinite(err)
    max_abs = float(err[finite].max()) if bool(finite.any()) else float("nan")
    rel = err / ref.abs().clamp_min(1e-30)
    max_rel = float(rel[finite].max()) if bool(finite.any()) else float("nan")
    return (f"{name}: {bad.shape[0]} of {got.numel()} elements fail |got-ref| <= {atol} + {rtol}*|ref|; "
            f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}; first bad index {first}: "
            f"got {float(got[first])}, ref {float(ref[first])}")


def check_case(case: Case, label: str = "") -> None:
    """Assert the in-place kernel's results in ``case`` match the oracle and the guard rows are untouched."""
    import torch

    rtol, atol = TOLERANCES[case.dtype_name]["out"]
    rrtol, ratol = TOLERANCES[case.dtype_name]["residual"]
    problems = [
        p for p in (
            _compare("residual", case.residual, case.ref_residual, rrtol, ratol),
            _compare("out", case.x, case.ref_out, rtol, atol),
        ) if p
    ]
    for name, buf in (("x", case.buf_x), ("residual", case.buf_res)):
        guards = torch.cat([buf[:GUARD_ROWS], buf[GUARD_ROWS + case.rows:]])
        if not bool(torch.isnan(guards).all()):
            problems.append(f"{name}: the kernel wrote outside its rows (guard rows changed)")
    assert not problems, f"{label} rows={case.rows} hidden={case.hidden} {case.dtype_name}:\n" + "\n".join(problems)


def assert_unwritten_fails(case: Case) -> None:
    """The rule must reject the untouched inputs, so an element a kernel skips cannot pass."""
    rtol, atol = TOLERANCES[case.dtype_name]["out"]
    assert _compare("out", case.x_in, case.ref_out, rtol, atol) is not None
    rrtol, ratol = TOLERANCES[case.dtype_name]["residual"]
    assert _compare("residual", case.residual_in, case.ref_residual, rrtol, ratol) is not None


def run_and_check(fn: Callable[..., Any], rows: int, hidden: int, dtype_name: str = "bfloat16",
                  device: str = "cpu", seed: int = 0, label: str = "", **kwargs: Any) -> Case:
    """Fresh case, one in-place call ``fn(x, residual, weight, eps, **kwargs)``, full check."""
    case = make_case(rows, hidden, dtype_name, device, seed)
    assert fn(case.x, case.residual, case.weight, case.eps, **kwargs) is None
    check_case(case, label)
    return case


@dataclass(frozen=True)
class FusedAddRMSNormChecks:
    make_case: Callable[..., Case]
    check_case: Callable[..., None]
    run_and_check: Callable[..., Case]
    assert_unwritten_fails: Callable[[Case], None]
    tolerances: dict[str, dict[str, tuple[float, float]]]


@pytest.fixture(scope="session")
def rmsnorm_checks() -> FusedAddRMSNormChecks:
    """The shared case builder and checker for fused residual-add + RMSNorm kernels."""
    return FusedAddRMSNormChecks(make_case, check_case, run_and_check, assert_unwritten_fails, TOLERANCES)

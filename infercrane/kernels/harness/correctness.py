"""Correctness of one implementation of fused residual-add + RMSNorm against the float32 oracle.

Method (every check, every row count):

* **Fresh inputs** from a new seed per check: ``x ~ N(0, s^2)``, ``residual ~ N(0, (2s)^2)``, ``weight ~ N(1, 0.5^2)``
  with the scale ``s`` cycling through ``CHECK_SCALES``; never zeros, never the same twice, the same for every
  implementation (the seed depends on the run's base seed, the row count and the check index only). Several checks
  per row count, so a kernel that returns a cached result passes at most the first.
* **Poisoned outputs**: an out-of-place implementation allocates its own outputs; before the call, blocks of the
  outputs' size are filled with NaN and released, so the allocator hands poisoned memory to a kernel that does not
  write everything. An in-place implementation's outputs are its inputs (fresh copies every check).
* **Contract**: out of place must return two new tensors of the inputs' shape/dtype/device and leave the inputs
  untouched; in place must leave ``weight`` untouched (so must out of place). ``x`` and ``residual`` sit between
  NaN guard rows: a write past them is a contract failure, a read past them poisons the result.
* **The stream**: on CUDA, inputs, call and comparison all run on a freshly created, non-default current stream,
  and results are read after synchronizing that stream only; a kernel that launches on another stream without
  making the current one wait is read before it finishes and fails.
* **Comparison**: both ``out`` and ``residual_out`` against ``fused_add_rmsnorm_ref`` with the rule in
  ``TOLERANCES``; NaN and inf never pass. A failure reports max abs/rel error, the first bad (row, col) and the count.
"""
from __future__ import annotations

from typing import Any, Callable, Literal

from pydantic import Field

from infercrane.receipts.base import Strict

COMPARISON_RULE = "|got - ref| <= atol + rtol * |ref| elementwise, atol = atol_scale * rms(ref); NaN/inf never pass"
# Input scale ``s`` of check i is CHECK_SCALES[i % len]: large and small magnitudes, both well inside bf16's range.
CHECK_SCALES: tuple[float, ...] = (1.0, 16.0, 1.0 / 16.0)
DEFAULT_CHECKS = 3
GUARD_ROWS = 1  # NaN rows before and after x and residual


class Tolerance(Strict):
    """``|got - ref| <= atol + rtol * |ref|`` with ``atol = atol_scale * rms(ref)`` of the tensor compared."""

    dtype: str
    rtol: float = Field(gt=0)
    atol_scale: float = Field(gt=0)
    rule: str = COMPARISON_RULE
    derivation: str


# Tolerances are data. Derivations (u = unit roundoff of the storage dtype; bf16 keeps 8 significant bits, u = 2^-8):
# * bf16: a kernel that computes in float32 rounds the stored output once (<= u relative); vLLM's CUDA kernel and
#   its native path round the normalized value before multiplying by the weight and round the product again, so
#   |err| <= ~3u = 1.2e-2 relative. rtol = 1.6e-2 (two bf16 ulps, 2 * 2^-7 ... 2^-6) leaves headroom without
#   admitting a wrong kernel. atol: where ``ref`` is near 0 (weight near 0, or cancellation) the rounding error of
#   the intermediates (magnitude ~ rms(out)) is absolute, so atol = 1e-2 * rms(ref). The new residual is one rounded
#   sum; the oracle rounds it the same way, so it normally matches exactly and is held to the same rule.
# * fp16 (u = 2^-11): the same reasoning, rtol = 2e-3 (~4u), atol = 1e-3 * rms(ref).
# * fp32: no storage rounding; reduction order only: rtol = 1e-5, atol = 1e-5 * rms(ref).
TOLERANCES: dict[str, Tolerance] = {
    "bfloat16": Tolerance(dtype="bfloat16", rtol=1.6e-2, atol_scale=1e-2,
                          derivation="bf16 u=2^-8; up to 3 roundings in vLLM-style kernels (<=1.2e-2); "
                                     "rtol = 2 ulp = 1.6e-2; atol = 1e-2 * rms(ref) for near-zero elements"),
    "float16": Tolerance(dtype="float16", rtol=2e-3, atol_scale=1e-3,
                         derivation="fp16 u=2^-11; up to 3 roundings (<=1.5e-3); rtol = 2e-3; atol = 1e-3 * rms(ref)"),
    "float32": Tolerance(dtype="float32", rtol=1e-5, atol_scale=1e-5,
                         derivation="fp32: reduction order only; rtol = 1e-5; atol = 1e-5 * rms(ref)"),
}


class TensorCheck(Strict):
    """One output tensor of one check compared with the oracle."""

    name: Literal["out", "residual_out"]
    passed: bool
    numel: int
    atol: float
    rtol: float
    mismatched: int = Field(ge=0, description="elements outside the tolerance, NaN/inf included")
    nonfinite: int = Field(ge=0, description="NaN or inf elements")
    max_abs_err: float | None = Field(description="over finite elements; None when none is finite")
    max_rel_err: float | None = Field(description="|got-ref|/|ref| over finite elements with |ref| > atol")
    first_bad_index: tuple[int, int] | None = Field(description="(row, col) of the first bad element, row-major")


class CheckResult(Strict):
    check_index: int
    seed: int
    input_scale: float
    passed: bool
    contract_error: str | None = None
    tensors: list[TensorCheck] = Field(default_factory=list)


class CorrectnessResult(Strict):
    """All checks of one implementation at one row count."""

    rows: int
    hidden_size: int
    dtype: str
    device: str
    stream: str = Field(description="where the call ran and how results were read")
    passed: bool
    tolerance: Tolerance
    checks: list[CheckResult]

    def failure_summary(self) -> str:
        """One line naming the first failing check, for error messages."""
        for c in self.checks:
            if c.passed:
                continue
            if c.contract_error:
                return f"rows={self.rows} check {c.check_index} (seed {c.seed}): {c.contract_error}"
            for t in c.tensors:
                if not t.passed:
                    return (
                        f"rows={self.rows} check {c.check_index} (seed {c.seed}): {t.name}: {t.mismatched}/{t.numel} "
                        f"elements out of tolerance ({t.nonfinite} NaN/inf), max abs err {t.max_abs_err}, "
                        f"max rel err {t.max_rel_err}, first bad (row, col) {t.first_bad_index}"
                    )
        return ""


def check_seed(base_seed: int, rows: int, check_index: int) -> int:
    """Seed of one check: distinct per (rows, check), identical for every implementation."""
    return (int(base_seed) * 1_000_003 + int(rows) * 1_009 + int(check_index)) % (2**63)


def torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def make_inputs(rows: int, hidden: int, dtype: str, device: Any, seed: int, scale: float) -> tuple[Any, Any, Any]:
    """Fresh ``(x, residual, weight)`` from ``seed`` on ``device`` (generated there: no host round trip)."""
    import torch

    dev = torch.device(device)
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(seed))
    dt = torch_dtype(dtype)
    x = (torch.randn(rows, hidden, generator=gen, device=dev, dtype=torch.float32) * scale).to(dt)
    residual = (torch.randn(rows, hidden, generator=gen, device=dev, dtype=torch.float32) * (2.0 * scale)).to(dt)
    weight = (1.0 + 0.5 * torch.randn(hidden, generator=gen, device=dev, dtype=torch.float32)).to(dt)
    return x, residual, weight


def compare(name: Literal["out", "residual_out"], got: Any, ref: Any, tol: Tolerance) -> TensorCheck:
    """Compare ``got`` (any float dtype) with the float32 ``ref`` under ``tol``; runs on the current stream."""
    import torch

    # float64, so that the error of a garbage value near the dtype's maximum is still a finite number
    got64 = got.detach().to(torch.float64).reshape(ref.shape)
    ref64 = ref.to(torch.float64)
    ref_abs = ref64.abs()
    rms = float(torch.sqrt(torch.mean(ref64 * ref64)).item())
    atol = tol.atol_scale * rms
    diff = (got64 - ref64).abs()
    bound = atol + tol.rtol * ref_abs
    ok = diff <= bound  # NaN compares False: NaN/inf never pass
    bad = ~ok
    finite = torch.isfinite(got64)
    mismatched = int(bad.sum().item())
    nonfinite = int((~finite).sum().item())
    max_abs = float(diff[finite].max().item()) if nonfinite < got64.numel() else None
    rel_mask = finite & (ref_abs > atol)
    max_rel = float((diff[rel_mask] / ref_abs[rel_mask]).max().item()) if bool(rel_mask.any().item()) else None
    first_bad = None
    if mismatched:
        flat = int(torch.nonzero(bad.reshape(-1))[0].item())
        cols = int(ref.shape[-1])
        first_bad = (flat // cols, flat % cols)
    return TensorCheck(
        name=name, passed=mismatched == 0, numel=int(got64.numel()), atol=atol, rtol=tol.rtol, mismatched=mismatched,
        nonfinite=nonfinite, max_abs_err=max_abs, max_rel_err=max_rel, first_bad_index=first_bad,
    )


def _storage_ptr(t: Any) -> int:
    return int(t.untyped_storage().data_ptr())


def _poison_allocator(rows: int, hidden: int, dt: Any, device: Any, blocks: int = 2) -> None:
    """Fill freshly allocated output-sized blocks with NaN and free them, so the next allocations get NaN memory."""
    import torch

    held = [torch.full((rows, hidden), float("nan"), dtype=dt, device=device) for _ in range(blocks)]
    del held


def _run_one(
    fn: Callable[..., Any], in_place: bool, rows: int, hidden: int, eps: float, dtype: str, device: Any, seed: int,
    scale: float, tol: Tolerance, check_index: int,
) -> CheckResult:
    import torch

    from infercrane.kernels.ops.fused_add_rmsnorm.oracle import fused_add_rmsnorm_ref

    x_in, r_in, weight = make_inputs(rows, hidden, dtype, device, seed, scale)
    ref_out, ref_res = fused_add_rmsnorm_ref(x_in, r_in, weight, eps)
    x0, r0, w0 = x_in.clone(), r_in.clone(), weight.clone()
    # x and residual are the middle rows of NaN-filled buffers: a write outside them changes a guard row, a read
    # outside them brings NaN into the result.
    buf_x = torch.full((rows + 2 * GUARD_ROWS, hidden), float("nan"), dtype=x_in.dtype, device=x_in.device)
    buf_r = torch.full_like(buf_x, float("nan"))
    x, residual = buf_x[GUARD_ROWS:GUARD_ROWS + rows], buf_r[GUARD_ROWS:GUARD_ROWS + rows]
    x.copy_(x_in)
    residual.copy_(r_in)
    del x_in, r_in

    def result(contract_error: str | None = None, tensors: list[TensorCheck] | None = None) -> CheckResult:
        tensors = tensors or []
        passed = contract_error is None and bool(tensors) and all(t.passed for t in tensors)
        return CheckResult(check_index=check_index, seed=seed, input_scale=scale, passed=passed,
                           contract_error=contract_error, tensors=tensors)

    if in_place:
        fn(x, residual, weight, eps)
        got_out, got_res = x, residual
    else:
        _poison_allocator(rows, hidden, x.dtype, x.device)
        returned = fn(x, residual, weight, eps)
        if not isinstance(returned, (tuple, list)) or len(returned) != 2:
            return result(f"out-of-place contract: expected (out, residual_out), got {type(returned).__name__}")
        got_out, got_res = returned
        for name, t in (("out", got_out), ("residual_out", got_res)):
            if not isinstance(t, torch.Tensor):
                return result(f"out-of-place contract: {name} is a {type(t).__name__}, not a tensor")
            if tuple(t.shape) != (rows, hidden) or t.dtype != x.dtype or t.device != x.device:
                return result(
                    f"out-of-place contract: {name} is {tuple(t.shape)} {t.dtype} on {t.device}, expected "
                    f"{(rows, hidden)} {x.dtype} on {x.device}"
                )
            if _storage_ptr(t) in {_storage_ptr(x), _storage_ptr(residual), _storage_ptr(weight)}:
                return result(f"out-of-place contract: {name} shares memory with an input (must be a new tensor)")
        if not (torch.equal(x, x0) and torch.equal(residual, r0)):
            return result("out-of-place contract: the call modified x or residual (declare in_place=True if meant)")
    if not torch.equal(weight, w0):
        return result("contract: the call modified weight")
    for name, buf in (("x", buf_x), ("residual", buf_r)):
        guards = torch.cat([buf[:GUARD_ROWS], buf[GUARD_ROWS + rows:]])
        if not bool(torch.isnan(guards).all().item()):
            return result(f"contract: the call wrote outside {name} (a NaN guard row next to it changed)")
    return result(None, [compare("out", got_out, ref_out, tol), compare("residual_out", got_res, ref_res, tol)])


def check_implementation(
    fn: Callable[..., Any],
    *,
    in_place: bool,
    rows: int,
    hidden: int,
    eps: float,
    dtype: str = "bfloat16",
    device: Any = "cpu",
    checks: int = DEFAULT_CHECKS,
    base_seed: int = 0,
    tolerance: Tolerance | None = None,
) -> CorrectnessResult:
    """Run ``checks`` independent checks of ``fn`` at ``rows`` x ``hidden``; see the module docstring for the method.

    Exceptions raised by ``fn`` propagate (the isolation layer records them as a failed implementation).
    """
    import torch

    if checks < 1:
        raise ValueError(f"checks must be >= 1, got {checks}")
    tol = tolerance or TOLERANCES[dtype]
    dev = torch.device(device)
    results: list[CheckResult] = []
    if dev.type == "cuda":
        # A new stream is never the default stream; everything of a check is ordered on it, and only it is synced.
        stream = torch.cuda.Stream(device=dev)
        stream_note = "fresh non-default CUDA stream as current stream; results read after syncing only that stream"
        for i in range(checks):
            seed = check_seed(base_seed, rows, i)
            scale = CHECK_SCALES[i % len(CHECK_SCALES)]
            with torch.cuda.stream(stream):
                res = _run_one(fn, in_place, rows, hidden, eps, dtype, dev, seed, scale, tol, i)
            stream.synchronize()
            # The results are read. Now wait for stray work a kernel left on other streams, so that it cannot write
            # into memory the next check reuses.
            torch.cuda.synchronize(dev)
            results.append(res)
    else:
        stream_note = "cpu (no streams)"
        for i in range(checks):
            seed = check_seed(base_seed, rows, i)
            scale = CHECK_SCALES[i % len(CHECK_SCALES)]
            results.append(_run_one(fn, in_place, rows, hidden, eps, dtype, dev, seed, scale, tol, i))
    return CorrectnessResult(
        rows=rows, hidden_size=hidden, dtype=dtype, device=str(dev), stream=stream_note,
        passed=all(r.passed for r in results), tolerance=tol, checks=results,
    )

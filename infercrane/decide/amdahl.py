"""End-to-end ceiling of a kernel win on a decode step (Amdahl's law).

``f`` is the op's share of decode-step wall time as it runs today (with the best baseline, CUDA graphs):
``f = calls_per_step * baseline_t_us / (decode_step_ms * 1000)``. With op speedup ``s = baseline_t / candidate_t``:

* best possible step speedup (the op costs nothing): ``1 / (1 - f)``
* expected step speedup with this candidate:         ``1 / ((1 - f) + f / s)``

Both are reported as gains in percent (``(speedup - 1) * 100``), next to the win per call in nanoseconds.
"""
from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.errors import InputError


def _gain_percent(speedup: float) -> float:
    return (speedup - 1.0) * 100.0


class AmdahlCeiling(BaseModel):
    """Inputs and results of one Amdahl estimate; the results are re-checked against the inputs on load."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    calls_per_step: int = Field(ge=1, description="op calls per decode step (e.g. 2 per layer x 28 layers)")
    candidate_t_us: float = Field(gt=0, description="candidate time per call")
    baseline_t_us: float = Field(gt=0, description="best baseline's time per call")
    baseline: str = Field(min_length=1, description="which baseline baseline_t_us is")
    decode_step_ms: float = Field(gt=0, description="decode step wall time")
    decode_step_source: str = Field(
        min_length=1, description="'user: --decode-step-ms' or 'serving receipt <path>: tpot_p50 at concurrency c'"
    )
    rows: int | None = Field(default=None, ge=1, description="rows (decode batch) the op times are for")
    timing_mode: str | None = Field(default=None, description="timing mode of the op times")
    op_share: float = Field(ge=0, lt=1, description="f: the op's share of the decode step today")
    op_speedup: float = Field(gt=0, description="s = baseline_t / candidate_t")
    win_ns_per_call: float = Field(description="baseline_t - candidate_t, in ns (negative when slower)")
    best_possible_gain_percent: float = Field(description="(1 / (1 - f) - 1) * 100")
    expected_gain_percent: float = Field(description="(1 / ((1 - f) + f / s) - 1) * 100")

    @model_validator(mode="after")
    def _consistent(self) -> "AmdahlCeiling":
        f, s = _share_and_speedup(self.calls_per_step, self.candidate_t_us, self.baseline_t_us, self.decode_step_ms)
        expected = {
            "op_share": f,
            "op_speedup": s,
            "win_ns_per_call": (self.baseline_t_us - self.candidate_t_us) * 1000.0,
            "best_possible_gain_percent": _gain_percent(1.0 / (1.0 - f)),
            "expected_gain_percent": _gain_percent(1.0 / ((1.0 - f) + f / s)),
        }
        for name, value in expected.items():
            if not math.isclose(getattr(self, name), value, rel_tol=1e-9, abs_tol=1e-12):
                raise ValueError(f"{name}={getattr(self, name)!r} does not follow from the inputs (expected {value!r})")
        return self


def _share_and_speedup(calls: int, candidate_t_us: float, baseline_t_us: float, step_ms: float) -> tuple[float, float]:
    return calls * baseline_t_us / (step_ms * 1000.0), baseline_t_us / candidate_t_us


def amdahl_ceiling(
    *,
    calls_per_step: int,
    candidate_t_us: float,
    baseline_t_us: float,
    baseline: str,
    decode_step_ms: float,
    decode_step_source: str,
    rows: int | None = None,
    timing_mode: str | None = None,
) -> AmdahlCeiling:
    """Compute the ceiling; bad inputs raise InputError naming the field (before any decision uses them)."""
    if isinstance(calls_per_step, bool) or not isinstance(calls_per_step, int) or calls_per_step < 1:
        raise InputError(f"calls_per_step must be a positive integer, got {calls_per_step!r}")
    for name, value in (
        ("candidate_t_us", candidate_t_us),
        ("baseline_t_us", baseline_t_us),
        ("decode_step_ms", decode_step_ms),
    ):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise InputError(f"{name} must be a finite positive number, got {value!r}")
    if not decode_step_source:
        raise InputError("decode_step_source must say where the decode step time came from")
    f, s = _share_and_speedup(calls_per_step, candidate_t_us, baseline_t_us, decode_step_ms)
    if f >= 1.0:
        op_ms = calls_per_step * baseline_t_us / 1000.0
        raise InputError(
            f"decode step time {decode_step_ms} ms ({decode_step_source}) is too small: {calls_per_step} calls x "
            f"{baseline_t_us} us = {op_ms:.4g} ms of this op alone, so its share f = {f:.3g} >= 1",
            hint="check that the decode step time is in milliseconds and the op time in microseconds",
        )
    return AmdahlCeiling(
        calls_per_step=calls_per_step,
        candidate_t_us=float(candidate_t_us),
        baseline_t_us=float(baseline_t_us),
        baseline=baseline,
        decode_step_ms=float(decode_step_ms),
        decode_step_source=decode_step_source,
        rows=rows,
        timing_mode=timing_mode,
        op_share=f,
        op_speedup=s,
        win_ns_per_call=(baseline_t_us - candidate_t_us) * 1000.0,
        best_possible_gain_percent=_gain_percent(1.0 / (1.0 - f)),
        expected_gain_percent=_gain_percent(1.0 / ((1.0 - f) + f / s)),
    )

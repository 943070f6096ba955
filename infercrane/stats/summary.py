"""Five-number summary plus mean and standard deviation of one set of samples.

The summary is unit-free: the field that holds it names the unit (``t_us: Summary``, ``output_tok_s: Summary``).
Quartiles use numpy's default ``linear`` interpolation (type 7 in Hyndman & Fan, the same as R's default),
so ``q1``/``q3`` of a handful of runs lie between observed values.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class Summary(BaseModel):
    """Location and spread of ``n`` finite samples.

    ``stdev`` is the sample standard deviation (``ddof=1``); it is ``None`` for a single sample, where it is undefined.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(ge=1)
    median: float
    q1: float
    q3: float
    min: float
    max: float
    mean: float
    stdev: float | None = Field(default=None, ge=0)


def as_finite_array(samples: Sequence[float] | np.ndarray, *, name: str = "samples") -> np.ndarray:
    """Samples as a 1-D float64 array; a ValueError names ``name`` when they are empty, not 1-D, NaN or infinite."""
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of numbers, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; at least one sample is needed")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} holds {int(bad.sum())} non-finite value(s) (NaN or inf), the first at index {first}: "
            f"{arr[first]!r}; a NaN sample is a failed measurement and must not be summarised"
        )
    return arr


def summarize(samples: Sequence[float] | np.ndarray) -> Summary:
    """Summarise finite samples; empty, NaN or infinite input raises ValueError."""
    arr = as_finite_array(samples)
    q1, median, q3 = np.percentile(arr, [25.0, 50.0, 75.0])
    return Summary(
        n=int(arr.size),
        median=float(median),
        q1=float(q1),
        q3=float(q3),
        min=float(arr.min()),
        max=float(arr.max()),
        mean=float(arr.mean()),
        stdev=float(arr.std(ddof=1)) if arr.size > 1 else None,
    )

"""Request traces: what a trace workload replays (one request per line, on its recorded schedule).

**The format** is Mooncake's, which AIPerf 0.12 replays (``mooncake_trace`` datasets with ``fixed_schedule`` phases):
one JSON object per line, ``timestamp`` (milliseconds from the trace's start), ``input_length`` and ``output_length``
(tokens), and optionally ``hash_ids`` (the prompt's blocks, shared between requests that share a prefix). Lines are in
timestamp order. ``read_trace`` reads one bounded and checks every line (its number in the error); ``summarize`` says
what it holds (requests, span, mean rate, length quantiles, prefix sharing) and its content hash, the identity a
receipt records.

**The generator** (``generate``) writes a trace from stated distributions, seeded (Python's ``random.Random``, so the
same seed gives the same file on every platform): arrivals ``poisson`` (exponential gaps) or ``constant`` at a rate;
lengths ``fixed``, ``uniform`` (inclusive bounds) or ``lognormal`` (its median and the sigma of its log, clipped to
bounds), rounded to whole tokens.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infercrane.errors import InputError

TRACE_FORMAT = "mooncake_trace"
MAX_TRACE_REQUESTS = 1_000_000


class TraceRequest(BaseModel):
    """One line of a trace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timestamp: int = Field(ge=0, description="milliseconds from the trace's start")
    input_length: int = Field(ge=1)
    output_length: int = Field(ge=1)
    hash_ids: list[int] | None = None


@dataclass(frozen=True)
class Trace:
    requests: tuple[TraceRequest, ...]
    sha256: str  # of the file's bytes (or of the generated text)


def parse_trace(text: str, source: str) -> Trace:
    """A trace from its JSONL text; InputError naming the first bad line."""
    requests: list[TraceRequest] = []
    last = 0
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            req = TraceRequest.model_validate(json.loads(line))
        except json.JSONDecodeError as e:
            raise InputError(f"trace {source}: line {n} is not JSON ({e.msg})") from None
        except ValidationError as e:
            first = e.errors(include_url=False)[0]
            where = ".".join(str(x) for x in first["loc"]) or "the line"
            raise InputError(f"trace {source}: line {n}: {where}: {first['msg']}",
                             hint="each line: {\"timestamp\": MS, \"input_length\": N, \"output_length\": N"
                                  "[, \"hash_ids\": [...]]}") from None
        if req.timestamp < last:
            raise InputError(f"trace {source}: line {n}: timestamp {req.timestamp} is before the previous line's "
                             f"{last}", hint="sort the trace by timestamp")
        last = req.timestamp
        requests.append(req)
        if len(requests) > MAX_TRACE_REQUESTS:
            raise InputError(f"trace {source}: more than {MAX_TRACE_REQUESTS} requests",
                             hint="cut the trace to the span to replay")
    if not requests:
        raise InputError(f"trace {source}: no request in it")
    return Trace(tuple(requests), hashlib.sha256(text.encode("utf-8")).hexdigest())


def read_trace(path: Path | str) -> Trace:
    """A trace file, read bounded (``datafiles.TRACE``) and checked line by line."""
    from infercrane.datafiles import TRACE, read_text

    return parse_trace(read_text(path, TRACE), str(path))


def _quantiles(values: list[int]) -> dict[str, float]:
    s = sorted(values)

    def q(p: float) -> float:  # nearest rank
        return float(s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))])

    return {"min": float(s[0]), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": float(s[-1]),
            "mean": sum(s) / len(s)}


def summarize(trace: Trace) -> dict[str, Any]:
    """What a trace holds, as a receipt and a console line state it."""
    reqs = trace.requests
    span_s = (reqs[-1].timestamp - reqs[0].timestamp) / 1000.0
    blocks = [b for r in reqs for b in (r.hash_ids or [])]
    return {
        "format": TRACE_FORMAT, "sha256": trace.sha256, "requests": len(reqs), "span_s": span_s,
        "mean_rate_per_s": (len(reqs) - 1) / span_s if span_s > 0 else None,
        "input_length": _quantiles([r.input_length for r in reqs]),
        "output_length": _quantiles([r.output_length for r in reqs]),
        "with_hash_ids": sum(r.hash_ids is not None for r in reqs),
        "shared_blocks_share": (1.0 - len(set(blocks)) / len(blocks)) if blocks else None,
    }


# --------------------------------------------------------------------------------------------- the generator


class LengthDistribution(BaseModel):
    """Token lengths: ``fixed`` (value), ``uniform`` (low..high, inclusive) or ``lognormal`` (median, sigma of the
    log), each clipped to [low, high] where given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fixed", "uniform", "lognormal"]
    value: int | None = Field(default=None, ge=1)
    median: float | None = Field(default=None, gt=0)
    sigma: float | None = Field(default=None, ge=0)
    low: int = Field(default=1, ge=1)
    high: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _parameters(self) -> "LengthDistribution":
        need = {"fixed": ("value",), "uniform": ("high",), "lognormal": ("median", "sigma")}[self.kind]
        missing = [n for n in need if getattr(self, n) is None]
        if missing:
            raise ValueError(f"a {self.kind} length needs {', '.join(missing)}")
        if self.high is not None and self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.value)  # type: ignore[arg-type]
        if self.kind == "uniform":
            return rng.randint(self.low, int(self.high))  # type: ignore[arg-type]
        v = round(rng.lognormvariate(math.log(float(self.median)), float(self.sigma)))  # type: ignore[arg-type]
        return max(self.low, min(v, self.high)) if self.high is not None else max(self.low, v)


class TraceSpec(BaseModel):
    """What ``generate`` writes: ``requests`` arrivals at ``rate_per_s`` (``poisson`` or ``constant``), lengths from
    two distributions, from ``seed``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int = Field(ge=1, le=MAX_TRACE_REQUESTS)
    rate_per_s: float = Field(gt=0)
    arrival: Literal["poisson", "constant"] = "poisson"
    input_length: LengthDistribution
    output_length: LengthDistribution
    seed: int = 0


def generate(spec: TraceSpec) -> str:
    """The trace's JSONL text (one request per line, timestamps in whole milliseconds from 0)."""
    rng = random.Random(spec.seed)
    t_s, lines = 0.0, []
    for i in range(spec.requests):
        if i:
            t_s += rng.expovariate(spec.rate_per_s) if spec.arrival == "poisson" else 1.0 / spec.rate_per_s
        lines.append(json.dumps({"timestamp": int(round(t_s * 1000.0)), "input_length": spec.input_length.draw(rng),
                                 "output_length": spec.output_length.draw(rng)}))
    return "\n".join(lines) + "\n"

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


def _nearest_rank(ordered: list[float], p: float) -> float:
    """The nearest-rank ``p`` quantile of ``ordered`` (sorted, not empty)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]


def _quantiles(values: list[int]) -> dict[str, float]:
    s = sorted(values)
    return {"min": float(s[0]), **{f"p{round(p * 100)}": float(_nearest_rank(s, p)) for p in (0.5, 0.9, 0.99)},
            "max": float(s[-1]), "mean": sum(s) / len(s)}


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


# --------------------------------------------------------------------------------------------- replaying a trace

TRACES_DIR = Path(__file__).resolve().parent / "traces"
# How far a request's start may sit from its place in the schedule (after the window's common offset) and still be
# "on schedule": AIPerf schedules to the millisecond; the rest is the client machine's jitter, which on a loaded
# 2-core CI machine, client and server sharing the cores, reaches tens of milliseconds.
ARRIVAL_TOLERANCE_MS = 50.0


def trace_presets() -> list[str]:
    """The traces InferCrane ships (``serving/traces/*.jsonl``), by name."""
    return sorted(p.stem for p in TRACES_DIR.glob("*.jsonl"))


def trace_path(name_or_path: str) -> Path:
    """A shipped trace by name, or a trace file; InputError naming both kinds when it is neither."""
    shipped = TRACES_DIR / f"{name_or_path}.jsonl"
    if "/" not in name_or_path and shipped.is_file():
        return shipped
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path.resolve()
    raise InputError(f"trace {name_or_path!r}: no shipped trace of that name and no such file",
                     hint=f"shipped traces: {', '.join(trace_presets()) or 'none'}; or give a JSONL file's path")


@dataclass(frozen=True)
class TraceReplay:
    """A trace as one window replays it: its file, content hash, AIPerf's time scale (``speedup``: 2 replays it in
    half the time) and hash-id block size (tokens per ``hash_ids`` entry; None: AIPerf's 512 for mooncake traces),
    and what the checks of a window read (each line's timestamp and output length)."""

    path: Path
    sha256: str
    speedup: float
    block_size: int | None
    timestamps_ms: tuple[int, ...]
    output_lengths: tuple[int, ...]
    tolerance_ms: float = ARRIVAL_TOLERANCE_MS

    @classmethod
    def load(cls, name_or_path: str, speedup: float = 1.0, block_size: int | None = None,
             tolerance_ms: float = ARRIVAL_TOLERANCE_MS) -> "TraceReplay":
        path = trace_path(name_or_path)
        trace = read_trace(path)
        return cls(path=path, sha256=trace.sha256, speedup=speedup, block_size=block_size,
                   timestamps_ms=tuple(r.timestamp for r in trace.requests),
                   output_lengths=tuple(r.output_length for r in trace.requests), tolerance_ms=tolerance_ms)

    @property
    def requests(self) -> int:
        return len(self.timestamps_ms)

    @property
    def span_s(self) -> float:
        """The replay's length: the trace's span divided by the speedup."""
        return (self.timestamps_ms[-1] - self.timestamps_ms[0]) / 1000.0 / self.speedup

    def scheduled_s(self, index: int) -> float:
        """Line ``index``'s place in the replay, seconds from the first line."""
        return (self.timestamps_ms[index] - self.timestamps_ms[0]) / 1000.0 / self.speedup


def record_line(meta: dict[str, Any]) -> int | None:
    """The trace line an AIPerf 0.12 record replays: its conversation's number (AIPerf names each line's conversation
    ``session_NNNNNN`` in file order), else None."""
    conv = str(meta.get("conversation_id") or "")
    head, _, number = conv.rpartition("_")
    return int(number) if head == "session" and number.isdigit() else None


def arrival_check(replay: TraceReplay, records: list[dict[str, Any]],
                  tolerance_ms: float | None = None) -> dict[str, Any]:
    """How closely a window's requests started on the trace's schedule, from the driver's per-request records
    (AIPerf's ``metadata.request_start_ns``, matched to trace lines by ``record_line``).

    Each request's lag is its start minus its scheduled place, less the window's common offset (the median of those
    differences: when the replay's clock started is not the question); ``within`` says every matched request's |lag|
    is at most ``tolerance_ms`` (default the replay's: the workload's ``arrival_tolerance_ms``) and every trace line has a
    record. Quantiles are nearest-rank."""
    tolerance_ms = replay.tolerance_ms if tolerance_ms is None else tolerance_ms
    starts: dict[int, float] = {}
    for rec in records:
        meta = rec.get("metadata") or {}
        line, start = record_line(meta), meta.get("request_start_ns")
        if line is not None and start is not None and 0 <= line < replay.requests and line not in starts:
            starts[line] = int(start) / 1e9
    out: dict[str, Any] = {"trace_requests": replay.requests, "matched": len(starts), "tolerance_ms": tolerance_ms,
                           "speedup": replay.speedup,
                           "method": "lag = request start - scheduled place - the window's median of those "
                                     "differences; records matched to trace lines by AIPerf's conversation number"}
    if not starts:
        return out | {"within": False, "lag_abs_ms": None, "beyond_tolerance": None}
    diffs = {i: t - replay.scheduled_s(i) for i, t in starts.items()}
    offset = _nearest_rank(sorted(diffs.values()), 0.5)
    lags = sorted(abs(d - offset) * 1000.0 for d in diffs.values())
    beyond = sum(lag > tolerance_ms for lag in lags)
    return out | {"lag_abs_ms": {"p50": round(_nearest_rank(lags, 0.5), 3), "p99": round(_nearest_rank(lags, 0.99), 3),
                                 "max": round(lags[-1], 3)},
                  "beyond_tolerance": beyond, "within": beyond == 0 and len(starts) == replay.requests}

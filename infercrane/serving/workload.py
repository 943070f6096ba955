"""Serving workloads, the ordered run plan of an A/B experiment, and running that plan.

A ``Workload`` says what every run sends (lengths, streaming, fixed output length), at which
concurrencies, how many requests per point, how many runs per arm and in which arm order. Presets
are data: ``workloads/*.yaml`` beside this file (``seed-paired``, ``public-1000``).

Defaults derived from the concurrency ``c`` when not given:
  * ``request_count = max(48 * c, 64)``: every concurrency slot serves at least 48 requests, so the
    ramp-up and drain at the edges (about one request per slot each) are a few percent of the window,
    and at least 64 requests so that a p95 rests on more than a handful of samples. For the seed
    workload (128 -> 64 tokens) at the seed's H100 rates that is 6-10 s of measurement per point for
    compiled vLLM and 37-46 s for eager, not a burst. A run whose window is shorter than
    ``MIN_WINDOW_S`` gets a note in the plan result.
  * ``warmup_requests = max(2 * c, 4)``: sent at the same concurrency before the window, excluded.
  * With a request rate (``request_rate``, AIPerf's ``--request-rate``: open loop, arrivals ``poisson`` or
    ``constant`` at that rate, the concurrency only a cap on the requests in flight) the slots no longer send back to
    back, so the count follows from the rate instead: ``request_count = max(ceil(rate * RATE_WINDOW_S),
    min_requests)``, about 10 s of load when the server keeps up. The drivers' warm-up requests are sent at the rate
    too (AIPerf's warm-up takes the profiling load's shape); the engine warm-up (``serving/warmup.py``) stays in
    closed-loop rounds at each concurrency.

What each request carries besides the prompt: ``extra_inputs`` (AIPerf's ``--extra-inputs``), merged into every body
the drivers and the warm-up send. ``request_rate``, ``arrival_pattern`` and ``extra_inputs`` came after receipts were
recorded: at their defaults they stay out of a workload's identity (``LATER_FIELDS``).

Arm order and engine lifetimes (``plan_runs``). One GPU holds one vLLM engine at its default
``--gpu-memory-utilization 0.9``; running both arms side by side would need a memory split, which
changes the KV-cache size and so the very throughput being compared. So each arm's engine runs alone,
and every switch between arms is an engine restart:
  * ``sequential``: A's runs, then B's: 2 engine starts; cheapest, but drift reads as a difference.
  * ``interleaved``: A B A B ... one run each: 2 x runs engine starts; drift spreads over both arms
    evenly, and engine start-up variance becomes part of the between-run spread (as it is in use).
  * ``sandwich`` (default): A's first ceil(runs/2) runs, all of B's runs, A's remaining runs:
    3 engine starts; A-before vs A-after exposes drift at little cost.
Within one engine lifetime each run sweeps every concurrency in the given order, and the prefix
cache is reset (``POST /reset_prefix_cache``) before every (run, concurrency) point.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import time
from pathlib import Path
from typing import Any, Literal
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from infercrane.errors import InfercraneError, InputError, RunFailed
from infercrane.serving.engine_kinds import STARTUP_TIMEOUT_S
from infercrane.serving.engine import EngineLifetime
from infercrane.serving.metrics import RunMetrics
from infercrane.serving.recipes import Recipe
from infercrane.serving.trace import ARRIVAL_TOLERANCE_MS

WORKLOAD_SCHEMA_VERSION = "infercrane.serving-workload/v1"
WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"
ArmOrder = Literal["sequential", "interleaved", "sandwich"]

# Fields added to the workload after receipts were recorded, with the default that means what those receipts did.
LATER_FIELDS: dict[str, Any] = {"prompts": "driver", "request_rate": None, "arrival_pattern": "poisson",
                                "extra_inputs": {}, "trace": None, "trace_speedup": 1.0, "trace_block_size": None,
                                "arrival_tolerance_ms": ARRIVAL_TOLERANCE_MS}
# Open loop (request_rate): a window of a request count is sized from the rate, not from the concurrency (whose slots
# no longer send back to back): max(min_requests, ceil(rate x RATE_WINDOW_S)), about RATE_WINDOW_S of load when the
# server keeps up (METHOD.md: windows of 10 s or more).
RATE_WINDOW_S = 10.0
# Request body fields InferCrane sets from the workload itself; extra_inputs may not set them (give the field).
RESERVED_INPUTS = {"model": "the recipe", "prompt": "the workload's prompts", "messages": "the workload's prompts",
                   "stream": "streaming", "stream_options": "streaming", "max_tokens": "output_tokens (--osl)",
                   "max_completion_tokens": "output_tokens (--osl)", "ignore_eos": "ignore_eos",
                   "min_tokens": "output_tokens and ignore_eos"}


def reserved_input(keys: Any) -> str | None:
    """Why one of ``keys`` cannot be an extra input (the first that cannot), or None."""
    for key in keys:
        if key in RESERVED_INPUTS:
            return (f"{key!r} is set by InferCrane from {RESERVED_INPUTS[key]}; give that instead of an extra "
                    "input")
    return None


WARMUP_PER_SLOT = 2
MIN_WARMUP = 4
MIN_WINDOW_S = 5.0
THREE_RUNS_NOTE = ("3 runs per arm: a two-sided Mann-Whitney rank test cannot reach p < 0.05 with 3 against 3 "
                   "(its smallest p is 0.1), and a confidence interval for a median needs about 6 runs; "
                   "a difference can at most be called AMBIGUOUS")


class PublishedExample(BaseModel):
    """A number someone published for this workload, and whether they said on what hardware and runtime."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output_tokens_per_second: float = Field(gt=0)
    request_throughput: float = Field(gt=0)
    hardware_and_runtime_disclosed: bool


MAX_CONCURRENCY = 4096  # requests in flight at one point, on any machine: each is a socket in the driver and the engine
FD_HEADROOM = 256  # open files a driver needs besides its sockets (AIPerf refuses to start below 256)
THREAD_HEADROOM = 64  # threads of this process and its libraries besides the warm-up's


def check_concurrency_fits(concurrency: Sequence[int]) -> None:
    """InputError when this process cannot hold ``max(concurrency)`` requests in flight: each is a socket (an open
    file) in the driver and in the warm-up, and a thread in the warm-up (at most ``warmup.MAX_IN_FLIGHT``); drivers
    and engines inherit this process's limits. A soft RLIMIT_NOFILE below what is needed is raised to it (up to the
    hard limit, as AIPerf and vLLM do for themselves); a hard limit below it, or too few threads (RLIMIT_NPROC, the
    kernel's threads-max), is refused, naming the limit and the fix. Machine-dependent, so it is not part of the
    Workload's validation (a receipt's workload must load on any machine): call it before a plan starts."""
    import resource
    import threading

    from infercrane.serving.warmup import MAX_IN_FLIGHT

    c = max(concurrency)
    unlimited = resource.RLIM_INFINITY
    files = c + FD_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != unlimited and files > hard:
        raise InputError(f"concurrency {c} needs about {files} open files ({c} sockets, one per request in flight, "
                         f"and {FD_HEADROOM} for the driver itself); this process may open at most {hard} "
                         "(RLIMIT_NOFILE, hard limit)",
                         hint=f"lower the concurrency to at most {hard - FD_HEADROOM}, or raise the hard limit (nofile "
                              f"in /etc/security/limits.conf, or `ulimit -Hn {files}` as root) and start InferCrane "
                              "from a new shell")
    if soft != unlimited and files > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, hard))
        except (ValueError, OSError) as exc:
            raise InputError(f"concurrency {c} needs about {files} open files; this process may open {soft} "
                             f"(RLIMIT_NOFILE, soft limit) and could not raise it ({exc})",
                             hint=f"run `ulimit -n {files}` in the shell that starts InferCrane, or lower the "
                                  f"concurrency to at most {soft - FD_HEADROOM}") from None
    threads = min(c, MAX_IN_FLIGHT) + threading.active_count() + THREAD_HEADROOM
    nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    try:
        threads_max = int(Path("/proc/sys/kernel/threads-max").read_text())
    except (OSError, ValueError):
        threads_max = None
    for limit, name, fix in ((nproc, "RLIMIT_NPROC, processes and threads of this user", f"`ulimit -u {threads}`"),
                             (threads_max, "the kernel's threads-max", "sysctl kernel.threads-max")):
        if limit is not None and limit != unlimited and threads > limit:
            raise InputError(f"concurrency {c} needs about {threads} threads (one per warm-up request in flight), "
                             f"above {limit} ({name})",
                             hint=f"lower the concurrency, or raise the limit ({fix})")


class Workload(BaseModel):
    """What each run sends and how the experiment is repeated. Frozen; see the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["infercrane.serving-workload/v1"]
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    endpoint: Literal["completions", "chat"] = Field(default="completions",
                                                     description="OpenAI API the drivers call")
    concurrency: list[int] = Field(min_length=1, description="concurrency points, swept in this order")
    input_tokens: int = Field(ge=1, description="prompt tokens per request (synthetic)")
    output_tokens: int = Field(ge=2, description="output tokens asked per request (>= 2 so TPOT is defined)")
    streaming: bool = True
    ignore_eos: bool = Field(default=True, description="fix output lengths: ignore_eos and min_tokens = output_tokens")
    token_count_source: Literal["server", "client"] = Field(
        default="server", description="count output tokens from the server's usage, or with a client tokenizer")
    request_count: int | None = Field(default=None, ge=1,
                                      description="requests per point; default max(requests_per_slot x c, "
                                                  "min_requests)")
    warmup_requests: int | None = Field(default=None, ge=0,
                                        description=f"excluded requests before each point; default "
                                                    f"max({WARMUP_PER_SLOT} x c, {MIN_WARMUP})")
    requests_per_slot: int = Field(default=48, ge=1, description="derived request count: requests per concurrency "
                                                              "slot (request_count = max(slot * c, min_requests))")
    min_requests: int = Field(default=64, ge=1, description="derived request count: at least this many per point")
    published_example: PublishedExample | None = Field(default=None, description="a public number this workload "
                                                                             "reproduces, for the comparison boundary")
    window_s: float | None = Field(default=None, gt=0,
                                   description="seconds of load per point instead of a request count (AIPerf's "
                                               "--benchmark-duration): every arm gets the same window whatever its "
                                               "speed, and a whole arm visit runs as one AIPerf invocation")
    warmup_s: float | None = Field(default=None, gt=0,
                                   description="seconds of warm-up load before each point instead of a request count")
    runs_per_arm: int = Field(default=5, ge=3, le=100, description="repeated runs per arm (3 allowed, with a note)")
    arm_order: ArmOrder = "sandwich"
    seed: int = Field(default=0, description="seed of the synthetic prompts (same for every run and arm)")
    prompts: Literal["driver", "shared"] = Field(
        default="driver", description="who makes the prompts: each driver its own, or InferCrane one JSONL file per "
                                      "(run, concurrency) point handed to every driver (serving/prompts.py)")
    request_timeout_s: float = Field(default=600.0, gt=0, description="one request's time limit")
    run_timeout_s: float = Field(default=3600.0, gt=0, description="one driver invocation's time limit")
    request_rate: float | None = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="requests per second sent at every point (AIPerf's --request-rate): open loop, arrivals spaced "
                    "by arrival_pattern, each concurrency the cap on requests in flight; default: closed loop, every "
                    "slot sends its next request when its last one ends")
    arrival_pattern: Literal["poisson", "constant"] = Field(
        default="poisson", description="how arrivals are spaced at request_rate (AIPerf's --arrival-pattern): poisson "
                                       "(exponential gaps, AIPerf's default) or constant (1/rate apart)")
    extra_inputs: dict[str, Any] = Field(
        default_factory=dict, description="fields merged into every request's body (AIPerf's --extra-inputs): the "
                                          "drivers' and the engine warm-up's; not those InferCrane sets itself "
                                          "(RESERVED_INPUTS)")
    trace: str | None = Field(
        default=None, description="a request trace replayed on its schedule in every window (serving/trace.py: a "
                                  "shipped trace's name or a JSONL file): each line's arrival time and lengths "
                                  "replace the synthetic prompts; input_tokens and output_tokens then size the "
                                  "engine warm-up only, and the concurrency caps the requests in flight")
    trace_speedup: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                                 description="the trace's time scale (AIPerf's speedup_ratio): 2 replays it in half "
                                             "its recorded time")
    arrival_tolerance_ms: float = Field(default=ARRIVAL_TOLERANCE_MS, gt=0, allow_inf_nan=False,
                                        description="a trace workload: how far a request's start may be from its place "
                                                    "in the schedule and still count as on it (serving.trace."
                                                    "ARRIVAL_TOLERANCE_MS, stated with every window's check)")
    trace_block_size: int | None = Field(default=None, ge=1,
                                         description="tokens per hash_ids entry of the trace (AIPerf's block size; "
                                                     "default AIPerf's 512, Mooncake's)")

    @field_validator("concurrency")
    @classmethod
    def _concurrency_ok(cls, value: list[int]) -> list[int]:
        if any(c < 1 for c in value):
            raise ValueError("every concurrency must be >= 1")
        if any(c > MAX_CONCURRENCY for c in value):
            raise ValueError(f"concurrency {max(value)} is above {MAX_CONCURRENCY}, the most requests InferCrane keeps "
                             "in flight at one point (each is a socket in the driver and the engine); give a lower one")
        if len(set(value)) != len(value):
            raise ValueError(f"concurrency points repeat: {value}")
        return value

    @field_validator("extra_inputs")
    @classmethod
    def _extra_inputs_ok(cls, value: dict[str, Any]) -> dict[str, Any]:
        why = reserved_input(value)
        if why is not None:
            raise ValueError(f"extra_inputs: {why}")
        return value

    @model_validator(mode="after")
    def _requests_cover_concurrency(self) -> Workload:
        if self.request_count is not None and self.request_count < max(self.concurrency) \
                and self.request_rate is None:
            raise ValueError(f"request_count {self.request_count} is below the highest concurrency "
                             f"{max(self.concurrency)}: the engine would never see that many requests at once")
        if self.trace is not None:
            clash = [name for name, value in (("window_s", self.window_s), ("request_rate", self.request_rate),
                                              ("request_count", self.request_count))
                     if value is not None] + (["prompts: shared"] if self.prompts == "shared" else [])
            if clash:
                raise ValueError(f"a trace workload's windows are the trace replayed on its schedule; "
                                 f"{', '.join(clash)} cannot apply to it")
            if len(self.concurrency) != 1:
                raise ValueError(f"a trace workload has one concurrency, the cap on requests in flight while the "
                                 f"trace replays; got {self.concurrency}")
        elif self.trace_speedup != 1.0 or self.trace_block_size is not None or self.arrival_tolerance_ms != ARRIVAL_TOLERANCE_MS:
            raise ValueError("trace_speedup, trace_block_size and arrival_tolerance_ms apply to a trace; there is none "
                             "(give trace)")
        if self.arrival_pattern != "poisson" and self.request_rate is None:
            raise ValueError(f"arrival_pattern {self.arrival_pattern!r} spaces requests at a request rate, and "
                             "there is none; give request_rate (--request-rate) too")
        return self

    def replay(self) -> Any:
        """The trace every window replays (``serving.trace.TraceReplay``, read once per process), or None."""
        return None if self.trace is None else _replay(self.trace, self.trace_speedup, self.trace_block_size,
                                                       self.arrival_tolerance_ms)

    def requests_at(self, concurrency: int) -> int:
        """Requests per point: ``request_count``; else derived, per concurrency slot for a closed loop, or from the
        rate for an open one (``RATE_WINDOW_S``); a trace's lines for a trace workload."""
        if self.trace is not None:
            return self.replay().requests
        if self.request_count is not None:
            return self.request_count
        if self.request_rate is not None:
            return max(self.min_requests, math.ceil(self.request_rate * RATE_WINDOW_S))
        return max(self.requests_per_slot * concurrency, self.min_requests)

    def warmup_at(self, concurrency: int) -> int:
        return self.warmup_requests if self.warmup_requests is not None \
            else max(WARMUP_PER_SLOT * concurrency, MIN_WARMUP)

    def notes(self) -> list[str]:
        """Caveats to record with any result of this workload."""
        out = []
        if self.runs_per_arm == 3:
            out.append(THREE_RUNS_NOTE)
        if self.window_s is not None:
            out.append(f"time windows: {self.window_s:g} s of load per point"
                       + (f" after {self.warmup_s:g} s of warm-up" if self.warmup_s else ""))
        elif self.request_count is None and self.trace is None:
            out.append("requests per point derived: " + ", ".join(
                f"c={c}: {self.requests_at(c)}" for c in self.concurrency))
        if not self.ignore_eos:
            out.append("ignore_eos is off: output lengths vary with the model, so throughputs compare different work")
        if self.request_rate is not None:
            out.append(f"open loop: {self.request_rate:g} requests/s, {self.arrival_pattern} arrivals, each "
                       "concurrency the cap on requests in flight; an engine slower than the rate is measured at its "
                       "cap, and its waiting requests are not in the latencies")
        if self.extra_inputs:
            out.append(f"every request body also carries {', '.join(sorted(self.extra_inputs))} (extra_inputs)")
        if self.trace is not None:
            out.append(f"trace replay: every window replays trace {self.trace}"
                       + (f" at {self.trace_speedup:g}x its recorded speed" if self.trace_speedup != 1.0 else "")
                       + f" on its schedule (AIPerf fixed_schedule), at most {self.concurrency[0]} requests in "
                         "flight; the prefix cache is reset before every window")
        return out

    def identity(self) -> dict[str, Any]:
        """The workload as a run's identity (a PoC section's hash): every field, except a field added later while it
        holds its default, so that a run recorded before the field existed is still the same run."""
        return {k: v for k, v in self.model_dump(mode="json").items() if LATER_FIELDS.get(k, object()) != v}

    def with_overrides(self, **changes: Any) -> Workload:
        """A new validated workload with the given fields replaced (CLI overrides). A published example was measured
        with this workload's requests (``SENT_FIELDS``): overrides that change them drop it, as it no longer applies."""
        data = {**self.model_dump(mode="json"), **changes}
        if any(k in SENT_FIELDS and v != getattr(self, k) for k, v in changes.items()):
            data["published_example"] = None
        counted = [k for k in COUNT_FIELDS if changes.get(k) is not None]
        if self.window_s is not None and counted and "window_s" not in changes:  # asked for counts: windows of counts
            data |= {"window_s": None, "warmup_s": None,
                     "description": f"{self.description} [{', '.join(counted)} given: windows of a request count "
                                    f"instead of {self.window_s:g} s of load]".lstrip()}
        return _validate(data, source="overrides")


# What sizes a window of a request count: given as an override to a workload of time windows, it replaces them.
COUNT_FIELDS = ("request_count", "requests_per_slot", "min_requests", "warmup_requests")
# What each request sends and how requests arrive: a published example measured otherwise is another workload.
SENT_FIELDS = ("input_tokens", "output_tokens", "request_rate", "arrival_pattern", "extra_inputs", "trace",
               "trace_speedup", "trace_block_size")


@functools.lru_cache(maxsize=16)
def _replay(trace: str, speedup: float, block_size: int | None, tolerance_ms: float) -> Any:
    from infercrane.serving.trace import TraceReplay

    return TraceReplay.load(trace, speedup, block_size, tolerance_ms)


def workload_presets() -> list[str]:
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.yaml"))


def _validate(data: Any, *, source: str) -> Workload:
    from infercrane import datafiles

    return datafiles.validate(Workload, data, what="workload", source=source,
                              hint=f"fix the named field(s); schema_version must be {WORKLOAD_SCHEMA_VERSION!r}")


def load_workload(name_or_path: str | Path) -> Workload:
    """A preset by name (``workload_presets()``) or a YAML file."""
    from infercrane import datafiles

    return datafiles.load(Workload, name_or_path, WORKLOADS_DIR, kind=datafiles.WORKLOAD,
                          hint=f"fix the named field(s); schema_version must be {WORKLOAD_SCHEMA_VERSION!r}")


# -- the run plan -------------------------------------------------------------------------------
class PlannedRun(BaseModel):
    """One driver invocation: arm, run index, concurrency; ``segment`` numbers the engine lifetime."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arm: str
    run_index: int = Field(ge=0)
    concurrency: int = Field(ge=1)
    segment: int = Field(ge=0, description="runs with the same segment share one engine lifetime")


def plan_runs(arms: Sequence[str], workload: Workload, order: ArmOrder | None = None) -> list[PlannedRun]:
    """Expand arms x runs x concurrencies into the ordered plan (see the module docstring)."""
    order = order or workload.arm_order
    arms = list(arms)
    if not arms:
        raise InputError("no arm to plan", hint="give at least one recipe")
    if len(set(arms)) != len(arms):
        raise InputError(f"arm names repeat: {arms}", hint="give each recipe (arm) a distinct name")
    if order in ("sandwich", "interleaved") and len(arms) < 2:
        raise InputError(f"arm order {order!r} needs two arms, got {arms}", hint="use arm_order: sequential")
    if order == "sandwich" and len(arms) != 2:
        raise InputError(f"arm order 'sandwich' (A B A) needs exactly two arms, got {len(arms)}",
                         hint="use interleaved or sequential for more arms")
    runs = workload.runs_per_arm
    blocks: list[tuple[str, range]] = []  # (arm, run indices) per engine lifetime
    if order == "sequential":
        blocks = [(arm, range(runs)) for arm in arms]
    elif order == "interleaved":
        blocks = [(arm, range(r, r + 1)) for r in range(runs) for arm in arms]
    elif order == "sandwich":
        first = math.ceil(runs / 2)
        a, b = arms
        blocks = [(a, range(first)), (b, range(runs)), (a, range(first, runs))]
    else:
        raise InputError(f"unknown arm order {order!r}", hint="one of: sequential, interleaved, sandwich")
    return [PlannedRun(arm=arm, run_index=r, concurrency=c, segment=seg)
            for seg, (arm, run_range) in enumerate(blocks) for r in run_range for c in workload.concurrency]


def engine_starts(plan: Sequence[PlannedRun]) -> dict[str, int]:
    """How many engine lifetimes each arm needs under this plan."""
    out: dict[str, int] = {}
    for seg in sorted({p.segment for p in plan}):
        arm = next(p.arm for p in plan if p.segment == seg)
        out[arm] = out.get(arm, 0) + 1
    return out


# -- running the plan ---------------------------------------------------------------------------
class PlanResult(BaseModel):
    """Everything one plan execution produced; ``complete`` is False when it stopped part-way."""

    model_config = ConfigDict(extra="forbid")

    workload: Workload
    recipes: dict[str, Recipe] = Field(description="arm -> resolved recipe")
    drivers: list[str] = Field(min_length=1, description="drivers run at every point, the first is primary")
    order: ArmOrder
    plan: list[PlannedRun]
    runs: list[RunMetrics] = Field(default_factory=list)
    engines: list[EngineLifetime] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    complete: bool = False
    wall_s: float | None = Field(default=None, description="wall time of the whole plan, once it has finished")
    analysis: Literal["runs", "pairs"] = Field(
        default="runs", description="how an A/B is analysed: 'pairs' (the window pair is the replicate, one family per "
                                    "decision: decide.serving.decide_serving_paired), or 'runs' (each arm's runs "
                                    "apart, per concurrency: receipts recorded before window pairs)")
    blocks: list[dict[str, Any]] = Field(default_factory=list,
                                         description="per AIPerf block: where its wall time went (drivers.aiperf."
                                                     "block_accounting)")


def resolve_tokenizer(recipe: Recipe, tokenizer: str | None = None) -> tuple[str, dict[str, str]]:
    """(tokenizer argument for the driver, environment to add) for one recipe's model.

    An explicit ``tokenizer`` (``--tokenizer``: a folder or a hub id; ``check_tokenizer`` says whether it is here)
    wins. A stand-in directory (``infercrane.models.standin``) goes through its ``aiperf_tokenizer_env`` (AIPerf
    0.12.0 refuses a local tokenizer directory under HF_HUB_OFFLINE=1; the stand-in carries a hub-cache copy); another
    local directory is used as is (made absolute); a hub id is used as is (it must be in the local hub cache: the GPU
    machine has no network).
    """
    if tokenizer is not None:
        local = Path(tokenizer).expanduser()
        return _tokenizer_dir(str(local.resolve())) if local.is_dir() else (tokenizer, {})
    if recipe.model_is_local():
        return _tokenizer_dir(recipe.resolved_model())
    if recipe.engine == "testserver":
        raise InputError(f"recipe {recipe.name!r}: the test server's model {recipe.model!r} has no tokenizer",
                         hint="give one with --tokenizer NAME_OR_DIR (a hub id in the local cache, or a tokenizer "
                              "folder; a PoC config: serving.tokenizer), or a recipe whose model is a local folder")
    return recipe.model, {}


def check_tokenizer(tokenizer: str) -> None:
    """InputError, before anything runs, when ``tokenizer`` (``--tokenizer``) is neither a folder nor a hub id whose
    tokenizer is in the local hub cache (the drivers load it offline)."""
    if Path(tokenizer).expanduser().is_dir() or _in_hub_cache(tokenizer):
        return
    raise InputError(f"--tokenizer {tokenizer}: no such folder, and no tokenizer of that hub id in the local hub cache",
                     hint="give a tokenizer folder, or a hub id downloaded first (`huggingface-cli download ID`; the "
                          "GPU machines have no network)")


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the local Hugging Face hub cache holds a tokenizer file of ``repo_id``."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    for name in ("tokenizer.json", "tokenizer_config.json"):
        try:
            if isinstance(try_to_load_from_cache(repo_id, name), str):
                return True
        except Exception:  # noqa: BLE001 - an id the hub would refuse is not in its cache either
            return False
    return False


def _tokenizer_dir(model_dir: str) -> tuple[str, dict[str, str]]:
    """A local tokenizer folder for the drivers: a stand-in's or a converted real model's through its
    ``aiperf_tokenizer_env`` (a hub-cache entry AIPerf loads offline, by the model's id), another as is."""
    try:
        from infercrane.models import real
        from infercrane.models.standin import aiperf_tokenizer_env, read_stand_in_marker
    except ImportError:
        return model_dir, {}
    if read_stand_in_marker(model_dir) is not None:
        tok, env = aiperf_tokenizer_env(model_dir)
        return str(tok), dict(env)
    if real.read_marker(model_dir) is not None:
        tok, env = real.aiperf_tokenizer_env(model_dir)
        return tok, env
    return model_dir, {}


# Synthetic prompts per AIPerf block (drivers.aiperf.RunGrid.prompt_entries): enough that none repeats in the block.
PROMPTS_PER_SLOT_SECOND = 8.0  # a first block's guess at requests per concurrency slot and second (rates measured later)
WARMUP_RATE_MARGIN = 2.0  # ... or this many times the rate its engine's warm-up saw (rounds of requests sent together)
MIN_PROMPT_ENTRIES = 500
MAX_PROMPT_ENTRIES = 20000  # AIPerf makes them at start-up: about 0.5 ms each on a small CPU
# Pre-starting the next block's AIPerf (run_plan): it is started when the running block has at most
# ceil(lead / window_s) windows left, the lead being the longest AIPerf start-up seen so far in the plan plus a margin.
PRESTART_FIRST_LEAD_S = 35.0  # before any block has shown its start-up (14-22 s on an H200 host)
PRESTART_MARGIN_S = 10.0
CORESIDENT_MEMORY = 0.9  # the share of GPU memory co-resident engines divide between them (vLLM's default for one)
# An AIPerf block that ends short of its windows, normally or with a non-zero exit, the engine alive
# (errors.WindowsLost: seen once under CPU load, AIPerf 0.12's records manager losing a phase's end): the windows left
# run again in new blocks this many times.
LOST_WINDOW_RETRIES = 1


def window_estimate_s(workload: Workload, runs: Sequence[Any]) -> float:
    """How long one window of ``workload`` lasts, to know how many windows ahead of a block's end its successor must
    start: ``window_s`` for time windows; for windows of a request count, the shortest ok window measured so far in
    the plan (``runs``; the shortest, so that the successor starts early rather than late), or MIN_WINDOW_S before
    any has been measured."""
    if workload.window_s is not None:
        return workload.window_s
    seen = [m.duration_s for m in runs if m.ok and m.requests_completed and m.duration_s > 0]
    return min(seen) if seen else MIN_WINDOW_S


def block_prompt_entries(workload: Workload, concurrencies: Sequence[int], runs: int, rates: Mapping[int, float],
                         warmup: Mapping[str, Any] | None) -> int:
    """Synthetic prompts AIPerf makes for one block of ``runs`` runs at ``concurrencies``, so that no prompt repeats
    inside it (a repeat could be served from the prefix cache): the block's request counts, or for time windows its
    windows at ``rates`` (requests per second measured so far, per concurrency), with 25 % to spare. Where no rate
    has been measured: WARMUP_RATE_MARGIN times the rate the engine's ``warmup`` record saw
    (``warmup.warmed_rate``), else PROMPTS_PER_SLOT_SECOND per slot and second. AIPerf makes every prompt at
    start-up: a guess far above the rate lengthens the start-up (1000-token prompts at c = 100), one below it repeats
    prompts. Between MIN_PROMPT_ENTRIES and MAX_PROMPT_ENTRIES."""
    from infercrane.serving.warmup import warmed_rate

    if workload.trace is not None:  # the trace is the dataset: AIPerf makes no prompt of its own
        return MIN_PROMPT_ENTRIES
    if workload.window_s is None:
        need = sum(workload.requests_at(c) for c in concurrencies) * runs
    else:
        def rate_at(c: int) -> float:
            if workload.request_rate is not None:  # open loop: AIPerf sends at most this, whatever the engine does
                return workload.request_rate
            if c in rates:
                return rates[c]
            seen = warmed_rate(warmup, c)
            return WARMUP_RATE_MARGIN * seen if seen is not None else PROMPTS_PER_SLOT_SECOND * c

        need = sum(rate_at(c) * workload.window_s for c in concurrencies) * runs
    return int(min(MAX_PROMPT_ENTRIES, max(MIN_PROMPT_ENTRIES, math.ceil(1.25 * need))))


def engine_memory_share(n_engines: int) -> float:
    """Each co-resident engine's ``--gpu-memory-utilization``: vLLM's one-engine default split evenly."""
    return math.floor(CORESIDENT_MEMORY / n_engines * 100) / 100


def _grid_fits(workload: Workload, drivers: Sequence[str]) -> bool:
    """Whether a whole arm visit can be one AIPerf invocation: one driver (AIPerf), and the same window and warm-up at
    every concurrency (a time, or one request count)."""
    if list(drivers) != ["aiperf"]:
        return False
    if workload.window_s is not None or workload.trace is not None:
        return True
    same = lambda f: len({f(c) for c in workload.concurrency}) == 1  # noqa: E731
    return same(workload.requests_at) and (workload.warmup_s is not None or same(workload.warmup_at))


def run_spec(workload: Workload, recipe: Recipe, tokenizer: tuple[str, dict[str, str]], p: PlannedRun,
             base_url: str, served_model: str, artifacts: Path, prompts_file: Path | None = None,
             access: Any = None, slos: Sequence[Any] = ()) -> Any:
    """The driver's RunSpec for planned run ``p`` of ``recipe`` (resolved) on an engine at ``base_url``:
    ``tokenizer`` as ``resolve_tokenizer`` gives it, ``prompts_file`` for shared prompts, ``access`` the API key and
    headers (``engine.ServerAccess``) every request carries; ``slos`` the policy's (``decide.slo``)."""
    from infercrane.serving.drivers import RunSpec

    tok, tok_env = tokenizer
    key = getattr(access, "api_key", None)
    headers = tuple(getattr(access, "headers", ()))
    return RunSpec(base_url=base_url, served_model=served_model, tokenizer=tok, endpoint=workload.endpoint,
                   streaming=workload.streaming, ignore_eos=workload.ignore_eos,
                   input_tokens=workload.input_tokens, output_tokens=workload.output_tokens,
                   concurrency=p.concurrency, request_count=workload.requests_at(p.concurrency),
                   warmup_requests=workload.warmup_at(p.concurrency), seed=workload.seed,
                   token_count_source=workload.token_count_source,
                   request_timeout_s=workload.request_timeout_s, timeout_s=workload.run_timeout_s,
                   artifact_dir=artifacts, arm=p.arm, recipe_sha256=recipe.sha256 or "",
                   run_index=p.run_index, env=tok_env, prompts_file=prompts_file,
                   request_rate=workload.request_rate, arrival_pattern=workload.arrival_pattern,
                   extra_inputs=dict(workload.extra_inputs), api_key=key, headers=headers, slos=tuple(slos),
                   trace=workload.replay())


def engine_warmup(engine: Any, workload: Workload) -> dict[str, Any] | None:
    """``engine``'s warm-up record for ``workload`` (ahead, in a sitting's start-up, or by a visit), or None."""
    ahead = getattr(engine, "warmed_for", {})
    if workload.name in ahead:
        return ahead[workload.name]
    warmed = engine.record.warmup or {}
    return warmed if warmed and warmed.get("workload", workload.name) == workload.name else None


def aiperf_block(workload: Workload, recipe: Recipe, tokenizer: tuple[str, dict[str, str]], engine: Any,
                 runs: Sequence[PlannedRun], where: Path, rates: Mapping[int, float],
                 prompts_file: Path | None = None, slos: Sequence[Any] = ()) -> Any:
    """The ``drivers.aiperf.RunGrid`` of one block of ``runs`` (one arm) on ``engine``, its artifacts in ``where``:
    ``rates``, the arm's requests per second measured so far per concurrency (``block_prompt_entries``). Its
    requests carry ``engine.access`` (the API key and headers every request to that engine carries)."""
    from infercrane.serving.drivers.aiperf import RunGrid

    indices = tuple(dict.fromkeys(p.run_index for p in runs))
    concurrencies = tuple(dict.fromkeys(p.concurrency for p in runs))
    return RunGrid(spec=run_spec(workload, recipe, tokenizer, runs[0], engine.base_url, engine.served_model, where,
                                 prompts_file, getattr(engine, "access", None), slos),
                   run_indices=indices, concurrencies=concurrencies,
                   request_counts={c: workload.requests_at(c) for c in concurrencies},
                   window_s=workload.window_s, warmup_s=workload.warmup_s,
                   warmup_requests=0 if workload.warmup_s is not None or workload.trace is not None
                   else workload.warmup_at(concurrencies[0]),
                   prompt_entries=block_prompt_entries(workload, concurrencies, len(indices), rates,
                                                       engine_warmup(engine, workload)))


def run_plan(recipes: Sequence[Recipe] | Mapping[str, Recipe], workload: Workload, *, out_dir: str | Path,
             drivers: Sequence[str] | str = "aiperf", order: ArmOrder | None = None, tokenizer: str | None = None,
             startup_timeout_s: float = STARTUP_TIMEOUT_S, preflight: bool = True,
             on_run: Callable[[RunMetrics], None] | None = None, into: PlanResult | None = None,
             on_start: Callable[[], None] | None = None, coresident: bool = False,
             engines: Mapping[str, Any] | None = None,
             on_progress: Callable[[str], None] | None = None, ahead: Any = None,
             then: Callable[[], None] | None = None, access: Any = None,
             quality: Callable[[str, Any], None] | None = None, slos: Sequence[Any] = ()) -> PlanResult:
    """Run every planned run: drive each arm's engine visit by visit, one driver invocation per visit where the
    driver allows it.

    ``quality``: called with (arm, engine) before every visit, before the warm-up (the semantic-quality gate's
    answers: ``serving.quality.QualityAsker``); where it is given, the kernel token gate records a divergence
    without stopping the arm (the quality gate decides).

    ``slos`` (``decide.slo.Slo``, the policy's): every run's goodput and SLO attainment, from its requests.

    ``access`` (``engine.ServerAccess``): the API key and headers every request to the engines it starts carries
    (their probes, the warm-up, the drivers); an engine given (``engines``) carries its own. ``tokenizer``: the
    drivers' tokenizer for every arm instead of each recipe's model's (``resolve_tokenizer``).

    ``recipes``: a sequence (arms named after the recipes) or a mapping arm -> recipe. Preflight
    (``check_recipe`` per recipe, driver availability and options) runs before any engine starts.

    Engines: by default each visit (``PlannedRun.segment``) starts its arm's engine and stops it after. With
    ``coresident``, every arm's engine is started (one after the other) with an even share of GPU memory
    (``engine_memory_share``) and stays up for the whole plan, so an interleaved or sandwich order costs no restart;
    if they cannot all start, InferCrane stops them, notes why, and falls back to one engine at a time.
    ``engines``: arm -> an engine InferCrane did not launch (``--url``), driven as is and never started or stopped.

    Driver invocations: with AIPerf alone and the same window at every concurrency (``window_s``, or one request
    count), a visit is one AIPerf invocation (every run as a trial, every concurrency as a sweep point;
    ``drivers.aiperf.RunGrid``), paying AIPerf's start-up once per visit; otherwise one invocation per point, with
    several drivers one after the other at each point. The prefix cache is reset before every invocation.
    With time windows, the next visit's AIPerf is started ahead while the current block is still measuring, so that
    its start-up (services, tokenizer, dataset: 14-22 s on an H200 host) costs no engine time: when the current block
    has at most ``ceil(lead / window_s)`` windows left (lead: the longest start-up the plan's blocks have shown plus
    ``PRESTART_MARGIN_S``, ``PRESTART_FIRST_LEAD_S`` before any), provided the next visit's engine is up already
    (co-resident, or given) and the installed AIPerf can be held at a gate (``drivers.aiperf_gate``). That process
    sends nothing until its gate opens; the next visit does first what it always does (the engine's alive check, the
    kernel token gate, its warm-up if the engine has had none, the prefix-cache reset), then opens the gate. A block
    started ahead is recorded with ``prestarted``, ``hidden_startup_s`` (its process start to its gate) and
    ``gate_wait_s``; the block it overlapped names in ``overlapped_by_prestart`` its windows that shared the machine
    with that start-up, and for how long. When the next visit's engine needs nothing first (warmed for the workload,
    no kernel token gate), its gate opens as soon as the current block has delivered its last window, its prefix
    cache reset then, rather than after the current AIPerf has exported and exited (its ``tail_s``); the current
    block records ``next_opened_before_end_s``, how long its process still ran after the next block's load began.
    When the plan stops (a failed block, an error, Ctrl-C), a block started ahead is ended with it, having sent
    nothing.

    Artifacts: ``out_dir/engines/<label>.log`` and ``out_dir/<arm>/run<NN>/c<C>/`` (per point; ``…/<driver>/`` with
    several drivers) or ``out_dir/<arm>/visit<SS>/`` (per visit). ``into``: a PlanResult to record into as the plan
    goes (engines as they start, runs as they finish), so a caller can write what was measured at any moment.
    ``on_start`` is called once preflight has passed; ``on_run`` with each run's metrics as soon as it is parsed;
    ``on_progress`` with a line per point of a one-invocation visit as AIPerf finishes it (the visit's metrics are
    parsed, and ``on_run`` called, when the invocation ends). A
    failing run stops the plan: engines are stopped and the error (RunFailed, mostly) propagates with ``.partial``
    holding the PlanResult measured so far; KeyboardInterrupt stops the engines and propagates.
    """
    from infercrane.serving.drivers import RunSpec, get_driver
    from infercrane.serving.engine import Engine
    from infercrane.serving.recipes import check_recipe

    arms = dict(recipes) if isinstance(recipes, Mapping) else {r.name: r for r in recipes}
    if not isinstance(recipes, Mapping) and len(arms) != len(recipes):
        raise InputError("two recipes share a name", hint="rename one, or pass a mapping arm -> recipe")
    arms = {arm: (r if r.sha256 else r.resolved()) for arm, r in arms.items()}
    order = order or workload.arm_order
    plan = plan_runs(list(arms), workload, order)
    drivers = [drivers] if isinstance(drivers, str) else list(drivers)
    if not drivers or len(set(drivers)) != len(drivers):
        raise InputError(f"drivers must be distinct and at least one, got {drivers}")
    if workload.window_s is not None and drivers != ["aiperf"]:
        raise InputError(f"workload {workload.name!r} sets window_s (a time window per point), which only AIPerf "
                         f"drives; drivers asked for: {', '.join(drivers)}",
                         hint="use --drivers aiperf, or a workload with request counts")
    drvs = [get_driver(d) for d in drivers]
    out = Path(out_dir)
    tokenizers = {arm: resolve_tokenizer(r, tokenizer) for arm, r in arms.items()}
    external = dict(engines or {})
    unknown = sorted(set(external) - set(arms))
    if unknown:
        raise InputError(f"engines given for arms {unknown} that the plan does not have ({sorted(arms)})")

    prompt_files: dict[tuple[int, int], Path] = {}  # (run index, concurrency) -> shared prompt file
    if workload.prompts == "shared" and len({(t, tuple(sorted(e.items()))) for t, e in tokenizers.values()}) > 1:
        raise InputError(f"workload {workload.name!r} sets prompts: shared, but the arms use different tokenizers "
                         f"({', '.join(sorted({t for t, _ in tokenizers.values()}))}): one prompt file cannot be "
                         "the same number of tokens for both", hint="pass --tokenizer, or set prompts: driver")

    def spec_for(p: PlannedRun, base_url: str, served_model: str, driver: str, artifacts: Path,
                 engine: Any = None) -> RunSpec:
        return run_spec(workload, arms[p.arm], tokenizers[p.arm], p, base_url, served_model, artifacts,
                        prompt_files.get((p.run_index, p.concurrency)),
                        getattr(engine, "access", None) if engine is not None else access, slos)

    def point_dir(p: PlannedRun, driver: str) -> Path:
        artifacts = out / p.arm / f"run{p.run_index:02d}" / f"c{p.concurrency}"
        return artifacts / driver if len(drivers) > 1 else artifacts

    if preflight:
        check_concurrency_fits(workload.concurrency)  # every request in flight is a socket (and a warm-up thread)
        for arm, recipe in arms.items():
            if arm not in external:
                check_recipe(recipe)
        for name, drv in zip(drivers, drvs):
            drv.require_available()
            drv.check(spec_for(plan[0], "http://127.0.0.1:0", arms[plan[0].arm].model, name,
                               point_dir(plan[0], name)))  # options only

    notes = workload.notes()
    if workload.prompts == "shared":
        notes.append(_write_shared_prompts(workload, plan, tokenizers[plan[0].arm], out / "prompts", prompt_files))
    if on_start is not None:
        on_start()
    result = PlanResult(workload=workload, recipes=arms, drivers=drivers, order=order, plan=plan, notes=notes,
                        analysis="pairs" if len(arms) == 2 and order != "sequential" else "runs")
    if into is not None:  # the caller's object, filled field by field, so it sees every run as it lands
        for name in PlanResult.model_fields:
            setattr(into, name, getattr(result, name))
        result = into
    result.engines.extend(e.record for e in external.values())  # servers given with --url, as they were found
    result.notes.extend(e.note for e in external.values() if getattr(e, "note", None))  # a model id not the recipe's
    segments: dict[int, list[PlannedRun]] = {}
    for p in plan:
        segments.setdefault(p.segment, []).append(p)
    grid = _grid_fits(workload, drivers)

    def record(metrics: RunMetrics, label: str) -> None:
        from infercrane.serving.drivers.aiperf import DRAIN_NOTE, DRAIN_NOTE_SHARE

        result.runs.append(metrics)
        said = "time windows waited on requests in flight after their end"
        if any(n.startswith(DRAIN_NOTE) for n in metrics.notes) and not any(n.startswith(said) for n in result.notes):
            result.notes.append(f"{said} for more than {DRAIN_NOTE_SHARE:.0%} of their length (first: {label}; each "
                                "window's notes say by how much): their throughput depends on where the requests' "
                                "rounds ended; windows of a request count have no such tail")
        if metrics.requests_completed and metrics.duration_s < MIN_WINDOW_S:
            result.notes.append(f"{label} ({metrics.driver}): the measurement window was {metrics.duration_s:.2f} s "
                                f"(< {MIN_WINDOW_S:g} s); raise request_count or window_s")
        if on_run is not None:
            on_run(metrics)

    from infercrane.serving.kernels import KernelGates
    from infercrane.serving.jit import attribute, jit_events, notes as jit_notes
    from infercrane.serving.warmup import warm_engine

    gates = KernelGates(arms, plan[0].arm, coresident, blocking=quality is None) \
        if any(r.kernels for r in arms.values()) else None
    shared: dict[str, Any] = dict(external)
    # Blocks started ahead (maybe_prestart): visit -> its AIPerf process, held at its gate until its visit comes.
    seg_order = list(segments)
    next_visit = dict(zip(seg_order, seg_order[1:]))
    prestarted: dict[int, Any] = {}
    prestart_tried: set[int] = set()
    can_prestart = (grid and workload.prompts != "shared"
                    and bool(getattr(drvs[0], "supports_prestart", lambda: False)()))

    def visit(engine: Any, seg: int, runs: list[PlannedRun]) -> None:
        first = len(result.runs)
        try:
            measure(engine, seg, runs)
        finally:  # compiles the engine logged inside the windows just measured (serving.jit)
            jit_check(engine, runs[0].arm, result.runs[first:])

    def jit_check(engine: Any, arm: str, new: list[RunMetrics]) -> None:
        log = getattr(engine, "log_path", None)
        if log is None or not getattr(engine.record, "launched_by_infercrane", True):
            return
        # the engine's runs so far: a co-resident engine serves all of its arm's, one started per visit this visit's
        mine = [m for m in result.runs if m.arm == arm] if shared.get(arm) is engine else new
        try:
            events = jit_events(log)
            engine.record.jit_during_serving = attribute(events, mine)
            result.notes.extend(jit_notes(engine.record.recipe_name, attribute(events, new)))
        except Exception as exc:  # reading the log must not hide why a visit failed, nor fail one that did not
            result.notes.append(f"{engine.record.recipe_name}: its log's compiles could not be read "
                                f"({type(exc).__name__}: {exc})")

    def block_grid(engine: Any, runs: list[PlannedRun], where: Path) -> Any:
        """The RunGrid of one block of ``runs`` on ``engine``, its artifacts in ``where`` (``aiperf_block``)."""
        p = runs[0]
        rates = {m.concurrency: m.request_s for m in result.runs if m.arm == p.arm and m.request_s > 0}
        return aiperf_block(workload, arms[p.arm], tokenizers[p.arm], engine, runs, where, rates,
                            prompt_files.get((p.run_index, p.concurrency)), slos)

    def run_block(engine: Any, runs: list[PlannedRun], where: Path, seg: int | None = None, retry: int = 0) -> None:
        """One block (one AIPerf process) of ``runs`` on ``engine``: every window recorded as soon as AIPerf has
        finished it, the block's time accounting kept even when it fails. ``seg``: the visit, for a whole-visit
        block: its process may have been started ahead (``prestarted``), and it may start the next visit's ahead
        (``maybe_prestart``). A block whose AIPerf ends short of its windows, normally or with a non-zero exit, the
        engine alive (``WindowsLost``), has the windows left run again, at once, on the same engine, in new blocks
        (``retry_lost``), up to ``LOST_WINDOW_RETRIES`` times; its accounting names them (``windows_lost``), the new
        blocks' say ``retry``, and a plan note says which windows were measured late."""
        from infercrane.errors import WindowsLost
        from infercrane.serving.drivers.aiperf import block_accounting

        arm = runs[0].arm
        pre = prestarted.pop(seg, None) if seg is not None else None
        g = pre.grid if pre is not None else block_grid(engine, runs, where)
        total, delivered = len(g.windows()), [0]

        def on_window(m: RunMetrics) -> None:
            record(m, f"{arm} run {m.run_index} at c={m.concurrency}")
            delivered[0] += 1
            if seg is not None:
                maybe_prestart(seg, total - delivered[0])
                if delivered[0] == total:  # this block's load has ended: the next may start while AIPerf exits
                    open_next_early(seg)

        started = time.time()
        lost: WindowsLost | None = None
        lost_windows: list[Any] = []  # the windows it did not finish, in order
        try:
            drvs[0].run_grid(g, on_window=on_window,
                             on_progress=(lambda line: on_progress(f"{arm} {line}")) if on_progress else None,
                             **({"prestarted": pre} if pre is not None else {}))
        except WindowsLost as exc:
            lost, lost_windows = exc, g.windows()[exc.finished:]
            if retry >= LOST_WINDOW_RETRIES or not engine.alive():
                raise
        finally:
            ended = time.time()
            if pre is not None:
                pre.kill()  # ended already, unless run_grid failed before waiting for it
                started = pre.opened_t or started
            acct = block_accounting(g, arm=arm, started=started, ended=ended,
                                    prestarted_t=pre.started_t if pre is not None else None)
            nxt = next_visit.get(seg) if seg is not None else None
            if nxt is not None and nxt in prestarted:
                acct["overlapped_by_prestart"] = prestart_overlap(g, prestarted[nxt], ended)
                if prestarted[nxt].opened_t is not None:  # the next block's load began before this process ended
                    acct["next_opened_before_end_s"] = round(max(0.0, ended - prestarted[nxt].opened_t), 3)
            if retry:
                acct["retry"] = retry
            if lost is not None:
                acct["windows_lost"] = [w.name for w in lost_windows]
            result.blocks.append(acct)
        if lost is not None:
            retry_lost(engine, runs, lost_windows, where, retry + 1, lost)

    def retry_lost(engine: Any, runs: list[PlannedRun], windows: list[Any], where: Path, retry: int,
                   cause: Exception) -> None:
        """Run ``windows`` (the ones a block lost) of ``runs`` again on ``engine``, now: in order, as few blocks as
        keep each one a grid (the lost run's concurrencies left, then the whole runs after it), each from a reset
        prefix cache, its artifacts in ``where/retry<N>-<k>``."""
        keys = {(w.run_index, w.concurrency) for w in windows}
        left = [p for p in runs if (p.run_index, p.concurrency) in keys]  # plan order: run by run
        by_run = [list(g) for _, g in itertools.groupby(left, key=lambda p: p.run_index)]
        pieces = [[p for row in rows for p in row]  # consecutive runs of the same concurrencies: one grid
                  for _, rows in itertools.groupby(by_run, key=lambda row: [p.concurrency for p in row])]
        arm = runs[0].arm
        first = cause.message.splitlines()[0]
        result.notes.append(f"{arm}: {first}; the engine was alive, so the {len(left)} window(s) left "
                            f"({', '.join(w.name for w in windows)}) ran again at once in {len(pieces)} new AIPerf "
                            f"block(s) (retry {retry} of {LOST_WINDOW_RETRIES}), later in the visit than planned")
        if on_progress is not None:
            on_progress(f"{arm}: AIPerf lost {len(left)} window(s); running them again (retry {retry})")
        for k, piece in enumerate(pieces):
            if not engine.alive():
                raise engine.failure(f"died before the retry of run {piece[0].run_index} at concurrency "
                                     f"{piece[0].concurrency}")
            engine.reset_prefix_cache()
            run_block(engine, piece, where / f"retry{retry}-{k}", retry=retry)

    def warmed_for_workload(engine: Any) -> bool:
        return engine_warmup(engine, workload) is not None

    def ready_for_load(engine: Any) -> bool:
        """Whether ``engine`` needs nothing more before a block's load reaches it (what ``measure`` does first
        otherwise): warmed for this workload, and no kernel token gate to pass."""
        return gates is None and warmed_for_workload(engine)

    def open_next_early(seg: int) -> None:
        """Once the block of visit ``seg`` has delivered its last window, open the next visit's gate at once (its
        engine's prefix cache reset first) rather than after this block's AIPerf has exported and exited (3-5 s on
        an H200 host): only for a block started ahead whose engine is up and needs nothing before its load."""
        nxt = next_visit.get(seg)
        pre = prestarted.get(nxt) if nxt is not None else None
        if pre is None or pre.opened_t is not None:
            return
        engine = shared.get(segments[nxt][0].arm)
        if engine is None or not ready_for_load(engine) or not engine.alive():
            return
        engine.reset_prefix_cache()
        pre.open()

    def prestart_lead_s() -> float:
        """How long ahead of a block's end to start the next block's AIPerf: the longest AIPerf start-up this plan's
        blocks have shown (a pre-started block's: what it took before its gate, and what was left after), plus
        PRESTART_MARGIN_S; PRESTART_FIRST_LEAD_S before any."""
        seen = []
        for b in result.blocks:
            if "startup_s" not in b:
                continue
            s = b["startup_s"]
            if b.get("prestarted"):
                s += b.get("hidden_startup_s", 0.0) - b.get("gate_wait_s", 0.0)
            seen.append(s)
        return max(seen) + PRESTART_MARGIN_S if seen else PRESTART_FIRST_LEAD_S

    def near_end(windows_left: int) -> bool:
        """Whether a block with ``windows_left`` windows to go is near enough its end to start what follows it: within
        ``prestart_lead_s`` of it at the window's length (``window_estimate_s``)."""
        return windows_left <= math.ceil(prestart_lead_s() / window_estimate_s(workload, result.runs))

    then_called: list[bool] = []

    def maybe_then(windows_left: int) -> None:
        """The plan's last block is near its end (``near_end``, as for a next visit): call ``then`` once, so that a
        caller can start the next plan's first block ahead (``EnginePool.prestart_first``)."""
        if then is None or then_called or not can_prestart or not near_end(windows_left):
            return
        then_called.append(True)
        try:
            then()
        except Exception as exc:  # noqa: BLE001 - a pre-start is an optimisation; this block goes on
            result.notes.append(f"the next A/B's first AIPerf block could not be started ahead "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")

    def maybe_prestart(seg: int, windows_left: int) -> None:
        """Start the next visit's block ahead, held at its gate (``AiperfDriver.prestart``), once the block of visit
        ``seg`` has at most ``ceil(prestart_lead_s() / window_s)`` windows left: only when the next visit's engine is
        up already (co-resident, or given) and the driver can hold AIPerf at a gate. A pre-start that fails is a note:
        the next block then starts when its turn comes."""
        nxt = next_visit.get(seg)
        if nxt is None:
            maybe_then(windows_left)
        if not can_prestart or nxt is None or nxt in prestarted or nxt in prestart_tried or not near_end(windows_left):
            return
        runs = segments[nxt]
        engine = shared.get(runs[0].arm)
        if engine is None:  # the next visit starts its own engine: nothing to send it to yet
            return
        prestart_tried.add(nxt)
        try:
            if not engine.alive():
                return  # the next visit says why, when it comes
            prestarted[nxt] = drvs[0].prestart(block_grid(engine, runs, out / runs[0].arm / f"visit{nxt:02d}"))
        except Exception as exc:  # noqa: BLE001 - a pre-start is an optimisation; this block goes on
            result.notes.append(f"visit {nxt} ({runs[0].arm}): its AIPerf could not be started ahead "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); it starts "
                                "when its turn comes")
            return
        if on_progress is not None:
            on_progress(f"{runs[0].arm}: AIPerf of visit {nxt} started ahead, held until this block has ended")

    def take_ahead(pre: Any) -> None:
        """Use ``pre`` (a block started ahead by the caller, held at its gate) as the first visit's block when it is
        that block: same engine, runs, workload and artifacts, and at least as many prompts. Else end it, with a
        note; the first block then starts when its turn comes."""
        first = seg_order[0]
        runs = segments[first]
        engine = shared.get(runs[0].arm)
        expected = (block_grid(engine, runs, out / runs[0].arm / f"visit{first:02d}")
                    if engine is not None and can_prestart else None)
        got = getattr(pre, "grid", None)
        if (expected is not None and got is not None
                and dataclasses.replace(got, prompt_entries=expected.prompt_entries) == expected
                and got.prompt_entries >= expected.prompt_entries):
            prestarted[first] = pre
            prestart_tried.add(first)
            return
        pre.kill()
        result.notes.append("an AIPerf block started ahead of this A/B was not its first block "
                            f"({'no such block here' if expected is None else 'a different block'}); ended unused")

    def prestart_overlap(g: Any, pre: Any, ended: float) -> list[dict[str, Any]]:
        """The windows of block ``g`` (ended at ``ended``) that ran while the next block's AIPerf (``pre``) was
        starting up: from its start to when AIPerf logged itself configured (or this block's end, if not yet)."""
        from infercrane.serving.drivers.aiperf import configured_at, window_spans

        ready = configured_at(pre.grid)
        until = min(ready, ended) if ready is not None else ended
        out = []
        for name, start, end in window_spans(g):
            overlap = min(end, until) - max(start, pre.started_t)
            if overlap > 0:
                out.append({"window": name, "overlap_s": round(overlap, 3)})
        return out

    def measure(engine: Any, seg: int, runs: list[PlannedRun]) -> None:
        arm = runs[0].arm
        if not engine.alive():
            raise engine.failure(f"died before run {runs[0].run_index} at concurrency {runs[0].concurrency}")
        if gates is not None:
            gates.before_visit(arm, engine, shared)
        if quality is not None:
            quality(arm, engine)
        if not warmed_for_workload(engine):
            # its first visit for this workload (an engine shared by A/Bs meets a new one): load it at every
            # concurrency first (serving.warmup)
            engine.record.warmup = warm_engine(engine, workload) | {"workload": workload.name}
        if grid and (workload.prompts == "shared" or (workload.trace is not None and len(runs) > 1)):
            # a prompt file per point, or a trace replayed from a reset prefix cache: one one-window block per point
            for p in runs:
                if not engine.alive():
                    raise engine.failure(f"died before run {p.run_index} at concurrency {p.concurrency}")
                engine.reset_prefix_cache()
                run_block(engine, [p], point_dir(p, "aiperf"))
        elif grid:  # the whole visit is one block: one AIPerf process, one window per (run, concurrency)
            pre = prestarted.get(seg)
            if pre is None or pre.opened_t is None:  # else reset as its gate opened (open_next_early)
                engine.reset_prefix_cache()
            run_block(engine, runs, out / arm / f"visit{seg:02d}", seg)  # its AIPerf may be waiting at its gate
        else:
            for p in runs:
                if not engine.alive():
                    raise engine.failure(f"died before run {p.run_index} at concurrency {p.concurrency}")
                for name, drv in zip(drivers, drvs):
                    engine.reset_prefix_cache()
                    m = drv.run(spec_for(p, engine.base_url, engine.served_model, name, point_dir(p, name),
                                         engine))
                    record(m, f"{p.arm} run {p.run_index} at c={p.concurrency}")
        if not engine.alive():
            raise engine.failure(f"died during its visit (runs {[p.run_index for p in runs]})")
        if gates is not None:
            gates.after_visit(arm, engine)

    t0 = time.monotonic()
    if ahead is not None:  # the first visit's block, started ahead by the caller: used only if it is that block
        take_ahead(ahead)
    try:
        if coresident:
            shared.update(_launch_coresident({a: r for a, r in arms.items() if a not in external}, out,
                                             startup_timeout_s, result, access))
        for seg, runs in segments.items():
            arm = runs[0].arm
            if arm in shared:
                visit(shared[arm], seg, runs)
                continue
            engine = Engine(arms[arm], log_dir=out / "engines", label=f"{seg:02d}-{arm}",
                            startup_timeout_s=startup_timeout_s, access=access)
            result.engines.append(engine.record)
            with engine:
                visit(engine, seg, runs)
    except (InfercraneError, KeyboardInterrupt, SystemExit) as exc:
        what = exc.message.splitlines()[0] if isinstance(exc, InfercraneError) else type(exc).__name__
        result.notes.append(f"stopped part-way: {what}")
        exc.partial = result  # type: ignore[attr-defined]
        raise
    finally:
        for pre in prestarted.values():  # a block started ahead whose visit never came: nothing of it may linger
            pre.kill()
        for arm, engine in shared.items():
            if arm not in external:
                engine.stop()
    result.wall_s = round(time.monotonic() - t0, 3)
    result.complete = True
    return result


def _write_shared_prompts(workload: Workload, plan: Sequence[PlannedRun], tokenizer: tuple[str, dict[str, str]],
                          prompts_dir: Path, files: dict[tuple[int, int], Path]) -> str:
    """Write one prompt file per (run index, concurrency) of the plan into ``files``; the plan note that says so."""
    from infercrane.serving.prompts import load_tokenizer, read_prompts_file, write_point_prompts

    tok = load_tokenizer(*tokenizer)
    counts: list[int] = []
    for p in plan:
        key = (p.run_index, p.concurrency)
        if key not in files:
            files[key] = write_point_prompts(prompts_dir / f"run{p.run_index:02d}-c{p.concurrency}.jsonl", tok,
                                             workload, p.run_index, p.concurrency)
            counts += [q.input_tokens for q in read_prompts_file(files[key])]
    return (f"prompts: shared, made by InferCrane with tokenizer {tokenizer[0]}: one file per (run, concurrency) "
            f"under {prompts_dir}, handed to every driver and arm at that point; prompt tokens "
            f"{min(counts)}-{max(counts)} for {workload.input_tokens} asked")


def _launch_coresident(arms: Mapping[str, Recipe], out: Path, startup_timeout_s: float,
                       result: PlanResult, access: Any = None) -> dict[str, Any]:
    """Every arm's engine up together (started one after the other), each with an even share of GPU memory; {} (and a
    note) when they cannot all start, after stopping those that did: the plan then starts one engine per visit."""
    from infercrane.serving.engine import Engine

    if len(arms) < 2:
        return {}
    share = engine_memory_share(len(arms))
    live: dict[str, Any] = {}
    try:
        for arm, recipe in arms.items():
            live[arm] = Engine(recipe, log_dir=out / "engines", label=f"coresident-{arm}",
                                    startup_timeout_s=startup_timeout_s,
                                    gpu_memory_utilization=share if recipe.engine == "vllm" else None,
                                    coresident_with=[a for a in arms if a != arm], access=access)
            # one after the other: vLLM sizes its KV cache from the memory its start-up profile sees taken, and
            # counts what another engine takes meanwhile as its own (seen on an H200 with vLLM 0.22.1: 0.65 GiB of
            # KV cache left, below one 40960-token request)
            live[arm].start()
    except BaseException as exc:
        for engine in live.values():
            engine.stop()
        if not isinstance(exc, RunFailed):  # a bad recipe or an interrupt is not a reason to fall back
            raise
        first = exc.message.splitlines()[0]
        result.notes.append(f"co-resident engines ({', '.join(arms)}, {share:g} of GPU memory each) did not all "
                            f"start ({first}); one engine at a time instead")
        return {}
    for engine in live.values():
        result.engines.append(engine.record)
    result.notes.append(f"co-resident engines: {', '.join(arms)} up together on one GPU, "
                        f"{share:g} of its memory each")
    return live


def run_arm(recipe: Recipe, workload: Workload, *, out_dir: str | Path, drivers: Sequence[str] | str = "aiperf",
            tokenizer: str | None = None, startup_timeout_s: float = STARTUP_TIMEOUT_S,
            on_run: Callable[[RunMetrics], None] | None = None) -> PlanResult:
    """One recipe alone: one engine lifetime, ``runs_per_arm`` runs x every concurrency."""
    return run_plan([recipe], workload, out_dir=out_dir, drivers=drivers, order="sequential", tokenizer=tokenizer,
                    startup_timeout_s=startup_timeout_s, on_run=on_run)

"""Every option of ``infercrane serve ab`` / ``serve bench`` and ``kernel apply``, declared once (type, bounds,
default, help).

Layering: the recipe and workload files, then these overrides, then the frozen resolved objects whose hashes go into
the receipt.

Groups of options shared with the PoC config (``poc/config.py``), declared here only: ``LoadOptions`` (what each
request sends and how requests arrive, named as AIPerf names them: ``--request-rate``, ``--arrival-pattern``, ``--isl``,
``--osl``, ``--extra-inputs``; overrides of the workload, so the receipt records them with it and both arms get the
same) within ``PlanOptions`` (``--runs``, ``--order``, ``--concurrency``, the request counts), which a PoC's
``paired`` and ``public`` sections take; and ``ServerOptions`` (how to reach the servers: ``--tokenizer``,
``--api-key``, ``--header``) with ``StandIn``, ``Drivers`` and ``StartupTimeout``, which its ``serving`` section
takes. Secrets: ``--api-key`` and the header values are never written: every dump of these models (the receipt's
recorded options, the PoC receipt's config) shows ``<redacted>`` in their place.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from cyclopts import Group, Parameter
from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PositiveInt, field_serializer, field_validator, model_validator,
)

from ..options import FailOnOption, Many, PriceOptions, flag
from .ratesearch import DEFAULT_MAX_PROBES, DEFAULT_RATE_RANGE
from .engine_kinds import STARTUP_TIMEOUT_S
from .quality import QUALITY_GATE_DEFAULT, QualityGateMode

# The workload each command runs when --workload is not given.
DEFAULT_WORKLOAD = {"ab": "seed-paired", "bench": "public-1000"}
RUNS_RANGE = (3, 100)
REDACTED = "<redacted>"  # as engine.REDACTED (not imported: --help must stay light)
LOAD = Group("Load (AIPerf's names; override the workload)", sort_key=10)
SERVER = Group("Server access", sort_key=11)
T = TypeVar("T")
# A repeated option whose values may hold commas (a header value, a JSON value): not split at them, unlike Many.
Repeated = Annotated[tuple[T, ...], Parameter(consume_multiple=True, negative=())]


def _as_pairs(value: object, as_json: bool = False) -> object:
    """A mapping (a PoC config's ``extra_inputs: {temperature: 0.7}``, ``headers: {X-Tenant: a}``) as the
    ``KEY:VALUE`` items of the CLI form, each value as JSON (``as_json``) or as text."""
    if isinstance(value, dict):
        return tuple(f"{k}:{json.dumps(v) if as_json else v}" for k, v in value.items())
    if isinstance(value, str):
        return (value,)
    return value


def parse_extra_input(text: str, flag_name: str = "--extra-inputs") -> tuple[str, Any]:
    """``KEY:VALUE`` (AIPerf's ``--extra-inputs`` form) as (key, value): the value read as JSON when it is JSON
    (``0.7``, ``true``, ``["a"]``, ``{"k": 1}``, ``null``), else kept as text; ValueError naming the flag otherwise."""
    key, colon, raw = str(text).partition(":")
    key, raw = key.strip(), raw.strip()
    if not colon or not key:
        raise ValueError(f"{flag_name} {text}: give KEY:VALUE (AIPerf's form, e.g. temperature:0.7; the value is read "
                         "as JSON when it is JSON)")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


SECRET_FLAGS = {"--api-key": "key", "--header": "header"}  # the flags whose values a command line may not keep


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` as a receipt may record it: the value of ``--api-key`` and the value part of each ``--header
    NAME:VALUE`` (repeated, or several after one flag) replaced by ``<redacted>``, in the ``--flag value`` and
    ``--flag=value`` forms."""
    def hidden(kind: str, value: str) -> str:
        return REDACTED if kind == "key" else f"{value.split(':', 1)[0]}:{REDACTED}"

    out: list[str] = []
    kind: str | None = None
    for tok in argv:
        if kind is not None and (kind == "key" or not tok.startswith("-")):
            out.append(hidden(kind, tok))
            kind = None if kind == "key" else kind
            continue
        kind = None
        name, eq, value = tok.partition("=")
        if name in SECRET_FLAGS and eq:
            out.append(f"{name}={hidden(SECRET_FLAGS[name], value)}")
            continue
        kind = SECRET_FLAGS.get(tok)
        out.append(tok)
    return out


class LoadOptions(BaseModel):
    """What each request sends and how requests arrive: overrides of the workload (``load_overrides``), recorded with
    it in the receipt and its identity, the same for both arms. A PoC's ``paired`` / ``public`` sections take them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_rate: Annotated[float | None, Parameter(group=LOAD)] = Field(
        None, gt=0, allow_inf_nan=False,
        description="Requests per second at every point (open loop, AIPerf's rate phases; vllm bench --request-rate); "
                    "each concurrency then caps the requests in flight. Default: closed loop at the concurrency.")
    arrival_pattern: Annotated[Literal["poisson", "constant"] | None, Parameter(group=LOAD)] = Field(
        None, description="How arrivals are spaced at --request-rate: poisson (AIPerf's default) or constant.")
    isl: Annotated[int | None, Parameter(group=LOAD)] = Field(
        None, ge=1, description="Input (prompt) tokens per request: the workload's input_tokens.")
    osl: Annotated[int | None, Parameter(group=LOAD)] = Field(
        None, ge=2, description="Output tokens per request (>= 2, so TPOT is defined): the workload's output_tokens.")
    extra_inputs: Annotated[Repeated[str] | None, Parameter(group=LOAD)] = Field(
        None, description="KEY:VALUE merged into every request body (repeatable; the value read as JSON when it is "
                          "JSON, e.g. temperature:0.7), the warm-up's too; recorded with the workload.")

    @field_validator("extra_inputs", mode="before")
    @classmethod
    def _pairs(cls, value: object) -> object:
        return _as_pairs(value, as_json=True)

    @field_validator("extra_inputs")
    @classmethod
    def _extra_inputs_ok(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        from .workload import reserved_input

        keys = [parse_extra_input(v)[0] for v in value]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"{flag('extra_inputs')}: {', '.join(twice)} given more than once; give each key once")
        why = reserved_input(keys)
        if why is not None:
            raise ValueError(f"{flag('extra_inputs')} {why}")
        return value

    def extra_inputs_dict(self) -> dict[str, Any] | None:
        return None if self.extra_inputs is None else dict(parse_extra_input(v) for v in self.extra_inputs)

    def load_overrides(self) -> dict[str, Any]:
        """The workload fields these options replace."""
        pairs = {"request_rate": self.request_rate, "arrival_pattern": self.arrival_pattern,
                 "input_tokens": self.isl, "output_tokens": self.osl, "extra_inputs": self.extra_inputs_dict()}
        return {k: v for k, v in pairs.items() if v is not None}


class ServerOptions(BaseModel):
    """How to reach the servers: the drivers' tokenizer, and the API key and headers every request carries (every
    probe, the warm-up, the drivers: ``engine.ServerAccess``). A PoC's ``serving`` section takes them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokenizer: Annotated[str | None, Parameter(group=SERVER)] = Field(
        None, description="The drivers' tokenizer (a hub id in the local cache, or a tokenizer folder) instead of the "
                          "recipe model's: needed for a test-server recipe, or a server whose model is not local.")
    api_key: Annotated[str | None, Parameter(group=SERVER)] = Field(
        None, repr=False, description="API key every request to the servers carries (Authorization: Bearer KEY): "
                                      "AIPerf's --api-key, vllm bench's OPENAI_API_KEY. Never recorded: the receipt "
                                      "says only that one was set.")
    headers: Annotated[Repeated[str] | None, Parameter(name="--header", group=SERVER)] = Field(
        None, repr=False, description="NAME:VALUE header every request to the servers carries (repeatable; AIPerf's "
                                      "Header:Value form). The receipt records the names; the values are never "
                                      "written. Not with vllm-bench.")

    @field_validator("api_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        from .engine import ServerAccess

        return None if value is None else ServerAccess.check_key(value, flag("api_key"))

    @field_validator("headers", mode="before")
    @classmethod
    def _header_list(cls, value: object) -> object:
        return _as_pairs(value)

    @field_validator("headers")
    @classmethod
    def _headers_ok(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        from .engine import ServerAccess

        names = [ServerAccess.parse_header(h)[0] for h in value]
        lower = [n.lower() for n in names]
        twice = sorted({n for n in names if lower.count(n.lower()) > 1})
        if twice:
            raise ValueError(f"--header {', '.join(twice)}: given more than once; give each header once")
        return value

    @model_validator(mode="after")
    def _one_authorization(self) -> "ServerOptions":
        if self.api_key is not None and any(h.split(":", 1)[0].strip().lower() == "authorization"
                                            for h in self.headers or ()):
            raise ValueError("--api-key is sent as the Authorization header, and --header Authorization sets it "
                             "too; give one")
        return self

    @field_serializer("api_key")
    def _no_key(self, value: str | None) -> str | None:
        return None if value is None else REDACTED

    @field_serializer("headers")
    def _names_only(self, value: tuple[str, ...] | None) -> list[str] | None:
        return None if value is None else [f"{h.split(':', 1)[0].strip()}:{REDACTED}" for h in value]

    def access(self) -> Any:
        """The ``engine.ServerAccess`` these options give (empty when neither key nor header is set)."""
        from .engine import ServerAccess

        return ServerAccess(api_key=self.api_key,
                            headers=tuple(ServerAccess.parse_header(h) for h in self.headers or ()))

    def recorded(self) -> dict[str, Any]:
        """What a receipt's options hold of them (secrets redacted), the options given only."""
        return {k: v for k, v in self.model_dump(mode="json", include=set(ServerOptions.model_fields)).items()
                if v is not None}


def _distinct_drivers(value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise ValueError("no driver given; give aiperf and/or vllm-bench")
    if len(set(value)) != len(value):
        raise ValueError(f"drivers repeat ({','.join(value)}); give each once")
    return value


# The plan and engine options ``serve ab`` / ``serve bench`` and a PoC's sections share: each one's type, bounds,
# help and default declared once, here, and taken by ``ServeConfig`` and ``poc.config`` each in its own order.
StandIn = Annotated[bool, Field(description="Serve an offline stand-in of the recipes' model (exact config, local "
                                            "tokenizer, --load-format dummy), written under runs/stand-ins/.")]
Drivers = Annotated[Many[Literal["aiperf", "vllm-bench"]], AfterValidator(_distinct_drivers),
                    Field(description="Load generators, each run at every point on the same engine; the first is "
                                      "primary.")]
StartupTimeout = Annotated[float, Field(gt=0, description="Engine start-up limit (health + first completion).")]
ServedModel = Annotated[str | None, Field(description="Serve this model instead of the recipes' (a catalog id, see "
                                                    "`infercrane model list`: a model with packaged weights is "
                                                    "served from its converted folder; or a local model folder).")]
QualityGate = Annotated[QualityGateMode,
                        # YAML 1.1 reads a bare on / off as a boolean: take it as the word it was
                        BeforeValidator(lambda v: {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v),
                        Field(description="The semantic-quality gate (an A/B's arms answer generated "
                                                           "items; a failed gate rejects): auto runs it where the "
                                                           "model's weights are real on vLLM, on and off force it.")]
DEFAULT_DRIVERS: tuple[str, ...] = ("aiperf",)


class PlanOptions(LoadOptions):
    """How many runs, in what order, at which points, of how many requests, and (``LoadOptions``) what each request
    sends: overrides of the workload that ``serve ab`` / ``serve bench`` and a PoC's ``paired`` / ``public`` sections
    take (``plan_overrides``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int | None = Field(None, ge=RUNS_RANGE[0], le=RUNS_RANGE[1],
                             description="Runs per arm, 3 to 100 (workload default: 5).")
    order: Literal["sequential", "interleaved", "sandwich"] | None = Field(None, description="Arm order (workload "
                                                                                              "default: sandwich).")
    concurrency: Many[PositiveInt] | None = Field(None, min_length=1,
                                                  description="Concurrency points (workload default).")
    request_count: int | None = Field(None, ge=1, description="Requests per point (default derived per point).")
    requests_per_slot: int | None = Field(None, ge=1, description="Derived request count: requests per "
                                                                  "concurrency slot.")
    min_requests: int | None = Field(None, ge=1, description="Derived request count: at least this many per point.")

    def plan_overrides(self) -> dict[str, Any]:
        """The workload fields these options and the load options replace."""
        pairs = {"runs_per_arm": self.runs, "arm_order": self.order, "request_count": self.request_count,
                 "requests_per_slot": self.requests_per_slot, "min_requests": self.min_requests,
                 "concurrency": list(self.concurrency) if self.concurrency else None}
        return {k: v for k, v in pairs.items() if v is not None} | self.load_overrides()


class _ServeHead(BaseModel):
    """``serve``'s first options (a base so that they come before ``PlanOptions`` in its help)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str | None = Field(None, description="Workload preset (quick, seed-paired, public-1000; see `infercrane "
                                                   "serve recipes`) or a YAML file. Default: "
                                                   + ", ".join(f"{v} for serve {k}" for k, v in DEFAULT_WORKLOAD.items())
                                                   + ".")
    model: ServedModel = None
    stand_in: StandIn = False
    drivers: Drivers = DEFAULT_DRIVERS
    quality_gate: QualityGate = QUALITY_GATE_DEFAULT


class ServeConfig(ServerOptions, PlanOptions, _ServeHead, FailOnOption, PriceOptions):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Path | None = Field(None, description="A serving policy file overriding the packaged thresholds.")
    startup_timeout_s: StartupTimeout = STARTUP_TIMEOUT_S
    out: Path | None = Field(None, description="Receipt path (default: runs/RUN_ID/serve-KIND.json).")
    sign_key: Path | None = Field(None, description="Sign the receipt each time it is written (an ed25519 private key "
                                                    "from `infercrane receipt keygen`); checked before anything runs.")
    coresident: bool = Field(False, description="serve ab: both arms' engines up at once on the one GPU, each with half "
                                                "of vLLM's default memory share, so an interleaved A/B restarts no "
                                                "engine (a PoC config's serving.coresident).")
    find_max_rate: bool = Field(False, description="serve bench: search the highest open-loop request rate at which "
                                                   "every window meets the policy's SLOs (a policy with slos, e.g. "
                                                   "--policy serving-slo), instead of benchmarking the workload.")
    rate_range: Many[float] | None = Field(None, description="--find-max-rate: the lowest and highest rate to probe, "
                                                             "requests per second (default "
                                                             f"{DEFAULT_RATE_RANGE[0]:g} and {DEFAULT_RATE_RANGE[1]:g}).")
    max_probes: int = Field(DEFAULT_MAX_PROBES, ge=2, le=30, description="--find-max-rate: at most this many rates "
                                                                          "probed.")
    url: Many[str] | None = Field(None, description="Measure servers that are already running instead of launching "
                                                    "engines: the base URL of an OpenAI-compatible server "
                                                    "(http://HOST:PORT), one per recipe in the recipes' order (serve "
                                                    "ab: A's, then B's). Nothing is started or stopped; the recipes "
                                                    "name what the servers run.")

    @field_validator("runs", mode="before")
    @classmethod
    def _runs_in_range(cls, value: object) -> object:
        try:
            n = int(value) if not isinstance(value, bool) else value
        except (TypeError, ValueError):
            return value  # not a number: pydantic's own message says so
        lo, hi = RUNS_RANGE
        if isinstance(n, int) and not lo <= n <= hi:
            raise ValueError(f"{flag('runs')} {n}: give {lo} to {hi} runs per arm (with 3 a rank test cannot reach "
                             "p < 0.05; 5 or more are recommended)")
        return value

    @field_validator("url")
    @classmethod
    def _urls(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        from ..errors import InputError
        from .engine import parse_server_url

        try:
            return tuple(parse_server_url(u) for u in value)
        except InputError as exc:
            raise ValueError(str(exc.lines()[0])) from None

    @model_validator(mode="after")
    def _consistent(self) -> "ServeConfig":
        if self.request_rate is not None and self.requests_per_slot is not None:
            raise ValueError("--requests-per-slot sizes windows of a closed loop, and --request-rate sends open loop "
                             "(a window's requests then follow from the rate); give --request-count, or drop one")
        if self.stand_in and self.model is not None:
            raise ValueError("--stand-in serves a stand-in of the recipes' model, --model another model; give one")
        if self.url and self.stand_in:
            raise ValueError("--stand-in has InferCrane launch engines on a stand-in, --url measures running servers; "
                             "give one")
        return self

    def workload_for(self, kind: str) -> str:
        """The workload to run: ``--workload``, or the command's default (``DEFAULT_WORKLOAD``)."""
        return self.workload or DEFAULT_WORKLOAD[kind]

    def workload_overrides(self) -> dict[str, Any]:
        return self.plan_overrides()


class ApplyConfig(BaseModel):
    """Every option of ``infercrane kernel apply``, declared once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str = Field("fused_add_rms_norm", description="The vLLM IR op the kernel provides (fused_add_rms_norm, "
                                                      "rms_norm; the kernel lab's spelling works too).")
    impl: Literal["triton", "cuda", "user"] = Field("triton", description="InferCrane's triton or cuda kernel, or "
                                                                          "user: --candidate.")
    candidate: str | None = Field(None, description="Your kernel as path/to/file.py:function (with --impl user).")
    modes: Many[Literal["compiled", "eager"]] = Field(
        ("compiled", "eager"), description="Serving modes, each an A/B of the shipped recipe against it with the "
                                           "kernel inside: compiled (incumbent: Inductor's code), eager (vLLM's "
                                           "CUDA kernel).")
    workload: str = Field("seed-paired", description="Workload preset or YAML file of the A/Bs.")
    runs: int | None = Field(None, ge=3, le=100, description="Runs per arm (workload default: 5).")
    model: ServedModel = None
    stand_in: bool = Field(False, description="Serve the offline stand-in of the recipes' model (dummy weights).")
    quality_gate: QualityGate = QUALITY_GATE_DEFAULT
    kernel_receipt: Path | None = Field(None, description="A kernel screen receipt (v3) to predict from, instead of "
                                                          "screening the kernel at the rows the workload runs.")
    trials: int = Field(5, ge=1, le=100, description="Timing trials of that screen.")
    policy: Path | None = Field(None, description="A serving policy file overriding the packaged thresholds.")
    startup_timeout_s: float = Field(STARTUP_TIMEOUT_S, gt=0, description="Engine start-up limit.")
    out: Path | None = Field(None, description="Folder of the receipts (default runs/RUN_ID/apply).")

    @field_validator("op")
    @classmethod
    def _vllm_op(cls, value: str) -> str:
        from ..vllm_plugin.selection import vllm_op_of

        return vllm_op_of(value)

    @model_validator(mode="after")
    def _candidate_with_user(self) -> "ApplyConfig":
        if (self.impl == "user") != (self.candidate is not None):
            raise ValueError("--impl user goes with --candidate path.py:function, and --candidate with --impl user")
        return self

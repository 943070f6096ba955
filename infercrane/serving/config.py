"""Every option of ``infercrane serve ab`` / ``serve bench``, declared once (type, bounds, default, help).

Layering: the recipe and workload files, then these overrides, then the frozen resolved objects whose hashes go into
the receipt.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from ..commands.options import Many, flag

# The workload each command runs when --workload is not given.
DEFAULT_WORKLOAD = {"ab": "seed-paired", "bench": "public-1000"}
RUNS_RANGE = (3, 100)


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str | None = Field(None, description="Workload preset (quick, seed-paired, public-1000; see `infercrane "
                                                   "serve recipes`) or a YAML file. Default: "
                                                   + ", ".join(f"{v} for serve {k}" for k, v in DEFAULT_WORKLOAD.items())
                                                   + ".")
    model: str | None = Field(None, description="Serve this model instead of the recipes' (a catalog id, "
                                                     "see `infercrane model list`, or a local model folder).")
    stand_in: bool = Field(False, description="Serve an offline stand-in of the recipes' model (exact config, local "
                                              "tokenizer, --load-format dummy), written under runs/stand-ins/.")
    drivers: Many[Literal["aiperf", "vllm-bench"]] = Field(
        ("aiperf",), description="Load generators, each run at every point on the same engine; the first is primary.")
    runs: int | None = Field(None, ge=RUNS_RANGE[0], le=RUNS_RANGE[1],
                             description="Runs per arm, 3 to 100 (workload default: 5).")
    order: Literal["sequential", "interleaved", "sandwich"] | None = Field(None, description="Arm order (workload "
                                                                                              "default: sandwich).")
    concurrency: Many[PositiveInt] | None = Field(None, description="Concurrency points (workload default).")
    request_count: int | None = Field(None, ge=1, description="Requests per point (default derived per point).")
    requests_per_slot: int | None = Field(None, ge=1, description="Derived request count: requests per "
                                                                  "concurrency slot.")
    min_requests: int | None = Field(None, ge=1, description="Derived request count: at least this many per point.")
    policy: Path | None = Field(None, description="A serving policy file overriding the packaged thresholds.")
    startup_timeout_s: float = Field(900.0, gt=0, description="Engine start-up limit (health + first completion).")
    out: Path | None = Field(None, description="Receipt path (default: runs/RUN_ID/serve-KIND.json).")
    sign_key: Path | None = Field(None, description="Sign the receipt each time it is written (an ed25519 private key "
                                                    "from `infercrane receipt keygen`); checked before anything runs.")
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

    @field_validator("drivers")
    @classmethod
    def _distinct_drivers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("no driver given; give aiperf and/or vllm-bench")
        if len(set(value)) != len(value):
            raise ValueError(f"drivers repeat ({','.join(value)}); give each once")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "ServeConfig":
        if self.stand_in and self.model is not None:
            raise ValueError("--stand-in serves a stand-in of the recipes' model, --model another model; give one")
        if self.url and self.stand_in:
            raise ValueError("--stand-in has InferCrane launch engines on a stand-in, --url measures running servers; "
                             "give one")
        return self

    def workload_for(self, kind: str) -> str:
        """The workload to run: ``--workload``, or the command's default (``DEFAULT_WORKLOAD``)."""
        return self.workload or DEFAULT_WORKLOAD[kind]

    def workload_overrides(self) -> dict:
        pairs = {"runs_per_arm": self.runs, "arm_order": self.order, "request_count": self.request_count,
                 "requests_per_slot": self.requests_per_slot, "min_requests": self.min_requests,
                 "concurrency": list(self.concurrency) if self.concurrency else None}
        return {k: v for k, v in pairs.items() if v is not None}

"""Every option of ``infercrane serve ab`` / ``serve bench``, declared once (type, bounds, default, help).

Layering: the recipe and workload files, then these overrides, then the frozen resolved objects whose hashes go into
the receipt.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from ..commands.options import Many


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str = Field("seed-paired", description="Workload preset (seed-paired, public-1000) or a YAML file.")
    model: str | None = Field(None, description="Serve this model instead of the recipes' (a catalog id, "
                                                     "see `infercrane model list`, or a local model folder).")
    stand_in: bool = Field(False, description="Serve an offline stand-in of the recipes' model (exact config, local "
                                              "tokenizer, --load-format dummy), written under runs/stand-ins/.")
    drivers: Many[Literal["aiperf", "vllm-bench"]] = Field(
        ("aiperf",), description="Load generators, each run at every point on the same engine; the first is primary.")
    runs: int | None = Field(None, ge=3, le=100, description="Runs per arm (workload default: 5).")
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
        return self

    def workload_overrides(self) -> dict:
        pairs = {"runs_per_arm": self.runs, "arm_order": self.order, "request_count": self.request_count,
                 "requests_per_slot": self.requests_per_slot, "min_requests": self.min_requests,
                 "concurrency": list(self.concurrency) if self.concurrency else None}
        return {k: v for k, v in pairs.items() if v is not None}

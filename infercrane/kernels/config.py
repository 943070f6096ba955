"""Every option of ``infercrane kernel screen`` and ``kernel list``, declared once: type, bounds, default and help on
one field.

The CLI is generated from these models; the resolved, frozen object is what the receipt hashes. Checks that need
only the options themselves (known op, known implementation keys, a candidate selected, options that go together)
are validators here, so a bad value is refused while the command line is parsed, naming its flag; checks that read
files or the machine (model, policy, receipts, output path, memory) are made by the command before any screening.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from cyclopts import Parameter
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationInfo, field_validator, model_validator

from ..decide.policy import TIMING_MODES, TimingMode
from ..options import Many
from ..options import ExecutorOptions, FailOnOption

DEFAULT_OP = "fused_add_rmsnorm"
# How a screen measures by default (the fields below; the harness's own defaults too)
DEFAULT_TRIALS = 5
DEFAULT_SAMPLES_PER_TRIAL = 20
DEFAULT_CHECKS = 3
DEFAULT_TIMEOUT_S = 600.0


class OpChoice(BaseModel):
    """The operator: what ``kernel list``, ``kernel screen`` and a PoC's ``kernel`` section all name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str = Field(DEFAULT_OP, description="Operator (see `infercrane kernel list --op OP`).")

    @field_validator("op")
    @classmethod
    def _known_op(cls, value: str) -> str:
        from . import registry

        if value not in registry.known_ops():
            raise ValueError(f"unknown operator {value!r}; known operators: {', '.join(registry.known_ops())}")
        return value


class OpOptions(OpChoice):
    """The operator and the device: what ``kernel list`` and ``kernel screen`` both ask."""

    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="auto: timed on a CUDA GPU, functional "
                                                                       "(correctness only) without one.")


# How a screen measures: each option's type, bounds, help and default declared once, here, and taken by ``kernel
# screen`` (``ScreenConfig``) and a PoC's ``kernel`` section (``poc.config.KernelSection``), each in its own order.
Modes = Annotated[Many[TimingMode], Field(min_length=1, description="Timing modes.")]
Trials = Annotated[int, Field(ge=1, le=100, description="Timing trials; implementations are interleaved in each.")]
Samples = Annotated[int, Field(ge=3, le=1000, description="Samples per implementation, row count and mode in a "
                                                         "trial.")]
Checks = Annotated[int, Field(ge=1, le=20, description="Correctness checks per row count, each on fresh random "
                                                      "inputs.")]
Dtype = Annotated[Literal["bfloat16", "float16"], Field(description="Storage dtype.")]
Seed = Annotated[int, Field(ge=0, description="Base seed of the random inputs.")]
WorkerTimeout = Annotated[float, Field(gt=0, description="Per-implementation worker timeout.")]
SCREEN_KNOBS = ("modes", "trials", "samples", "checks", "dtype", "seed", "timeout_s")  # those fields' names


class ScreenConfig(ExecutorOptions, OpOptions, FailOnOption):
    model: str = Field("Qwen/Qwen3-0.6B", description="Catalog model id, or a config.json / model folder, whose "
                                                      "hidden size, eps and layer count set the shapes.")
    rows: Many[PositiveInt] | None = Field(None, description="Row counts (tokens in flight) to screen "
                                                             "(default: the op's, see `infercrane kernel list`).")
    bandwidth_rows: bool = Field(False, description="Also screen the op's large row counts (the memory-bandwidth "
                                                    "regime; see `infercrane kernel list`).")
    impls: Many[str] | None = Field(None, description="Implementations to screen (default: all; see "
                                                      "`infercrane kernel list`).")
    candidate: str | None = Field(None, description="Your kernel as path/to/file.py:function, screened as 'user'.")
    candidate_in_place: Annotated[bool | None, Parameter(negative="--candidate-out-of-place")] = Field(
        None, description="Override the candidate's declared contract (in place like vLLM, or returning the outputs).")
    modes: Modes = TIMING_MODES
    trials: Trials = DEFAULT_TRIALS
    samples: Samples = DEFAULT_SAMPLES_PER_TRIAL
    checks: Checks = DEFAULT_CHECKS
    dtype: Dtype = "bfloat16"
    decode_step_ms: float | None = Field(None, gt=0, description="Decode step wall time for the end-to-end (Amdahl) "
                                                                 "ceiling.")
    serving_receipt: Path | None = Field(None, description="Read the decode step time from a serving receipt "
                                                           "(median TPOT of --serving-recipe at --serving-concurrency).")
    serving_recipe: str = Field("compiled", description="Recipe whose TPOT is the decode step time "
                                                        "(with --serving-receipt).")
    serving_concurrency: int = Field(1, ge=1, description="Concurrency whose TPOT is the decode step time "
                                                          "(with --serving-receipt).")
    policy: Path | None = Field(None, description="A kernel policy file overriding the packaged thresholds.")
    seed: Seed = 0
    timeout_s: WorkerTimeout = DEFAULT_TIMEOUT_S
    out: Path | None = Field(None, description="Receipt path (default: runs/RUN_ID/kernel-screen.json).")
    sign_key: Path | None = Field(None, description="Sign the receipt as it is written (an ed25519 private key from "
                                                    "`infercrane receipt keygen`); checked before anything runs.")

    @field_validator("impls")
    @classmethod
    def _known_impls(cls, value: tuple[str, ...] | None, info: ValidationInfo) -> tuple[str, ...] | None:
        from . import registry

        op = info.data.get("op")
        if value is None or op is None:  # a bad --op is reported on its own
            return value
        if not value:
            raise ValueError(f"no implementation given; known keys: {', '.join(registry.known_keys(op))}")
        unknown = [k for k in dict.fromkeys(value) if k not in registry.known_keys(op)]
        if unknown:
            raise ValueError(f"unknown implementation key(s) {', '.join(map(repr, unknown))} for {op}; known keys: "
                             f"{', '.join(registry.known_keys(op))}")
        return tuple(dict.fromkeys(value))

    @model_validator(mode="after")
    def _consistent(self) -> "ScreenConfig":
        from . import registry

        given = self.model_fields_set
        if self.candidate is None and "candidate_in_place" in given:
            raise ValueError("--candidate-in-place / --candidate-out-of-place apply to --candidate only; give "
                             "--candidate path/to/file.py:function or drop the flag")
        if self.impls is not None and registry.USER_KEY in self.impls and self.candidate is None:
            raise ValueError(f"--impls {registry.USER_KEY} needs --candidate path/to/file.py:function")
        if self.impls is not None and self.candidate is None:
            candidates = [i.key for i in registry.implementations(self.op) if i.kind == "candidate"]
            if not set(self.impls) & set(candidates):
                raise ValueError(f"--impls {','.join(self.impls)} selects no candidate, only baselines: add one of "
                                 f"the {self.op} candidates ({', '.join(candidates)}) or give --candidate "
                                 "path/to/file.py:function")
        for f in ("serving_recipe", "serving_concurrency"):
            if f in given and self.serving_receipt is None:
                raise ValueError(f"--{f.replace('_', '-')} is read only with --serving-receipt; give the serving "
                                 "receipt too, or drop it")
        if self.serving_receipt is not None and self.decode_step_ms is not None:
            raise ValueError("--decode-step-ms and --serving-receipt both set the decode step time; give one")
        return self

    def default_rows(self) -> tuple[int, ...]:
        from . import registry

        return registry.default_rows(self.op)

    def all_rows(self) -> tuple[int, ...]:
        """The rows screened: --rows (or the op's default), then the op's bandwidth rows with --bandwidth-rows."""
        from . import registry

        rows = tuple(self.rows) if self.rows is not None else registry.default_rows(self.op)
        extra = tuple(r for r in registry.bandwidth_rows(self.op) if r not in rows) if self.bandwidth_rows else ()
        return tuple(dict.fromkeys(rows)) + extra

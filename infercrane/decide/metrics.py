"""Serving metrics a decision can read: the name used in runs and policies, its phrase in sentences, its direction.

The names are the fields of ``infercrane.serving.metrics.RunMetrics`` (e2e = request latency, TPOT as vLLM defines
it). The direction is a property of the metric, not of a policy, so a policy file can name metrics but not flip them.
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
    ServingMetric("request_s", "request throughput", True),
    ServingMetric("goodput_req_s", "goodput", True),  # needs SLOs (decide/slo.py)
    *(
        ServingMetric(f"{m}_{p}_ms", f"{'median' if p == 'p50' else p} {label}", False)
        for m, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "latency"))
        for p in ("p50", "p95", "p99")
    ),
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

"""Service-level objectives and goodput.

An SLO bounds one per-request latency at a percentile: "p95 TTFT <= 2000 ms" is ``Slo(metric="ttft", percentile=95,
max_ms=2000)``. A window **meets** it when at least 95 % of the requests it sent had a TTFT of at most 2000 ms (its
*attainment*, the share of requests within the bound, is at least the percentile): the nearest-rank reading of "the
95th percentile is at most 2000 ms", stated on the requests rather than on an interpolated quantile. A failed request
is within no bound, nor is a request that does not define the metric (TPOT of a one-token output, TTFT without
streaming): AIPerf's rule, so that its own good-request count checks InferCrane's.

**Goodput** (DistServe's definition, the one AIPerf's and ``vllm bench serve``'s ``--goodput`` compute): the requests
per second that kept *every* SLO's bound, over the window the request throughput divides by. A policy naming SLOs gets
``goodput_req_s`` in every run and may decide on it (``decide/metrics.py``).

Metrics: ``ttft`` (time to the first token), ``tpot`` (time per output token after the first, vLLM's TPOT, AIPerf's
``inter_token_latency``), ``e2e`` (request latency), as ``serving/metrics.py`` defines them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SloMetric = Literal["ttft", "tpot", "e2e"]
SLO_PHRASES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "latency"}


class Slo(BaseModel):
    """One objective: at least ``percentile`` % of a window's requests have ``metric`` <= ``max_ms``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: SloMetric
    percentile: float = Field(gt=0, lt=100, description="share of requests (percent) that must be within the bound")
    max_ms: float = Field(gt=0, allow_inf_nan=False, description="the per-request bound, milliseconds")

    @property
    def label(self) -> str:
        return f"p{self.percentile:g} {SLO_PHRASES[self.metric]} <= {self.max_ms:g} ms"


def check_slos(slos: Sequence[Slo]) -> list[Slo]:
    """``slos`` as a list; ValueError when a metric is bounded twice (a request's goodput reads one bound per
    metric)."""
    seen = [s.metric for s in slos]
    twice = sorted({m for m in seen if seen.count(m) > 1})
    if twice:
        raise ValueError(f"SLOs bound {', '.join(twice)} more than once; give one bound per metric")
    return list(slos)


class SloResult(BaseModel):
    """What one window did against the SLOs: the good requests (within every bound), each SLO's attainment and
    whether it was met, and the goodput."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slos: list[Slo]
    requests: int = Field(ge=0, description="requests the window sent (failed ones included)")
    good_requests: int = Field(ge=0, description="completed requests within every SLO's bound")
    attainment: dict[str, float] = Field(description="metric -> share of the window's requests within its bound")
    met: dict[str, bool] = Field(description="metric -> attainment >= the SLO's percentile / 100")
    all_met: bool
    goodput_req_s: float = Field(ge=0, description="good requests / the window's duration")
    method: str = ("a request is good when it completed and each SLO metric is defined and within its bound; "
                   "attainment = requests within a bound / requests sent (failed ones included); goodput = good "
                   "requests / the window's duration (DistServe's goodput)")


def slo_result(requests: Sequence[Mapping[str, float | None]], failed: int, duration_s: float,
               slos: Sequence[Slo]) -> SloResult:
    """The SLO outcome of one window: ``requests``, one mapping per completed request from metric (``ttft``,
    ``tpot``, ``e2e``) to milliseconds (None or absent: not defined for that request, so outside any bound on it);
    ``failed`` requests besides
    them; ``duration_s``, the window the rates divide by."""
    slos = check_slos(slos)
    sent = len(requests) + failed

    def within(req: Mapping[str, float | None], slo: Slo) -> bool:
        value = req.get(slo.metric)
        return value is not None and value <= slo.max_ms

    attainment, met = {}, {}
    for slo in slos:
        share = sum(within(r, slo) for r in requests) / sent if sent else 0.0
        attainment[slo.metric] = share
        met[slo.metric] = sent > 0 and share >= slo.percentile / 100.0
    good = sum(all(within(r, s) for s in slos) for r in requests)
    return SloResult(slos=slos, requests=sent, good_requests=good, attainment=attainment, met=met,
                     all_met=all(met.values()) if slos else False,
                     goodput_req_s=good / duration_s if duration_s > 0 else 0.0)

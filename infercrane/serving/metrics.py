"""One run's serving metrics at one concurrency, whichever driver measured them.

Definitions (METHOD.md, Serving), and what each driver calls them:

===================  ==============================  ==============================  =====================
InferCrane field     meaning                         AIPerf 0.12.0 (profile_export)  vllm bench serve 0.22.1
===================  ==============================  ==============================  =====================
ttft_*_ms            first content token - request   time_to_first_token             p{50,95,99}_ttft_ms
                     start
tpot_*_ms            (latency - TTFT) /              inter_token_latency  (NOT its   p{50,95,99}_tpot_ms
                     (output tokens - 1)             inter_chunk_latency)
e2e_*_ms             last byte - request start       request_latency                 p{50,95,99}_e2el_ms
output_tok_s         output tokens / run duration    output_token_throughput         output_throughput
request_s            completed requests / duration   request_throughput              request_throughput
goodput_req_s        requests within every SLO /     goodput (good_request_count     request_goodput
                     duration (decide/slo.py)        checked against InferCrane's)
duration_s           the window the rates divide by  profiling phase end_ns -        duration
                     (warm-up excluded)              start_ns (phase_manifest.json)
===================  ==============================  ==============================  =====================

The naming trap: AIPerf's "inter_token_latency" is vLLM's TPOT (a per-request average); vLLM's "ITL"
is the gap between successive chunks, AIPerf's "inter_chunk_latency". InferCrane reports TPOT only.

Percentiles are the driver's own (both interpolate linearly between order statistics). Token counts
come from the server's ``usage`` (``token_count_source="server"``) unless the workload asked for a
client tokenizer count (AIPerf only). Warm-up requests are excluded by both drivers.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.decide.slo import SloResult

RUN_METRICS_SCHEMA_VERSION = "infercrane.serving-run-metrics/v1"

LATENCY_FIELDS = tuple(f"{m}_{p}_ms" for m in ("ttft", "tpot", "e2e") for p in ("p50", "p95", "p99"))


class RunMetrics(BaseModel):
    """What one driver measured in one run of one arm at one concurrency."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["infercrane.serving-run-metrics/v1"] = RUN_METRICS_SCHEMA_VERSION
    # where it belongs
    arm: str = Field(description="the arm's label in the plan (a recipe name)")
    recipe_sha256: str
    run_index: int = Field(ge=0)
    concurrency: int = Field(ge=1)
    # how it was measured
    driver: str
    driver_version: str
    token_count_source: Literal["server", "client"]
    streaming: bool
    expected_output_tokens: int = Field(ge=1)
    raw_export_path: str = Field(description="the driver's own export (AIPerf JSON / vllm bench result JSON)")
    driver_cpu_s: float | None = Field(default=None, ge=0,
                                       description="user+system CPU seconds of the driver's process tree over the "
                                                   "whole invocation (start-up included): a client-load indicator "
                                                   "to compare between concurrencies and drivers")
    started_at: str | None = None
    # counts
    requests_sent: int = Field(ge=0, description="profiling requests, warm-up excluded")
    requests_completed: int = Field(ge=0)
    failures: int = Field(ge=0)
    output_length_mismatches: int | None = Field(
        default=None, ge=0,
        description="completed requests whose output token count differs from expected_output_tokens; "
                    "None when lengths were not fixed (ignore_eos off)")
    output_tokens_total: int = Field(ge=0)
    # rates and latencies
    duration_s: float = Field(ge=0)
    output_tok_s: float = Field(ge=0)
    request_s: float = Field(ge=0)
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    e2e_p99_ms: float | None = None
    # prompt tokens the completed requests carried, per second of the window (the server's count where it reports one):
    # what a cost per input token divides by
    input_tok_s: float | None = Field(default=None, ge=0)
    # under SLOs (a policy naming them, decide/slo.py): requests per second within every SLO's bound, and the detail
    goodput_req_s: float | None = Field(default=None, ge=0)
    slo: SloResult | None = None
    # a trace workload: how far each request's start was from its place in the trace's schedule (serving/trace.py)
    arrival: dict[str, Any] | None = None
    notes: list[str] = Field(default_factory=list, description="anything the parser found odd")

    @model_validator(mode="after")
    def _consistent(self) -> RunMetrics:
        if self.requests_completed + self.failures != self.requests_sent:
            raise ValueError(f"requests_completed ({self.requests_completed}) + failures ({self.failures}) "
                             f"!= requests_sent ({self.requests_sent})")
        if self.output_length_mismatches is not None and self.output_length_mismatches > self.requests_completed:
            raise ValueError("output_length_mismatches exceeds requests_completed")
        if self.requests_completed > 0:
            if self.duration_s <= 0 or self.output_tok_s <= 0:
                raise ValueError("completed requests without a positive duration_s and output_tok_s")
            if self.e2e_p50_ms is None:
                raise ValueError("completed requests without an end-to-end latency")
            if self.streaming and self.ttft_p50_ms is None:
                raise ValueError("a streaming run with completed requests must report TTFT")
        for name in LATENCY_FIELDS:
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} is negative")
        return self

    @property
    def ok(self) -> bool:
        """No failure and no output-length mismatch: the run measured what it was asked to."""
        return self.failures == 0 and not self.output_length_mismatches

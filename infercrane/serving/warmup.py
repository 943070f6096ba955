"""The engine warm-up: load an engine at every concurrency of the workload before its first measured point.

A fresh vLLM engine still compiles code the first time a batch shape or configuration is met while serving: on the
H200 (vLLM 0.22.1, Qwen3-0.6B, compiled mode) the sampler's Triton top-k/top-p kernel was JIT-compiled in the first
c = 8 point of each arm and stalled it for seconds (``docs/benchmarks/2026-12-01-h200-kernel-in-vllm``), longer than
the warm-up the driver gives each point. So before an engine's first measured point InferCrane sends, at each of the
workload's concurrencies in ascending order, ``ROUNDS`` rounds of ``c`` concurrent requests shaped like the
workload's (endpoint, streaming, prompt length, output length, ``ignore_eos``; no sampling parameters, so the server
applies the same defaults it applies to the driver's requests). Nothing of it is measured; what it did is recorded
on the engine (``EngineRecord.warmup``). A request the engine refuses or does not answer fails the arm there, with the
engine's answer (``engine.post``).
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

ROUNDS = 2
_log = logging.getLogger("infercrane.serving.engine")  # the engine lines the serve commands print as they come
FILLER = "warm"  # one token per word for common BPE tokenizers: the prompt is about input_tokens long


def warmup_body(workload: Any, served_model: str, index: int) -> tuple[str, dict[str, Any]]:
    """(path, body) of warm-up request ``index``: the workload's shape, a prompt of its length, unique per index
    (so that no two requests share a cached prefix)."""
    prompt = f"{index} " + " ".join([FILLER] * max(1, workload.input_tokens - 1))
    body: dict[str, Any] = {"model": served_model, "max_tokens": workload.output_tokens, "stream": workload.streaming}
    if workload.ignore_eos:
        body |= {"ignore_eos": True, "min_tokens": workload.output_tokens}
    if workload.endpoint == "chat":
        return "/v1/chat/completions", body | {"messages": [{"role": "user", "content": prompt}]}
    return "/v1/completions", body | {"prompt": prompt}


def warm_engine(engine: Any, workload: Any) -> dict[str, Any]:
    """Warm ``engine`` for ``workload`` (module docstring); returns the record ``EngineRecord.warmup`` holds."""
    t0 = time.monotonic()
    concurrencies = sorted(set(workload.concurrency))
    sent = 0
    for c in concurrencies:
        for _ in range(ROUNDS):
            requests = [warmup_body(workload, engine.served_model, sent + i) for i in range(c)]
            sent += c
            what = f"a warm-up request at concurrency {c}"
            with ThreadPoolExecutor(max_workers=c) as pool:  # a failed request raises here (the engine's failure)
                list(pool.map(lambda req: engine.post(req[0], req[1], timeout_s=workload.request_timeout_s, what=what),
                              requests))
    record = {"concurrencies": concurrencies, "rounds": ROUNDS, "requests": sent,
              "seconds": round(time.monotonic() - t0, 3)}
    _log.info("engine %s warmed up: %d requests at c = %s in %.1f s (not measured)",
              getattr(engine, "label", "?"), sent, ", ".join(map(str, concurrencies)), record["seconds"])
    return record

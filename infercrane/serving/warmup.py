"""The engine warm-up: load an engine at every concurrency of the workload before its first measured point.

A fresh vLLM engine still compiles code the first time a batch shape or configuration is met while serving: on the
H200 (vLLM 0.22.1, Qwen3-0.6B, compiled mode) the sampler's Triton top-k/top-p kernel was JIT-compiled in the first
c = 8 point of each arm and stalled it for seconds (``docs/benchmarks/2026-12-01-h200-kernel-in-vllm``), longer than
the warm-up the driver gives each point. So before an engine's first measured point InferCrane sends, at each of the
workload's concurrencies in ascending order, ``rounds_for(workload)`` rounds (two for time windows, one for windows
of a request count) of ``c`` concurrent requests shaped like the
workload's (endpoint, streaming, prompt length, output length, ``ignore_eos``; no sampling parameters, so the server
applies the same defaults it applies to the driver's requests), the workload's ``extra_inputs`` merged into each
body and the engine's ``access`` (API key, headers) on each request, as the drivers send them. Nothing of it is
measured; what it did is recorded on the engine (``EngineLifetime.warmup``).

A workload with a request rate (``request_rate``: the drivers send open loop, the concurrency a cap) is warmed the
same way, in closed-loop rounds of ``c`` requests: what the warm-up is for is meeting every batch shape up to ``c``
(and the compiles they cause) before a measured window, which a rate below the engine's capacity might never reach;
the drivers' own per-point warm-up then sends at the workload's rate.

Failures. A request the engine refuses (an answer other than 200 or 5xx) or does not answer whole (refused, reset,
timed out, its stream cut short) fails the arm there, with the engine's answer and its state after it: dead (how it
ended), hung or alive (``engine.ask``). A 5xx answer while the engine's process lives is sent again, up to
``RETRIES`` times after a growing pause (``RETRY_PAUSE_S``, doubled each time): warm-up is not measured, so a passing
failure costs only its time. The record counts them when there were any: ``failures`` (5xx answers) and ``retries``
(requests sent again). An engine that answers 5xx to every try of one request, or that has died, fails the arm with
its words; the requests not yet sent are dropped.

Threads. One thread per request in flight, at most ``MAX_IN_FLIGHT``: a concurrency above it is warmed with that
many in flight (the record's ``max_in_flight``; vLLM batches at most ``max_num_seqs`` requests, 1024 at most by
default, so no larger batch shape is left cold). The workload's own ceiling is ``workload.MAX_CONCURRENCY``, and
``workload.check_concurrency_fits`` checks, in the plan's preflight before any engine starts, that this process may
open the sockets and threads it needs.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

ROUNDS = 2  # for time windows: the fastest round sizes a first AIPerf block's prompts (warmed_rate)
# For windows of a request count nothing is sized from the rounds: one round meets every batch shape (and the Triton
# compilations) the second would, and on the H200 the public workload's second round at c = 100 cost 8.2 s more of
# warm-up on the engine that was the last to be ready (docs/benchmarks/2026-12-03-h200-poc-one-sitting-fourth-try/).
COUNTED_ROUNDS = 1
RETRIES = 3  # times a request answered with a 5xx is sent again while the engine lives
RETRY_PAUSE_S = 0.5  # before the first retry; doubled before each next one
MAX_IN_FLIGHT = 1024  # warm-up requests (threads) in flight at once, whatever the concurrency
_log = logging.getLogger("infercrane.serving.engine")  # the engine lines the serve commands print as they come
# One token per word in common BPE vocabularies, so that the prompt is about input_tokens long: " the" is one token
# in Qwen3-0.6B's offline stand-in (the H200 sittings' tokenizer), where " warm" (used before) was two, which made
# the public workload's warm-up prompts twice its length and filled the engine's fixed KV cache.
FILLER = "the"


def warmup_body(workload: Any, served_model: str, index: int) -> tuple[str, dict[str, Any]]:
    """(path, body) of warm-up request ``index``: the workload's shape, a prompt of its length, unique per index
    (so that no two requests share a cached prefix)."""
    prompt = f"{index} " + " ".join([FILLER] * max(1, workload.input_tokens - 1))
    body: dict[str, Any] = {**(getattr(workload, "extra_inputs", None) or {}), "model": served_model,
                            "max_tokens": workload.output_tokens, "stream": workload.streaming}
    if workload.ignore_eos:
        body |= {"ignore_eos": True, "min_tokens": workload.output_tokens}
    if workload.endpoint == "chat":
        return "/v1/chat/completions", body | {"messages": [{"role": "user", "content": prompt}]}
    return "/v1/completions", body | {"prompt": prompt}


class _Tally:
    """5xx answers and retries, counted across the warm-up's threads."""

    def __init__(self) -> None:
        self.failures = 0
        self.retries = 0
        self._lock = threading.Lock()

    def failed(self) -> None:
        with self._lock:
            self.failures += 1

    def retried(self) -> None:
        with self._lock:
            self.retries += 1


def send(engine: Any, path: str, body: dict[str, Any], *, timeout_s: float, what: str, tally: _Tally) -> None:
    """One warm-up request, sent again after a 5xx while the engine lives (module docstring); the engine's failure
    (RunFailed) when it refuses it, does not answer it whole, answers 5xx to every try, or has died."""
    pause = RETRY_PAUSE_S
    for attempt in range(RETRIES + 1):
        status, payload = engine.ask(path, body, timeout_s=timeout_s, what=what)
        if status == 200:
            return
        if status < 500:
            raise engine.refused(status, payload, what)
        tally.failed()
        if attempt == RETRIES:
            raise engine.refused(status, payload, what, tries=RETRIES + 1)
        time.sleep(pause)
        pause *= 2
        dead = engine.failure_if_dead(f"after answering {status} ({payload[:200]!r}) to {what}", grace_s=0.0,
                                      probe=False)
        if dead is not None:
            raise dead
        tally.retried()


def warm_engine(engine: Any, workload: Any) -> dict[str, Any]:
    """Warm ``engine`` for ``workload`` (module docstring); returns the record ``EngineLifetime.warmup`` holds."""
    concurrencies = sorted(set(workload.concurrency))
    rounds = rounds_for(workload)
    t0 = time.monotonic()
    tally = _Tally()
    in_flight = min(max(concurrencies), MAX_IN_FLIGHT)
    sent = 0
    round_s: dict[str, list[float]] = {}
    pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="infercrane-warmup")
    try:
        for c in concurrencies:
            what = f"a warm-up request at concurrency {c}"
            for _ in range(rounds):
                t_round = time.monotonic()
                futures = [pool.submit(send, engine, *warmup_body(workload, engine.served_model, sent + i),
                                       timeout_s=workload.request_timeout_s, what=what, tally=tally)
                           for i in range(c)]
                sent += c
                _wait_all(futures)
                round_s.setdefault(str(c), []).append(round(time.monotonic() - t_round, 3))
    except BaseException:  # a failure, Ctrl-C: the requests not yet sent are dropped, those in flight end on their own
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    record: dict[str, Any] = {"concurrencies": concurrencies, "rounds": rounds, "requests": sent,
                              "seconds": round(time.monotonic() - t0, 3), "round_s": round_s}
    if tally.failures:
        record |= {"failures": tally.failures, "retries": tally.retries}
    if in_flight < max(concurrencies):
        record["max_in_flight"] = in_flight
    _log.info("engine %s warmed up: %d requests at c = %s in %.1f s (not measured)%s",
              getattr(engine, "label", "?"), sent, ", ".join(map(str, concurrencies)), record["seconds"],
              f"; sent again after {tally.failures} answers of 5xx" if tally.failures else "")
    return record


def rounds_for(workload: Any) -> int:
    """Rounds of warm-up at each concurrency: ROUNDS for time windows, COUNTED_ROUNDS for windows of a request count."""
    return ROUNDS if getattr(workload, "window_s", None) is not None else COUNTED_ROUNDS


def _wait_all(futures: list[Future]) -> None:
    """Wait for every request of a round; raise the first failure as soon as there is one (of those failed by then,
    the earliest submitted)."""
    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
    failed = [f for f in futures if f in done and f.exception() is not None]
    if failed:
        raise failed[0].exception()


def warmed_rate(record: Mapping[str, Any] | None, concurrency: int) -> float | None:
    """Requests per second at ``concurrency`` as a warm-up ``record`` saw them: ``c`` requests over its fastest round
    of ``c`` requests sent together (``round_s``); None when the record has no round at that concurrency. A round
    starts every request at once (their prefills together), so a steady stream of requests may run somewhat faster."""
    rounds = [t for t in ((record or {}).get("round_s") or {}).get(str(concurrency), []) if t > 0]
    if not rounds:
        return None
    return min(concurrency, MAX_IN_FLIGHT) / min(rounds)

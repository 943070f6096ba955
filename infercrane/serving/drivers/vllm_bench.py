"""``vllm bench serve`` (vLLM 0.22.1) as a driver: the second opinion next to AIPerf.

Command: ``python -m vllm.entrypoints.cli.main bench serve`` with the random dataset
(``--dataset-name random --random-input-len I --random-output-len O --random-range-ratio 0``),
``--num-prompts N --max-concurrency C --request-rate inf --num-warmups W --ignore-eos``
(plus ``--extra-body '{"min_tokens": O}'``), ``--percentile-metrics ttft,tpot,itl,e2el
--metric-percentiles 50,95,99``, ``--save-result --save-detailed --result-dir D --result-filename``.

With a shared prompt file (``RunSpec.prompts_file``, ``serving/prompts.py``) the custom dataset replaces the random
one: ``--dataset-name custom --dataset-path F --custom-output-len O --disable-shuffle --no-oversample
--skip-chat-template``: the file's prompts in file order, sent as written (as AIPerf sends them: the completions
prompt, or the chat message the server templates), not first wrapped in the tokenizer's chat template, which vLLM's
CustomDataset does by default. Flag names read from vLLM's source (``vllm/benchmarks/datasets``:
``add_dataset_parser`` and ``CustomDataset``), not from a run: vLLM is not installed where this was written.

Result JSON keys (vllm/benchmarks/serve.py in 0.22.1): ``duration``, ``completed``, ``failed``,
``num_prompts``, ``max_concurrency``, ``total_input_tokens``, ``total_output_tokens``,
``request_throughput``, ``output_throughput``, ``{mean,median,std}_{ttft,tpot,itl,e2el}_ms``,
``p{50,95,99}_{ttft,tpot,itl,e2el}_ms`` and, with ``--save-detailed``, per-request ``output_lens``
and ``errors`` (an empty string for a request that succeeded). Output tokens come from the server's
``usage.completion_tokens`` (the client always asks for ``include_usage``), so the token count source
is the server. It always streams; its ready check is off by default (the engine was checked before);
``--num-warmups`` requests go first, at the same concurrency, and are excluded. The result carries no vLLM version: the driver records the installed one.

Open loop (``RunSpec.request_rate``): ``--request-rate R`` with ``--burstiness 1`` (a Poisson process) for
``arrival_pattern: poisson`` or ``--burstiness inf`` (every gap ``1/R``: vLLM's ``get_request`` takes an infinite
burstiness as constant gaps) for ``constant``; ``--max-concurrency`` caps the requests in flight, as AIPerf's
concurrency does at a rate. vLLM then rescales the drawn gaps so that the N requests span N/R seconds; AIPerf does
not. ``extra_inputs`` join ``--extra-body``. The API key goes in the driver's environment as ``OPENAI_API_KEY``,
which vLLM's request functions send as ``Authorization: Bearer`` (``vllm/benchmarks/lib/endpoint_request_func.py``,
``_get_headers``). Extra headers are refused: ``vllm bench serve`` takes them only as ``--header KEY=VALUE`` on its
command line, and prints its whole argument list to its log (``main_async``: ``print(args)``), so their values
would be written to disk.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from infercrane.errors import InputError, RunFailed
from infercrane.serving.drivers import Driver, RunSpec
from infercrane.serving.engine import log_tail
from infercrane.serving.metrics import RunMetrics

RESULT_FILE = "vllm_bench_result.json"
PERCENTILES = ("50", "95", "99")
# InferCrane field prefix -> vllm bench metric name.
METRIC_NAMES = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2el"}


class VllmBenchDriver(Driver):
    name = "vllm-bench"
    dist = "vllm"

    def available(self) -> tuple[bool, str]:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            return False, f"vllm is not importable by {sys.executable}; `vllm bench serve` comes with it"
        return True, f"vllm {self.version()} (vllm bench serve)"

    def check(self, spec: RunSpec) -> None:
        if not spec.streaming:
            raise InputError("vllm bench serve always streams; this workload has streaming: false",
                             hint="use the aiperf driver for non-streaming workloads")
        if spec.token_count_source != "server":
            raise InputError("vllm bench serve counts output tokens from the server's usage; "
                             "token_count_source: client is only available with the aiperf driver",
                             hint="set token_count_source: server, or use the aiperf driver")
        if spec.trace is not None:
            raise InputError("a trace workload is replayed on its schedule by AIPerf (mooncake_trace, fixed_schedule); "
                             "vllm bench serve has no timestamped replay",
                             hint="use --drivers aiperf for trace workloads")
        if spec.slos:
            raise InputError("SLOs are checked request by request from AIPerf's per-request records; vllm bench "
                             "serve's result keeps no per-request latency to check its goodput against",
                             hint="use --drivers aiperf with a policy that names SLOs, or a policy without slos")
        if spec.headers:
            raise InputError(f"--header {', '.join(n for n, _ in spec.headers)}: vllm bench serve takes headers only "
                             "on its command line, and prints its arguments to its log: their values would be "
                             "written to disk",
                             hint="drop --header for --drivers vllm-bench (an API key goes with --api-key, as "
                                  "OPENAI_API_KEY), or measure with --drivers aiperf")

    def secret_env(self, spec: RunSpec) -> dict[str, str]:
        """``OPENAI_API_KEY``: vLLM's bench client sends it as ``Authorization: Bearer`` (module docstring)."""
        return {"OPENAI_API_KEY": spec.api_key} if spec.api_key is not None else {}

    def command(self, spec: RunSpec) -> list[str]:
        backend, endpoint = ("openai-chat", "/v1/chat/completions") if spec.endpoint == "chat" \
            else ("openai", "/v1/completions")
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
               "--backend", backend, "--base-url", spec.base_url, "--endpoint", endpoint,
               "--model", spec.served_model, "--tokenizer", spec.tokenizer,
               *(["--dataset-name", "custom", "--dataset-path", str(spec.prompts_file),
                  "--custom-output-len", str(spec.output_tokens), "--disable-shuffle", "--no-oversample",
                  "--skip-chat-template"]
                 if spec.prompts_file is not None else
                 ["--dataset-name", "random",
                  "--random-input-len", str(spec.input_tokens), "--random-output-len", str(spec.output_tokens),
                  "--random-range-ratio", "0"]),
               "--num-prompts", str(spec.request_count), "--max-concurrency", str(spec.concurrency),
               *(["--request-rate", repr(float(spec.request_rate)),
                  "--burstiness", "1" if spec.arrival_pattern == "poisson" else "inf"]
                 if spec.request_rate is not None else ["--request-rate", "inf"]),
               "--num-warmups", str(spec.warmup_requests),
               "--seed", str(spec.seed),
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", ",".join(PERCENTILES),
               "--save-result", "--save-detailed",
               "--result-dir", str(spec.artifact_dir), "--result-filename", RESULT_FILE,
               "--disable-tqdm"]
        body = dict(spec.extra_inputs) | ({"min_tokens": spec.output_tokens} if spec.ignore_eos else {})
        if spec.ignore_eos:
            cmd.append("--ignore-eos")
        if body:
            cmd += ["--extra-body", json.dumps(body, sort_keys=True)]
        return cmd

    def parse(self, spec: RunSpec, *, driver_version: str, driver_cpu_s: float | None = None,
              started_at: str | None = None) -> RunMetrics:
        path = spec.artifact_dir / RESULT_FILE
        if not path.is_file():
            raise RunFailed(f"vllm bench serve wrote no {RESULT_FILE} under {spec.artifact_dir}; driver log:\n"
                            f"{log_tail(spec.artifact_dir / 'driver.log', 30)}", hint="read the driver log")
        return parse_vllm_bench_result(spec, path, driver_version=driver_version, driver_cpu_s=driver_cpu_s,
                                       started_at=started_at)


def parse_vllm_bench_result(spec: RunSpec, path: Path, *, driver_version: str, driver_cpu_s: float | None = None,
                            started_at: str | None = None) -> RunMetrics:
    """Read a ``vllm bench serve --save-result [--save-detailed]`` JSON file into RunMetrics."""
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RunFailed(f"cannot read vllm bench result {path}: {exc}", hint="re-run the driver") from None
    missing = [k for k in ("duration", "completed", "failed", "num_prompts", "output_throughput",
                           "request_throughput", "total_output_tokens") if k not in result]
    if missing:
        raise RunFailed(f"vllm bench result {path} lacks {', '.join(missing)}",
                        hint="was it written by `vllm bench serve --save-result` of vLLM 0.22.1?")
    notes: list[str] = []
    completed, failed, sent = int(result["completed"]), int(result["failed"]), int(result["num_prompts"])
    if completed + failed != sent:
        notes.append(f"completed ({completed}) + failed ({failed}) != num_prompts ({sent}); "
                     "failures taken as num_prompts - completed")
        failed = sent - completed
    if result.get("max_concurrency") not in (None, spec.concurrency):
        notes.append(f"result max_concurrency {result.get('max_concurrency')} != planned {spec.concurrency}")

    mismatches = None
    lens, errors = result.get("output_lens"), result.get("errors")
    if spec.ignore_eos:
        if isinstance(lens, list) and isinstance(errors, list) and len(lens) == len(errors):
            ok_lens = [n for n, err in zip(lens, errors, strict=True) if not err]
            mismatches = sum(1 for n in ok_lens if n != spec.output_tokens)
            if len(ok_lens) != completed:
                notes.append(f"{len(ok_lens)} requests without an error in the detail, {completed} completed")
                mismatches = min(mismatches, completed)
        else:
            notes.append("no per-request output_lens/errors (run without --save-detailed): "
                         "output lengths not checked")

    latencies: dict[str, float | None] = {}
    for prefix, metric in METRIC_NAMES.items():
        for p in PERCENTILES:
            value = result.get(f"p{p}_{metric}_ms") if completed else None
            if value is None and p == "50" and completed:
                value = result.get(f"median_{metric}_ms")
            latencies[f"{prefix}_p{p}_ms"] = None if value is None else float(value)
    return RunMetrics(
        arm=spec.arm, recipe_sha256=spec.recipe_sha256, run_index=spec.run_index, concurrency=spec.concurrency,
        driver="vllm-bench", driver_version=driver_version, token_count_source="server", streaming=True,
        expected_output_tokens=spec.output_tokens, raw_export_path=str(path),
        driver_cpu_s=driver_cpu_s, started_at=started_at,
        requests_sent=sent, requests_completed=completed, failures=failed,
        output_length_mismatches=mismatches, output_tokens_total=int(result["total_output_tokens"]),
        duration_s=float(result["duration"]), output_tok_s=float(result["output_throughput"]),
        request_s=float(result["request_throughput"]), notes=notes, **latencies,
        input_tok_s=(float(result["total_input_tokens"]) / float(result["duration"])
                     if completed and result.get("total_input_tokens") is not None and float(result["duration"]) > 0
                     else None))

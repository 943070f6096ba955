"""Driver registry, command lines, and parsing of recorded/constructed exports (no live runs here)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infercrane.errors import InputError
from infercrane.serving.drivers import DRIVER_NAMES, RunSpec, driver_availability, get_driver
from infercrane.serving.drivers.vllm_bench import RESULT_FILE, parse_vllm_bench_result
from infercrane.serving.metrics import RunMetrics

DATA = Path(__file__).resolve().parent / "data"
VLLM_RESULT = DATA / "vllm_bench_serve_0.22.1_CONSTRUCTED_not_measured.json"


def spec(tmp_path: Path, **kw) -> RunSpec:
    data = dict(base_url="http://127.0.0.1:8000", served_model="/runs/standin/qwen3-0.6b", tokenizer="Qwen/Qwen3-0.6B",
                endpoint="completions", streaming=True, ignore_eos=True, input_tokens=16, output_tokens=8,
                concurrency=4, request_count=8, warmup_requests=4, seed=0, token_count_source="server",
                request_timeout_s=600.0, artifact_dir=tmp_path, timeout_s=60.0, arm="eager",
                recipe_sha256="0" * 64, run_index=0)
    data.update(kw)
    return RunSpec(**data)


def test_registry_is_ordered_and_rejects_unknown():
    assert DRIVER_NAMES == ("aiperf", "vllm-bench")
    with pytest.raises(InputError) as err:
        get_driver("genai-perf")
    assert "aiperf" in str(err.value) and "vllm-bench" in str(err.value)
    names = [name for name, _, _ in driver_availability()]
    assert names == list(DRIVER_NAMES)
    ok, reason = get_driver("aiperf").available()
    assert ok and "0.12.0" in reason
    ok, reason = get_driver("vllm-bench").available()
    if not ok:  # vLLM is not installed on CPU machines: the reason says so instead of silence
        assert "vllm is not importable" in reason


def test_aiperf_flags_are_ones_the_installed_aiperf_accepts(tmp_path):
    help_text = subprocess.run([sys.executable, "-m", "aiperf", "profile", "--help"], capture_output=True,
                               text=True, timeout=120, env={**os.environ, "COLUMNS": "250"}).stdout
    known = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_text))
    assert "--concurrency" in known  # the help was read
    for s in (spec(tmp_path), spec(tmp_path, streaming=False, ignore_eos=False, token_count_source="client",
                                   warmup_requests=0, endpoint="chat"),
              spec(tmp_path, prompts_file=tmp_path / "prompts.jsonl")):
        used = [t for t in get_driver("aiperf").command(s) if t.startswith("--")]
        assert set(used) <= known, set(used) - known


def test_aiperf_command_content(tmp_path):
    cmd = get_driver("aiperf").command(spec(tmp_path))
    joined = " ".join(cmd)
    for part in ("--endpoint-type completions", "--streaming", "--concurrency 4", "--request-count 8",
                 "--warmup-request-count 4", "--isl 16", "--isl-stddev 0", "--osl 8", "--osl-stddev 0",
                 "--extra-inputs ignore_eos:true", "--extra-inputs min_tokens:8", "--use-server-token-count",
                 "--tokenizer Qwen/Qwen3-0.6B", "--export-level records", f"--artifact-dir {tmp_path}"):
        assert part in joined, part
    plain = " ".join(get_driver("aiperf").command(spec(tmp_path, streaming=False, ignore_eos=False,
                                                       warmup_requests=0, token_count_source="client")))
    for absent in ("--streaming", "ignore_eos", "--warmup-request-count", "--use-server-token-count"):
        assert absent not in plain


def test_vllm_bench_command(tmp_path):
    drv = get_driver("vllm-bench")
    cmd = drv.command(spec(tmp_path))
    assert cmd[:5] == [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve"]
    joined = " ".join(cmd)
    for part in ("--backend openai --base-url http://127.0.0.1:8000 --endpoint /v1/completions",
                 "--dataset-name random", "--random-input-len 16", "--random-output-len 8",
                 "--random-range-ratio 0", "--num-prompts 8", "--max-concurrency 4", "--num-warmups 4",
                 "--ignore-eos", "--percentile-metrics ttft,tpot,itl,e2el", "--metric-percentiles 50,95,99",
                 "--save-result", "--save-detailed", f"--result-filename {RESULT_FILE}"):
        assert part in joined, part
    body = cmd[cmd.index("--extra-body") + 1]
    assert json.loads(body) == {"min_tokens": 8}
    chat = " ".join(drv.command(spec(tmp_path, endpoint="chat")))
    assert "--backend openai-chat" in chat and "--endpoint /v1/chat/completions" in chat


def test_vllm_bench_refuses_what_it_cannot_do(tmp_path):
    drv = get_driver("vllm-bench")
    with pytest.raises(InputError, match="always streams"):
        drv.check(spec(tmp_path, streaming=False))
    with pytest.raises(InputError, match="token_count_source"):
        drv.check(spec(tmp_path, token_count_source="client"))


def test_parse_constructed_vllm_bench_result(tmp_path):
    raw = json.loads(VLLM_RESULT.read_text())
    assert "CONSTRUCTED" in raw["_infercrane_note"]
    m = parse_vllm_bench_result(spec(tmp_path), VLLM_RESULT, driver_version="0.22.1")
    assert (m.requests_sent, m.requests_completed, m.failures) == (8, 7, 1)
    assert m.output_length_mismatches == 1  # one successful request returned 4 of 8 tokens
    assert m.output_tokens_total == raw["total_output_tokens"] == 52
    assert m.output_tok_s == pytest.approx(raw["output_throughput"])
    assert m.output_tok_s == pytest.approx(m.output_tokens_total / m.duration_s)
    assert m.request_s == pytest.approx(raw["request_throughput"])
    assert m.ttft_p50_ms == raw["p50_ttft_ms"] and m.ttft_p95_ms == raw["p95_ttft_ms"]
    assert m.tpot_p99_ms == raw["p99_tpot_ms"] and m.e2e_p95_ms == raw["p95_e2el_ms"]
    assert (m.driver, m.driver_version, m.token_count_source) == ("vllm-bench", "0.22.1", "server")
    assert not m.ok


def test_parse_vllm_bench_without_detail_notes_unchecked_lengths(tmp_path):
    raw = json.loads(VLLM_RESULT.read_text())
    for key in ("output_lens", "errors", "ttfts", "itls", "start_times", "generated_texts", "input_lens"):
        raw.pop(key)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(raw))
    m = parse_vllm_bench_result(spec(tmp_path), path, driver_version="0.22.1")
    assert m.output_length_mismatches is None
    assert any("output lengths not checked" in n for n in m.notes)


def test_parse_vllm_bench_rejects_foreign_json(tmp_path):
    from infercrane.errors import RunFailed

    path = tmp_path / "r.json"
    path.write_text(json.dumps({"duration": 1.0}))
    with pytest.raises(RunFailed, match="lacks completed"):
        parse_vllm_bench_result(spec(tmp_path), path, driver_version="0.22.1")


def metrics(**kw) -> dict:
    data = dict(arm="a", recipe_sha256="0" * 64, run_index=0, concurrency=1, driver="aiperf", driver_version="0.12.0",
                token_count_source="server", streaming=True, expected_output_tokens=8, raw_export_path="x",
                requests_sent=10, requests_completed=10, failures=0, output_length_mismatches=0,
                output_tokens_total=80, duration_s=1.0, output_tok_s=80.0, request_s=10.0,
                ttft_p50_ms=40.0, tpot_p50_ms=5.0, e2e_p50_ms=75.0)
    data.update(kw)
    return data


def test_run_metrics_rejects_inconsistent_records():
    assert RunMetrics(**metrics()).ok
    with pytest.raises(ValueError, match="requests_sent"):
        RunMetrics(**metrics(failures=1))
    with pytest.raises(ValueError, match="positive duration_s"):
        RunMetrics(**metrics(output_tok_s=0.0))
    with pytest.raises(ValueError, match="must report TTFT"):
        RunMetrics(**metrics(ttft_p50_ms=None))
    with pytest.raises(ValueError, match="exceeds"):
        RunMetrics(**metrics(output_length_mismatches=11))
    with pytest.raises(ValueError, match="negative"):
        RunMetrics(**metrics(tpot_p95_ms=-1.0))
    with pytest.raises(ValueError, match="extra"):
        RunMetrics(**metrics(inter_token_latency_ms=5.0))
    empty = RunMetrics(**metrics(requests_completed=0, failures=10, output_tokens_total=0, output_tok_s=0.0,
                                 request_s=0.0, ttft_p50_ms=None, tpot_p50_ms=None, e2e_p50_ms=None,
                                 output_length_mismatches=0))
    assert not empty.ok


RECORDED = DATA / "vllm_bench_serve_0.22.1_RECORDED_testserver_c4.json"


def test_parse_recorded_vllm_bench_result(tmp_path):
    """A result file written by the real `vllm bench serve` of vLLM 0.22.1 (16 streamed completions at concurrency 4
    against InferCrane's test server programmed with a 20 ms first token and 6 ms per token, 500 tokens each)."""
    raw = json.loads(RECORDED.read_text())
    s = spec(tmp_path, concurrency=4, request_count=16, output_tokens=500)
    m = parse_vllm_bench_result(s, RECORDED, driver_version="0.22.1")
    assert (m.requests_sent, m.requests_completed, m.failures, m.output_length_mismatches) == (16, 16, 0, 0)
    assert m.output_tokens_total == raw["total_output_tokens"] == 16 * 500
    assert m.output_tok_s == pytest.approx(raw["output_throughput"])
    assert m.tpot_p50_ms == pytest.approx(6.0, rel=0.1) and m.ttft_p50_ms == pytest.approx(22, rel=0.3)
    assert m.ok

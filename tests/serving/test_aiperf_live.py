"""Real AIPerf runs against the test server: the metric plumbing measures back what the server was told to do.

Tolerance rule for a programmed latency ``p`` (ms): ``|measured - p| <= 10 ms + 50 % of p``. The server
keeps its schedule to well under a millisecond; the slack is for a loaded 2-core CI machine, where the
client and server share the cores (a p50 TTFT of 55.5 ms against 40 programmed was seen there with another
test process running). The ranges still keep the metrics apart (TTFT 40 -> 10..70, TPOT 5 -> 0..17.5,
latency 195 -> 87.5..302.5), so these check the plumbing (units, which metric is which, warm-up exclusion,
the chat role chunk not counted as the first token), not performance.
"""
from __future__ import annotations

import json
import urllib.request

import pytest

from infercrane.serving.drivers import RunSpec, get_driver
from infercrane.serving.engine import Engine
from infercrane.serving.workload import resolve_tokenizer

TTFT_MS, ITL_MS, OUT_TOKENS = 40.0, 5.0, 32
E2E_MS = TTFT_MS + (OUT_TOKENS - 1) * ITL_MS


def within(measured: float | None, programmed: float) -> bool:
    return measured is not None and abs(measured - programmed) <= 10.0 + 0.5 * programmed


def server_stats(engine: Engine) -> dict:
    with urllib.request.urlopen(f"{engine.base_url}/stats", timeout=5) as resp:
        return json.loads(resp.read())


def make_spec(engine: Engine, tmp_path, tokenizer: tuple[str, dict], **kw) -> RunSpec:
    data = dict(base_url=engine.base_url, served_model=engine.served_model, tokenizer=tokenizer[0],
                endpoint="completions", streaming=True, ignore_eos=True, input_tokens=64, output_tokens=OUT_TOKENS,
                concurrency=1, request_count=16, warmup_requests=4, seed=0, token_count_source="server",
                request_timeout_s=30.0, artifact_dir=tmp_path, timeout_s=240.0, arm="ts",
                recipe_sha256=engine.recipe.sha256, run_index=0, env=tokenizer[1])
    data.update(kw)
    return RunSpec(**data)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_aiperf_measures_programmed_latency(tmp_path, ts_recipe, stand_in_dir, offline_env):
    recipe = ts_recipe("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), model=str(stand_in_dir))
    tokenizer = resolve_tokenizer(recipe.resolved())
    with Engine(recipe, log_dir=tmp_path / "engines", startup_timeout_s=30) as engine:
        for c in (1, 4):
            engine.reset_prefix_cache()
            m = get_driver("aiperf").run(make_spec(engine, tmp_path / f"c{c}", tokenizer, concurrency=c,
                                                   warmup_requests=2 * c))
            assert (m.driver, m.driver_version, m.token_count_source) == ("aiperf", "0.12.0", "server")
            assert (m.requests_sent, m.requests_completed, m.failures, m.output_length_mismatches) == (16, 16, 0, 0)
            assert m.output_tokens_total == 16 * OUT_TOKENS
            assert within(m.ttft_p50_ms, TTFT_MS), m.ttft_p50_ms
            assert within(m.tpot_p50_ms, ITL_MS), m.tpot_p50_ms
            assert within(m.e2e_p50_ms, E2E_MS), m.e2e_p50_ms
            assert m.ttft_p50_ms <= m.ttft_p95_ms <= m.ttft_p99_ms
            # throughput is output tokens over the measured window ...
            assert m.output_tok_s == pytest.approx(m.output_tokens_total / m.duration_s, rel=0.01)
            # ... and cannot beat what c slots of the programmed server can produce
            assert m.output_tok_s <= 1.3 * c * OUT_TOKENS / (E2E_MS / 1000.0)
            assert m.duration_s >= 0.75 * (16 / c) * E2E_MS / 1000.0
            assert m.notes == []
        assert server_stats(engine)["prefix_cache_resets"] == 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_aiperf_counts_failures_and_short_outputs(tmp_path, ts_recipe, stand_in_dir, offline_env):
    recipe = ts_recipe("--ttft-ms", str(TTFT_MS), "--itl-ms", "1", "--fail-rate", "0.25",
                       "--short-output-rate", "0.25", "--seed", "3", model=str(stand_in_dir))
    tokenizer = resolve_tokenizer(recipe.resolved())
    with Engine(recipe, log_dir=tmp_path / "engines", startup_timeout_s=30) as engine:
        before = server_stats(engine)
        m = get_driver("aiperf").run(make_spec(engine, tmp_path / "run", tokenizer, endpoint="chat", concurrency=4,
                                               request_count=24, warmup_requests=0, output_tokens=16))
        after = server_stats(engine)
    failures = after["failures_sent"] - before["failures_sent"]
    shorts = after["short_outputs_sent"] - before["short_outputs_sent"]
    assert failures > 0 and shorts > 0  # the seed makes both faults happen in 24 requests
    assert m.requests_sent == 24
    assert m.failures == failures
    assert m.output_length_mismatches == shorts
    assert m.requests_completed == 24 - failures
    assert m.output_tokens_total == (24 - failures - shorts) * 16 + shorts * 8
    assert not m.ok
    assert any("500" in n for n in m.notes)  # AIPerf's error summary is carried along
    # chat streams open with an empty role chunk; TTFT must still be the first content token
    assert within(m.ttft_p50_ms, TTFT_MS), m.ttft_p50_ms


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_aiperf_sends_the_shared_prompt_file(tmp_path, ts_recipe, stand_in_dir, offline_env):
    import hashlib

    from infercrane.serving.prompts import load_tokenizer, read_prompts_file, write_point_prompts
    from infercrane.serving.workload import WORKLOAD_SCHEMA_VERSION, Workload

    recipe = ts_recipe("--ttft-ms", "5", "--itl-ms", "1", model=str(stand_in_dir))
    tokenizer = resolve_tokenizer(recipe.resolved())
    w = Workload(schema_version=WORKLOAD_SCHEMA_VERSION, name="w", concurrency=[2], input_tokens=48,
                 output_tokens=8, request_count=12, warmup_requests=2, prompts="shared")
    path = write_point_prompts(tmp_path / "prompts.jsonl", load_tokenizer(*tokenizer), w, 0, 2)
    prompts = read_prompts_file(path)
    assert len(prompts) == 14  # 12 requests + 2 warm-up
    digest = lambda text: hashlib.sha256(text.encode()).hexdigest()  # noqa: E731
    with Engine(recipe, log_dir=tmp_path / "engines", startup_timeout_s=30) as engine:
        before = server_stats(engine)["prompts"]
        m = get_driver("aiperf").run(make_spec(engine, tmp_path / "run", tokenizer, concurrency=2, request_count=12,
                                               warmup_requests=2, input_tokens=48, output_tokens=8,
                                               prompts_file=path))
        after = server_stats(engine)["prompts"]
    sent = {d: n - before.get(d, 0) for d, n in after.items() if n > before.get(d, 0)}
    assert (m.requests_sent, m.requests_completed, m.failures, m.output_length_mismatches) == (12, 12, 0, 0)
    # the server saw the file's prompts in file order, each once, byte for byte: the first two as warm-up, which
    # AIPerf 0.12 prefixes with "warmup\n" (endpoints/openai_completions.py: WARMUP_SYSTEM_MESSAGE_PREFIX, so that
    # warm-up does not fill the prefix cache with what profiling sends), then the twelve measured ones as written
    expected = [digest("warmup\n" + p.text) for p in prompts[:2]] + [digest(p.text) for p in prompts[2:]]
    assert sent == dict.fromkeys(expected, 1)
    records = [json.loads(line) for line in (tmp_path / "run" / "profile_export.jsonl").read_text().splitlines()]
    isl = sorted(r["metrics"]["input_sequence_length"]["value"] for r in records
                 if r["metadata"]["benchmark_phase"] == "profiling")
    # with the server's token count, AIPerf's input length is the test server's usage.prompt_tokens, which counts the
    # prompt's whitespace-separated words: those of the file's measured prompts
    assert isl == sorted(len(p.text.split()) for p in prompts[2:])
    assert all(abs(p.input_tokens - 48) <= 2 for p in prompts)  # and about 48 tokens of the drivers' tokenizer

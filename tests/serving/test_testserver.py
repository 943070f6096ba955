"""The test server speaks enough of the OpenAI API, and its faults are what they say."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from infercrane.serving.testserver import CRASH_EXIT_CODE, ServerConfig, count_prompt_tokens, output_length


def post(url: str, body: dict, timeout: float = 10.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


def sse_events(raw: bytes) -> list:
    events = []
    for block in raw.decode().split("\n\n"):
        block = block.strip()
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_output_length_rule():
    cfg = ServerConfig(port=0, eos_after=5)
    assert output_length({"max_tokens": 12, "ignore_eos": True}, cfg) == 12
    assert output_length({"max_tokens": 12, "min_tokens": 12}, cfg) == 12
    assert output_length({"max_tokens": 12}, cfg) == 5  # natural stop
    assert output_length({"max_tokens": 12, "min_tokens": 8}, cfg) == 8
    assert output_length({"max_tokens": 3}, cfg) == 3
    assert output_length({"max_completion_tokens": 7, "ignore_eos": True}, cfg) == 7
    assert output_length({"max_tokens": 9}, ServerConfig(port=0)) == 9  # no natural stop by default


def test_prompt_tokens_are_whitespace_words():
    assert count_prompt_tokens({"prompt": "a b  c\nd"}) == 4
    assert count_prompt_tokens({"messages": [{"role": "system", "content": "x y"},
                                             {"role": "user", "content": [{"type": "text", "text": "p q r"}]}]}) == 5


def test_streaming_completion_with_usage(raw_server):
    srv = raw_server("--ttft-ms", "1", "--itl-ms", "1")
    status, raw = post(f"{srv.url}/v1/completions", {"model": "m", "prompt": "one two three", "max_tokens": 6,
                                                     "ignore_eos": True, "stream": True,
                                                     "stream_options": {"include_usage": True}})
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    token_chunks = [e for e in events[:-1] if e["choices"]]
    assert len(token_chunks) == 6
    assert all(len(c["choices"][0]["text"].split()) == 1 for c in token_chunks)
    assert token_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in token_chunks[:-1])
    usage = events[-2]["usage"]
    assert events[-2]["choices"] == []
    assert usage == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}


def test_streaming_without_include_usage_has_no_usage(raw_server):
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0")
    _, raw = post(f"{srv.url}/v1/completions", {"prompt": "x", "max_tokens": 3, "stream": True})
    assert not any(isinstance(e, dict) and "usage" in e for e in sse_events(raw))


def test_chat_stream_starts_with_role_chunk_and_honours_min_tokens(raw_server):
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0", "--eos-after", "2")
    _, raw = post(f"{srv.url}/v1/chat/completions",
                  {"messages": [{"role": "user", "content": "hi there"}], "max_completion_tokens": 10,
                   "min_tokens": 6, "stream": True, "stream_options": {"include_usage": True}})
    events = sse_events(raw)
    assert events[0]["object"] == "chat.completion.chunk"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [e for e in events[1:-1] if e["choices"]]
    assert len(content) == 6  # natural stop at 2 raised to min_tokens
    assert content[-1]["choices"][0]["finish_reason"] == "stop"
    assert events[-2]["usage"]["completion_tokens"] == 6
    assert events[-2]["usage"]["prompt_tokens"] == 2


def test_non_streaming_always_reports_usage(raw_server):
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0")
    status, raw = post(f"{srv.url}/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "a b c d"}], "max_tokens": 5, "ignore_eos": True})
    body = json.loads(raw)
    assert status == 200 and body["object"] == "chat.completion"
    assert len(body["choices"][0]["message"]["content"].split()) == 5
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    status, raw = post(f"{srv.url}/v1/completions", {"prompt": "a", "max_tokens": 2})
    assert json.loads(raw)["usage"]["completion_tokens"] == 2


def test_service_endpoints(raw_server):
    srv = raw_server("--model", "my-model")
    assert get(f"{srv.url}/health")[0] == 200
    models = json.loads(get(f"{srv.url}/v1/models")[1])
    assert [m["id"] for m in models["data"]] == ["my-model"]
    assert json.loads(get(f"{srv.url}/version")[1])["version"].startswith("infercrane-testserver")
    assert post(f"{srv.url}/reset_prefix_cache", {})[0] == 200
    assert json.loads(get(f"{srv.url}/stats")[1])["prefix_cache_resets"] == 1


def test_fail_rate_is_deterministic_by_seed(raw_server):
    outcomes = []
    for _ in range(2):
        srv = raw_server("--ttft-ms", "0", "--itl-ms", "0", "--fail-rate", "0.3", "--seed", "7")
        codes = [post(f"{srv.url}/v1/completions", {"prompt": "x", "max_tokens": 1})[0] for _ in range(40)]
        stats = json.loads(get(f"{srv.url}/stats")[1])
        assert stats["failures_sent"] == codes.count(500)
        assert set(codes) <= {200, 500}
        outcomes.append(codes)
    assert outcomes[0] == outcomes[1]
    assert 0 < outcomes[0].count(500) < 40


def test_short_output_fault_ignores_ignore_eos(raw_server):
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0", "--short-output-rate", "1")
    _, raw = post(f"{srv.url}/v1/completions", {"prompt": "x", "max_tokens": 10, "ignore_eos": True})
    assert json.loads(raw)["usage"]["completion_tokens"] == 5


def test_crash_after_n_requests(raw_server):
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0", "--crash-after", "2")
    assert post(f"{srv.url}/v1/completions", {"prompt": "x", "max_tokens": 1})[0] == 200
    post(f"{srv.url}/v1/completions", {"prompt": "x", "max_tokens": 1})  # the process exits as this one ends
    assert srv.proc.wait(timeout=10) == CRASH_EXIT_CODE


def test_hang_after_n_requests(raw_server):
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0", "--hang-after", "1")
    assert post(f"{srv.url}/v1/completions", {"prompt": "x", "max_tokens": 1})[0] == 200
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        post(f"{srv.url}/v1/completions", {"prompt": "x", "max_tokens": 1}, timeout=1.0)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        urllib.request.urlopen(f"{srv.url}/health", timeout=1.0)
    assert srv.proc.poll() is None  # hung, not dead


def test_only_loopback_binds():
    from infercrane.serving.testserver import parser

    with pytest.raises(SystemExit):
        parser().parse_args(["--port", "1", "--host", "0.0.0.0"])

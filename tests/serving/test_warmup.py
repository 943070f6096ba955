"""The engine warm-up (serving/warmup.py): what it sends, what it records, how a refusing engine fails."""
from __future__ import annotations

import json
import urllib.request

import pytest

from infercrane.errors import RunFailed
from infercrane.serving.engine import Engine, _Served
from infercrane.serving.warmup import MAX_IN_FLIGHT, ROUNDS, warm_engine, warmed_rate, warmup_body
from infercrane.serving.workload import WORKLOAD_SCHEMA_VERSION, Workload


def workload(**kw) -> Workload:
    data = dict(schema_version=WORKLOAD_SCHEMA_VERSION, name="w", concurrency=[4, 1], input_tokens=16,
                output_tokens=5, runs_per_arm=3)
    data.update(kw)
    return Workload(**data)


def test_a_warm_up_request_has_the_workloads_shape_and_no_sampling_parameters():
    path, body = warmup_body(workload(), "m", 3)
    assert path == "/v1/completions"
    assert body == {"model": "m", "max_tokens": 5, "stream": True, "ignore_eos": True, "min_tokens": 5,
                    "prompt": body["prompt"]}
    assert len(body["prompt"].split()) == 16 and body["prompt"] != warmup_body(workload(), "m", 4)[1]["prompt"]
    path, body = warmup_body(workload(endpoint="chat", streaming=False, ignore_eos=False), "m", 0)
    assert path == "/v1/chat/completions" and body["stream"] is False and "ignore_eos" not in body
    assert body["messages"][0]["role"] == "user"


def test_the_warm_up_loads_every_concurrency_and_says_what_it_sent(tmp_path, ts_recipe):
    with Engine(ts_recipe("--ttft-ms", "0", "--itl-ms", "1"), log_dir=tmp_path, startup_timeout_s=30) as engine:
        before = _stats(engine)["finished_requests"]
        record = warm_engine(engine, workload(window_s=2.0, warmup_s=1.0))  # time windows: ROUNDS rounds
        after = _stats(engine)["finished_requests"]
    assert record["concurrencies"] == [1, 4] and record["rounds"] == ROUNDS
    assert record["requests"] == ROUNDS * (1 + 4) == after - before
    assert record["seconds"] >= 0
    # each round timed: c requests sent together took at least the server's ~5 ms per request at 1 ms a token
    assert set(record["round_s"]) == {"1", "4"} and all(len(t) == ROUNDS for t in record["round_s"].values())
    assert all(0.004 < t < record["seconds"] for times in record["round_s"].values() for t in times)
    assert warmed_rate(record, 4) == 4 / min(record["round_s"]["4"])


def test_windows_of_a_request_count_are_warmed_with_one_round(tmp_path, ts_recipe):
    from infercrane.serving.warmup import COUNTED_ROUNDS, rounds_for

    counted = workload(request_count=8)
    assert counted.window_s is None and rounds_for(counted) == COUNTED_ROUNDS == 1
    assert rounds_for(workload(window_s=2.0, warmup_s=1.0)) == ROUNDS  # time windows: prompts sized from the rounds
    with Engine(ts_recipe("--ttft-ms", "0", "--itl-ms", "1"), log_dir=tmp_path, startup_timeout_s=30) as engine:
        before = _stats(engine)["finished_requests"]
        record = warm_engine(engine, counted)
        after = _stats(engine)["finished_requests"]
    assert record["rounds"] == 1 and record["requests"] == 1 + 4 == after - before
    assert all(len(t) == 1 for t in record["round_s"].values())


def test_the_warm_up_rate_is_c_requests_over_the_fastest_round():
    record = {"round_s": {"1": [0.5, 0.25], "100": [4.0, 5.0], "2000": [10.0]}}
    assert warmed_rate(record, 1) == 4.0 and warmed_rate(record, 100) == 25.0
    assert warmed_rate(record, 2000) == MAX_IN_FLIGHT / 10.0  # at most MAX_IN_FLIGHT were in flight at once
    assert warmed_rate(record, 8) is None and warmed_rate(None, 1) is None and warmed_rate({"seconds": 1}, 1) is None
    assert warmed_rate({"round_s": {"1": [0.0]}}, 1) is None


class _Refusing(_Served):
    served_model = "m"

    def __init__(self, answer):
        self.answer = answer

    def request(self, method, path, body=None, timeout_s=5.0):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def failure(self, what):
        return RunFailed(f"engine 'x' {what}")


def test_an_engine_that_refuses_a_warm_up_request_fails_with_its_answer():
    with pytest.raises(RunFailed, match=r"answered 400 to a warm-up request at concurrency 1: .*max_tokens"):
        warm_engine(_Refusing((400, json.dumps({"error": "max_tokens too large"}).encode())), workload())


def test_an_engine_that_does_not_answer_a_warm_up_request_fails_naming_why():
    with pytest.raises(RunFailed, match=r"did not answer a warm-up request at concurrency 1: .*ConnectionRefused"):
        warm_engine(_Refusing(ConnectionRefusedError(111, "refused")), workload())


def _stats(engine) -> dict:
    with urllib.request.urlopen(f"{engine.base_url}/stats", timeout=5) as resp:
        return json.loads(resp.read())


def test_a_warm_up_prompt_is_about_the_workloads_length_in_the_stand_ins_tokens(stand_in_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(stand_in_dir))
    for n in (16, 128, 1000):
        _, body = warmup_body(workload(input_tokens=n), "m", 12345)
        assert abs(len(tok(body["prompt"])["input_ids"]) - n) <= 2, n  # not twice as long

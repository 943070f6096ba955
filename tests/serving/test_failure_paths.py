"""What InferCrane says when the engine fails under it: a stream cut short, a 5xx during warm-up, a death right after
start-up, a hang under the driver, every output short, a concurrency the machine cannot hold. Each failure is a named
error with the engine's state and words, never a traceback; each is made by one of the test server's faults."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import pytest

from infercrane.errors import InputError, ReceiptInvalid, RunFailed
from infercrane.serving import warmup as warmup_mod
from infercrane.serving.drivers import run_logged
from infercrane.serving.engine import Engine, _Served
from infercrane.serving.metrics import RunMetrics
from infercrane.serving.warmup import RETRIES, warm_engine
from infercrane.serving.workload import (MAX_CONCURRENCY, WORKLOAD_SCHEMA_VERSION, PlanResult, Workload, load_workload,
                                         plan_runs)


def workload(**kw) -> Workload:
    data = dict(schema_version=WORKLOAD_SCHEMA_VERSION, name="w", concurrency=[1], input_tokens=8, output_tokens=16,
                runs_per_arm=3, request_timeout_s=30)
    data.update(kw)
    return Workload(**data)


# time windows: the engine warm-up sends two rounds at each concurrency (warmup.rounds_for), the sequence the seeded
# faults below are chosen over
TIMED = workload(window_s=2.0, warmup_s=1.0)


def stats(engine) -> dict:
    with urllib.request.urlopen(f"{engine.base_url}/stats", timeout=5) as resp:
        return json.loads(resp.read())


# -- 1. a stream cut short ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_stream_cut_short_by_a_dying_engine_is_the_engines_death_not_a_traceback(tmp_path, ts_recipe):
    # readiness is request 1; the engine exits (code 17) when the second warm-up request ends, mid-way through the
    # streams of the other two of the round
    recipe = ts_recipe("--ttft-ms", "0", "--itl-ms", "5", "--crash-after", "3")
    with Engine(recipe, log_dir=tmp_path, startup_timeout_s=30) as engine:
        with pytest.raises(RunFailed) as err:
            warm_engine(engine, workload(concurrency=[4], output_tokens=32))
    msg = str(err.value)
    assert msg.startswith("engine 'ts' (testserver) cut its answer to a warm-up request at concurrency 4 short: "
                          "the answer was cut short (IncompleteRead")
    assert "; the engine has died: it exited with code 17" in msg
    assert "crashing after 3 requests" in msg  # the engine's log tail


@pytest.mark.slow
def test_a_stream_cut_short_by_a_living_engine_says_it_is_alive(tmp_path, ts_recipe):
    with Engine(ts_recipe("--ttft-ms", "0", "--itl-ms", "1", "--cut-after", "1"), log_dir=tmp_path,
                startup_timeout_s=30) as engine:
        for streaming in (True, False):
            with pytest.raises(RunFailed) as err:
                warm_engine(engine, workload(streaming=streaming))
            msg = str(err.value)
            assert "cut its answer to a warm-up request at concurrency 1 short: the answer was cut short" in msg
            assert "; the engine is alive: its process runs and GET /health answered 200" in msg
            assert "--cut-after" in msg  # the log tail
        assert engine.alive() and stats(engine)["answers_cut"] == 2


# -- 2. a 5xx during warm-up -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_warm_up_request_answered_500_is_sent_again_and_counted(tmp_path, ts_recipe):
    # fail-rate 0.5, seed 0, one request at a time: the readiness check passes at once, then one of the warm-up's
    # answers is a 500 (the fault's choices are fixed by the seed over the arrival order)
    with Engine(ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--fail-rate", "0.5", "--seed", "0"), log_dir=tmp_path,
                startup_timeout_s=30) as engine:
        before = stats(engine)["failures_sent"]
        record = warm_engine(engine, TIMED)  # two rounds at c = 1
        sent_500 = stats(engine)["failures_sent"] - before
    assert sent_500 >= 1
    assert record["failures"] == sent_500 and record["retries"] == sent_500
    assert record["requests"] == 2  # retries are not requests of the warm-up's plan


@pytest.mark.slow
def test_an_engine_that_answers_500_to_every_try_fails_the_arm_with_its_words(tmp_path, ts_recipe):
    # fail-rate 0.5, seed 16: the readiness check and the first warm-up request pass (the latter on its 2nd try),
    # then the second warm-up request is answered 500 four times in a row
    with Engine(ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--fail-rate", "0.5", "--seed", "16"), log_dir=tmp_path,
                startup_timeout_s=30) as engine:
        with pytest.raises(RunFailed) as err:
            warm_engine(engine, TIMED)  # two rounds at c = 1
        assert engine.alive()
    msg = str(err.value)
    assert msg.startswith(f"engine 'ts' (testserver) answered 500 to a warm-up request at concurrency 1 on each of "
                          f"{RETRIES + 1} tries: ")
    assert "injected failure (--fail-rate)" in msg.splitlines()[0]  # the engine's words


class _FailsThenDies(_Served):
    """A server that answers 500 and then is found dead (what a launched engine says of itself)."""

    served_model = "m"

    def __init__(self) -> None:
        self.asked = 0

    def request(self, method, path, body=None, timeout_s=5.0):
        self.asked += 1
        return 500, b'{"error": "EngineDeadError"}'

    def failure_if_dead(self, what, *, grace_s=2.0, probe=True):
        return RunFailed(f"engine 'x' died {what}: it exited with code 1")

    def failure(self, what):
        return RunFailed(f"engine 'x' {what}")


def test_a_500_from_an_engine_that_then_died_is_its_death_and_is_not_retried(monkeypatch):
    monkeypatch.setattr(warmup_mod, "RETRY_PAUSE_S", 0.01)
    server = _FailsThenDies()
    with pytest.raises(RunFailed) as err:
        warm_engine(server, workload())
    assert str(err.value) == ("engine 'x' died after answering 500 (b'{\"error\": \"EngineDeadError\"}') to a warm-up "
                              "request at concurrency 1: it exited with code 1")
    assert server.asked == 1


# -- 3. a death right after start-up ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_an_engine_that_exits_right_after_it_is_ready_is_not_called_another_server(tmp_path, ts_recipe):
    engine = Engine(ts_recipe("--ttft-ms", "0", "--crash-after", "1"), log_dir=tmp_path, startup_timeout_s=30)
    with pytest.raises(RunFailed) as err:
        engine.start()
    msg = str(err.value)
    assert msg.startswith("engine 'ts' (testserver) died right after answering the readiness check: it exited with "
                          "code 17")
    assert "another" not in msg
    assert "crashing after 1 requests" in msg  # the log tail


# -- 4. a hang under the driver ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_an_engine_that_hangs_under_the_driver_is_named_hung_not_the_drivers_exit(tmp_path, ts_recipe):
    with Engine(ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--hang-after", "1"), log_dir=tmp_path,
                startup_timeout_s=30) as engine:
        with pytest.raises(OSError):  # request 2: the server hangs from here on, /health included
            engine.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, timeout_s=0.5)
        with pytest.raises(RunFailed) as err:  # a driver that gives up (exit 1) while the engine hangs
            run_logged([sys.executable, "-c", "raise SystemExit(1)", "--url", engine.base_url],
                       log_path=tmp_path / "driver.log", env=dict(os.environ), timeout_s=60, what="driver fake")
        msg = str(err.value)
        assert msg.startswith("engine 'ts' (testserver) stopped answering (hung) while driver fake ran: its process "
                              "runs, but GET /health did not answer within")
        assert "(then: driver fake exited with code 1" in msg
        assert "hanging from request 2 on" in msg  # the log tail
        state, words = engine.probe()
        assert state == "hung" and "GET /health did not answer within" in words and engine.alive()
    assert engine.probe()[0] == "dead"  # stopped


# -- 5. every output short ---------------------------------------------------------------------------------------------
def _short_run(arm: str, run: int, c: int = 4, asked: int = 16, requests: int = 32) -> RunMetrics:
    """A run whose every output came back half as long as asked (the test server's --short-output-rate 1.0)."""
    tok_s = 300.0
    return RunMetrics(arm=arm, recipe_sha256="0" * 64, run_index=run, concurrency=c, driver="aiperf",
                      driver_version="1", token_count_source="server", streaming=True, expected_output_tokens=asked,
                      raw_export_path="x", requests_sent=requests, requests_completed=requests, failures=0,
                      output_length_mismatches=requests, output_tokens_total=requests * asked // 2,
                      duration_s=requests * asked / 2 / tok_s, output_tok_s=tok_s, request_s=tok_s * 2 / asked,
                      ttft_p50_ms=40.0, ttft_p95_ms=45.0, ttft_p99_ms=50.0, tpot_p50_ms=5.0, tpot_p95_ms=5.2,
                      tpot_p99_ms=5.4, e2e_p50_ms=80.0, e2e_p95_ms=85.0, e2e_p99_ms=90.0,
                      started_at="2026-12-01T00:00:00+00:00")


def test_an_ab_whose_every_output_is_short_ends_in_a_named_error_not_a_schema_error(tmp_path, stand_in_dir,
                                                                                     ts_recipe):
    from infercrane.decide.policy import load_policy
    from infercrane.env.capture import provenance
    from infercrane.receipts.validate import write_receipt
    from infercrane.serving.receipt import build_document, plan_config

    w = load_workload("quick")  # c = 4, 16 tokens asked, 3 runs per arm
    arms = ["testserver", "testserver-fast"]
    result = PlanResult(workload=w, recipes={a: ts_recipe(name=a, model=str(stand_in_dir)).resolved() for a in arms},
                        drivers=["aiperf"], order="sandwich", plan=plan_runs(arms, w))
    result.runs += [_short_run(a, i) for a in arms for i in range(w.runs_per_arm)]
    result.complete = True
    prov = provenance(config=plan_config("ab", list(result.recipes.values()), w, {"order": "sandwich"}),
                      command_line=["test"])
    prov["hardware"] = prov["hardware"] | {"gpu": "test-gpu"}
    with pytest.raises(RunFailed) as err:
        write_receipt(build_document(result, kind="ab", policy=load_policy("serving"), provenance=prov),
                      tmp_path / "ab.json")
    msg = str(err.value)
    assert all(f"{a} at c=4" in msg for a in arms) and "output" in msg


# -- 6. a concurrency the machine cannot hold ---------------------------------------------------------------------------
def test_a_concurrency_above_the_ceiling_is_refused(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text(f"schema_version: {WORKLOAD_SCHEMA_VERSION}\nname: huge\nconcurrency: [4, 100000]\n"
                    "input_tokens: 8\noutput_tokens: 8\n")
    with pytest.raises(InputError) as err:
        load_workload(path)
    assert f"concurrency 100000 is above {MAX_CONCURRENCY}" in str(err.value)
    assert workload(concurrency=[MAX_CONCURRENCY]).concurrency == [MAX_CONCURRENCY]


_UNDER_LIMITS = textwrap.dedent("""\
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))
    from infercrane.errors import InputError
    from infercrane.serving.workload import check_concurrency_fits
    try:
        check_concurrency_fits([int(sys.argv[3])])
    except InputError as exc:
        print("InputError:", exc)
        raise SystemExit(2)
    print("fits; soft limit now", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    """)


def _under_limits(soft: int, hard: int, c: int) -> subprocess.CompletedProcess:
    """``check_concurrency_fits([c])`` in a process whose open-file limit is (soft, hard): a lowered hard limit
    cannot be raised again, so never in the test's own process."""
    return subprocess.run([sys.executable, "-c", _UNDER_LIMITS, str(soft), str(hard), str(c)], capture_output=True,
                          text=True, timeout=60)


def test_a_concurrency_above_the_open_file_limit_is_refused_naming_the_limit_and_the_fix():
    out = _under_limits(300, 300, 1000)
    assert out.returncode == 2, out.stderr
    assert "concurrency 1000 needs about 1256 open files" in out.stdout
    assert "at most 300 (RLIMIT_NOFILE, hard limit)" in out.stdout and "ulimit -Hn 1256" in out.stdout


def test_a_soft_open_file_limit_below_the_concurrency_is_raised_to_it():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    if hard < 1256:
        pytest.skip(f"this machine's hard open-file limit ({hard}) is below the 1256 the check needs")
    out = _under_limits(300, hard, 1000)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fits; soft limit now 1256" in out.stdout


class _CountsInFlight(_Served):
    """A server that answers every request after a moment and counts how many were in flight at once."""

    served_model = "m"

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()

    def request(self, method, path, body=None, timeout_s=5.0):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.02)
        with self.lock:
            self.now -= 1
        return 200, b"{}"

    def failure(self, what):
        return RunFailed(what)


def test_the_warm_up_keeps_at_most_max_in_flight_threads(monkeypatch):
    monkeypatch.setattr(warmup_mod, "MAX_IN_FLIGHT", 4)
    server = _CountsInFlight()
    threads_before = threading.active_count()
    record = warm_engine(server, workload(concurrency=[2, 16], window_s=2.0, warmup_s=1.0))  # two rounds each
    assert server.most == 4 and record["max_in_flight"] == 4
    assert record["requests"] == 2 * (2 + 16)
    assert threading.active_count() == threads_before  # the pool is gone

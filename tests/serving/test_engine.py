"""Engine lifecycle against the test server: ready, reset, stop, and no engine outlives InferCrane."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from infercrane.errors import InputError, RunFailed
from infercrane.proc import group_alive
from infercrane.serving.engine import Engine
from infercrane.serving.engine_kinds import ENGINE_KINDS, get_engine_kind
from infercrane.serving.recipes import load_recipe


def stats(engine: Engine) -> dict:
    with urllib.request.urlopen(f"{engine.base_url}/stats", timeout=5) as resp:
        return json.loads(resp.read())


def wait_gone(pgid: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.05)
    return False


def test_start_ready_reset_stop(tmp_path, ts_recipe):
    engine = Engine(ts_recipe("--ttft-ms", "1", "--itl-ms", "1"), log_dir=tmp_path, startup_timeout_s=30)
    with engine:
        assert engine.alive()
        rec = engine.record
        assert rec.version and rec.version.startswith("infercrane-testserver")
        assert rec.ready_after_s is not None and rec.ready_after_s >= 0
        assert rec.command[:3] == [sys.executable, "-m", "infercrane.serving.testserver"]
        assert ["--host", "127.0.0.1"] == rec.command[3:5] and str(engine.port) in rec.command
        assert stats(engine)["finished_requests"] == 1  # the readiness completion
        engine.reset_prefix_cache()
        engine.reset_prefix_cache()
        assert stats(engine)["prefix_cache_resets"] == 2
        pgid = engine.pgid
    assert not engine.alive()
    assert not group_alive(pgid)
    assert engine.record.stop_signals == ["SIGINT"]  # the test server stops cleanly on SIGINT
    assert engine.record.returncode == 0 and engine.record.stopped_at
    log = engine.log_path.read_text()
    assert "# infercrane: " in log and "serving model" in log


def test_env_additions_recorded_and_passed(tmp_path, ts_recipe):
    from infercrane.serving.recipes import Recipe

    base = ts_recipe("--ttft-ms", "0")
    recipe = Recipe.model_validate({**base.model_dump(mode="json"), "env": {"INFERCRANE_TEST_FLAG": "42"}})
    with Engine(recipe, log_dir=tmp_path, startup_timeout_s=30) as engine:
        environ = open(f"/proc/{engine.proc.pid}/environ", "rb").read().split(b"\0")
        assert b"INFERCRANE_TEST_FLAG=42" in environ
    assert engine.record.env_added == {"INFERCRANE_TEST_FLAG": "42"}


def test_exit_on_error_kills_the_group(tmp_path, ts_recipe):
    with pytest.raises(LookupError):
        with Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, startup_timeout_s=30) as engine:
            pgid = engine.pgid
            raise LookupError("a failure inside the with block")
    assert not group_alive(pgid)


def test_hang_at_start_times_out_with_log_tail(tmp_path, ts_recipe):
    engine = Engine(ts_recipe("--hang-after", "0"), log_dir=tmp_path, startup_timeout_s=3)
    with pytest.raises(RunFailed) as err:
        engine.start()
    msg = str(err.value)
    assert "was not ready after 3 s" in msg and "waiting for health" in msg
    assert "serving model" in msg  # the log tail
    assert not group_alive(engine.pgid)


def test_slow_loading_engine_times_out(tmp_path, ts_recipe):
    engine = Engine(ts_recipe("--startup-delay-s", "600"), log_dir=tmp_path, startup_timeout_s=2)
    with pytest.raises(RunFailed) as err:
        engine.start()
    assert "loading (sleeping 600 s" in str(err.value)
    assert not group_alive(engine.pgid)


def test_engine_exiting_at_start_fails_fast_with_log(tmp_path, ts_recipe):
    engine = Engine(ts_recipe("--no-such-flag"), log_dir=tmp_path, startup_timeout_s=60)
    t0 = time.monotonic()
    with pytest.raises(RunFailed) as err:
        engine.start()
    assert time.monotonic() - t0 < 30
    assert "exited with code 2 before it was ready" in str(err.value)
    assert "unrecognized arguments: --no-such-flag" in str(err.value)


def test_unknown_engine_lists_known():
    with pytest.raises(InputError) as err:
        get_engine_kind("sglang")
    assert "vllm" in str(err.value) and "testserver" in str(err.value)


def test_vllm_command_for_stand_in_and_hub_model(stand_in_dir):
    from infercrane.serving.recipes import Recipe

    kind = ENGINE_KINDS["vllm"]
    local = Recipe(schema_version="infercrane.serving-recipe/v1", name="e", engine="vllm", model=str(stand_in_dir),
                   engine_args=["--enforce-eager"])
    cmd = kind.command(local.resolved(), 8123)
    assert cmd[:5] == [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(stand_in_dir.resolve())]
    assert cmd[5:] == ["--host", "127.0.0.1", "--port", "8123", "--load-format", "dummy", "--enforce-eager"]
    hub = load_recipe("throughput")
    cmd = kind.command(hub, 8124)
    assert cmd[4] == "Qwen/Qwen3-0.6B" and "--load-format" not in cmd
    assert cmd[-2:] == ["--performance-mode", "throughput"]
    assert kind.default_env()["VLLM_SERVER_DEV_MODE"] == "1"  # needed for /reset_prefix_cache


CHILD = """\
import sys, time
from infercrane.serving.engine import Engine
from infercrane.serving.recipes import Recipe
r = Recipe(schema_version="infercrane.serving-recipe/v1", name="child", engine="testserver",
           model="m", engine_args=["--ttft-ms", "0"])
engine = Engine(r, log_dir=sys.argv[1], startup_timeout_s=30)
"""
WITH_BLOCK = """\
with engine:
    print(engine.pgid, flush=True)
    time.sleep(120)
"""
NO_WITH = """\
engine.start()
print(engine.pgid, flush=True)
time.sleep(120)
"""


def run_child(tmp_path, body: str) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "child.py"
    script.write_text(CHILD + body)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline()
    if not line.strip():
        proc.kill()
        pytest.fail(f"child did not start an engine: {proc.stderr.read()}")
    pgid = int(line)
    assert group_alive(pgid)
    return proc, pgid


@pytest.mark.parametrize("body, sig", [(WITH_BLOCK, signal.SIGINT), (WITH_BLOCK, signal.SIGTERM),
                                       (NO_WITH, signal.SIGTERM), (NO_WITH, signal.SIGKILL)],
                         ids=["ctrl-c", "sigterm", "sigterm-no-context", "sigkill-parent"])
def test_no_engine_outlives_its_parent(tmp_path, body, sig):
    proc, pgid = run_child(tmp_path, body)
    try:
        os.kill(proc.pid, sig)
        proc.wait(timeout=30)
        assert wait_gone(pgid), f"engine group {pgid} survived its parent's {signal.Signals(sig).name}"
    finally:
        if proc.poll() is None:
            proc.kill()
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_normal_interpreter_exit_stops_engine(tmp_path):
    body = "engine.start()\nprint(engine.pgid, flush=True)\n"
    proc, pgid = run_child(tmp_path, body)
    proc.wait(timeout=30)
    assert wait_gone(pgid)

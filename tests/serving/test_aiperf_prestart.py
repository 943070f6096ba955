"""The next block's AIPerf started ahead, held at a gate (``drivers.aiperf_gate``): it sends nothing before its gate
opens, run_plan starts it while the block before still measures and records what overlapped, and a plan that stops
leaves none of it running."""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from infercrane.serving.drivers import aiperf_gate

needs_aiperf = pytest.mark.skipif(importlib.util.find_spec("aiperf") is None, reason="aiperf is not installed")


def server_stats(base_url: str) -> dict:
    with urllib.request.urlopen(f"{base_url}/stats", timeout=5) as resp:
        return json.loads(resp.read())


def processes_naming(text: str) -> list[str]:
    """Command lines of the live processes whose command line contains ``text``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((line for line in (d / "status").read_text().splitlines() if line.startswith("State:")), "")
        except OSError:
            continue
        if text in cmd and "zombie" not in state:
            out.append(cmd)
    return out


@pytest.fixture
def prestarts(monkeypatch):
    """Every block run_plan starts ahead (``AiperfDriver.prestart``), as it was handed back."""
    from infercrane.serving.drivers.aiperf import AiperfDriver

    handles = []
    original = AiperfDriver.prestart

    def prestart(self, grid):
        handles.append(original(self, grid))
        return handles[-1]

    monkeypatch.setattr(AiperfDriver, "prestart", prestart)
    return handles


# -- a command started now, waited for later ------------------------------------------------------------------------
def test_a_started_command_is_waited_for_later_or_killed(tmp_path):
    from infercrane.serving.drivers import finish_logged, start_logged
    from infercrane.proc import group_alive

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
    first = start_logged([sys.executable, "-c", burn], log_path=tmp_path / "first.log", env=dict(os.environ),
                         what="first")
    second = start_logged([sys.executable, "-c", "import time; time.sleep(1.0)"], log_path=tmp_path / "second.log",
                          env=dict(os.environ), what="second")
    assert first.running() and second.running()
    assert finish_logged(first, timeout_s=60) >= 0.4
    # the second started before the first was reaped: the first's CPU is not counted again as the second's
    assert finish_logged(second, timeout_s=60) < 0.3
    assert (tmp_path / "second.log").read_text().startswith("# infercrane: ")
    held = start_logged([sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "held.log",
                        env=dict(os.environ), what="held")
    held.kill()
    held.kill()  # again: nothing left to end
    assert not held.running() and not group_alive(held.proc.pid)


# -- the gate itself (no AIPerf needed) ---------------------------------------------------------------------------
class FakeController:
    def __init__(self) -> None:
        self.started = 0

    async def _start_profiling_all_services(self) -> str:
        self.started += 1
        return "profiling"


def test_the_gate_holds_the_start_until_its_file_exists(tmp_path, capsys):
    import asyncio
    import threading

    ctrl_cls = type("Ctrl", (FakeController,), {})
    gate = tmp_path / "gate"
    assert aiperf_gate.install(gate, controller=ctrl_cls)
    ctrl = ctrl_cls()
    threading.Timer(0.3, gate.touch).start()
    assert asyncio.run(ctrl._start_profiling_all_services()) == "profiling"
    assert ctrl.started == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"infercrane gate: AIPerf configured; waiting for {gate}"
    assert out[1].startswith("infercrane gate: open after ") and out[1].endswith(" s")


def test_without_the_method_aiperf_runs_ungated(tmp_path, capsys, monkeypatch):
    assert not aiperf_gate.install(tmp_path / "gate", controller=type("Other", (), {}))
    assert capsys.readouterr().out == "infercrane gate: not available in this AIPerf; running ungated\n"
    # the whole entry point: an AIPerf without the controller's method is run as is, with the arguments after --
    seen: list[list[str]] = []
    fake_cli = type(sys)("aiperf.cli")
    fake_cli.app = lambda: seen.append(list(sys.argv))
    monkeypatch.setitem(sys.modules, "aiperf.cli", fake_cli)
    monkeypatch.setattr(aiperf_gate, "TARGET_MODULE", "infercrane_no_such_module.system_controller")
    monkeypatch.setattr(sys, "argv", ["x"])
    aiperf_gate.main([str(tmp_path / "gate"), "--max-wait-s", "5", "--", "profile", "--config", "c.yaml"])
    assert seen == [["aiperf", "profile", "--config", "c.yaml"]]
    assert "running ungated" in capsys.readouterr().out
    assert not (tmp_path / "gate").exists()


def test_a_gate_never_opened_gives_up_after_max_wait(tmp_path):
    code = ("import asyncio, sys\n"
            "from pathlib import Path\n"
            "from infercrane.serving.drivers import aiperf_gate\n"
            "class C:\n"
            "    async def _start_profiling_all_services(self):\n"
            "        print('STARTED', flush=True)\n"
            "assert aiperf_gate.install(Path(sys.argv[1]), max_wait_s=0.3, controller=C)\n"
            "asyncio.run(C()._start_profiling_all_services())\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "never")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == aiperf_gate.TIMEOUT_EXIT
    assert "did not appear within 0.3 s" in proc.stdout and "STARTED" not in proc.stdout


def test_the_gate_arguments():
    assert aiperf_gate.parse_args(["g", "--", "profile", "--config", "x"]) == (Path("g"), aiperf_gate.MAX_WAIT_S,
                                                                             ["profile", "--config", "x"])
    assert aiperf_gate.parse_args(["g", "--max-wait-s", "9", "--", "profile"])[1] == 9.0
    with pytest.raises(SystemExit):
        aiperf_gate.parse_args(["g", "profile"])


@needs_aiperf
def test_the_installed_aiperf_can_be_held():
    from aiperf.controller.system_controller import SystemController

    assert aiperf_gate.gate_available()
    assert hasattr(SystemController, aiperf_gate.TARGET_METHOD)


# -- real AIPerf against the test server ---------------------------------------------------------------------------
@needs_aiperf
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_prestarted_block_sends_nothing_until_its_gate_opens(tmp_path, ts_recipe, stand_in_dir, offline_env):
    from infercrane.serving.drivers import RunSpec
    from infercrane.serving.drivers.aiperf import AiperfDriver, RunGrid, block_accounting
    from infercrane.serving.engine import Engine
    from infercrane.serving.workload import resolve_tokenizer

    recipe = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", model=str(stand_in_dir))
    tok, env = resolve_tokenizer(recipe.resolved())
    driver = AiperfDriver()
    assert driver.supports_prestart()
    with Engine(recipe, log_dir=tmp_path / "engines", startup_timeout_s=30) as engine:
        spec = RunSpec(base_url=engine.base_url, served_model=engine.served_model, tokenizer=tok,
                       endpoint="completions", streaming=True, ignore_eos=True, input_tokens=32, output_tokens=16,
                       concurrency=2, request_count=12, warmup_requests=2, seed=0, token_count_source="server",
                       request_timeout_s=30.0, artifact_dir=tmp_path / "visit", timeout_s=240.0, arm="ts",
                       recipe_sha256=engine.recipe.sha256, run_index=0, env=env)
        grid = RunGrid(spec=spec, run_indices=(0, 1), concurrencies=(2,), window_s=1.0, warmup_s=0.5)
        before = server_stats(engine.base_url)["generation_requests"]  # the engine's readiness check sent one
        pre = driver.prestart(grid)
        try:
            deadline = time.monotonic() + 240
            while not pre.waiting():
                assert pre.running(), pre.process.log_path.read_text()
                assert time.monotonic() < deadline, "AIPerf did not reach its gate"
                time.sleep(0.1)
            time.sleep(2.0)
            assert pre.running()
            assert server_stats(engine.base_url)["generation_requests"] == before  # held: nothing sent
            assert not pre.gate.exists()
            runs = driver.run_grid(grid, prestarted=pre)
        finally:
            pre.kill()
        assert server_stats(engine.base_url)["generation_requests"] > before
    assert [(m.run_index, m.concurrency) for m in runs] == [(0, 2), (1, 2)]
    assert all(m.ok and m.requests_completed > 0 for m in runs)
    assert pre.opened_t is not None and pre.opened_t > pre.started_t and not pre.running()
    acct = block_accounting(grid, arm="ts", started=pre.opened_t, ended=time.time(), prestarted_t=pre.started_t)
    assert acct["prestarted"] is True and acct["hidden_startup_s"] > 0 and acct["gate_wait_s"] >= 1.5
    assert acct["windows_finished"] == 2 and "startup_s" in acct


@needs_aiperf
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("windows", ["time", "requests"])
def test_run_plan_starts_each_next_block_ahead(tmp_path, ts_recipe, stand_in_dir, offline_env, prestarts, windows):
    from infercrane.proc import group_alive
    from infercrane.serving.workload import load_workload, run_plan

    slow = ts_recipe("--ttft-ms", "20", "--itl-ms", "2", name="slow", model=str(stand_in_dir))
    fast = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", name="fast", model=str(stand_in_dir))
    w = load_workload("quick").with_overrides(runs_per_arm=4, concurrency=[2])  # blocks of 2, 4 and 2 windows
    if windows == "requests":  # windows of a request count: how far ahead to start is read from the windows measured
        w = w.with_overrides(window_s=None, warmup_s=None, request_count=40, warmup_requests=8)
    progress: list[str] = []
    result = run_plan([slow, fast], w, out_dir=tmp_path / "art", drivers="aiperf", startup_timeout_s=60,
                      coresident=True, on_progress=progress.append)
    assert result.complete
    assert len(result.runs) == 2 * w.runs_per_arm * len(w.concurrency) and all(m.ok for m in result.runs)
    # a block whose AIPerf lost windows under CPU load (errors.WindowsLost; seen on a 2-core host) has them run again
    # at once in retry blocks after it, on the same engine; the visits' order is unchanged
    visits = [b for b in result.blocks if "retry" not in b]
    assert [b["arm"] for b in visits] == ["slow", "fast", "slow"]
    for i, b in enumerate(result.blocks):
        if "windows_lost" in b and "retry" not in b:
            retries = list(itertools.takewhile(lambda r: "retry" in r, result.blocks[i + 1:]))
            assert retries and all(r["arm"] == b["arm"] and r["retry"] == 1 for r in retries)
            assert b["windows_finished"] + sum(r["windows_finished"] for r in retries) == b["windows_planned"]
            assert any("ran again at once" in n for n in result.notes)
        elif "retry" not in b:
            assert b["windows_finished"] == b["windows_planned"]
    first, second, third = visits
    assert "prestarted" not in first
    for b in (second, third):
        assert b["prestarted"] is True and b["hidden_startup_s"] > 0 and b["gate_wait_s"] >= 0
    # the blocks that had the next one starting beside them name the windows that shared the machine with it
    for b, name in ((first, "slow"), (second, "fast")):
        overlap = b["overlapped_by_prestart"]
        assert overlap and all(o["overlap_s"] > 0 for o in overlap)
        windows = {f"r{m.run_index:02d}_c{m.concurrency}" for m in result.runs if m.arm == name}
        assert {o["window"] for o in overlap} <= windows
    assert "overlapped_by_prestart" not in third
    # the third block's engine (slow) was warmed in its first visit: its gate opened as the second block delivered its
    # last window, while that block's AIPerf was still exporting and exiting; the second's (fast, not yet warmed) gate
    # waited for the first block's process to end
    assert "next_opened_before_end_s" not in first
    if "windows_lost" in second:  # its windows left ran first: the third's gate opened only after their block
        assert "next_opened_before_end_s" not in second
    else:
        assert 0 <= second["next_opened_before_end_s"] <= second["tail_s"]
    assert [p.grid.spec.artifact_dir.name for p in prestarts] == ["visit01", "visit02"]
    assert all(not p.running() and not group_alive(p.process.proc.pid) for p in prestarts)
    assert sum("started ahead" in line for line in progress) == 2
    assert not processes_naming(str(tmp_path))


@needs_aiperf
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_block_that_fails_ends_the_block_started_ahead(tmp_path, ts_recipe, stand_in_dir, offline_env, prestarts):
    from infercrane.errors import RunFailed
    from infercrane.proc import group_alive
    from infercrane.serving.workload import WORKLOAD_SCHEMA_VERSION, PlanResult, Workload, run_plan

    a = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", name="a", model=str(stand_in_dir))
    b = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", name="b", model=str(stand_in_dir))
    w = Workload(schema_version=WORKLOAD_SCHEMA_VERSION, name="fault", concurrency=[1], input_tokens=32,
                 output_tokens=16, window_s=1.0, runs_per_arm=8, arm_order="sandwich")
    into = PlanResult.model_construct()

    def on_run(m) -> None:  # a's engine is killed in its first block, once two windows have landed
        if m.arm == "a" and len(into.runs) == 2:
            assert prestarts, "the next block should have been started ahead by now"
            os.kill(next(e.pid for e in into.engines if e.recipe_name == "a"), signal.SIGKILL)

    with pytest.raises(RunFailed) as err:
        run_plan([a, b], w, out_dir=tmp_path / "art", drivers="aiperf", startup_timeout_s=60, coresident=True,
                 into=into, on_run=on_run)
    partial = err.value.partial
    assert str(err.value).startswith("engine ")  # the engine's failure
    measured = [m.run_index for m in partial.runs if m.ok]
    assert measured[:2] == [0, 1] and measured == list(range(len(measured)))  # what was measured is kept
    assert partial.blocks and partial.blocks[0]["arm"] == "a"
    # the block started ahead (b's) was ended with the plan, its gate never opened, nothing of it runs
    assert [p.grid.spec.arm for p in prestarts] == ["b"]
    pre = prestarts[0]
    assert not pre.running() and not group_alive(pre.process.proc.pid)
    assert pre.opened_t is None and not pre.gate.exists()
    assert aiperf_gate.OPENED not in pre.process.log_path.read_text()
    assert not processes_naming(str(tmp_path))

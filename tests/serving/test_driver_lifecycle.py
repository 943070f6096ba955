"""Driver processes: no driver (nor anything it started) outlives InferCrane, SIGKILL included; a driver's failure
while its engine died is reported as the engine's death, for one run and for a whole AIPerf visit; the log starts
with the shell-quoted command."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infercrane.errors import RunFailed
from infercrane.serving.drivers import Driver, RunSpec, run_logged
from infercrane.serving.drivers.aiperf import AiperfDriver, RunGrid
from infercrane.serving.engine import Engine, ExternalEngine, engine_serving

# A fake driver: starts a grandchild (a sleeping process of its own), writes both pids, then sleeps.
# With "ignore-term" both ignore SIGTERM, so only the guard's SIGKILL ends them.
FAKE_DRIVER = """\
import json, signal, subprocess, sys, time, os
ignore = sys.argv[2] == "ignore-term"
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN) if %r else None; time.sleep(300)" % ignore])
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump({"driver": os.getpid(), "grandchild": child.pid, "guard": os.getppid()}, f)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""

# InferCrane's side: run the fake driver through run_logged, as Driver.run does.
PARENT = """\
import sys
from pathlib import Path
from infercrane.serving.drivers import run_logged
run_logged([sys.executable, sys.argv[1], sys.argv[2], sys.argv[3]], log_path=Path(sys.argv[4]), env={},
           timeout_s=600, what="driver fake")
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if _running(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if _running(p)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("mode", ["sleeps", "ignore-term"])
def test_sigkill_of_infercrane_ends_the_driver_tree(tmp_path, mode):
    driver, parent = tmp_path / "driver.py", tmp_path / "parent.py"
    driver.write_text(FAKE_DRIVER)
    parent.write_text(PARENT)
    pids_file = tmp_path / "pids.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(parent), str(driver), str(pids_file), mode, str(tmp_path / "d.log")],
                            env=env, start_new_session=True)
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 60
        while not pids_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert pids_file.exists(), f"the fake driver did not start; log:\n{(tmp_path / 'd.log').read_text()}"
        pids = json.loads(pids_file.read_text())
        assert all(_running(p) for p in pids.values())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        left = _wait_gone(list(pids.values()), 60)
        assert not left, f"{mode}: still running after InferCrane's SIGKILL: {left} of {pids}"
    finally:
        for p in pids.values():
            if _running(p):
                os.kill(p, signal.SIGKILL)


def test_run_logged_writes_the_quoted_command_and_names_the_exit(tmp_path):
    log = tmp_path / "d.log"
    cmd = [sys.executable, "-c", "print('hello from the driver')", "an arg; with spaces"]
    cpu_s = run_logged(cmd, log_path=log, env=dict(os.environ), timeout_s=60, what="driver fake")
    lines = log.read_text().splitlines()
    assert lines[0].endswith("'an arg; with spaces'") and lines[0].startswith("# infercrane: ")
    assert "hello from the driver" in lines and cpu_s >= 0
    with pytest.raises(RunFailed, match="driver fake exited with code 3"):
        run_logged([sys.executable, "-c", "raise SystemExit(3)"], log_path=log, env=dict(os.environ), timeout_s=60,
                   what="driver fake")
    with pytest.raises(RunFailed, match=r"driver fake was killed by SIGKILL \(signal 9\)"):
        run_logged([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], log_path=log,
                   env=dict(os.environ), timeout_s=60, what="driver fake")


class ScriptDriver(Driver):
    """A driver whose command is a Python snippet given the engine's base URL (as AIPerf gets --url)."""

    name = "script"

    def __init__(self, code: str) -> None:
        self.code = code

    def available(self) -> tuple[bool, str]:
        return True, "test"

    def version(self) -> str:
        return "0"

    def command(self, spec: RunSpec) -> list[str]:
        return [sys.executable, "-c", self.code, "--url", spec.base_url]

    def parse(self, spec, *, driver_version, driver_cpu_s=None, started_at=None):
        raise RunFailed("the script driver writes no export")


def _spec(url: str, tmp_path: Path) -> RunSpec:
    return RunSpec(base_url=url, served_model="infercrane-test-model", tokenizer="unused", endpoint="completions",
                   streaming=False, ignore_eos=True, input_tokens=4, output_tokens=4, concurrency=1, request_count=4,
                   warmup_requests=0, seed=0, token_count_source="server", request_timeout_s=10, artifact_dir=tmp_path,
                   timeout_s=120, arm="a", recipe_sha256="0" * 64, run_index=0)


SEND_UNTIL_FAILURE = """\
import json, sys, urllib.request
url = sys.argv[2]
for i in range(50):
    body = json.dumps({"model": "infercrane-test-model", "prompt": "x", "max_tokens": 2}).encode()
    try:
        urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=body,
                               headers={"Content-Type": "application/json"}), timeout=5).read()
    except OSError as exc:
        print("request failed:", exc)
        sys.exit(1)
"""


def test_an_engine_crash_under_the_driver_is_the_engines(tmp_path, ts_recipe):
    # readiness takes one request; the engine exits (code 17) after the second
    with Engine(ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--crash-after", "2"), log_dir=tmp_path,
                startup_timeout_s=30) as eng:
        with pytest.raises(RunFailed) as err:
            ScriptDriver(SEND_UNTIL_FAILURE).run(_spec(eng.base_url, tmp_path / "run"))
    msg = str(err.value)
    assert msg.startswith(f"engine {eng.label!r} (testserver) died while driver script ran: it exited with code 17")
    assert "crashing after 2 requests" in msg  # the engine's log tail
    assert "(then: driver script exited with code 1" in msg
    assert "the engine stopped the run, not the driver" in msg


KILL_ENGINE = """\
import os, signal, sys
os.kill(int(os.environ["ENGINE_PID"]), signal.SIGKILL)
sys.exit(1)
"""


def test_an_engine_killed_by_a_signal_is_named(tmp_path, ts_recipe, monkeypatch):
    with Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, startup_timeout_s=30) as eng:
        monkeypatch.setenv("ENGINE_PID", str(eng.proc.pid))
        with pytest.raises(RunFailed, match=r"died while driver script ran: it was killed by SIGKILL \(signal 9\)"):
            ScriptDriver(KILL_ENGINE).run(_spec(eng.base_url, tmp_path / "run"))


def test_a_driver_failure_with_the_engine_alive_stays_the_drivers(tmp_path, ts_recipe):
    with Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, startup_timeout_s=30) as eng:
        with pytest.raises(RunFailed) as err:
            ScriptDriver("raise SystemExit(5)").run(_spec(eng.base_url, tmp_path / "run"))
        assert str(err.value).startswith("driver script exited with code 5")
        with pytest.raises(RunFailed, match="writes no export"):  # exit 0, no export: the driver's, engine alive
            ScriptDriver("pass").run(_spec(eng.base_url, tmp_path / "run2"))
        assert engine_serving(["x", "--url", eng.base_url]) is eng
    assert engine_serving(["x", "--url", eng.base_url]) is None  # stopped engines are no one's


def test_a_running_server_that_stops_answering_is_named(tmp_path, ts_recipe, raw_server):
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0")
    ext = ExternalEngine(srv.url, recipe=ts_recipe(), label="ext").connect()
    assert engine_serving(["--url", srv.url]) is ext
    code = f"import os, signal, sys; os.kill({srv.proc.pid}, signal.SIGKILL); sys.exit(1)"
    with pytest.raises(RunFailed, match=rf"server 'ext' at {srv.url} \(not launched by InferCrane\) stopped "
                                        "answering while driver script ran"):
        ScriptDriver(code).run(_spec(srv.url, tmp_path / "run"))


class GridScriptDriver(ScriptDriver, AiperfDriver):
    """AIPerf's visit path (``run_grid``) with a Python snippet in place of the AIPerf invocation."""

    name = "aiperf"

    def grid_command(self, grid: RunGrid, config_path) -> list[str]:
        return [sys.executable, "-c", self.code, "--url", grid.spec.base_url]


def test_an_engine_killed_under_a_whole_visit_is_the_engines(tmp_path, ts_recipe, monkeypatch):
    # the snippet kills the engine and exits 0 without an export, as AIPerf does when every request of a trial fails
    code = "import os, signal; os.kill(int(os.environ['ENGINE_PID']), signal.SIGKILL)"
    with Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, startup_timeout_s=30) as eng:
        monkeypatch.setenv("ENGINE_PID", str(eng.proc.pid))
        grid = RunGrid(spec=_spec(eng.base_url, tmp_path / "visit"), run_indices=(0, 1), concurrencies=(1, 4),
                       window_s=1.0, warmup_s=0.0)
        with pytest.raises(RunFailed) as err:
            GridScriptDriver(code).run_grid(grid)
    msg = str(err.value)
    assert msg.startswith(f"engine {eng.label!r} (testserver) died while driver aiperf ran: it was killed by SIGKILL")
    assert "(then: " in msg  # the unreadable export, after the engine's death


def test_an_unreadable_visit_export_with_the_engine_alive_stays_the_drivers(tmp_path, ts_recipe):
    with Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, startup_timeout_s=30) as eng:
        grid = RunGrid(spec=_spec(eng.base_url, tmp_path / "visit"), run_indices=(0,), concurrencies=(1,),
                       window_s=1.0, warmup_s=0.0)
        with pytest.raises(RunFailed) as err:
            GridScriptDriver("pass").run_grid(grid)
        assert not str(err.value).startswith("engine ")

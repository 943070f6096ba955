"""A worker and everything its candidate starts are gone after every way a screen can end.

Exit paths: a normal end (``close``), a timeout (a hanging candidate), Ctrl-C and SIGTERM of the InferCrane process
(its ``finally`` closes the workers) and SIGKILL of it (the worker's parent-death signal, or its watchdog). Background
processes: one in a new session (``setsid``) and one double-forked into a new session (an orphan). Real processes on
CPU; the candidates (``fixtures/lifecycle_candidates.py``) write the pids to check into a file. Deadlines are generous
(CI is a loaded 2-core machine); nothing here asserts a duration.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import infercrane
from infercrane import proc
from infercrane.kernels.harness import reaper
from infercrane.kernels.harness.isolation import SubprocessWorker, WorkerFailure, spec_to_json
from infercrane.kernels.harness.runner import screen
from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc and prctl")

FIXTURES = Path(__file__).parent / "fixtures"
CANDIDATES = FIXTURES / "lifecycle_candidates.py"
PARENT = FIXTURES / "lifecycle_parent.py"
PID_FILE_ENV = "INFERCRANE_TEST_PID_FILE"
ON_IMPORT_ENV = "INFERCRANE_TEST_ON_IMPORT"
GONE_DEADLINE_S = 20.0
START_DEADLINE_S = 180.0  # a worker imports torch; a parent script imports it too
SPEC = FusedAddRMSNormSpec(hidden_size=64, eps=1e-6, rows=(2,))
SLEEPER = [sys.executable, "-c", "import time\nwhile True:\n    time.sleep(60)"]


def _alive(pid: int) -> bool:
    """Exists and is not a zombie (a zombie runs nothing; who reaps it is up to PID 1 of this machine)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return data[data.rindex(b")") + 2:].split()[0] not in (b"Z", b"X")


def _recorded(pid_file: Path) -> dict[str, list[int]]:
    roles: dict[str, list[int]] = {}
    if pid_file.exists():
        for line in pid_file.read_text().splitlines(keepends=True):
            if line.endswith("\n") and line.strip():
                role, pid = line.split()
                roles.setdefault(role, []).append(int(pid))
    return roles


def _wait_recorded(pid_file: Path, roles: set[str], proc: subprocess.Popen | None = None) -> list[int]:
    """Wait until the candidate has recorded every role; return all pids recorded."""
    end = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < end:
        got = _recorded(pid_file)
        if roles <= set(got):
            return [p for pids in got.values() for p in pids]
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the parent exited ({proc.returncode}) before the candidate started")
        time.sleep(0.05)
    pytest.fail(f"the candidate did not record {sorted(roles)} within {START_DEADLINE_S:g} s: {_recorded(pid_file)}")


def _assert_gone(pids: list[int]) -> None:
    end = time.monotonic() + GONE_DEADLINE_S
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.05)
    left = [p for p in pids if _alive(p)]
    assert not left, f"processes still running {GONE_DEADLINE_S:g} s after the worker was ended: {left}"


def _kill_leftovers(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _roles(fn: str) -> set[str]:
    return {"worker"} if fn == "hangs" else {"worker", "background"}


def _load(w: SubprocessWorker, fn: str) -> None:
    """Send the ``load`` job of ``fn`` (the candidate file runs ``fn`` at import: see ``ON_IMPORT_ENV``)."""
    ref = {"path": str(CANDIDATES), "function": fn, "in_place_override": None}
    w.send({"op": "load", "op_name": "fused_add_rmsnorm", "impl": "user", "spec": spec_to_json(SPEC),
            "device": "cpu", "candidate": ref})


HANGING = ["hangs", "setsid_then_hangs", "double_fork_then_hangs"]


# --------------------------------------------------------------------------------------------- the reaper alone


def test_a_token_finds_processes_that_left_the_session(tmp_path):
    """No worker: processes carrying a token, one setsid'd and one double-forked (an orphan), are all ended."""
    token = reaper.new_token()
    env = {**os.environ, reaper.TOKEN_ENV: token}
    direct = subprocess.Popen(SLEEPER, env=env, start_new_session=True)
    pid_file = tmp_path / "orphan"
    daemonize = ("import os, sys\n"
                 "if os.fork() == 0:\n    os.setsid()\n"
                 "    if os.fork() == 0:\n"
                 f"        open({str(pid_file)!r}, 'w').write(str(os.getpid()) + '\\n')\n"
                 f"        os.execv(sys.executable, {SLEEPER!r})\n"
                 "    os._exit(0)\n"
                 "os.wait()\n")
    subprocess.run([sys.executable, "-c", daemonize], env=env, check=True, timeout=60)
    pids = [direct.pid]
    try:
        end = time.monotonic() + GONE_DEADLINE_S
        while not (pid_file.exists() and pid_file.read_text().endswith("\n")):
            assert time.monotonic() < end, "the double-forked process did not start"
            time.sleep(0.02)
        orphan = int(pid_file.read_text())
        pids.append(orphan)
        assert _alive(direct.pid) and _alive(orphan)
        untouched = subprocess.Popen(SLEEPER, start_new_session=True)  # no token: must survive
        pids.append(untouched.pid)
        signalled = proc.end_processes(marker=reaper.marker(token))
        assert {direct.pid, orphan} <= signalled and untouched.pid not in signalled
        direct.wait(timeout=GONE_DEADLINE_S)
        _assert_gone([direct.pid, orphan])
        assert _alive(untouched.pid)
    finally:
        _kill_leftovers(pids)


def test_sigterm_raises_terminated_in_the_main_thread():
    # from the default disposition whatever an earlier test in this worker left installed, and back to it after
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with proc.sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
            with pytest.raises(proc.Terminated) as e:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(GONE_DEADLINE_S)
            assert isinstance(e.value, KeyboardInterrupt) and e.value.exit_code == 143
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_second_sigterm_during_cleanup_ends_the_process():
    script = ("import os, signal, time\n"
              "from infercrane.proc import Terminated, raise_on_sigterm\n"
              "raise_on_sigterm()\n"
              "try:\n    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(60)\n"
              "except Terminated:\n    print('cleanup', flush=True)\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(60)\n"
              "print('survived', flush=True)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["cleanup"] and r.returncode == -signal.SIGTERM, r.stderr


# --------------------------------------------------------------------------------------------- exit paths


@pytest.mark.parametrize("fn", ["setsid_then_returns", "double_fork_then_returns"])
def test_a_screen_that_ends_normally_ends_what_the_candidate_started(fn, tmp_path, monkeypatch):
    pid_file = tmp_path / "pids"
    monkeypatch.setenv(PID_FILE_ENV, str(pid_file))
    pids: list[int] = []
    try:
        res = screen(SPEC, [], candidate=f"{CANDIDATES}:{fn}", device="cpu", checks=1, timeout_s=START_DEADLINE_S)
        user = res.implementation("user")
        assert user.status == "ok", user.error
        pids = _wait_recorded(pid_file, _roles(fn))
        _assert_gone(pids)
    finally:
        _kill_leftovers(pids)


def test_close_asks_an_idle_worker_to_exit():
    w = SubprocessWorker("idle")
    try:
        assert w.request({"op": "ping"}, START_DEADLINE_S)["pid"] == w.proc.pid
        w.close()
        assert w.proc.returncode == 0  # asked to exit, it did (no kill needed)
    finally:
        w.close()
    _assert_gone([w.proc.pid])


@pytest.mark.parametrize("fn", HANGING)
def test_timeout_kills_the_worker_and_what_it_started(fn, tmp_path):
    pid_file = tmp_path / "pids"
    w = SubprocessWorker("lifecycle", env={**os.environ, PID_FILE_ENV: str(pid_file), ON_IMPORT_ENV: fn})
    pids: list[int] = [w.proc.pid]
    try:
        _load(w, fn)
        pids = _wait_recorded(pid_file, _roles(fn))  # the candidate is now hanging
        assert _recorded(pid_file)["worker"] == [w.proc.pid]
        with pytest.raises(WorkerFailure) as e:
            w.receive(1.0, "load")
        assert e.value.kind == "timeout" and w.dead
        _assert_gone(pids)
    finally:
        w.close()
        _kill_leftovers(pids)


SIGNALS = [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGKILL, -signal.SIGKILL)]


@pytest.mark.parametrize("fn,sig,exit_code", [
    *[pytest.param(fn, sig, code, id=f"{fn}-{sig.name}") for fn in HANGING for sig, code in SIGNALS],
    # the candidate's SIGTERM disposition matters only when the parent dies without cleaning up
    pytest.param("ignores_sigterm_setsid_then_hangs", signal.SIGKILL, -signal.SIGKILL,
                 id="ignores_sigterm_setsid_then_hangs-SIGKILL"),
])
def test_signal_to_the_screen_process_ends_its_workers(fn, sig, exit_code, tmp_path):
    """SIGTERM and SIGINT: the screen's ``finally`` closes the busy worker. SIGKILL: nothing runs in the parent; the
    worker's parent-death signal (or, when the candidate ignores SIGTERM, its watchdog thread) ends it."""
    pid_file = tmp_path / "pids"
    stderr = (tmp_path / "parent.stderr").open("w")
    root = str(Path(infercrane.__file__).resolve().parent.parent)  # the parent imports this checkout's package
    env = {**os.environ, PID_FILE_ENV: str(pid_file),
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    parent = subprocess.Popen([sys.executable, str(PARENT), f"{CANDIDATES}:{fn}"], stdout=subprocess.DEVNULL,
                              stderr=stderr, env=env)
    pids: list[int] = []
    try:
        try:
            pids = _wait_recorded(pid_file, _roles(fn), parent)
        except BaseException:
            stderr.flush()
            print((tmp_path / "parent.stderr").read_text()[-3000:], file=sys.stderr)
            raise
        parent.send_signal(sig)
        rc = parent.wait(timeout=60)
        assert rc == exit_code, (tmp_path / "parent.stderr").read_text()[-3000:]
        _assert_gone(pids)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        stderr.close()
        _kill_leftovers(pids)


def test_sigterm_to_the_cli_exits_143_and_leaves_nothing(tmp_path):
    """The same through `infercrane kernel screen` itself: SIGTERM unwinds like Ctrl-C (the CLI's handler), the screen's
    workers and what their candidate started are ended, and the exit code says it was a SIGTERM."""
    pid_file = tmp_path / "pids"
    stderr = (tmp_path / "cli.stderr").open("w")
    root = str(Path(infercrane.__file__).resolve().parent.parent)
    env = {**os.environ, PID_FILE_ENV: str(pid_file),
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    fn = "setsid_then_hangs"
    cli = subprocess.Popen([sys.executable, "-m", "infercrane", "kernel", "screen", "--device", "cpu", "--rows", "1",
                            "--impls", "eager", "--checks", "1", "--candidate", f"{CANDIDATES}:{fn}",
                            "--out", str(tmp_path / "k.json")], stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    pids: list[int] = []
    try:
        pids = _wait_recorded(pid_file, _roles(fn), cli)
        cli.send_signal(signal.SIGTERM)
        rc = cli.wait(timeout=60)
        assert rc == 143, (tmp_path / "cli.stderr").read_text()[-3000:]
        assert "SIGTERM" in (tmp_path / "cli.stderr").read_text()
        _assert_gone(pids)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        stderr.close()
        _kill_leftovers(pids)

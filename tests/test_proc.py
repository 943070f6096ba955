"""Starting a process that dies with its parent (``proc.popen_dying_with_parent``): it becomes the command, same pid;
it ends with the thread that started it; a missing program fails as ``subprocess.Popen`` fails; and no Python at-fork
hook runs in the parent, so a Ctrl-C cannot land in one and be lost."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from infercrane.proc import is_alive, popen_dying_with_parent

ROOT = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")


def test_the_command_runs_as_itself_with_the_launchers_pid() -> None:
    proc = popen_dying_with_parent([sys.executable, "-c", "import os, sys; print(os.getpid(), sys.argv)", "a b"],
                                   stdout=subprocess.PIPE, text=True, start_new_session=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.split(" ", 1) == [str(proc.pid), "['-c', 'a b']\n"]


@linux_only
def test_the_command_ends_with_the_thread_that_started_it() -> None:
    started: list[subprocess.Popen] = []
    t = threading.Thread(target=lambda: started.append(
        popen_dying_with_parent(["sleep", "300"], start_new_session=True)))
    t.start()
    t.join()
    proc = started[0]
    try:
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_missing_program_fails_as_popen_fails() -> None:
    with pytest.raises(FileNotFoundError) as got:
        popen_dying_with_parent(["infercrane-no-such-program"], env={"PATH": "/nonexistent"})
    assert got.value.filename == "infercrane-no-such-program"


@linux_only
def test_a_launcher_whose_parent_is_gone_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    launcher = [sys.executable, "-I", "-S", str(ROOT / "infercrane" / "proc.py")]
    # PARENT_PID 1: as if this process had died before the launcher armed its signal (the launcher was re-parented)
    assert subprocess.run([*launcher, "1", "1", "--", "touch", str(marker)], timeout=60).returncode == 128 + 15
    assert not marker.exists()
    assert subprocess.run([*launcher, "x", "1", "--", "true"], timeout=60, capture_output=True).returncode == 2


@linux_only
def test_starting_runs_no_at_fork_hook_in_the_parent() -> None:
    # A preexec_fn makes subprocess run Python's at-fork hooks in the parent (logging registers some); a SIGINT that
    # lands in one is printed as "Exception ignored" and the interrupt is lost.
    script = ("import os, subprocess, sys\n"
              "from infercrane.proc import popen_dying_with_parent\n"
              "calls = []\n"
              "os.register_at_fork(before=lambda: calls.append('before'),\n"
              "                    after_in_parent=lambda: calls.append('after'))\n"
              "popen_dying_with_parent(['true'], start_new_session=True).wait()\n"
              "subprocess.Popen(['true'], preexec_fn=lambda: None).wait()\n"
              "print(calls)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['before', 'after']"  # the second Popen's, with a preexec_fn; none for the first


def test_no_process_infercrane_starts_takes_a_preexec_fn() -> None:
    # the drivers' guard is exempt: it ignores SIGINT (its command gets it from the group) and runs no logging
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "infercrane").rglob("*.py"))
             if p.name != "guard.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bpreexec_fn\s*=", line)]
    assert not found, found


@linux_only
def test_its_command_line_is_the_commands_once_started() -> None:
    proc = popen_dying_with_parent(["sleep", "300"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep":
                break
            time.sleep(0.02)
        assert is_alive(proc.pid)
        assert Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"300"]
    finally:
        proc.kill()
        proc.wait(timeout=30)

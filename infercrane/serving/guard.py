"""The drivers' process guard: run a command so that it, and every process it starts, ends with InferCrane.

    python infercrane/serving/guard.py PARENT_PID -- CMD [ARG...]

A load driver is a tree of processes (AIPerf starts a dozen services), and InferCrane may be SIGKILLed mid-run. The
parent-death signal (``PR_SET_PDEATHSIG``) reaches only the process it was armed in, not that process's children, so
``drivers.run_logged`` does not start the driver directly: it starts this guard, in a session of its own (the guard's
pid is the process group of everything below it), with the parent-death signal armed. The guard

  * checks that its parent is still ``PARENT_PID`` (InferCrane may have died before the signal was armed);
  * starts CMD in its own process group, itself with the parent-death signal armed, and waits for it, exiting with
    CMD's status (128 + N when CMD was killed by signal N);
  * on SIGTERM or SIGHUP (the parent-death signal among them), or when a watchdog (every ``WATCH_S``) sees its parent
    change, sends SIGTERM to its whole group, gives it ``GRACE_S`` to end, then SIGKILLs the group, itself included;
  * leaves SIGINT to CMD: InferCrane's own stop (``proc.stop_process_group``) sends it to the whole group, so CMD has
    it already; the guard waits on and exits with CMD's status.

Run as a script by path, not ``-m``: it imports only the standard library, whatever the driver's environment.
Linux only for the parent-death signal; elsewhere the watchdog alone notices a dead parent.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

GRACE_S = 10.0
WATCH_S = 0.5
_PR_SET_PDEATHSIG = 1


def arm_parent_death_signal() -> None:
    """SIGTERM to this process when its parent (thread) dies; runs between fork and exec too."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _end_group() -> None:
    """SIGTERM to the guard's group, a grace period for the command to end, then SIGKILL to the group (the guard too)."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    try:
        os.killpg(0, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.05)
        except ChildProcessError:  # the command (the guard's only child) is gone
            break
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: guard.py PARENT_PID -- CMD [ARG...]", file=sys.stderr)
        return 2
    parent, cmd = int(argv[0]), argv[2:]
    if os.getppid() != parent:  # the parent died before the parent-death signal was armed
        return 128 + signal.SIGTERM

    def on_signal(signum, frame) -> None:
        _end_group()

    def on_sigint(signum, frame) -> None:
        pass  # CMD got it too (sent to the group); wait for it to end

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGINT, on_sigint)
    try:
        child = subprocess.Popen(cmd, preexec_fn=arm_parent_death_signal)
    except OSError as exc:
        print(f"guard: cannot start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
        return 127
    while True:
        try:
            rc = child.wait(timeout=WATCH_S)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                _end_group()
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The kernel workers' protocol: ending a worker process and everything it started, on every exit path.

A kernel worker runs untrusted code (a user's candidate file). That code may hang, and it may start processes of its
own, including ones that leave the worker's process group and session (``setsid``, ``start_new_session=True``, the
classic fork / setsid / fork). These are the mechanisms that find and end them (the worker's token and side here,
the scans and signals in ``infercrane/proc.py``; Linux: elsewhere each
mechanism that is not available is skipped and the worker's own process group is all that is killed):

* **A token in the environment.** The parent gives every worker a unique random value in ``INFERCRANE_WORKER_TOKEN``;
  every process the worker starts inherits it unless that process is given another environment. ``end_processes``
  finds token holders by reading ``/proc/<pid>/environ`` (the environment a process was started with), wherever they
  live now: in another session, or re-parented to init after the worker died.
* **The process tree and the process group.** The worker is started in a new session (its pid is its process group),
  and it makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so an orphaned descendant (a double fork)
  re-parents to the worker rather than to init and stays in the worker's tree. ``end_processes`` walks the tree of a
  root pid via ``/proc/<pid>/stat`` and takes every member of a process group.
* **Freeze, then kill.** The processes found are stopped (SIGSTOP) and the scan repeated until it finds no new one, so
  a process that forks while being collected cannot outrun the scan; then all are killed (SIGKILL), and the scan is
  repeated until it finds none alive (a zombie counts as dead: it runs nothing and holds no memory).
* **The parent-death signal.** The worker's first act (``arm_worker``) is ``prctl(PR_SET_PDEATHSIG, SIGTERM)``, then
  a check that its parent is still the InferCrane process that started it (``os.getppid()`` against the pid in
  ``INFERCRANE_WORKER_PARENT_PID``: closes the race where InferCrane died before the signal was armed). Its SIGTERM
  handler ends the worker's descendants and exits 143. A watchdog thread in the worker checks ``os.getppid()`` every
  ``WATCHDOG_INTERVAL_S`` and does the same, for when the main thread is stuck in C code that released the GIL (a
  hung device synchronization) and so cannot run a Python signal handler.

The parent (``isolation.SubprocessWorker``) calls ``end_processes`` with the worker's pid, group and token whenever
it closes, kills or loses a worker; the worker calls it on its own tree when it exits for any reason.

**What remains possible** (all of it needs code written to evade this, since the candidate runs with InferCrane's
user id and can do anything that user can):

* a descendant that was started with a scrubbed environment (``env={}``, or ``exec`` with another environment) *and*
  left the worker's process group is found only through the worker's tree. That tree is lost when the worker dies
  before it is swept (a crash, ``os._exit``: the orphans re-parent to init), so such a process survives then;
  likewise one whose ``/proc/<pid>/environ`` cannot be read (another user id, after ``setuid``);
* candidate code runs inside the worker and can disarm it: clear the parent-death signal or ignore SIGTERM *and*
  defeat the watchdog (patch ``os.getppid`` or this module), or hold the GIL in a C loop that never returns (then
  neither the handler nor the watchdog thread runs). Then a SIGKILL of InferCrane leaves that worker and what it
  started running. The parent's sweep, which runs on every other exit path, needs no cooperation from the worker;
* a killed process whose parent is gone is re-parented to PID 1 and stays a zombie until PID 1 reaps it (some
  container init processes never do). A zombie runs nothing and holds no memory; only its pid stays taken;
* ``InProcessWorker`` (``isolate=False``) runs candidates in InferCrane's own process: none of this applies there;
* the parent-death signal follows the *thread* that started the worker: create workers from a thread that outlives
  them (``screen`` creates them in the calling thread);
* pids are matched by scanning ``/proc``: a process that exits and whose pid is reused between the scan and the kill
  (microseconds) would be hit instead; the group of a worker is only killed while the worker is unreaped, so its pid
  cannot have been reused then;
* other platforms (macOS) have no parent-death signal, no subreaper and no ``/proc``: only the process group is killed.
"""
from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from typing import Any

from ...proc import end_processes, reap_children, set_child_subreaper, set_parent_death_signal

TOKEN_ENV = "INFERCRANE_WORKER_TOKEN"
PARENT_ENV = "INFERCRANE_WORKER_PARENT_PID"
PDEATHSIG = signal.SIGTERM
WATCHDOG_INTERVAL_S = 0.5


def new_token() -> str:
    return secrets.token_hex(16)


def marker(token: str | None) -> str | None:
    """The environment entry that marks a worker's processes (``proc.end_processes``'s ``marker``)."""
    return f"{TOKEN_ENV}={token}" if token else None


# --------------------------------------------------------------------------------------------- worker side

_end_lock = threading.RLock()


def end_own_descendants() -> None:
    """In a worker: end everything this worker started (its tree, its group, its token), then reap them."""
    with _end_lock:
        end_processes(marker=marker(os.environ.get(TOKEN_ENV)), root=os.getpid(), group=os.getpgrp())
        reap_children()


def _end_worker(signum: int) -> None:
    with _end_lock:
        try:
            end_own_descendants()
        finally:
            os._exit(128 + signum)


def _on_signal(signum: int, frame: Any) -> None:
    _end_worker(signum)


def _parent_gone(expected: int | None) -> bool:
    ppid = os.getppid()
    return ppid != expected if expected else ppid == 1


def _watch_parent(expected: int | None) -> None:
    while True:
        time.sleep(WATCHDOG_INTERVAL_S)
        if _parent_gone(expected):
            _end_worker(PDEATHSIG)


def arm_worker() -> None:
    """First thing in a worker process (main thread): subreaper, SIGTERM handler, parent-death signal, the check
    that the parent is still alive, and the watchdog thread. See the module docstring."""
    expected = int(os.environ.get(PARENT_ENV, "0") or 0) or None
    set_child_subreaper()
    signal.signal(PDEATHSIG, _on_signal)  # before arming, so the signal never finds the default action
    set_parent_death_signal(PDEATHSIG)
    if _parent_gone(expected):  # InferCrane died before the signal was armed
        _end_worker(PDEATHSIG)
    threading.Thread(target=_watch_parent, args=(expected,), name="infercrane-parent-watchdog", daemon=True).start()


def worker_env(base: dict[str, str], token: str) -> dict[str, str]:
    """The environment of a new worker: ``base`` plus its token and this process's pid as its expected parent."""
    return {**base, TOKEN_ENV: token, PARENT_ENV: str(os.getpid())}

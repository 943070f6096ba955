"""Ending a worker process and everything it started, on every exit path; SIGTERM in InferCrane as an interrupt.

A kernel worker runs untrusted code (a user's candidate file). That code may hang, and it may start processes of its
own, including ones that leave the worker's process group and session (``setsid``, ``start_new_session=True``, the
classic fork / setsid / fork). This module holds the mechanisms that find and end them (Linux; elsewhere each
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

SIGTERM in InferCrane (``raise_on_sigterm`` / ``sigterm_as_interrupt``): ``timeout``, systemd and Slurm stop a job
with SIGTERM, whose default action ends the process without running ``finally`` blocks. With the handler installed,
the first SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) in the main thread, so every ``finally`` that closes
workers and engines runs as for Ctrl-C; a second SIGTERM during that cleanup ends the process at once (workers then
die through their parent-death signal).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator

TOKEN_ENV = "INFERCRANE_WORKER_TOKEN"
PARENT_ENV = "INFERCRANE_WORKER_PARENT_PID"
PDEATHSIG = signal.SIGTERM
WATCHDOG_INTERVAL_S = 0.5
END_DEADLINE_S = 10.0

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_LINUX = sys.platform.startswith("linux")


# --------------------------------------------------------------------------------------------- Linux primitives


def _prctl(option: int, arg: int) -> bool:
    if not _LINUX:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                          ctypes.c_ulong(0)) == 0
    except (OSError, AttributeError):
        return False


def set_parent_death_signal(sig: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)``: this process gets ``sig`` when the thread that started it ends."""
    return _prctl(_PR_SET_PDEATHSIG, int(sig))


def set_child_subreaper() -> bool:
    """``prctl(PR_SET_CHILD_SUBREAPER, 1)``: orphaned descendants re-parent to this process instead of init."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def new_token() -> str:
    return secrets.token_hex(16)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, process group) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # the command name may hold spaces and parentheses
    return fields[0].decode(), int(fields[1]), int(fields[2])


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    if _LINUX:
        st = _stat(pid)
        return st is not None and st[0] not in ("Z", "X", "x")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _carries(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:  # gone, or another user's process
        return False


def _find(token: str | None, root: int | None, group: int | None, skip: set[int]) -> set[int]:
    """Live pids that are ``root`` or descend from it, are in process group ``group``, or carry ``token``."""
    if not _LINUX or not os.path.isdir("/proc"):
        return set()
    table: dict[int, tuple[str, int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[0] not in ("Z", "X", "x"):
                table[int(name)] = st
    found: set[int] = set()
    if root is not None:
        children: dict[int, list[int]] = {}
        for pid, (_, ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        todo = [root]
        while todo:
            pid = todo.pop()
            if pid in table:
                found.add(pid)
            todo.extend(c for c in children.get(pid, ()) if c not in found)
    if group is not None:
        found.update(pid for pid, (_, _, pgrp) in table.items() if pgrp == group)
    if token:
        marker = f"{TOKEN_ENV}={token}".encode()
        found.update(pid for pid in table if pid not in found and pid not in skip and _carries(pid, marker))
    return found - skip


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_processes(*, token: str | None = None, root: int | None = None, group: int | None = None,
                  exclude: Iterable[int] = (), deadline_s: float = END_DEADLINE_S) -> set[int]:
    """SIGKILL ``root`` and its descendants, the members of process group ``group`` and every process whose
    environment carries ``token`` (never this process, never ``exclude``); return the pids signalled.

    Freeze first (SIGSTOP, rescanning until no new process appears), then kill, then rescan until none is alive or
    ``deadline_s`` has passed. Without ``/proc`` only ``killpg(group)`` is done.
    """
    skip = {os.getpid(), *exclude}
    if not _LINUX or not os.path.isdir("/proc"):
        if group is not None and group not in skip:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        return set()
    end = time.monotonic() + deadline_s
    frozen: set[int] = set()
    while time.monotonic() < end:
        new = _find(token, root, group, skip) - frozen
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        frozen |= new
    _signal(frozen, signal.SIGKILL)
    signalled = set(frozen)
    while time.monotonic() < end:
        alive = {p for p in signalled if is_alive(p)} | _find(token, root, group, skip)
        if not alive:
            break
        _signal(alive, signal.SIGKILL)
        signalled |= alive
        time.sleep(0.02)
    return signalled


def reap_children(deadline_s: float = 2.0) -> None:
    """Collect exited children (a subreaper inherits orphans; leave no zombies behind)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= end:
                return
            time.sleep(0.01)


# --------------------------------------------------------------------------------------------- worker side

_end_lock = threading.RLock()


def end_own_descendants() -> None:
    """In a worker: end everything this worker started (its tree, its group, its token), then reap them."""
    with _end_lock:
        end_processes(token=os.environ.get(TOKEN_ENV), root=os.getpid(), group=os.getpgrp())
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


# --------------------------------------------------------------------------------------------- parent side: SIGTERM


class Terminated(KeyboardInterrupt):
    """InferCrane got SIGTERM. A ``KeyboardInterrupt``, so that it unwinds like Ctrl-C: ``except Exception`` does not
    swallow it and every ``finally`` runs. The CLI exits with ``exit_code`` (128 + SIGTERM = 143)."""

    exit_code = 128 + int(signal.SIGTERM)

    def __init__(self, message: str = "terminated by SIGTERM") -> None:
        super().__init__(message)
        self.message = message


def _make_handler() -> Callable[[int, Any], None]:
    state = {"raised": False}

    def handler(signum: int, frame: Any) -> None:
        if state["raised"]:  # a second SIGTERM during cleanup: end now, as the default action would
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        state["raised"] = True
        raise Terminated(f"terminated by {signal.Signals(signum).name}")

    return handler


def raise_on_sigterm() -> Callable[[], None]:
    """Make SIGTERM raise ``Terminated`` in the main thread; return a function that puts the old handler back.

    Does nothing (and returns a no-op) outside the main thread, or when SIGTERM is already ignored or handled by
    someone else: only the default action, which skips all cleanup, is replaced.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        return lambda: None
    signal.signal(signal.SIGTERM, _make_handler())

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """``with sigterm_as_interrupt(): ...``: SIGTERM raises ``Terminated`` inside the block (see ``raise_on_sigterm``)."""
    restore = raise_on_sigterm()
    try:
        yield
    finally:
        restore()

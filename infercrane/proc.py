"""Process supervision, in one place (a leaf: standard library only, anything may import it): starting a process in
a session of its own that dies with its parent, telling whether a pid still runs (and since when), stopping a process
group in steps, ending a tree of processes that tries to escape (freeze, then kill), and SIGTERM as an interrupt.

Who uses it: the kernel lab's workers (``kernels/harness/isolation.py``, with the worker protocol in
``kernels/harness/reaper.py``), the serving engines (``serving/engine.py``), the load drivers
(``serving/drivers``), the executors' jobs (``executors/jobs.py``) and the receipts' progress (``serving/progress.py``).
The drivers' guard (``serving/guard.py``) arms the parent-death signal itself: it runs as a script by path in the
driver's environment, where InferCrane may not be importable.

Linux has the parent-death signal, the child subreaper and ``/proc``; elsewhere each is skipped, and only process
groups are signalled.

SIGTERM in InferCrane (``raise_on_sigterm`` / ``sigterm_as_interrupt``): ``timeout``, systemd and Slurm stop a job
with SIGTERM, whose default action ends the process without running ``finally`` blocks. With the handler installed,
the first SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) in the main thread, so every ``finally`` that closes
workers and engines runs as for Ctrl-C; a second SIGTERM during that cleanup ends the process at once (workers then
die through their parent-death signal).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

ARMING_TIMEOUT_S = 60.0  # how long popen_dying_with_parent waits for its process to arm the parent-death signal
END_DEADLINE_S = 10.0  # how long end_processes keeps rescanning for processes to kill

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")


# ------------------------------------------------------------------------------------------ starting: Linux prctl

def _prctl(option: int, arg: int) -> bool:
    if not LINUX:
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


def popen_dying_with_parent(cmd: list[str], *, env: Mapping[str, str] | None = None,
                            **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd, env=env, **popen)`` for a process that gets SIGTERM when the thread that starts it
    ends; pass ``start_new_session=True``, so that it leads a group that can be stopped as one. The process is this
    file run as a script (``exec_dying_with_parent``), which arms the parent-death signal, says so through a pipe, and
    becomes CMD (same pid); this returns once the signal is armed, as a ``preexec_fn`` would have it. Not a
    ``preexec_fn``: with one, ``subprocess`` runs Python's at-fork hooks (logging's among them) in the parent, and a
    Ctrl-C that lands in one is printed as "Exception ignored" and lost. FileNotFoundError, as ``Popen`` raises it,
    when CMD's program is not on ``env``'s PATH. Outside Linux: a plain ``Popen``."""
    if not LINUX:
        return subprocess.Popen(cmd, env=env, **popen)
    program = cmd[0]
    if shutil.which(program, path=os.pathsep.join(os.get_exec_path(env))) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    armed, arming = os.pipe()
    try:
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(os.getpid()),
                                     str(arming), "--", *cmd], env=env, pass_fds=(arming,), **popen)
        finally:
            os.close(arming)
        select.select([armed], [], [], ARMING_TIMEOUT_S)  # a byte once armed, or end of file if it failed first
    finally:
        os.close(armed)
    return proc


def exec_dying_with_parent(argv: list[str]) -> int:
    """``proc.py PARENT_PID FD -- CMD [ARG...]``: arm the parent-death signal, check that the parent is still
    PARENT_PID (it may have died before the signal was armed), write a byte to FD and close it, then become CMD.
    Returns only on failure: 2 (usage), 143 (the parent is gone), 127 (CMD cannot be run)."""
    if len(argv) < 4 or argv[2] != "--" or not (argv[0].isdigit() and argv[1].isdigit()):
        print("usage: proc.py PARENT_PID FD -- CMD [ARG...]", file=sys.stderr)
        return 2
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != int(argv[0]):
        return 128 + signal.SIGTERM
    with contextlib.suppress(OSError):
        os.write(int(argv[1]), b"1")
        os.close(int(argv[1]))
    try:
        os.execvp(argv[3], argv[3:])
    except OSError as exc:
        print(f"infercrane: cannot start {argv[3]}: {exc}", file=sys.stderr, flush=True)
    return 127


# ------------------------------------------------------------------------------------------ liveness

def stat(pid: int) -> tuple[str, int, int] | None:
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
    if LINUX:
        st = stat(pid)
        return st is not None and st[0] not in ("Z", "X", "x")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started_at(pid: int) -> datetime | None:
    """When process ``pid`` started (Linux ``/proc``: its start time in clock ticks after boot), or None when it does
    not run (a zombie does not count) or this cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            return None
        ticks = int(fields[19])  # field 22 of stat, counting pid and comm
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return datetime.fromtimestamp(btime + ticks / os.sysconf("SC_CLK_TCK"), UTC)


def group_alive(pgid: int) -> bool:
    """True while any process (zombies included) is in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_group(proc: subprocess.Popen, waits: tuple[float, ...] = (20.0, 10.0, 5.0)) -> list[str]:
    """SIGINT, SIGTERM, SIGKILL to the group led by ``proc`` (started with ``start_new_session``).

    After each signal, waits up to the matching entry of ``waits`` for the whole group to be gone
    (the leader is reaped on the way, so a zombie leader does not count). Returns the signals sent.
    """
    sent: list[str] = []
    for sig, wait_s in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), waits, strict=True):
        proc.poll()
        if not group_alive(proc.pid):
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        sent.append(signal.Signals(sig).name)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()
            if not group_alive(proc.pid):
                break
            time.sleep(0.05)
    proc.poll()
    return sent


def group_pids(pgid: int) -> list[int]:
    """Every live process whose process group is ``pgid`` (``stat``: zombies left out)."""
    found = ((int(e), stat(int(e))) for e in os.listdir("/proc") if e.isdigit())
    return [pid for pid, st in found if st is not None and st[2] == pgid and st[0] != "Z"]


def describe_pid(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return f"pid {pid}: {shlex.join(c.decode(errors='replace') for c in cmd if c)[:200]}"
    except OSError:
        return f"pid {pid}"



# ------------------------------------------------------------------------------------------ ending a tree: freeze, then kill

def _carries(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:  # gone, or another user's process
        return False


def _find(marker: str | None, root: int | None, group: int | None, skip: set[int]) -> set[int]:
    """Live pids that are ``root`` or descend from it, are in process group ``group``, or whose environment holds
    the entry ``marker`` (``NAME=value``)."""
    if not LINUX or not os.path.isdir("/proc"):
        return set()
    table: dict[int, tuple[str, int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat(int(name))
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
    if marker:
        entry = marker.encode()
        found.update(pid for pid in table if pid not in found and pid not in skip and _carries(pid, entry))
    return found - skip


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_processes(*, marker: str | None = None, root: int | None = None, group: int | None = None,
                  exclude: Iterable[int] = (), deadline_s: float = END_DEADLINE_S) -> set[int]:
    """SIGKILL ``root`` and its descendants, the members of process group ``group`` and every process whose
    environment holds the entry ``marker`` (``NAME=value``; never this process, never ``exclude``); return the pids
    signalled.

    Freeze first (SIGSTOP, rescanning until no new process appears), then kill, then rescan until none is alive or
    ``deadline_s`` has passed. Without ``/proc`` only ``killpg(group)`` is done.
    """
    skip = {os.getpid(), *exclude}
    if not LINUX or not os.path.isdir("/proc"):
        if group is not None and group not in skip:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        return set()
    end = time.monotonic() + deadline_s
    frozen: set[int] = set()
    while time.monotonic() < end:
        new = _find(marker, root, group, skip) - frozen
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        frozen |= new
    _signal(frozen, signal.SIGKILL)
    signalled = set(frozen)
    while time.monotonic() < end:
        alive = {p for p in signalled if is_alive(p)} | _find(marker, root, group, skip)
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



# ------------------------------------------------------------------------------------------ SIGTERM as an interrupt

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


if __name__ == "__main__":  # the launcher of ``popen_dying_with_parent``
    sys.exit(exec_dying_with_parent(sys.argv[1:]))

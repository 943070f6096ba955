"""Whether a partial serving receipt is still being written, or its writer is gone.

``serve ab`` / ``serve bench`` rewrite their receipt after every driver run, marked incomplete with
``progress_reason``: ``in progress: 3 of 12 driver runs done (pid 1234 on host gpu-7, last update 2026-12-01T10:00:00Z)``.
A writer that is SIGKILLed (or whose machine goes down) never rewrites it, so the reason alone would say "in progress"
forever. ``serving_progress_state`` reads the writer back out of the reason and says what is true now:

  * the writer's host is this host and no process with that pid runs, or the process with that pid started after
    the last update (the pid was reused): ``interrupted (the writer, pid N on this host, is gone; ...)``;
  * the writer runs: ``in progress (pid N on this host, last update ...)``;
  * another host: ``in progress or interrupted: written by pid N on host H, ...`` (this host cannot tell);
  * a reason of a receipt written before the writer was recorded: ``in progress or interrupted (its writer was not
    recorded; ...)``.

A receipt stopped on purpose (``stopped part-way: ...``) or complete is returned as such.
"""
from __future__ import annotations

import os
import re
import socket
from datetime import UTC, datetime
from typing import Any

from infercrane.proc import is_alive, started_at

_PROGRESS_RE = re.compile(r"^in progress: (?P<what>.+?)"
                          r"(?: \(pid (?P<pid>\d+) on host (?P<host>\S+), last update (?P<at>[^)]+)\))?$")


def this_host() -> str:
    return socket.gethostname()


def progress_reason(done: int, total: int, *, pid: int | None = None, host: str | None = None,
                    at: datetime | None = None) -> str:
    """The incomplete_reason of a receipt being written: runs done, the writer (pid, host) and the time of this
    update (UTC, seconds)."""
    return progress_of(f"{done} of {total} driver runs done", pid=pid, host=host, at=at)


def progress_of(what: str, *, pid: int | None = None, host: str | None = None, at: datetime | None = None) -> str:
    """``in progress: WHAT (pid P on host H, last update T)``: any receipt rewritten as its run goes (a serving plan,
    a PoC between sections) says what is done and who writes it."""
    stamp = (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"in progress: {what} (pid {os.getpid() if pid is None else pid} on host {host or this_host()}, last update {stamp})"


def parse_progress(reason: str | None) -> dict[str, Any] | None:
    """``{"what", "pid", "host", "at"}`` from a ``progress_of`` reason (pid/host/at None in the old form), or None when
    the reason is not one."""
    m = _PROGRESS_RE.match(reason or "")
    if m is None:
        return None
    at = None
    if m["at"]:
        try:
            at = datetime.strptime(m["at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            at = None
    return {"what": m["what"], "pid": int(m["pid"]) if m["pid"] else None, "host": m["host"], "at": at}


def serving_progress_state(doc: dict[str, Any], *, now: datetime | None = None) -> str:
    """What a serving receipt's completeness means now: ``complete``, the reason it stopped, ``in progress (...)``,
    or ``interrupted (the writer, pid N on this host, is gone; ...)`` (see the module docstring)."""
    if doc.get("complete"):
        return "complete"
    reason = doc.get("incomplete_reason") or "incomplete (no reason recorded)"
    p = parse_progress(reason)
    if p is None:
        return reason
    now = now or datetime.now(UTC)
    runs = p["what"]
    if p["pid"] is None:
        return f"in progress or interrupted (its writer was not recorded; {runs})"
    at = p["at"]
    ago = f", {_ago(now - at)} ago" if at is not None else ""
    last = f"last update {at.strftime('%Y-%m-%dT%H:%M:%SZ')}{ago}" if at is not None else "last update unknown"
    pid, host = p["pid"], p["host"]
    if host != this_host():
        return f"in progress or interrupted: written by pid {pid} on host {host}, not this host ({runs}; {last})"
    started = started_at(pid)
    # a process that started after the last update is another one under a reused pid (2 s: the stamp's whole
    # seconds and boot time's)
    if not is_alive(pid) or (started is not None and at is not None and (started - at).total_seconds() > 2):
        return f"interrupted (the writer, pid {pid} on this host, is gone; {runs}; {last})"
    return f"in progress (pid {pid} on this host; {runs}; {last})"


def _ago(delta) -> str:
    s = max(0, int(delta.total_seconds()))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h"

"""Compiles an engine logged while serving, and the measured runs whose windows they fall in.

vLLM 0.22.1 activates a JIT monitor once its start-up warm-up is over (``vllm/triton_utils/jit_monitor.py``): from
then on Triton's ``jit_post_compile_hook`` logs ``Triton kernel JIT compilation during inference: <kernel>`` when a
kernel has been compiled, once per kernel name (``warning_once``: a second configuration of the same kernel compiled
later is not logged). A compile stalls the engine for seconds; a run whose window holds one measured the compile.

``jit_events`` reads those lines from an engine log; ``attribute`` names, for each, the runs of that engine whose
measured window holds the logged moment. The line is written when the compile has finished, so a compile logged
inside a window stalled that window; one logged during a point's warm-up ended before its window, and one logged
in the seconds after a window may have begun inside it (not attributed: the moment it began is not logged). vLLM's
log stamps carry no year and no zone: they are read in this machine's local time (the engine runs here) and the year
of the run they are set against.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable

JIT_LINE = re.compile(r"(?P<month>\d\d)-(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)?\s.*?"
                      r"Triton kernel JIT compilation during inference: (?P<kernel>[^\s.]+)")
SLACK_S = 1.0  # the log's stamps are whole seconds
_log = logging.getLogger("infercrane.serving.engine")  # the engine lines the serve commands print as they come


@dataclass(frozen=True)
class JitEvent:
    stamp: str  # as logged: "MM-DD HH:MM:SS"
    kernel: str

    def moment(self, year: int) -> datetime:
        return datetime.strptime(f"{year}-{self.stamp}", "%Y-%m-%d %H:%M:%S").astimezone()


def jit_events(log_path: str | Path) -> list[JitEvent]:
    """Every JIT-during-inference line of the log, in order; none when it cannot be read."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return []
    return [JitEvent(f"{m['month']}-{m['day']} {m['time']}", m["kernel"]) for m in JIT_LINE.finditer(text)]


def _window(run: Any) -> tuple[datetime, datetime] | None:
    if not getattr(run, "started_at", None):
        return None
    start = datetime.fromisoformat(run.started_at)
    if start.tzinfo is None:
        start = start.astimezone()
    return (start - timedelta(seconds=SLACK_S), start + timedelta(seconds=(run.duration_s or 0.0) + SLACK_S))


def label(run: Any) -> str:
    return f"{run.arm} run {run.run_index} at c={run.concurrency} ({run.driver})"


def attribute(events: Iterable[JitEvent], runs: list[Any]) -> list[dict[str, Any]]:
    """One record per event: ``{"logged_at", "kernel", "runs"}``, ``runs`` naming those whose window holds it
    (empty: it was logged between measured windows: in a warm-up, a gate, or after a window)."""
    windows = [(r, _window(r)) for r in runs]
    out = []
    for ev in events:
        held = []
        for run, win in windows:
            if win is None:
                continue
            at = ev.moment(win[0].year)
            if win[0] <= at <= win[1]:
                held.append(label(run))
        out.append({"logged_at": ev.stamp, "kernel": ev.kernel, "runs": held})
    return out


def notes(engine_label: str, records: list[dict[str, Any]]) -> list[str]:
    """The plan notes for the records that fall in measured windows, each also logged as a warning."""
    out = [f"{engine_label}: vLLM logged a Triton JIT compile of {r['kernel']} at {r['logged_at']} inside the window "
           f"of {', '.join(r['runs'])}: the compile's stall is in those numbers" for r in records if r["runs"]]
    for line in out:
        _log.warning(line)
    return out

"""AIPerf held at a gate: start it now, let it send its first request later.

    python -m infercrane.serving.drivers.aiperf_gate GATE_FILE [--max-wait-s S] -- profile --config FILE

AIPerf spends seconds (14-22 s on an H200 host) starting up before its first request: its services, the tokenizer,
the dataset. InferCrane's blocks run one after another on the same engine(s), so that start-up is engine time nobody
measures. ``drivers.aiperf.AiperfDriver.prestart`` starts the next block's AIPerf through this module while the
current block is still measuring; AIPerf starts up and then waits here until ``GATE_FILE`` exists, which InferCrane
creates once the current block's process has ended (``AiperfDriver.run_grid`` with the pre-started handle).

How: AIPerf's SystemController runs in the main process. Its start-up (``_start_services``) logs "AIPerf System is
CONFIGURED" once every service has been configured (dataset made, workers up) and then awaits
``_start_profiling_all_services``, which sends PROFILE_START to the services; no request is sent before that. This
module replaces that coroutine with one that prints ``infercrane gate: AIPerf configured; waiting for GATE_FILE``,
polls for the file every ``POLL_S``, prints ``infercrane gate: open after S s`` and then runs the original. Then it
runs AIPerf's own CLI in this process (as ``python -m aiperf`` does: ``aiperf.cli.app``).

An AIPerf without that method (another version) is run ungated, after the line ``infercrane gate: not available in
this AIPerf; running ungated``; ``gate_available`` says so beforehand, and InferCrane pre-starts nothing then. A gate
that stays closed for ``--max-wait-s`` (default ``MAX_WAIT_S``) ends AIPerf and its services and exits with
``TIMEOUT_EXIT``: a forgotten gate never leaves a process waiting for ever.

Imports only the standard library at module level (AIPerf's spawned services import this module again as their
``__main__``).
"""
from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
from pathlib import Path

POLL_S = 0.05
MAX_WAIT_S = 1800.0
TIMEOUT_EXIT = 75  # EX_TEMPFAIL: the gate was never opened
TARGET_MODULE = "aiperf.controller.system_controller"
TARGET_CLASS = "SystemController"
TARGET_METHOD = "_start_profiling_all_services"
WAITING = "infercrane gate: AIPerf configured; waiting for"
OPENED = "infercrane gate: open after"
UNGATED = "infercrane gate: not available in this AIPerf; running ungated"


def _say(line: str) -> None:
    print(line, flush=True)


def gate_available() -> bool:
    """Whether the installed AIPerf has the coroutine the gate wraps, without importing AIPerf (seconds of imports):
    its controller's source defines ``TARGET_METHOD``."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(TARGET_MODULE)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    try:
        return f"async def {TARGET_METHOD}(" in Path(spec.origin).read_text(errors="replace")
    except OSError:
        return False


def _end_services() -> None:
    """Kill AIPerf's service processes (this process's multiprocessing children) before giving up."""
    import multiprocessing

    for child in multiprocessing.active_children():
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass


def install(gate: Path, *, max_wait_s: float = MAX_WAIT_S, controller: type | None = None) -> bool:
    """Wrap the controller's ``TARGET_METHOD`` with the gate; False (and the UNGATED line) when it has none.
    ``controller``: the class to patch (AIPerf's SystemController by default)."""
    if controller is None:
        try:
            import importlib

            controller = getattr(importlib.import_module(TARGET_MODULE), TARGET_CLASS)
        except (ImportError, AttributeError):
            controller = None
    original = getattr(controller, TARGET_METHOD, None) if controller is not None else None
    if original is None or not asyncio.iscoroutinefunction(original):
        _say(UNGATED)
        return False

    @functools.wraps(original)
    async def gated(self, *args, **kwargs):
        _say(f"{WAITING} {gate}")
        t0 = time.monotonic()
        while not gate.exists():
            if time.monotonic() - t0 > max_wait_s:
                _say(f"infercrane gate: {gate} did not appear within {max_wait_s:g} s (--max-wait-s); ending AIPerf "
                     "without sending a request")
                _end_services()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(TIMEOUT_EXIT)
            await asyncio.sleep(POLL_S)
        _say(f"{OPENED} {time.monotonic() - t0:.3f} s")
        return await original(self, *args, **kwargs)

    setattr(controller, TARGET_METHOD, gated)
    return True


def parse_args(argv: list[str]) -> tuple[Path, float, list[str]]:
    """(gate file, max wait, AIPerf's arguments) from ``GATE_FILE [--max-wait-s S] -- ARGS``."""
    import argparse

    if "--" not in argv:
        raise SystemExit("usage: python -m infercrane.serving.drivers.aiperf_gate GATE_FILE [--max-wait-s S] -- "
                         "AIPERF_ARGS...")
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m infercrane.serving.drivers.aiperf_gate")
    p.add_argument("gate", type=Path, help="AIPerf sends nothing until this file exists")
    p.add_argument("--max-wait-s", type=float, default=MAX_WAIT_S,
                   help="give up (exit %d) when the gate is still closed after this long" % TIMEOUT_EXIT)
    ns = p.parse_args(argv[:cut])
    if ns.max_wait_s <= 0:
        p.error("--max-wait-s must be positive")
    return ns.gate, ns.max_wait_s, argv[cut + 1:]


def main(argv: list[str] | None = None) -> None:
    gate, max_wait_s, args = parse_args(list(sys.argv[1:] if argv is None else argv))
    install(gate, max_wait_s=max_wait_s)
    sys.argv = ["aiperf", *args]
    from aiperf.cli import app  # what `python -m aiperf` runs (aiperf/__main__.py)

    app()


if __name__ == "__main__":
    main()

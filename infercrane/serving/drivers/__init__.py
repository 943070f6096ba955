"""Load drivers: programs that send the workload to a running engine and measure it.

An ordered registry (``DRIVER_NAMES``): ``aiperf`` (NVIDIA AIPerf, the primary driver) then
``vllm-bench`` (``vllm bench serve``, the second opinion METHOD.md asks for at high concurrency).
Each driver says ``available() -> (ok, reason)``, builds its command from a ``RunSpec``, runs it as a
subprocess in its own process group (killed on timeout, error or Ctrl-C), and parses its own export
into ``RunMetrics``. ``get_driver`` raises InputError listing the known names for an unknown one.

Every driver invocation goes through ``run_logged`` (or its two halves, ``start_logged`` now and ``finish_logged``
later, for a driver started before it is needed: ``drivers.aiperf.AiperfDriver.prestart``): the driver runs under the
process guard (``serving/guard.py``:
its own session and process group, the parent-death signal, and its whole tree ended when InferCrane dies, SIGKILL
included), its output to a log whose first line is the command, shell-quoted for copy-paste. When the driver fails
(non-zero exit, timeout, or an export that cannot be read) and the engine it drove has died meanwhile, the error is
the engine's (``Engine.failure_if_dead``: exit code or signal, the engine's log tail), not "driver exited 1".
"""
from __future__ import annotations

import importlib
import os
import resource
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from collections.abc import Callable, Mapping

from infercrane.errors import DriverExited, InputError, RunFailed, UnavailableError
from infercrane.proc import popen_dying_with_parent, stop_process_group
from infercrane.serving.engine import engine_serving, exit_text, log_tail, utc_now
from infercrane.serving.metrics import RunMetrics

T = TypeVar("T")

# name -> (module, class); imported on first use so that listing drivers imports no driver.
_REGISTRY: dict[str, tuple[str, str]] = {
    "aiperf": ("infercrane.serving.drivers.aiperf", "AiperfDriver"),
    "vllm-bench": ("infercrane.serving.drivers.vllm_bench", "VllmBenchDriver"),
}
DRIVER_NAMES: tuple[str, ...] = tuple(_REGISTRY)


@dataclass(frozen=True)
class RunSpec:
    """Everything one driver invocation needs: where to send what, and where to write."""

    base_url: str
    served_model: str
    tokenizer: str
    endpoint: Literal["completions", "chat"]
    streaming: bool
    ignore_eos: bool
    input_tokens: int
    output_tokens: int
    concurrency: int
    request_count: int
    warmup_requests: int
    seed: int
    token_count_source: Literal["server", "client"]
    request_timeout_s: float
    artifact_dir: Path
    timeout_s: float
    arm: str
    recipe_sha256: str
    run_index: int
    env: Mapping[str, str] = field(default_factory=dict)
    prompts_file: Path | None = None  # a shared prompt file (serving/prompts.py) instead of the driver's own prompts
    # Open loop (AIPerf's --request-rate): requests per second, arrivals spaced by arrival_pattern, the concurrency
    # their cap; None: closed loop at the concurrency.
    request_rate: float | None = None
    arrival_pattern: Literal["poisson", "constant"] = "poisson"
    extra_inputs: Mapping[str, Any] = field(default_factory=dict)  # merged into every request body
    # SLOs (decide.slo.Slo) the policy names: each run's goodput and attainment are read from its requests
    slos: tuple[Any, ...] = ()
    # a trace workload (serving.trace.TraceReplay): the trace replayed on its schedule instead of synthetic prompts
    trace: Any = None
    # Secrets (engine.ServerAccess): handed to the driver in its environment (secret_env), never on its command line.
    api_key: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)


class Driver:
    """Base of the drivers; subclasses fill in the four driver-specific methods."""

    name: str = ""
    dist: str = ""  # the installed distribution whose version the driver reports

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def version(self) -> str:
        from infercrane.env.capture import ABSENT, dist_version

        found = dist_version(self.dist)
        return "unknown" if found == ABSENT else found

    def check(self, spec: RunSpec) -> None:
        """Raise InputError when the driver cannot honour the spec (before any request is sent)."""

    def scrub(self, spec: RunSpec) -> None:
        """Remove from what the driver wrote under ``spec.artifact_dir`` any secret it wrote there (the API key, header
        values); called once each of its processes has ended, whatever the outcome."""

    def secret_env(self, spec: RunSpec) -> dict[str, str]:
        """The variables that hand the spec's API key and header values to the driver: added to its environment only,
        so that its command line (the first line of its log, ``ps``) holds none of them."""
        return {}

    def command(self, spec: RunSpec) -> list[str]:
        raise NotImplementedError

    def parse(self, spec: RunSpec, *, driver_version: str, driver_cpu_s: float | None = None,
              started_at: str | None = None) -> RunMetrics:
        raise NotImplementedError

    def require_available(self) -> None:
        """Raise UnavailableError, with the reason, when this driver cannot run here."""
        ok, reason = self.available()
        if not ok:
            raise UnavailableError(f"driver {self.name!r} is not available here: {reason}",
                                   hint=f"pick another driver ({', '.join(DRIVER_NAMES)}) or install this one")

    def run(self, spec: RunSpec) -> RunMetrics:
        """Run the driver once against a live engine and return what it measured."""
        self.require_available()
        self.check(spec)
        cmd = self.command(spec)
        try:
            version, started_at, cpu_s = self.invoke(spec, cmd, timeout_s=spec.timeout_s)
        finally:
            self.scrub(spec)
        return self.read_back(cmd, lambda: self.parse(spec, driver_version=version, driver_cpu_s=cpu_s,
                                                      started_at=started_at))

    def invoke(self, spec: RunSpec, cmd: list[str], *, timeout_s: float, env: Mapping[str, str] | None = None,
               on_tick: Callable[[], None] | None = None) -> tuple[str, str, float]:
        """Run one driver command into ``spec.artifact_dir`` (``run_logged``): (driver version, start time, CPU s).
        ``env`` is added to the spec's; ``on_tick`` is called about every second while it runs."""
        version, started_at, started = self.start_invoke(spec, cmd, env=env)
        return version, started_at, self.finish_invoke(started, timeout_s=timeout_s, on_tick=on_tick)

    def start_invoke(self, spec: RunSpec, cmd: list[str], *,
                     env: Mapping[str, str] | None = None) -> tuple[str, str, Started]:
        """The first half of ``invoke`` (``start_logged``): (driver version, start time, the started command)."""
        version = self.version()
        spec.artifact_dir.mkdir(parents=True, exist_ok=True)
        started_at = utc_now()
        started = start_logged(cmd, log_path=spec.artifact_dir / "driver.log",
                               env={**os.environ, **spec.env, **self.secret_env(spec), **(env or {})},
                               what=f"driver {self.name}")
        return version, started_at, started

    def finish_invoke(self, started: Started, *, timeout_s: float,
                      on_tick: Callable[[], None] | None = None) -> float:
        """The second half of ``invoke`` (``finish_logged``): wait for the started command; its CPU seconds."""
        return finish_logged(started, timeout_s=timeout_s, on_tick=on_tick)

    def read_back(self, cmd: list[str], read: Callable[[], T]) -> T:
        """``read()`` the driver's export; an unreadable one after an exit 0 is the engine's failure when the
        engine ``cmd`` drove has died meanwhile, and the driver's otherwise."""
        try:
            return read()
        except RunFailed as exc:
            err = _engine_failure(cmd, f"while driver {self.name} ran", exc)
            if err is None:
                raise
            raise err from exc


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


GUARD = Path(__file__).resolve().parents[1] / "guard.py"


def _engine_failure(cmd: list[str], what: str, cause: RunFailed, engine: Any = None) -> RunFailed | None:
    """The engine's own failure when the engine ``cmd`` drives (``engine``, or the one whose URL ``cmd`` names) has
    died; None while it runs (the driver's failure is then the driver's)."""
    engine = engine if engine is not None else engine_serving(cmd)
    if engine is None:
        return None
    err = engine.failure_if_dead(what)
    if err is not None:
        err.message += f"\n(then: {cause.message.splitlines()[0]})"
        err.args = (err.message,)
    return err


@dataclass
class Started:
    """A command ``start_logged`` started under the process guard and nobody has waited for yet (``finish_logged``
    waits; ``kill`` ends it unwaited). ``cpu0``/``claimed0``: the reaped-children CPU seconds, and the part of them
    other started commands had claimed, when it started (see ``finish_logged``)."""

    proc: subprocess.Popen
    cpu0: float
    claimed0: float
    log_path: Path
    cmd: list[str]
    what: str
    engine: Any = None
    cpu_s: float | None = None  # set once it has ended (finish_logged or kill)

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """End the command's whole process group (SIGINT, SIGTERM, SIGKILL) without reading what it did; idempotent."""
        try:
            stop_process_group(self.proc, (5.0, 5.0, 5.0))
        finally:
            if self.cpu_s is None:
                self.cpu_s = _claim(_children_cpu_s() - self.cpu0 - (_CLAIMED[0] - self.claimed0))


# CPU seconds of reaped children that a finished (or killed) started command has counted as its own: a command
# started while another runs sees the other's whole tree reaped during its life, and leaves that part out.
_CLAIMED = [0.0]


def _claim(cpu_s: float) -> float:
    cpu_s = max(0.0, cpu_s)
    _CLAIMED[0] += cpu_s
    return cpu_s


def start_logged(cmd: list[str], *, log_path: Path, env: Mapping[str, str], what: str,
                 engine: Any = None) -> Started:
    """Start ``cmd`` under the process guard, output to ``log_path`` (first line: the command, shell-quoted), and
    return at once: the first half of ``run_logged``. Wait for it with ``finish_logged``, or end it with
    ``Started.kill``."""
    cpu0 = _children_cpu_s()
    with open(log_path, "ab") as log:
        log.write(f"# infercrane: {shlex.join(cmd)}\n".encode())
        log.flush()
        proc = popen_dying_with_parent([sys.executable, str(GUARD), str(os.getpid()), "--", *cmd], stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env),
                                       start_new_session=True)
    return Started(proc=proc, cpu0=cpu0, claimed0=_CLAIMED[0], log_path=log_path, cmd=list(cmd), what=what,
                   engine=engine)


def finish_logged(started: Started, *, timeout_s: float, on_tick: Callable[[], None] | None = None,
                  tick_s: float = 1.0) -> float:
    """Wait for a ``start_logged`` command (at most ``timeout_s`` from now), calling ``on_tick`` meanwhile; end its
    group whatever happens; the second half of ``run_logged`` (which see for the errors). Returns its tree's CPU
    seconds: the growth of the reaped-children rusage since it started, less what other started commands finished
    meanwhile claimed."""
    proc, cmd, what, log_path, engine = started.proc, started.cmd, started.what, started.log_path, started.engine
    try:
        try:
            rc = _wait_ticking(proc, timeout_s, on_tick, tick_s)
        except subprocess.TimeoutExpired:
            failed = RunFailed(f"{what} did not finish within {timeout_s:g} s; log {log_path}:\n"
                               f"{log_tail(log_path, 30)}",
                               hint="raise the run timeout, or lower request_count; check that the engine still answers")
            raise _engine_failure(cmd, f"while {what} ran", failed, engine) or failed from None
    finally:
        started.kill()
    if rc != 0:
        # the guard exits 128 + N for a driver killed by signal N; a negative code is the guard's own signal
        how = exit_text(rc) if rc < 0 else exit_text(128 - rc) if rc > 128 else f"exited with code {rc}"
        failed = DriverExited(f"{what} {how}; log {log_path}:\n{log_tail(log_path, 30)}", how=how,
                              hint="read the driver log; the command line is its first line")
        raise _engine_failure(cmd, f"while {what} ran", failed, engine) or failed
    return round(started.cpu_s or 0.0, 3)


def run_logged(cmd: list[str], *, log_path: Path, env: Mapping[str, str], timeout_s: float, what: str,
               engine: Any = None, on_tick: Callable[[], None] | None = None, tick_s: float = 1.0) -> float:
    """Run ``cmd`` under the process guard, output to ``log_path``; return its tree's CPU seconds.

    The guard (``serving/guard.py``) leads a process group of its own and carries the parent-death signal, so the
    driver and everything it starts end with InferCrane, however InferCrane ends. Non-zero exit or timeout raises
    RunFailed with the log tail, or, when the engine the command drives has died (``engine``, by default the live
    engine whose base URL is one of ``cmd``'s arguments), the engine's failure; any exit path ends the group.
    The CPU figure is the growth of this process's reaped-children rusage over the call, i.e. the guard, the driver
    and the descendants they waited for (the engine is not reaped meanwhile). ``on_tick`` is called in this thread
    every ``tick_s`` while the command runs (reading what the driver has written so far); an exception from it ends
    the command and propagates. ``start_logged`` + ``finish_logged``: the same in two halves, for a command started
    now and waited for later.
    """
    return finish_logged(start_logged(cmd, log_path=log_path, env=env, what=what, engine=engine),
                         timeout_s=timeout_s, on_tick=on_tick, tick_s=tick_s)


def _wait_ticking(proc: subprocess.Popen, timeout_s: float, on_tick: Callable[[], None] | None,
                  tick_s: float) -> int:
    """``proc.wait(timeout_s)``, calling ``on_tick`` every ``tick_s`` meanwhile (TimeoutExpired past the limit)."""
    if on_tick is None:
        return proc.wait(timeout=timeout_s)
    import time

    end = time.monotonic() + timeout_s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        try:
            return proc.wait(timeout=min(tick_s, left))
        except subprocess.TimeoutExpired:
            on_tick()


def get_driver(name: str) -> Driver:
    """The driver registered under ``name``; InputError listing the known names otherwise."""
    try:
        module, cls = _REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown driver {name!r}", hint=f"known drivers: {', '.join(DRIVER_NAMES)}") from None
    return getattr(importlib.import_module(module), cls)()


def driver_availability() -> list[tuple[str, bool, str]]:
    """(name, available, reason) for every registered driver, in registry order."""
    out = []
    for name in DRIVER_NAMES:
        ok, reason = get_driver(name).available()
        out.append((name, ok, reason))
    return out

"""Load drivers: programs that send the workload to a running engine and measure it.

An ordered registry (``DRIVER_NAMES``): ``aiperf`` (NVIDIA AIPerf, the primary driver) then
``vllm-bench`` (``vllm bench serve``, the second opinion METHOD.md asks for at high concurrency).
Each driver says ``available() -> (ok, reason)``, builds its command from a ``RunSpec``, runs it as a
subprocess in its own process group (killed on timeout, error or Ctrl-C), and parses its own export
into ``RunMetrics``. ``get_driver`` raises InputError listing the known names for an unknown one.
"""
from __future__ import annotations

import importlib
import os
import resource
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from collections.abc import Mapping

from infercrane.errors import InputError, RunFailed, UnavailableError
from infercrane.serving.engine import log_tail, stop_process_group, utc_now
from infercrane.serving.metrics import RunMetrics

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
        version = self.version()
        spec.artifact_dir.mkdir(parents=True, exist_ok=True)
        started_at = utc_now()
        cpu_s = run_logged(self.command(spec), log_path=spec.artifact_dir / "driver.log",
                           env={**os.environ, **spec.env}, timeout_s=spec.timeout_s, what=f"driver {self.name}")
        return self.parse(spec, driver_version=version, driver_cpu_s=cpu_s, started_at=started_at)


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_logged(cmd: list[str], *, log_path: Path, env: Mapping[str, str], timeout_s: float, what: str) -> float:
    """Run ``cmd`` in its own process group, output to ``log_path``; return its tree's CPU seconds.

    Non-zero exit or timeout raises RunFailed with the log tail; any exit path kills the group.
    The CPU figure is the growth of this process's reaped-children rusage over the call, i.e. the
    driver and the descendants it waited for (the engine is not reaped meanwhile).
    """
    cpu0 = _children_cpu_s()
    with open(log_path, "ab") as log:
        log.write(f"# infercrane: {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(env), start_new_session=True)
    try:
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{what} did not finish within {timeout_s:g} s; log {log_path}:\n{log_tail(log_path, 30)}",
                            hint="raise the run timeout, or lower request_count; check that the engine still answers"
                            ) from None
    finally:
        stop_process_group(proc, (5.0, 5.0, 5.0))
    if rc != 0:
        raise RunFailed(f"{what} exited with code {rc}; log {log_path}:\n{log_tail(log_path, 30)}",
                        hint="read the driver log; the command line is its first line")
    return round(_children_cpu_s() - cpu0, 3)


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

"""Executors: where a job (one InferCrane command for one GPU type, ``executors.jobs``) runs.

An ordered registry (``EXECUTOR_NAMES``): ``local`` (this machine, one job after the other), ``ray`` (a Ray cluster:
one task per GPU type, ``accelerator_type`` per task), ``modal`` (Modal: one function per GPU string, a fresh container
per job). Each executor says which GPU types it can run (``known_gpus``, for the error an unknown one gets), and has
``submit(job) -> Handle``, ``gather(handles)`` (results as the jobs finish) and ``cancel(handles)``. The job runs
InferCrane itself where it lands and comes back with the receipt it wrote there; ``executors.fanout`` submits one job
per GPU type, shows them in one live table, keeps every finished job's receipt, and merges them (``receipt merge``).
``get_executor`` raises InputError listing the known names for an unknown one; a missing package or an unreachable
cluster is an UnavailableError that says what to install or start.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from infercrane.errors import InputError
from infercrane.executors.jobs import Job, JobResult

# name -> (module, class); imported on first use, so that naming an executor imports no cluster client.
_REGISTRY: dict[str, tuple[str, str]] = {
    "local": ("infercrane.executors.local", "LocalExecutor"),
    "ray": ("infercrane.executors.ray_cluster", "RayExecutor"),
    "modal": ("infercrane.executors.modal_app", "ModalExecutor"),
}
EXECUTOR_NAMES: tuple[str, ...] = tuple(_REGISTRY)


@dataclass
class Handle:
    """A submitted job: the job, when it was submitted (monotonic seconds), and the executor's own reference."""

    job: Job
    submitted_at: float
    ref: Any = None
    run_id: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Executor(Protocol):
    name: str

    def known_gpus(self) -> tuple[str, ...]:
        """The GPU strings this executor can run a job on (for the error an unknown one gets)."""

    def submit(self, job: Job) -> Handle:
        """Start ``job``; returns at once."""

    def gather(self, handles: Iterable[Handle]) -> Iterator[tuple[Handle, JobResult]]:
        """Each handle's result as its job finishes (a job's failure is its result's state, not an exception)."""

    def cancel(self, handles: Iterable[Handle]) -> None:
        """Stop the jobs of ``handles`` that have not finished; returns when none of them runs any more."""


def check_gpus(executor: Executor, gpus: Iterable[str]) -> None:
    """InputError for a GPU string the executor cannot run, listing the ones it can."""
    known = executor.known_gpus()
    unknown = [g for g in gpus if g not in known]
    if unknown:
        raise InputError(f"--gpus {','.join(unknown)}: not a GPU type the {executor.name} executor can run",
                         hint=f"known here: {', '.join(known) or 'none'}")


def get_executor(name: str, **options: Any) -> Executor:
    """The executor registered under ``name``, built with ``options``; InputError listing the known names otherwise."""
    try:
        module, cls = _REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown executor {name!r}", hint=f"known executors: {', '.join(EXECUTOR_NAMES)}") from None
    return getattr(importlib.import_module(module), cls)(**options)

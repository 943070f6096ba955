"""The Ray executor: one Ray task per job on a Ray cluster, placed by GPU type.

Placement: a task asks for ``num_gpus=1`` (none for a functional job) and ``accelerator_type=<type>``, Ray's own
placement by GPU model (Ray labels each GPU node with ``accelerator_type:<type>``, e.g. ``H100``, ``L40S``; a cluster
can declare such a resource itself, ``ray start --resources '{"accelerator_type:H200": 1}'``, which is how the CPU
tests stand GPU types in). A pinned Modal-style request (``H100!``) is the same type for Ray, whose accelerator types
are exact. Known GPU types: the ``accelerator_type:*`` resources of the cluster's nodes now.

Each task runs ``jobs.run_job`` on the node it lands on; its run id is Ray's job id and task id
(``ray-<job id>-<task id>``). Results are gathered with ``ray.wait`` as tasks finish; cancel is
``ray.cancel(force=True)`` (the worker is killed, and the InferCrane command under it ends by its parent-death signal),
then a wait until every cancelled task has resolved. Tasks are not retried: a failed job is a result, not a retry.

The cluster: ``address=None`` connects to a running cluster (``RAY_ADDRESS`` or Ray's ``auto``); ``local`` starts one
on this machine for the command's lifetime. The workers import InferCrane from their own environment; a version that
differs from the caller's is flagged by the fan-out.
"""
from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Iterator
from typing import Any

from infercrane.errors import UnavailableError
from infercrane.executors import Handle
from infercrane.executors.jobs import LOG_TAIL_CHARS, Job, JobResult, run_job

RESOURCE_PREFIX = "accelerator_type:"
CANCEL_WAIT_S = 60.0


def ray_type(request: str) -> str:
    """The Ray accelerator type of a GPU request: ``H100!`` -> ``H100``."""
    return request.rstrip("!")


def _task(job_doc: dict[str, Any]) -> dict[str, Any]:
    """The task body: run the job on this node under Ray's job and task id."""
    import ray

    ctx = ray.get_runtime_context()
    run_id = f"ray-{ctx.get_job_id()}-{ctx.get_task_id()}"
    return run_job(Job.model_validate(job_doc), run_id=run_id).model_dump()


def _check_reachable(address: str) -> None:
    """UnavailableError at once for a HOST:PORT nothing answers on (Ray itself retries for up to 20 minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # auto, local, or a name Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise UnavailableError(f"no Ray cluster reachable at {address}: {exc}", hint=_START_HINT) from None


_START_HINT = ("start one (`ray start --head`), pass --ray-address HOST:PORT, or --ray-address local to start one "
               "on this machine")


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise UnavailableError("the ray executor needs Ray, which is not installed",
                                   hint="pip install 'infercrane[ray]'") from None
        self._ray = ray
        address = address or os.environ.get("RAY_ADDRESS") or "auto"
        if not ray.is_initialized():
            _check_reachable(address)
            try:
                ray.init(address=address, log_to_driver=False, include_dashboard=False, configure_logging=False)
            except ConnectionError as exc:
                where = address
                raise UnavailableError(f"no Ray cluster reachable at {where}: {exc}", hint=_START_HINT) from None
        self._remote = ray.remote(max_retries=0)(_task)

    def known_gpus(self) -> tuple[str, ...]:
        return tuple(sorted(k[len(RESOURCE_PREFIX):] for k in self._ray.cluster_resources()
                            if k.startswith(RESOURCE_PREFIX)))

    def submit(self, job: Job) -> Handle:
        ref = self._remote.options(accelerator_type=ray_type(job.gpu), num_gpus=1 if job.needs_gpu else 0,
                                   name=f"infercrane-{ray_type(job.gpu)}").remote(job.model_dump())
        return Handle(job=job, submitted_at=time.monotonic(), ref=ref, info={"task_id": ref.task_id().hex()})

    def gather(self, handles: Iterable[Handle]) -> Iterator[tuple[Handle, JobResult]]:
        pending = {h.ref: h for h in handles}
        while pending:
            done, _ = self._ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in done:
                h = pending.pop(ref)
                yield h, self._result(h)

    def _result(self, h: Handle) -> JobResult:
        from ray import exceptions as rx

        try:
            res = JobResult.model_validate(self._ray.get(h.ref))
        except rx.TaskCancelledError:
            return JobResult(gpu=h.job.gpu, state="cancelled", error="cancelled")
        except rx.RayError as exc:  # the task raised, its worker died, or its node went away
            return JobResult(gpu=h.job.gpu, state="failed", error=f"{type(exc).__name__}: {str(exc)[-LOG_TAIL_CHARS:]}")
        h.run_id = res.run_id
        return res

    def cancel(self, handles: Iterable[Handle]) -> None:
        refs = [h.ref for h in handles]
        for ref in refs:
            self._ray.cancel(ref, force=True)
        deadline = time.monotonic() + CANCEL_WAIT_S
        pending = refs
        while pending and time.monotonic() < deadline:
            _, pending = self._ray.wait(pending, num_returns=len(pending), timeout=1.0)

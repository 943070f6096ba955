"""The local executor: every job on this machine, one after the other (this machine has one GPU type).

Known GPU types: this machine's own, as its key (``h200``) and as the device name PyTorch reports; a machine without
a GPU knows ``cpu``. A job runs through ``jobs.run_job`` in a worker thread, so that the live table goes on; cancel
stops the running job's process group and drops the queued ones.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator

from infercrane.executors import Handle
from infercrane.executors.jobs import Job, JobResult, run_job


class LocalExecutor:
    name = "local"

    def __init__(self) -> None:
        self._queue: list[Handle] = []
        self._cancelled = threading.Event()
        self._procs: dict[int, object] = {}

    def known_gpus(self) -> tuple[str, ...]:
        from infercrane.env.capture import hardware
        from infercrane.poc.gpus import gpu_key

        name = hardware()["gpu"]
        key = gpu_key(name)
        return (key, key.upper(), name) if name != "none" else (key,)

    def submit(self, job: Job) -> Handle:
        h = Handle(job=job, submitted_at=time.monotonic(), run_id=None)
        self._queue.append(h)
        return h

    def gather(self, handles: Iterable[Handle]) -> Iterator[tuple[Handle, JobResult]]:
        from infercrane.env.capture import new_run_id

        results: queue.Queue = queue.Queue()
        todo = list(handles)

        def work() -> None:
            for h in todo:
                if self._cancelled.is_set():
                    results.put((h, JobResult(gpu=h.job.gpu, state="cancelled", error="cancelled before it started")))
                    continue
                h.run_id = new_run_id()
                h.info["started_at"] = time.monotonic()
                res = run_job(h.job, run_id=h.run_id, on_start=lambda p, h=h: self._procs.__setitem__(id(h), p))
                self._procs.pop(id(h), None)
                if self._cancelled.is_set() and res.state != "done":
                    res.state = "cancelled"
                results.put((h, res))

        worker = threading.Thread(target=work, name="infercrane-local-executor", daemon=True)
        worker.start()
        for _ in todo:
            yield results.get()

    def cancel(self, handles: Iterable[Handle]) -> None:
        from infercrane.proc import stop_process_group

        self._cancelled.set()
        for h in handles:
            proc = self._procs.get(id(h))
            if proc is not None and proc.poll() is None:
                stop_process_group(proc, (10.0, 5.0, 5.0))

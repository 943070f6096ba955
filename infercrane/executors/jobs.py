"""A job (one InferCrane command for one GPU type) and its result, and how a job runs where it lands.

A job is data: the InferCrane command line (``argv``, without ``--out``), the GPU type asked for, the files the command
reads (a candidate kernel, a policy, a serving receipt), shipped by content and named in ``argv`` by their file name,
and a time limit. ``run_job`` is what every executor runs on the machine a job lands on: it writes the files into a
fresh folder, runs ``python -m infercrane ARGV --out <folder>/receipt.json`` there under the parent-death signal (a
cancelled or killed worker takes the command down with it), and returns the receipt the command wrote, so that the
receipt's hardware is measured where it ran and never copied from the request. The run id the receipt carries is the
executor's (Ray's job and task id, Modal's app and function-call id), passed as ``INFERCRANE_RUN_ID``; the GPU string
asked for is passed as ``INFERCRANE_GPU_REQUEST`` and lands in the receipt's ``hardware.gpu_request``.
``job_argv`` makes a command's own options into a job's ``argv`` and files.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infercrane.datafiles import CANDIDATE, OPTION_FILE, read_bytes
from infercrane.env.capture import GPU_REQUEST_ENV, RUN_ID_ENV
from infercrane.options import EXECUTOR_FIELDS, flag

RECEIPT_NAME = "receipt.json"
LOG_TAIL_CHARS = 4000

JobState = Literal["queued", "running", "done", "failed", "timed-out", "cancelled"]
FINISHED: tuple[JobState, ...] = ("done", "failed", "timed-out", "cancelled")


class Job(BaseModel):
    """One InferCrane command for one GPU type (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(description="The GPU type asked for, as the executor spells it (H100!, L40S, H200).")
    argv: tuple[str, ...] = Field(description="The InferCrane command line without --out, e.g. kernel screen --op …")
    files: dict[str, bytes] = Field(default_factory=dict, description="File name -> content, written beside the run.")
    needs_gpu: bool = Field(True, description="False for a functional (CPU) command: no GPU is reserved for it.")
    timeout_s: float = Field(3600.0, gt=0, description="Wall-clock limit of the command where it runs.")


class JobResult(BaseModel):
    """What came back from a job: its state, the receipt it wrote (JSON text) and how it ended."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    state: JobState
    run_id: str | None = None
    receipt_json: str | None = None
    returncode: int | None = None
    elapsed_s: float | None = None
    error: str | None = None
    log_tail: str = ""
    host: str | None = None
    infercrane_version: str | None = None
    started_at: str | None = Field(None, description="When the command started where it ran (UTC, ISO 8601).")
    finished_at: str | None = Field(None, description="When it ended there (UTC, ISO 8601).")
    cuda_visible_devices: str | None = Field(None, description="CUDA_VISIBLE_DEVICES where it ran (what the executor "
                                                               "gave it), None when unset.")


def run_job(job: Job, *, run_id: str | None = None, workdir: Path | None = None,
            on_start: Callable[[subprocess.Popen], None] | None = None) -> JobResult:
    """Run ``job`` here (module docstring); never raises for the command's own failure, which is the result's.
    ``on_start`` gets the command's process as it starts (its group is the command's whole tree), for a cancel."""
    from infercrane import __version__
    from infercrane.proc import popen_dying_with_parent, stop_process_group
    from infercrane.serving.engine import exit_text

    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="infercrane-job-"))
    root.mkdir(parents=True, exist_ok=True)
    for name, content in job.files.items():
        if Path(name).name != name or name in (".", ".."):
            return JobResult(gpu=job.gpu, state="failed", run_id=run_id, error=f"shipped file name {name!r} is not a "
                             "plain file name", infercrane_version=__version__)
        (root / name).write_bytes(content)
    receipt = root / RECEIPT_NAME
    log = root / "console.log"
    env = dict(os.environ, **{GPU_REQUEST_ENV: job.gpu}, PYTHONUNBUFFERED="1")
    if run_id:
        env[RUN_ID_ENV] = run_id
    cmd = [sys.executable, "-m", "infercrane", *job.argv, "--out", str(receipt)]
    t0, started_at = time.monotonic(), _utc_now()
    with open(log, "wb") as out:
        proc = popen_dying_with_parent(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
    if on_start is not None:
        on_start(proc)
    state: JobState = "done"
    error = None
    try:
        rc = proc.wait(timeout=job.timeout_s)
    except subprocess.TimeoutExpired:
        rc, state, error = None, "timed-out", f"did not finish within {job.timeout_s:g} s"
    finally:
        if proc.poll() is None:
            stop_process_group(proc, (10.0, 5.0, 5.0))
    if state == "done" and rc != 0:
        state, error = "failed", f"infercrane {exit_text(rc)}"
    text = receipt.read_text() if receipt.exists() else None
    if state == "done" and text is None:
        state, error = "failed", "the command wrote no receipt"
    tail = log.read_text(errors="replace")[-LOG_TAIL_CHARS:] if log.exists() else ""
    return JobResult(gpu=job.gpu, state=state, run_id=run_id, receipt_json=text, returncode=rc,
                     elapsed_s=round(time.monotonic() - t0, 3), error=error, log_tail=tail,
                     host=socket.gethostname(), infercrane_version=__version__, started_at=started_at,
                     finished_at=_utc_now(), cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))


def _utc_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def job_argv(command: tuple[str, ...], config: BaseModel, *, exclude: tuple[str, ...] = ()) -> tuple[list[str], dict[str, bytes]]:
    """(argv, files) of ``command`` with the options the user set on ``config`` (defaults stay defaults there),
    without the executor's own options, ``out`` and ``exclude``; a Path option's file travels by content."""
    argv, files = list(command), {}
    fields = type(config).model_fields
    for name in fields:
        if name in EXECUTOR_FIELDS or name in exclude or name == "out" or name not in config.model_fields_set:
            continue
        value = getattr(config, name)
        if value is None:
            continue
        if isinstance(value, Path):
            files[value.name] = read_bytes(value, OPTION_FILE)
            value = value.name
        elif name == "candidate":  # path/to/file.py:function -> file.py:function, the file shipped
            path, _, fn = str(value).rpartition(":")
            files[Path(path).name] = read_bytes(Path(path).expanduser(), CANDIDATE)
            value = f"{Path(path).name}:{fn}"
        argv += _flag_value(name, value, fields[name])
    return argv, files


def _flag_value(name: str, value: Any, field: Any) -> list[str]:
    if isinstance(value, bool):
        negative = _negative_flag(field)
        return [flag(name)] if value else [negative or f"--no-{name.replace('_', '-')}"]
    if isinstance(value, (tuple, list)):
        return [flag(name), ",".join(map(str, value))]
    return [flag(name), str(value)]


def _negative_flag(field: Any) -> str | None:
    from cyclopts import Parameter

    for meta in getattr(field, "metadata", ()):
        if isinstance(meta, Parameter) and meta.negative:
            neg = meta.negative
            return neg if isinstance(neg, str) else neg[0]
    return None

"""Fan-out: one job per GPU type through an executor, one live table, every finished receipt kept, then merged.

For ``OUT`` = ``DIR/NAME.json`` (the command's ``--out``): each job's receipt is written as it comes back, validated,
to ``DIR/NAME.<gpu>.json`` (``<gpu>`` the request, lower-cased, ``!`` spelled ``-pinned``); the fan-out's own record
(every job: the GPU asked for, the device that ran it, state, run id, elapsed, error and log tail; flags; notes) to
``DIR/NAME.fanout.json``, rewritten after every job, so an interrupted or failed fan-out keeps what finished. With
one job ``OUT`` is that job's receipt; with more, ``OUT`` is their merge (``receipt merge``: one PoC receipt with
one ``custom_kernel.<gpu>`` per measured GPU type).

Flags, never silent: a job whose measured device is not the GPU type asked for (Modal may upgrade an unpinned H100 to
an H200; a CPU stand-in runs on a CPU) is flagged ``gpu_mismatch``; a job whose InferCrane version or commit differs
from the caller's is flagged ``version_mismatch`` and left out of the merge (install the caller's version where the
jobs run). Two receipts measured on one GPU type cannot both be merged (a merged receipt holds one section per type):
the first is, the others are named in the notes. Ctrl-C cancels every unfinished job (``Executor.cancel`` returns
once none runs), records them as cancelled and re-raises.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infercrane.executors import Executor, Handle, check_gpus
from infercrane.executors.jobs import FINISHED, Job, JobResult, JobState

FANOUT_SCHEMA = "infercrane.fanout/v1"


class JobRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu_request: str
    state: JobState | Literal["submitted"]
    run_id: str | None = None
    elapsed_s: float | None = None
    receipt: str | None = None
    measured_gpu: str | None = None
    measured_key: str | None = None
    gpu_mismatch: str | None = None
    version_mismatch: str | None = None
    host: str | None = None
    error: str | None = None
    log_tail: str = ""


class FanoutRecord(BaseModel):
    """``OUT.fanout.json``: what a fan-out ran where, and what became of each job."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal["infercrane.fanout/v1"] = FANOUT_SCHEMA
    executor: str
    argv: list[str]
    caller_infercrane_version: str
    caller_git_commit: str | None
    jobs: list[JobRecord]
    result: str | None = Field(None, description="OUT, once written: the one job's receipt, or the merge.")
    complete: bool = False
    notes: list[str] = Field(default_factory=list)


def gpu_slug(request: str) -> str:
    return request.lower().replace("!", "-pinned").replace("/", "-")


class _Table:
    """The live table: one row per job (GPU, state, elapsed, run id, device that ran it, note)."""

    def __init__(self, handles: Sequence[Handle], records: dict[int, JobRecord]) -> None:
        self.handles, self.records = handles, records

    def __rich__(self) -> Any:
        from rich.table import Table

        t = Table(title="jobs", title_justify="left")
        for col in ("GPU", "state", "elapsed", "run id", "ran on", "note"):
            t.add_column(col, overflow="fold")
        now = time.monotonic()
        for h in self.handles:
            r = self.records[id(h)]
            elapsed = r.elapsed_s if r.state in FINISHED and r.elapsed_s is not None else now - h.submitted_at
            note = r.gpu_mismatch or r.version_mismatch or next(iter((r.error or "").splitlines()), "")
            t.add_row(r.gpu_request, r.state, f"{elapsed:.0f} s", r.run_id or "", _ran_on(r), note)
        return t


def _ran_on(r: JobRecord) -> str:
    return "no GPU (CPU)" if r.measured_gpu == "none" else r.measured_gpu or ""


def _caller_identity() -> tuple[str, str | None]:
    from infercrane import __version__
    from infercrane.env.capture import git_state

    return __version__, git_state()[0]


def fan_out(executor: Executor, jobs: Sequence[Job], *, out: Path, argv: Sequence[str], con: Any,
            title: str | None = None) -> FanoutRecord:
    """Run ``jobs`` through ``executor`` and keep, flag and merge their receipts (module docstring); ``title`` is
    printed once the GPU types are known to the executor, before the first job starts."""
    from rich.live import Live

    check_gpus(executor, [j.gpu for j in jobs])
    if title:
        con.print(title)
    version, commit = _caller_identity()
    record = FanoutRecord(executor=executor.name, argv=list(argv), caller_infercrane_version=version,
                          caller_git_commit=commit, jobs=[])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record_path = out.with_name(f"{out.stem}.fanout.json")
    handles = [executor.submit(j) for j in jobs]
    records = {id(h): JobRecord(gpu_request=h.job.gpu, state="submitted") for h in handles}
    record.jobs = [records[id(h)] for h in handles]

    def save() -> None:
        from infercrane.receipts.io import write_atomic

        write_atomic(record_path, record.model_dump(mode="json"))

    save()
    table = _Table(handles, records)
    with Live(table, console=con, refresh_per_second=2, transient=False):
        try:
            for h, res in executor.gather(handles):
                _take(records[id(h)], h, res, out, version, commit)
                save()
        except KeyboardInterrupt:
            unfinished = [h for h in handles if records[id(h)].state not in FINISHED]
            executor.cancel(unfinished)
            for h in unfinished:
                r = records[id(h)]
                r.state, r.error = "cancelled", "cancelled by Ctrl-C"
                r.elapsed_s = round(time.monotonic() - h.submitted_at, 3)
            record.notes.append(f"interrupted: {len(unfinished)} job(s) cancelled, finished ones kept")
            save()
            raise
    con.print()
    _conclude(record, out)
    save()
    return record


def _take(r: JobRecord, h: Handle, res: JobResult, out: Path, version: str, commit: str | None) -> None:
    """Fill ``r`` from a job's result; write its receipt beside ``out`` and check what it says about where it ran."""
    from infercrane.errors import InputError
    from infercrane.poc.gpus import gpu_key, gpu_key_of_receipt, receipt_hardware
    from infercrane.receipts.io import write_atomic_bytes
    from infercrane.receipts.validate import load_receipt

    r.state, r.run_id, r.elapsed_s, r.error, r.log_tail, r.host = (res.state, res.run_id or h.run_id, res.elapsed_s,
                                                                   res.error, res.log_tail, res.host)
    if res.receipt_json is None:
        return
    path = out.with_name(f"{out.stem}.{gpu_slug(h.job.gpu)}.json")
    write_atomic_bytes(path, res.receipt_json.encode())
    r.receipt = str(path)
    try:
        doc = load_receipt(path).document
    except InputError as exc:
        r.state, r.error = "failed", f"its receipt does not validate: {exc.message.splitlines()[0]}"
        return
    r.measured_gpu, r.measured_key = receipt_hardware(doc).get("gpu"), gpu_key_of_receipt(doc)
    if gpu_key(h.job.gpu) != r.measured_key:
        r.gpu_mismatch = f"asked for {h.job.gpu}, ran on {_ran_on(r)}"
    prov = doc.get("provenance") or {}
    theirs = (prov.get("infercrane_version") or res.infercrane_version, prov.get("git_commit"))
    if theirs[0] != version or (commit and theirs[1] and theirs[1] != commit):
        r.version_mismatch = (f"ran InferCrane {theirs[0]} (commit {theirs[1] or 'unknown'}), the caller "
                              f"{version} (commit {commit or 'unknown'}): install the caller's version where the "
                              "jobs run")


def _conclude(record: FanoutRecord, out: Path) -> None:
    """Write ``out``: the one job's receipt, or the merge of every mergeable one; say what was left out and why."""
    from infercrane.errors import InputError
    from infercrane.receipts.io import write_atomic_bytes
    from infercrane.receipts.merge import merge
    from infercrane.receipts.validate import write_receipt

    good = [r for r in record.jobs if r.state == "done" and r.receipt and r.measured_key and not r.version_mismatch]
    for r in record.jobs:
        if r.state != "done":
            record.notes.append(f"{r.gpu_request}: {r.state}" + (f" ({r.error.splitlines()[0]})" if r.error else ""))
        elif r.version_mismatch:
            record.notes.append(f"{r.gpu_request}: left out of the result: {r.version_mismatch}")
    by_key: dict[str, JobRecord] = {}
    for r in good:
        if r.measured_key in by_key:
            record.notes.append(f"{r.gpu_request}: measured on {r.measured_key} like {by_key[r.measured_key].gpu_request}"
                                "; a merged receipt holds one section per GPU type, so only the first is merged")
            continue
        by_key[r.measured_key] = r
    chosen = list(by_key.values())
    if len(chosen) == 1 and len(record.jobs) == 1:
        write_atomic_bytes(out, Path(chosen[0].receipt).read_bytes())
        record.result = str(out)
    elif len(chosen) >= 2:
        try:
            write_receipt(merge([Path(r.receipt) for r in chosen]), out)
            record.result = str(out)
        except InputError as exc:
            record.notes.append(f"not merged: {exc.message.splitlines()[0]}")
    elif chosen:
        record.notes.append(f"one receipt to keep ({chosen[0].gpu_request}): nothing to merge it with; it is "
                            f"{chosen[0].receipt}")
    record.complete = all(r.state == "done" and not r.version_mismatch for r in record.jobs) and record.result is not None


def summary_lines(record: FanoutRecord) -> list[str]:
    """What the command prints at the end: one line per job, the notes, and where the result is."""
    lines = []
    for r in record.jobs:
        flag = "; ".join(x for x in (r.gpu_mismatch, r.version_mismatch) if x)
        lines.append(f"{r.gpu_request}: {r.state}" + (f" on {_ran_on(r)}" if r.measured_gpu else "") +
                     (f", {r.elapsed_s:.0f} s" if r.elapsed_s is not None else "") +
                     (f", run {r.run_id}" if r.run_id else "") + (f" [flagged: {flag}]" if flag else "") +
                     (f" -> {r.receipt}" if r.receipt else ""))
    lines += [f"note: {n}" for n in record.notes]
    lines.append(f"result: {record.result}" if record.result else "result: none (see the notes)")
    return lines


def read_record(path: Path) -> FanoutRecord:
    return FanoutRecord.model_validate(json.loads(Path(path).read_text()))


def run_fanned_out(where: Any, gpus: Sequence[str], *, argv: Sequence[str], files: dict[str, bytes], needs_gpu: bool,
                   out: Path, what: str, sign_key: Path | None, con: Any) -> int:
    """A command's fan-out from its executor options ``where`` (``executors.options.ExecutorOptions``): refuse what
    cannot travel, build the executor and one job per GPU type, run them (``fan_out``), print the summary; exit 0
    when every job finished and the result was written, 1 otherwise."""
    from infercrane.commands.options import check_output_file, plain
    from infercrane.errors import InputError
    from infercrane.executors import get_executor

    if sign_key is not None:
        raise InputError(f"--sign-key: the key stays on this machine and each job's receipt of {what} is written where "
                         "it ran", hint=f"sign the result here once it is back: infercrane receipt sign {out} --key KEY")
    check_output_file(out, "--out")
    executor = get_executor(where.executor, **({"address": where.ray_address} if where.executor == "ray" else {}))
    jobs = [Job(gpu=g, argv=tuple(argv), files=files, needs_gpu=needs_gpu, timeout_s=where.job_timeout_s) for g in gpus]
    record = fan_out(executor, jobs, out=out, argv=argv, con=con,
                     title=f"{what} on {', '.join(gpus)} through the {executor.name} executor → {plain(out)}")
    for line in summary_lines(record):
        con.print(plain(line))
    return 0 if record.complete else 1

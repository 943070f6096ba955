"""Fan-out: one job per GPU asked for through an executor, one live table, every finished receipt kept, then merged.

For ``OUT`` = ``DIR/NAME.json`` (the command's ``--out``): each job's receipt is written as it comes back, validated,
to ``DIR/NAME.<label>.json`` (``<label>`` the request, lower-cased, ``!`` spelled ``-pinned``; the n-th job of a type
given n times gets ``__<n>``: ``h200``, ``h200__2``, as ``poc.gpus.instance_key`` spells the n-th device); the fan-
out's own record (every job: the GPU asked for, the device that ran it, state, run id, when it started and ended,
error and log tail; flags; notes; the fan-out's wall time; how jobs of one GPU type agree) to
``DIR/NAME.fanout.json``, rewritten after every job, so an interrupted or failed fan-out keeps what finished. With one
job ``OUT`` is that job's receipt; with more, ``OUT`` is their merge (``receipt merge``: one PoC receipt with one
``custom_kernel.<gpu>`` per measured GPU, ``h200__2`` for a second H200).

Several jobs of one GPU type (``--gpus H200,H200``) are several GPUs of it at once where the executor has them (Ray:
one task per GPU), or one after the other on one (the local executor). Their kernel screens are compared cell by
cell (``kernels.agreement``: do they agree within their runs' spread?) into the record's ``agreement``; two jobs that
ran at the same time on one device (the same ``hardware.gpu_uuid``) are flagged ``same_device``: each timed the other's
load.

Flags, never silent: a job whose measured device is not the GPU type asked for (Modal may upgrade an unpinned H100 to
an H200; a CPU stand-in runs on a CPU) is flagged ``gpu_mismatch``; a job whose InferCrane version or commit differs
from the caller's is flagged ``version_mismatch`` and left out of the merge (install the caller's version where the
jobs run). Two receipts measured on one device, or on one GPU type where either does not record its device, cannot
both be merged (a merged receipt holds one section per GPU): the first is, the others are named in the notes. Ctrl-C
cancels every unfinished job (``Executor.cancel`` returns once none runs), records them as cancelled and re-raises.
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
    label: str = Field(description="The job's name in files and tables: the request's slug, __<n> for the n-th job "
                                   "of a type.")
    state: JobState | Literal["submitted"]
    run_id: str | None = None
    elapsed_s: float | None = None
    started_at: str | None = None
    finished_at: str | None = None
    receipt: str | None = None
    measured_gpu: str | None = None
    measured_key: str | None = None
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    cuda_visible_devices: str | None = None
    gpu_mismatch: str | None = None
    version_mismatch: str | None = None
    same_device: str | None = None
    host: str | None = None
    error: str | None = None
    log_tail: str = ""


class SameTypeAgreement(BaseModel):
    """Two jobs' kernel screens on one GPU type, compared cell by cell (``kernels.agreement.compare_screens``)."""

    model_config = ConfigDict(extra="forbid")

    a: str
    b: str
    gpu: str
    op: str
    method: str
    compared: int = Field(description="Cells compared that neither screen flagged.")
    agreeing: int
    compared_flagged: int = Field(0, description="Cells a screen flagged, compared on the primary timer apart.")
    agreeing_flagged: int = 0
    not_compared: int
    disagreeing: list[str] = Field(description="impl rows mode: A range vs B range (B/A) of each cell that disagrees "
                                               "(of the cells neither screen flagged).")
    decisions_same: bool
    a_decision: str
    b_decision: str


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
    wall_s: float | None = Field(None, description="From the first submit to the last job's end, on the caller.")
    agreement: list[SameTypeAgreement] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def gpu_slug(request: str) -> str:
    return request.lower().replace("!", "-pinned").replace("/", "-")


def job_labels(gpus: Sequence[str]) -> list[str]:
    """Each job's label: its request's slug; the n-th job of a request given several times gets ``__<n>``."""
    from infercrane.poc.gpus import instance_key

    seen: dict[str, int] = {}
    out = []
    for g in gpus:
        slug = gpu_slug(g)
        seen[slug] = seen.get(slug, 0) + 1
        out.append(instance_key(slug, seen[slug]))
    return out


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
            note = r.gpu_mismatch or r.version_mismatch or r.same_device or next(iter((r.error or "").splitlines()), "")
            t.add_row(r.label if r.label != gpu_slug(r.gpu_request) else r.gpu_request, r.state, f"{elapsed:.0f} s",
                      r.run_id or "", _ran_on(r), note)
        return t


def _ran_on(r: JobRecord) -> str:
    if r.measured_gpu == "none":
        return "no GPU (CPU)"
    return (r.measured_gpu or "") + (f" (GPU {r.gpu_index})" if r.gpu_index is not None else "")


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
    t0 = time.monotonic()
    handles = [executor.submit(j) for j in jobs]
    records = {id(h): JobRecord(gpu_request=h.job.gpu, label=label, state="submitted")
               for h, label in zip(handles, job_labels([j.gpu for j in jobs]))}
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
                record.wall_s = round(time.monotonic() - t0, 3)
                save()
        except KeyboardInterrupt:
            unfinished = [h for h in handles if records[id(h)].state not in FINISHED]
            executor.cancel(unfinished)
            for h in unfinished:
                r = records[id(h)]
                r.state, r.error = "cancelled", "cancelled by Ctrl-C"
                r.elapsed_s = round(time.monotonic() - h.submitted_at, 3)
            record.notes.append(f"interrupted: {len(unfinished)} job(s) cancelled, finished ones kept")
            record.wall_s = round(time.monotonic() - t0, 3)
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
    r.started_at, r.finished_at, r.cuda_visible_devices = res.started_at, res.finished_at, res.cuda_visible_devices
    if res.receipt_json is None:
        return
    path = out.with_name(f"{out.stem}.{r.label}.json")
    write_atomic_bytes(path, res.receipt_json.encode())
    r.receipt = str(path)
    try:
        doc = load_receipt(path).document
    except InputError as exc:
        r.state, r.error = "failed", f"its receipt does not validate: {exc.message.splitlines()[0]}"
        return
    hw = receipt_hardware(doc)
    r.measured_gpu, r.measured_key = hw.get("gpu"), gpu_key_of_receipt(doc)
    r.gpu_uuid, r.gpu_index = hw.get("gpu_uuid"), hw.get("gpu_index")
    if gpu_key(h.job.gpu) != r.measured_key:
        r.gpu_mismatch = f"asked for {h.job.gpu}, ran on {_ran_on(r)}"
    prov = doc.get("provenance") or {}
    theirs = (prov.get("infercrane_version") or res.infercrane_version, prov.get("git_commit"))
    if theirs[0] != version or (commit and theirs[1] and theirs[1] != commit):
        r.version_mismatch = (f"ran InferCrane {theirs[0]} (commit {theirs[1] or 'unknown'}), the caller "
                              f"{version} (commit {commit or 'unknown'}): install the caller's version where the "
                              "jobs run")


def _conclude(record: FanoutRecord, out: Path) -> None:
    """Write ``out``: the one job's receipt, or the merge of every mergeable one; say what was left out and why; flag
    jobs that shared a device at the same time; compare the kernel screens of jobs of one GPU type."""
    from infercrane.errors import InputError
    from infercrane.poc.gpus import distinct_devices
    from infercrane.receipts.io import write_atomic_bytes
    from infercrane.poc.merge import merge
    from infercrane.receipts.validate import write_receipt

    good = [r for r in record.jobs if r.state == "done" and r.receipt and r.measured_key and not r.version_mismatch]
    for r in record.jobs:
        if r.state != "done":
            record.notes.append(f"{r.label}: {r.state}" + (f" ({r.error.splitlines()[0]})" if r.error else ""))
        elif r.version_mismatch:
            record.notes.append(f"{r.label}: left out of the result: {r.version_mismatch}")
    _flag_same_device(good)
    record.agreement, notes = _same_type_agreement(good)
    record.notes += notes
    chosen: list[JobRecord] = []
    for r in good:
        twin = next((c for c in chosen if c.measured_key == r.measured_key
                     and not distinct_devices(c.gpu_uuid, r.gpu_uuid)), None)
        if twin is None:
            chosen.append(r)
        elif r.gpu_uuid is not None and twin.gpu_uuid == r.gpu_uuid:
            record.notes.append(f"{r.label}: measured on the same device as {twin.label} ({r.gpu_uuid}); a merged "
                                "receipt holds one section per GPU, so only the first is merged")
        else:
            record.notes.append(f"{r.label}: measured on {r.measured_key} like {twin.label}, and one of them does not "
                                "say which device it ran on; a merged receipt holds one section per GPU, so only the "
                                "first is merged")
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
        record.notes.append(f"one receipt to keep ({chosen[0].label}): nothing to merge it with; it is "
                            f"{chosen[0].receipt}")
    record.complete = all(r.state == "done" and not r.version_mismatch for r in record.jobs) and record.result is not None


def _flag_same_device(jobs: Sequence[JobRecord]) -> None:
    """Flag each job that ran while an earlier-listed one ran on the same device (the same recorded GPU UUID)."""
    from datetime import datetime

    timed = [(r, datetime.fromisoformat(r.started_at), datetime.fromisoformat(r.finished_at)) for r in jobs
             if r.gpu_uuid is not None and r.started_at is not None and r.finished_at is not None]
    for i, (b, b_start, b_end) in enumerate(timed):
        a = next((a for a, a_start, a_end in timed[:i]
                  if a.gpu_uuid == b.gpu_uuid and a_start < b_end and b_start < a_end), None)
        if a is not None:
            b.same_device = (f"ran at the same time as {a.label} on one device ({b.gpu_uuid}): each timed the "
                             "other's load")


def _kernel_screens(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The kernel screen receipts a job's receipt holds: itself (a kernel screen), or a PoC's kernel sections."""
    from infercrane.receipts.models_v3 import SCREENING_V3

    if doc.get("schema_version") == SCREENING_V3:
        return [doc]
    return list(((doc.get("evidence") or {}).get("kernel") or {}).values())


def _span(values: list[float]) -> str:
    return f"{min(values):.4g}-{max(values):.4g} us"


def _same_type_agreement(jobs: Sequence[JobRecord]) -> tuple[list[SameTypeAgreement], list[str]]:
    """Each later job of a GPU type against the first of that type: their kernel screens, cell by cell. The receipts
    are read as written beside ``OUT``: each was validated when it came back (``_take``)."""
    from infercrane.kernels.agreement import compare_screens
    from infercrane.receipts.io import read_json

    out: list[SameTypeAgreement] = []
    notes: list[str] = []
    first: dict[str, tuple[JobRecord, list[dict[str, Any]]]] = {}
    for r in jobs:
        screens = _kernel_screens(read_json(Path(r.receipt)))
        if r.measured_key not in first:
            first[r.measured_key] = (r, screens)
            continue
        a, a_screens = first[r.measured_key]
        for da, db in zip(a_screens, screens):
            try:
                res = compare_screens(da, db)
            except ValueError as exc:
                notes.append(f"{a.label} vs {r.label}: not compared: {exc}")
                continue
            bad = [f"{c.impl} {c.rows} {c.mode}: {_span(c.a_trial_medians_us)} vs {_span(c.b_trial_medians_us)} "
                   f"(B/A {c.ratio_b_over_a:.3f})" for c in res.disagreeing]
            out.append(SameTypeAgreement(
                a=a.label, b=r.label, gpu=str(r.measured_key), op=res.op, method=res.method,
                compared=len(res.compared), agreeing=len(res.compared) - len(bad),
                compared_flagged=len(res.compared_flagged),
                agreeing_flagged=len(res.compared_flagged) - len(res.disagreeing_flagged),
                not_compared=len(res.not_compared), disagreeing=bad,
                decisions_same=res.a_decision == res.b_decision, a_decision=res.a_decision, b_decision=res.b_decision))
    return out, notes


def summary_lines(record: FanoutRecord) -> list[str]:
    """What the command prints at the end: one line per job, the notes, and where the result is."""
    from infercrane.kernels.agreement import summary_line

    lines = []
    for r in record.jobs:
        flag = "; ".join(x for x in (r.gpu_mismatch, r.version_mismatch, r.same_device) if x)
        lines.append(f"{r.label}: {r.state}" + (f" on {_ran_on(r)}" if r.measured_gpu else "") +
                     (f", {r.elapsed_s:.0f} s" if r.elapsed_s is not None else "") +
                     (f", run {r.run_id}" if r.run_id else "") + (f" [flagged: {flag}]" if flag else "") +
                     (f" -> {r.receipt}" if r.receipt else ""))
    times = [r.elapsed_s for r in record.jobs if r.elapsed_s is not None]
    if record.wall_s is not None and len(times) > 1:
        lines.append(f"wall: {record.wall_s:.0f} s for {len(record.jobs)} jobs (the longest {max(times):.0f} s, their "
                     f"sum {sum(times):.0f} s)")
    for ag in record.agreement:
        cells = summary_line(agreeing=ag.agreeing, compared=ag.compared, agreeing_flagged=ag.agreeing_flagged,
                             compared_flagged=ag.compared_flagged, not_compared=ag.not_compared)
        lines.append(f"{ag.a} vs {ag.b} ({ag.op}, {ag.gpu}): {cells}; decisions "
                     + ("the same" if ag.decisions_same else f"DIFFER: {ag.a_decision} / {ag.b_decision}"))
        lines += [f"  disagrees: {d}" for d in ag.disagreeing[:8]]
        if len(ag.disagreeing) > 8:
            lines.append(f"  … {len(ag.disagreeing) - 8} more in the fan-out record")
    lines += [f"note: {n}" for n in record.notes]
    lines.append(f"result: {record.result}" if record.result else "result: none (see the notes)")
    return lines


def read_record(path: Path) -> FanoutRecord:
    return FanoutRecord.model_validate(json.loads(Path(path).read_text()))


def run_fanned_out(where: Any, gpus: Sequence[str], *, argv: Sequence[str], files: dict[str, bytes], needs_gpu: bool,
                   out: Path, what: str, sign_key: Path | None, con: Any) -> int:
    """A command's fan-out from its executor options ``where`` (``options.ExecutorOptions``): refuse what
    cannot travel, build the executor and one job per GPU type, run them (``fan_out``), print the summary; exit 0
    when every job finished and the result was written, 1 otherwise."""
    from infercrane.options import check_output_file, command_line, plain
    from infercrane.errors import InputError
    from infercrane.executors import get_executor

    if sign_key is not None:
        raise InputError(f"--sign-key: the key stays on this machine and each job's receipt of {what} is written where "
                         "it ran", hint="sign the result here once it is back: "
                              f"{command_line('receipt', 'sign', out, '--key', 'KEY')}")
    check_output_file(out, "--out")
    executor = get_executor(where.executor, **({"address": where.ray_address} if where.executor == "ray" else {}))
    jobs = [Job(gpu=g, argv=tuple(argv), files=files, needs_gpu=needs_gpu, timeout_s=where.job_timeout_s) for g in gpus]
    record = fan_out(executor, jobs, out=out, argv=argv, con=con,
                     title=f"{what} on {', '.join(gpus)} through the {executor.name} executor → {plain(out)}")
    for line in summary_lines(record):
        con.print(plain(line))
    return 0 if record.complete else 1

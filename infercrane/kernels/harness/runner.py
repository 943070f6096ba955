"""Screen implementations of one op: availability, correctness at every row count, timing in every mode.

``screen(...)`` runs the whole thing and returns a ``ScreenResult`` carrying everything a receipt needs: raw samples,
summaries, clocks, the method of each timing mode, the tolerance rule, the seeds, calibration and device facts.

* **TIMED run** (a CUDA device): each implementation lives in its own worker process (``isolation.py``); a device
  calibration runs first in a worker of its own; then correctness of every implementation at every row count;
  then ``trials`` rounds of timing, each round visiting every (rows, mode) and, inside it, every implementation in
  an order rotated by one per round, so drift and warm-up effects hit all implementations alike.
  An implementation that fails correctness is not timed.
* **FUNCTIONAL run** (no CUDA device, or ``device="cpu"``): correctness only, on CPU tensors; no timing and no
  calibration, and the result says so. Triton runs under its interpreter when ``TRITON_INTERPRET=1`` is set;
  the handwritten CUDA kernel and vLLM's kernel are skipped with their reasons.

Statistics come from ``infercrane.stats`` (summaries here, speedup CIs and verdicts in ``compare.py``).
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Literal

from infercrane.decide.policy import TIMING_MODES
from infercrane.errors import InputError, UnavailableError
from infercrane.kernels.config import DEFAULT_CHECKS, DEFAULT_SAMPLES_PER_TRIAL, DEFAULT_TIMEOUT_S, DEFAULT_TRIALS
from infercrane.receipts.screen_result import (  # noqa: F401  (ScreenResult and friends: the result model)
    SCREEN_RESULT_SCHEMA, Calibration, CorrectnessResult, Failure, ImplementationResult, ScreenResult, SpecRecord,
    Status, TimingBlock, TimingCell,
)

Progress = Callable[[int, int, str], None]

# Report % of copy bandwidth only where the byte floor (bytes / copy bandwidth) is at least this many times the
# empty-kernel floor of the mode: below that the time is launch-bound and a bandwidth figure would mislead.
BANDWIDTH_MIN_FLOOR_RATIO = 5.0
# A cell whose median and the second timer's figure differ by more than this (relative to the second timer) is
# flagged and carries no verdict.
TIMER_AGREEMENT_MAX = 0.05
# A median below a physical floor measured in the same run (the mode's empty-kernel floor, the byte floor at copy
# bandwidth) by more than this fraction is impossible: flagged, never a speedup.
FLOOR_SLACK = 0.02
# Launch mode: a cell whose host time per call (median) is at least this fraction of its launch time (median) is
# bound by the host (``TimingCell.host_bound``): the events read the host's pace of issuing calls, not the GPU's.
HOST_BOUND_FRACTION = 0.9
# In launch and graph mode a call whose bytes are under this many times the L2 size is taken as served from L2.
L2_RESIDENT_MULTIPLE = 2
TIMING_SEED_OFFSET = 7_777_777
INTERLEAVING = (
    "trials outer; in each trial every rows x mode cell visits every implementation once, the order rotated by one "
    "implementation per trial; each visit warms up, then takes samples_per_trial samples"
)


# --------------------------------------------------------------------------------------------- helpers


def _validate(
    op: str, impl_keys: Any, modes: Any, rows: Any, trials: int, samples_per_trial: int, checks: int,
    candidate: Any, timeout_s: float,
) -> tuple[list[str], list[str], list[int], Any]:
    from infercrane.kernels import registry
    from infercrane.kernels.harness.timing import MODES
    from infercrane.kernels.user_candidate import CandidateRef, check_candidate_file, parse_candidate_ref

    if isinstance(candidate, str):
        candidate = parse_candidate_ref(candidate)
    if candidate is not None and not isinstance(candidate, CandidateRef):
        raise InputError(f"candidate must be 'path.py:function' or a CandidateRef, got {type(candidate).__name__}")
    if candidate is not None:
        check_candidate_file(candidate)
    keys = registry.validate_keys(op, list(impl_keys) if impl_keys is not None
                                  else [k for k in registry.known_keys(op) if k != registry.USER_KEY], candidate)
    modes = list(dict.fromkeys(modes))
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise InputError(f"unknown timing mode(s) {bad}; known modes: {', '.join(MODES)}")
    if not modes:
        raise InputError(f"no timing mode selected; known modes: {', '.join(MODES)}")
    rows = list(dict.fromkeys(rows))
    if not rows or any(not isinstance(r, int) or isinstance(r, bool) or r < 1 for r in rows):
        raise InputError(f"rows must be positive integers, got {rows}")
    if not isinstance(trials, int) or trials < 1:
        raise InputError(f"trials must be a positive integer, got {trials!r}")
    if not isinstance(samples_per_trial, int) or samples_per_trial < 2:
        raise InputError(f"samples_per_trial must be an integer >= 2, got {samples_per_trial!r}")
    if not isinstance(checks, int) or checks < 1:
        raise InputError(f"checks must be a positive integer, got {checks!r}")
    if not timeout_s > 0:
        raise InputError(f"timeout_s must be positive, got {timeout_s!r}")
    return keys, modes, rows, candidate


def resolve_device(device: str, flag: str = "device") -> tuple[str, str]:
    """Where a screen with ``device`` runs: ``("cuda" | "cpu", why)``, without creating a CUDA context. ``flag`` is how
    errors and reasons name the option (``--device`` from the CLI). Asking for CUDA without a GPU is refused."""
    if device not in ("auto", "cuda", "cpu"):
        raise InputError(f"{flag} must be 'auto', 'cuda' or 'cpu', got {device!r}")
    import torch

    has_cuda = bool(torch.cuda.is_available())
    if device == "cuda" and not has_cuda:
        raise UnavailableError(f"{flag} cuda was asked for but torch sees no CUDA device",
                               hint=f"run on a GPU machine, or use {flag} auto / cpu for a functional run")
    if device == "cpu":
        return "cpu", f"{flag} cpu was asked for: correctness only on CPU tensors, no timing"
    if has_cuda:
        return "cuda", "CUDA device present: correctness and timing"
    return "cpu", "no CUDA device visible to torch: correctness only on CPU tensors, no timing"


def plan_summary(device: str, *, modes: list[str] | tuple[str, ...], trials: int, samples_per_trial: int,
                 checks: int) -> str:
    """What a screen on ``device`` (``resolve_device``'s "cuda" or "cpu") will do, for a console header: a timed run
    names its timing modes, trials and samples; a functional run says that nothing is timed (its modes and trials
    are not used) and what is checked instead."""
    if device == "cpu":
        return (f"functional: nothing timed (timing modes and trials unused); correctness against the op's float32 "
                f"oracle, {checks} checks per row count")
    return (f"timed in {', '.join(modes)} mode{'s' if len(modes) > 1 else ''}, {trials} trials x {samples_per_trial} "
            f"samples, after {checks} correctness checks per row count")



def summarize_cell(rows: int, mode: str, blocks: list[TimingBlock], bytes_moved: int | None,
                   calibration: Calibration | None) -> TimingCell:
    """A cell from its raw blocks and the run's calibration: what the screen writes, and what a receipt's
    validation recomputes."""
    from infercrane.stats import summarize

    copy_gbps = calibration.copy_bandwidth.median_gbps if calibration else None
    floors = {b.mode: summarize(b.samples_us).median for b in calibration.floors} if calibration else {}
    l2 = calibration.device.l2_cache_bytes if calibration else None
    overhead = calibration.parent_overhead_us.get(mode) if calibration else None
    offset = calibration.cold_second_offset_us if calibration and mode == "cold" else None
    return _summarize_cell(rows, mode, blocks, bytes_moved, copy_gbps, floors.get(mode), l2, overhead, offset)


def _summarize_cell(rows: int, mode: str, blocks: list[TimingBlock], bytes_moved: int | None,
                    copy_gbps: float | None, floor_us: float | None, l2_bytes: int | None = None,
                    overhead_us: float | None = None, second_offset_us: float | None = None) -> TimingCell:
    """One implementation's cell: pooled summary, bandwidth where meaningful, the second timer's agreement and the
    physical floors; a disagreement beyond ``TIMER_AGREEMENT_MAX`` or a time under a floor flags the cell. Launch
    mode: the host's time per call summarized over the same samples as the time (``host_summary``), and whether it
    bounds the launch time (``host_bound``: its median at least ``HOST_BOUND_FRACTION`` of the time's); information
    beside the time, never a flag."""
    from infercrane.stats import summarize

    kept: list[float] = []
    every: list[float] = []
    n_rejected = 0
    for b in blocks:
        rejected = set(b.rejected)
        n_rejected += len(rejected)
        every.extend(b.samples_us)
        kept.extend(t for i, t in enumerate(b.samples_us) if i not in rejected)
    over: Literal["kept", "all"] = "kept" if kept else "all"
    summary = summarize(kept if kept else every)
    host = [t for b in blocks for t in (b.kept_host() if over == "kept" else b.host_samples_us or [])]
    host_summary = summarize(host) if host else None
    host_bound = host_summary.median >= HOST_BOUND_FRACTION * summary.median if host_summary else None
    achieved = bytes_moved / summary.median / 1e3 if bytes_moved and summary.median > 0 else None
    pct = None
    # Launch and graph mode call the op on the same buffers again and again: a working set that L2 can hold is served
    # from L2, faster than the device-memory copy bandwidth, so neither the byte floor nor a % of that bandwidth means
    # anything there. Cold mode flushes L2 before each sample.
    l2_resident = mode != "cold" and bytes_moved is not None and l2_bytes is not None and \
        bytes_moved < L2_RESIDENT_MULTIPLE * l2_bytes
    if achieved is None or copy_gbps is None:
        note = "no byte model or no copy bandwidth"
    elif l2_resident:
        note = (f"{bytes_moved} bytes per call < {L2_RESIDENT_MULTIPLE} x L2 ({l2_bytes} bytes) in {mode} mode: served "
                "from L2, so % of device-memory copy bandwidth is not reported and the byte floor does not apply")
    else:
        byte_floor_us = bytes_moved / (copy_gbps * 1e3)
        if floor_us is None:
            note = f"no empty-kernel floor measured in {mode} mode"
        elif byte_floor_us >= BANDWIDTH_MIN_FLOOR_RATIO * floor_us:
            pct = 100.0 * achieved / copy_gbps
            note = (f"byte floor {byte_floor_us:.3g} us >= {BANDWIDTH_MIN_FLOOR_RATIO:g} x empty-kernel floor "
                    f"{floor_us:.3g} us: % of copy bandwidth reported")
        else:
            note = (f"byte floor {byte_floor_us:.3g} us < {BANDWIDTH_MIN_FLOOR_RATIO:g} x empty-kernel floor "
                    f"{floor_us:.3g} us: launch-bound, % of copy bandwidth not reported")
    finite = [b.outputs_finite for b in blocks if b.outputs_finite is not None]
    flags: list[str] = []
    # The second timer ran in one trial; it is held against that trial's own median (same conditions: launch-mode
    # figures move by tens of percent between trials on a busy host).
    seconds = [b for b in blocks if b.second_timer_us is not None]
    second = seconds[-1].second_timer_us if seconds else None
    method = seconds[-1].second_timer_method if seconds else None
    disagreement = None
    if second:
        import statistics

        trial = seconds[-1]
        own = [t for i, t in enumerate(trial.samples_us) if i not in set(trial.rejected)] or trial.samples_us
        # graph mode with placements: the second timer replayed the trial's last graph; held against its median
        reference = trial.second_timer_reference_us or statistics.median(own)
        # receipts whose cold second timer was CUPTI's marker span: plus what the event pair adds beyond it
        # (the calibration's cold_second_offset_us, measured on the empty kernel); None since the driver-API pair
        held = second + (second_offset_us or 0.0)
        disagreement = reference / held - 1.0
    # cold samples are single calls bracketed by events: a difference below their resolution is no disagreement
    # (for second timers that read event timestamps; a receipt whose cold cells were held against CUPTI's last
    # activity keeps the limit it was decided under)
    from infercrane.kernels.harness.timing import COLD_RESOLUTION_METHODS, COLD_RESOLUTION_US

    limit = TIMER_AGREEMENT_MAX
    if second and mode == "cold" and any(k in (method or "") for k in COLD_RESOLUTION_METHODS):
        limit = max(TIMER_AGREEMENT_MAX, COLD_RESOLUTION_US / held)
    if second is None:
        why = "; ".join(sorted({b.second_timer_error for b in blocks if b.second_timer_error})) or "not run"
        flags.append(f"no_second_timer: {why}")
    elif abs(disagreement) > limit:
        flags.append(f"timer_disagreement: trial {seconds[-1].trial} median {held * (1 + disagreement):.4g} us vs "
                     f"second timer {held:.4g} us ({disagreement:+.1%}, limit ±"
                     f"{f'{limit:.0%}' if limit == TIMER_AGREEMENT_MAX else f'{limit:.1%}'}; "
                     f"{method.split(':')[0]})")
    byte_floor_us = bytes_moved / (copy_gbps * 1e3) if bytes_moved and copy_gbps and not l2_resident else None
    # The empty-kernel floor is a device floor in graph and cold mode; in launch mode it is the host cost of
    # Triton's launcher, which other launch paths undercut, so only the byte floor applies there.
    floors = [f for f in ((floor_us if mode != "launch" else None), byte_floor_us) if f is not None]
    floor = max(floors) if floors else None
    if floor is not None and summary.median < (1.0 - FLOOR_SLACK) * floor:
        which = "byte floor at copy bandwidth" if floor == byte_floor_us else f"empty-kernel floor in {mode} mode"
        flags.append(f"below_floor: median {summary.median:.4g} us < {which} {floor:.4g} us: impossible, a fault of "
                     "the measurement or the kernel, never a speedup")
    if any(b.outputs_finite is False for b in blocks):
        flags.append("outputs_not_finite: the in-place buffers held NaN/inf after timing")
    from infercrane.kernels.harness.timing import parent_bound

    faults = [f for f in (parent_bound(b, overhead_us) for b in blocks) if f]
    flags += faults[:1]
    wrong = [b for b in blocks if b.timed_check is not None and not b.timed_check.passed]
    if wrong:
        flags.append(f"timed_outputs_wrong: trial {wrong[0].trial}: {wrong[0].timed_check.failure_summary()}")
    per_graph = [m for b in blocks for m in b.graph_medians()]
    levels = None
    if per_graph:
        from infercrane.kernels.harness.placement import split_levels

        levels = split_levels(per_graph)
    return TimingCell(
        rows=rows, mode=mode, calls_per_sample=blocks[0].calls_per_sample, blocks=blocks, kept_samples_us=kept,
        summary_over=over, summary=summary, n_rejected=n_rejected, throttled=any(b.throttled for b in blocks),
        outputs_finite=all(finite) if finite else None, bytes_moved=bytes_moved, achieved_gbps=achieved,
        pct_of_copy_bandwidth=pct, bandwidth_note=note, second_timer_us=second, second_timer_method=method,
        timer_disagreement=disagreement, floor_us=floor, flags=flags, levels=levels,
        second_timer_offset_us=second_offset_us if second is not None else None,
        host_summary=host_summary, host_bound=host_bound,
    )


def _prefill_info(op: str, impls: list["_Impl"], candidate: Any) -> None:
    """What is known without loading anything, so an implementation whose worker dies while loading is still named
    properly (the worker's own answer replaces this)."""
    from infercrane.kernels import registry

    built_in = {i.key: i for i in registry.implementations(op)}
    for im in impls:
        if im.key in built_in:
            i = built_in[im.key]
            im.info.update(label=i.label, kind=i.kind, in_place=i.in_place, source=i.source, notes=list(i.notes))
        elif candidate is not None:
            im.info.update(label=f"user candidate {candidate.path.name}:{candidate.function}", kind="candidate",
                           in_place=candidate.in_place_override, source=candidate.text)


PARENT_OVERHEAD_REPEATS = 3


def _timed_job(worker: Any, job: dict[str, Any], timeout_s: float, what: str) -> TimingBlock:
    """One visit's timing jobs (``session``: time, sample, finish) on ``worker``; the sample job bracketed by this
    process's monotonic clock (the block's ``parent_elapsed_us``; worker state kept for a ``verify`` unless the job
    is empty). A worker whose finished block does not hold the samples (and host times) it sent is a timer fault."""
    from infercrane.kernels.harness.isolation import WorkerFailure

    from pydantic import ValidationError

    worker.request(job, timeout_s, what)
    t0 = time.monotonic()
    sampled = worker.request({"op": "sample"}, timeout_s, what)
    elapsed_us = (time.monotonic() - t0) * 1e6
    try:
        block = TimingBlock.model_validate(worker.request({"op": "finish", "keep": not job.get("empty")}, timeout_s,
                                                          what))
    except ValidationError as e:  # e.g. a host time that is NaN: the worker's clock was not what InferCrane reads
        raise WorkerFailure("timer_fault", f"{what}: the worker's timing block does not hold together: "
                                           f"{_first_error(e)}") from None
    if list(block.samples_us) != list(sampled.get("samples_us", [])):
        raise WorkerFailure("timer_fault", f"{what}: the samples in the worker's block differ from those it sent "
                                           "when they were taken")
    if block.host_samples_us != sampled.get("host_samples_us"):
        raise WorkerFailure("timer_fault", f"{what}: the host times in the worker's block differ from those it sent "
                                           "when they were taken")
    return block.model_copy(update={"parent_elapsed_us": elapsed_us})


def _first_error(e: Any) -> str:
    """A pydantic ValidationError's first error as ``field.path: message``."""
    errors = e.errors()
    if not errors:
        return str(e)
    return f"{'.'.join(str(p) for p in errors[0]['loc'])}: {errors[0]['msg']}"


def _visit(im: "_Impl", job: dict[str, Any], spec: Any, timeout_s: float, what: str, seed: int) -> TimingBlock:
    """Time one cell of one implementation, then check the outputs of what was timed (``timed_check``)."""
    from infercrane.kernels.harness.timed_check import verify

    block = _timed_job(im.worker, job, timeout_s, what)
    check = verify(lambda j: im.worker.request(j, timeout_s, f"timed-output check of {what}"), spec,
                   in_place=bool(im.info["in_place"]), rows=int(job["rows"]), seed=seed,
                   calls=block.calls_per_sample)
    return block.model_copy(update={"timed_check": check})


def _handshake_cost(worker: Any, modes: list[str], samples: int, timeout_s: float) -> dict[str, float]:
    """Per mode, what this process's clock sees around a sample job of the empty kernel beyond the samples' own
    time: the median of ``PARENT_OVERHEAD_REPEATS`` jobs in the calibration worker (no candidate ever ran there)."""
    import statistics

    from infercrane.kernels.harness.placement import GRAPHS_PER_TRIAL, draw

    out: dict[str, float] = {}
    for m in modes:
        extra = []
        for rep in range(PARENT_OVERHEAD_REPEATS):
            job = {"op": "time", "empty": True, "device": "cuda", "rows": 1, "mode": m, "samples": samples,
                   "trial": rep, "seed": 0, "second_timer": False,
                   "placements": [draw(0, g).model_dump() for g in range(GRAPHS_PER_TRIAL)] if m == "graph" else None}
            block = _timed_job(worker, job, timeout_s, f"handshake cost in {m} mode")
            extra.append(block.parent_elapsed_us - sum(block.samples_us) * block.calls_per_sample)
        out[m] = statistics.median(extra)
    return out


class _Impl:
    """Mutable bookkeeping for one implementation during a screen."""

    def __init__(self, key: str, worker: Any) -> None:
        self.key = key
        self.worker = worker
        self.info: dict[str, Any] = {"key": key, "label": key, "kind": "candidate", "in_place": None,
                                     "source": "", "notes": [], "provenance": {}}
        self.available = True
        self.skip_reason: str | None = None
        self.status: Status = "ok"
        self.failure: Failure | None = None
        self.error: str | None = None
        self.exit_signal: str | None = None
        self.correctness: list[CorrectnessResult] = []
        self.blocks: dict[tuple[int, str], list[TimingBlock]] = {}
        self.calls: dict[tuple[int, str], int] = {}
        self.steps = 0  # correctness and timing steps taken, for progress accounting

    @property
    def active(self) -> bool:
        return self.status == "ok" and self.available

    def fail(self, failure: Failure, error: str, exit_signal: str | None = None) -> None:
        self.status, self.failure, self.error, self.exit_signal = "failed", failure, error, exit_signal
        self.close()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


# --------------------------------------------------------------------------------------------- screen


def screen(
    spec: Any,
    impl_keys: list[str] | tuple[str, ...] | None = None,
    modes: list[str] | tuple[str, ...] = TIMING_MODES,
    rows: list[int] | tuple[int, ...] | None = None,
    trials: int = DEFAULT_TRIALS,
    candidate: Any = None,
    progress: Progress | None = None,
    *,
    samples_per_trial: int = DEFAULT_SAMPLES_PER_TRIAL,
    checks: int = DEFAULT_CHECKS,
    seed: int = 0,
    device: str = "auto",
    isolate: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    policy: Any = None,
) -> ScreenResult:
    """Screen ``impl_keys`` (default: every built-in implementation, plus ``user`` when ``candidate`` is given).

    ``spec``: an ``OpSpec`` of a registered op (it names the op); ``rows`` defaults to ``spec.rows``. ``candidate``: ``"path.py:fn"`` or a
    ``CandidateRef``. ``progress(done, total, description)`` is called after every step. ``isolate=False`` runs
    every implementation in this process (no protection from crashes; for quick functional runs).
    ``policy``: the kernel policy whose CI settings the comparisons use (default: the packaged one).
    Raises InputError for bad arguments or a bad candidate file before any kernel runs.
    """
    from infercrane.kernels.harness import correctness as corr_mod
    from infercrane.kernels.harness.calibration import device_info
    from infercrane.kernels.harness.compare import NEW_SCREEN_FLAG_RULE, with_comparisons
    from infercrane.kernels.harness.correctness import check_in_worker
    from infercrane.kernels.harness.isolation import InProcessWorker, SubprocessWorker, WorkerFailure, spec_to_json
    from infercrane.kernels.harness.placement import DRAW_METHOD, GRAPHS_PER_TRIAL, draw
    from infercrane.kernels.harness.timed_check import verify_seed
    from infercrane.kernels.harness.timing import HOST_METHOD, method_sentence, parent_bound

    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    op = getattr(spec, "OP_NAME", None)
    if op is None:
        raise InputError(f"spec must be an OpSpec of a registered op, got {type(spec).__name__}")
    keys, modes, rows, candidate = _validate(
        op, impl_keys, modes, rows if rows is not None else list(spec.rows), trials, samples_per_trial, checks,
        candidate, timeout_s,
    )
    if spec.dtype not in spec.TOLERANCES:
        raise InputError(f"no correctness tolerance for dtype {spec.dtype!r}; known: {', '.join(spec.TOLERANCES)}")
    if policy is None:
        from infercrane.decide.policy import load_policy

        policy = load_policy("kernel")
    dev, dev_reason = resolve_device(device)
    timed = dev == "cuda"
    timed_modes = modes if timed else []
    timing_seed = seed + TIMING_SEED_OFFSET

    make_worker = SubprocessWorker if isolate else InProcessWorker
    total = len(keys) * (1 + len(rows)) + (1 if timed else 0) + (len(keys) * trials * len(rows) * len(timed_modes))
    done = 0
    remaining_per_impl = len(rows) + trials * len(rows) * len(timed_modes)

    def step(desc: str, n: int = 1) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(min(done, total), total, desc)

    def drop(im: _Impl, desc: str) -> None:
        """Count the steps a dropped implementation will not take, so the progress total stays right."""
        step(desc, max(0, remaining_per_impl - im.steps))
        im.steps = remaining_per_impl

    if progress is not None:
        progress(0, total, "starting workers")
    impls = [_Impl(k, make_worker(k)) for k in keys]
    _prefill_info(op, impls, candidate)
    calib_worker = make_worker("calibration") if timed else None
    spec_json = spec_to_json(spec)
    calibration: Calibration | None = None
    calibration_note: str | None = None
    software: dict[str, str] = {}
    interrupted: str | None = None
    try:
        # 1. load (workers start in parallel; replies are collected in registry order)
        for im in impls:
            im.worker.send({"op": "load", "op_name": op, "impl": im.key, "spec": spec_json, "device": dev,
                            "candidate": candidate.to_json() if (im.key == "user" and candidate) else None})
        for im in impls:
            try:
                info = im.worker.receive(timeout_s, f"load of {im.key}")
            except WorkerFailure as e:
                im.fail(e.kind, e.message, e.exit_signal)
                step(f"{im.key}: {e.kind} while loading")
                drop(im, f"{im.key}: not screened")
                continue
            im.info.update({k: info[k] for k in ("label", "kind", "in_place", "source", "notes", "provenance")})
            software = software or dict(info.get("versions", {}))
            if not info["available"]:
                im.available, im.status, im.skip_reason = False, "skipped", info["reason"]
                im.close()
                step(f"{im.key}: skipped ({info['reason']})")
                drop(im, f"{im.key}: skipped")
            else:
                step(f"{im.key}: loaded")

        # 2. calibration (timed runs), then the handshake cost of a sample job, in the same clean worker
        if calib_worker is not None:
            try:
                calibration = Calibration.model_validate(calib_worker.request(
                    {"op": "calibrate", "device": dev, "modes": timed_modes, "samples": samples_per_trial},
                    timeout_s, "calibration"))
                calibration = calibration.model_copy(update={"parent_overhead_us": _handshake_cost(
                    calib_worker, timed_modes, samples_per_trial, timeout_s)})
            except WorkerFailure as e:
                calibration_note = f"calibration failed: {e.message}"
            finally:
                calib_worker.close()
            step("calibration")
            if calibration is None:
                raise UnavailableError(
                    f"device calibration failed, so no timing can be interpreted: {calibration_note}",
                    hint="check that the GPU is healthy (nvidia-smi) and retry",
                )

        # 3. correctness
        for im in impls:
            if not im.active:
                continue
            for r in rows:
                try:
                    res = check_in_worker(
                        lambda job, im=im, r=r: im.worker.request(job, timeout_s, f"correctness of {im.key} at rows={r}"),
                        spec, in_place=bool(im.info["in_place"]), rows=r, device=dev, checks=checks, base_seed=seed)
                except WorkerFailure as e:
                    im.fail(e.kind, e.message, e.exit_signal)
                    drop(im, f"{im.key}: {e.kind} in correctness")
                    break
                im.correctness.append(res)
                im.steps += 1
                step(f"{im.key}: correctness rows={r} {'passed' if res.passed else 'FAILED'}")
            if im.active and not all(c.passed for c in im.correctness):
                first = next(c for c in im.correctness if not c.passed)
                im.fail("incorrect", f"incorrect: {first.failure_summary()}")
                drop(im, f"{im.key}: incorrect, not timed")

        # 4. timing, interleaved
        for t in range(trials if timed else 0):
            for r in rows:
                for m in timed_modes:
                    active = [im for im in impls if im.active]
                    if not active:
                        continue
                    k = t % len(active)
                    placements = ([draw(timing_seed, t * GRAPHS_PER_TRIAL + g).model_dump()
                                   for g in range(GRAPHS_PER_TRIAL)] if m == "graph" else None)
                    for im in active[k:] + active[:k]:
                        cell = (r, m)
                        job = {"op": "time", "rows": r, "mode": m, "samples": samples_per_trial, "trial": t,
                               "seed": timing_seed, "calls_per_sample": im.calls.get(cell),
                               "second_timer": t == trials - 1, "placements": placements,
                               "graph_fixed_us": calibration.graph_fixed_cost_us if calibration else None}
                        what = f"timing of {im.key} rows={r} mode={m} trial={t}"
                        try:
                            block = _visit(im, job, spec, timeout_s, what,
                                           verify_seed(timing_seed, t, r, m))
                        except WorkerFailure as e:
                            im.fail(e.kind, e.message, e.exit_signal)
                            drop(im, f"{im.key}: {e.kind} while timing")
                            continue
                        im.blocks.setdefault(cell, []).append(block)
                        im.calls.setdefault(cell, block.calls_per_sample)
                        im.steps += 1
                        step(f"trial {t + 1}/{trials} rows={r} {m}: {im.key}")
                        if block.timed_check is not None and not block.timed_check.passed:
                            im.fail("incorrect", f"incorrect when timed: {block.timed_check.failure_summary()}")
                            drop(im, f"{im.key}: incorrect when timed")
                            continue
                        fault = parent_bound(block, calibration.parent_overhead_us.get(m) if calibration else None)
                        if fault and im.info.get("kind") == "candidate":
                            im.fail("timer_fault", fault)
                            drop(im, f"{im.key}: timer fault")
        # 5. provenance as it stands after the run (configurations compiled, library versions)
        for im in impls:
            if im.active and im.worker is not None:
                try:
                    im.info["provenance"] = im.worker.request({"op": "describe"}, timeout_s, f"describe {im.key}")[
                        "provenance"]
                except WorkerFailure as e:
                    im.info["provenance"] = {**im.info["provenance"], "describe_error": e.message[:500]}
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM through proc.raise_on_sigterm: keep what finished
        if timed and calibration is None:
            raise
        interrupted = (f"{str(e) or 'interrupted (Ctrl-C)'} after {done} of {total} steps; the implementations' "
                       "unfinished visits are not in this result")
    finally:
        for im in impls:
            im.close()
        if calib_worker is not None:
            calib_worker.close()

    # 6. assemble
    if interrupted:  # an implementation stopped before every row count was checked decides nothing
        for im in impls:
            if im.active and len(im.correctness) < len(rows):
                im.status, im.failure = "failed", "harness"
                im.error = f"not checked at every row count: {interrupted}"
    results = []
    for im in impls:
        cells = [
            summarize_cell(r, m, im.blocks[(r, m)], spec.bytes_moved(r), calibration)
            for r in rows for m in timed_modes if (r, m) in im.blocks
        ]
        results.append(ImplementationResult(
            **im.info, available=im.available, skip_reason=im.skip_reason, status=im.status, failure=im.failure,
            error=im.error, exit_signal=im.exit_signal, correctness=im.correctness, timings=cells,
        ))
    device_record = calibration.device if calibration else device_info("cpu")
    base = dict(
        schema_version=SCREEN_RESULT_SCHEMA,
        spec=SpecRecord(**spec.record()),
        run_kind="timed" if timed else "functional", run_kind_reason=dev_reason, device=device_record,
        software=software, isolation="subprocess" if isolate else "in_process", rows=rows,
        modes_requested=modes, modes=timed_modes, methods={m: method_sentence(m) for m in timed_modes},
        host_method=HOST_METHOD if "launch" in timed_modes else None,
        correctness_method=" ".join((corr_mod.__doc__ or "").split()), tolerance=spec.tolerance,
        checks_per_rows=checks, base_seed=seed, timing_input_seed=timing_seed, trials=trials,
        samples_per_trial=samples_per_trial, interleaving=INTERLEAVING, timeout_s=float(timeout_s),
        calibration=calibration, calibration_note=calibration_note if timed else
        "functional run: no calibration (nothing is timed)",
        implementations=results, interrupted=interrupted,
        placement={"seed": timing_seed, "graphs_per_trial": GRAPHS_PER_TRIAL, "method": DRAW_METHOD}
        if "graph" in timed_modes else None,
    )
    finished = datetime.now(timezone.utc)
    result = ScreenResult(**base, comparisons=[], started_at=started, finished_at=finished,
                          wall_s=time.perf_counter() - t0)
    return with_comparisons(result, policy, flag_rule=NEW_SCREEN_FLAG_RULE) if timed else result

"""NVIDIA AIPerf (0.12.0) as a driver: ``aiperf profile`` in a subprocess, then its JSON exports.

Command (flags as AIPerf 0.12.0's ``aiperf profile --help`` lists them): ``--model``, ``--url``,
``--endpoint-type completions|chat``, ``--streaming``, ``--concurrency``, ``--request-count``,
``--warmup-request-count``, ``--isl``/``--isl-stddev 0``, ``--osl``/``--osl-stddev 0``,
``--extra-inputs ignore_eos:true`` and ``min_tokens:<osl>`` (fixed output lengths),
``--use-server-token-count``, ``--tokenizer``, ``--artifact-dir``, ``--export-level records``,
``--random-seed``, ``--request-timeout-seconds``; UI, server-metrics scraping and GPU telemetry off.
With a shared prompt file (``RunSpec.prompts_file``, ``serving/prompts.py``) ``--input-file F --custom-dataset-type
single_turn --dataset-sampling-strategy sequential`` replace ``--isl``/``--isl-stddev``: the file's prompts in file
order, cycled when the point needs more (AIPerf 0.12's ``aiperf/config/flags/cli_config.py``; the file's
``output_length`` equals ``--osl``). AIPerf sends the warm-up requests first, from the file's first prompts, each
prefixed with ``warmup\n`` (its WARMUP_SYSTEM_MESSAGE_PREFIX, so warm-up cannot fill the prefix cache with what
profiling sends), then the measured ones as written (checked against the test server in test_aiperf_live.py).

Exports read back:
  * ``profile_export_aiperf.json``: the profiling phase's summary (warm-up excluded); percentiles
    and throughputs come from here;
  * ``phase_manifest.json``: the profiling phase's window (``end_ns - start_ns``), which AIPerf's
    throughputs divide by: that is ``duration_s``;
  * ``profile_export.jsonl``: one record per request, with ``metadata.benchmark_phase``
    (``warmup``/``profiling``), ``metrics`` and, for a failed request, ``error``. Failures and
    output-length mismatches are counted here, from profiling records only, and cross-checked
    against the summary's ``error_request_count`` / ``osl_mismatch_count``.
"""
from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from infercrane.errors import RunFailed
from infercrane.serving.drivers import Driver, RunSpec
from infercrane.serving.engine import log_tail
from infercrane.serving.metrics import RunMetrics

PINNED_VERSION = "0.12.0"
SUMMARY_FILE = "profile_export_aiperf.json"
RECORDS_FILE = "profile_export.jsonl"
MANIFEST_FILE = "phase_manifest.json"
MIN_WINDOW_REQUESTS = 20  # below this, a time window's p95 is close to its maximum

# InferCrane field prefix -> AIPerf metric tag (see infercrane.serving.metrics for the definitions).
METRIC_TAGS = {"ttft": "time_to_first_token", "tpot": "inter_token_latency", "e2e": "request_latency"}


class AiperfDriver(Driver):
    name = "aiperf"
    dist = "aiperf"

    def available(self) -> tuple[bool, str]:
        import importlib.util

        if importlib.util.find_spec("aiperf") is None:
            return False, f"aiperf is not importable by {sys.executable} (pip install aiperf=={PINNED_VERSION})"
        version = self.version()
        if version != PINNED_VERSION:
            return True, f"aiperf {version} (InferCrane reads the export format of {PINNED_VERSION})"
        return True, f"aiperf {version}"

    def command(self, spec: RunSpec) -> list[str]:
        cmd = [sys.executable, "-m", "aiperf", "profile",
               "--model", spec.served_model,
               "--url", spec.base_url,
               "--endpoint-type", spec.endpoint,
               "--concurrency", str(spec.concurrency),
               "--request-count", str(spec.request_count),
               *(["--input-file", str(spec.prompts_file), "--custom-dataset-type", "single_turn",
                  "--dataset-sampling-strategy", "sequential"] if spec.prompts_file is not None
                 else ["--isl", str(spec.input_tokens), "--isl-stddev", "0"]),
               "--osl", str(spec.output_tokens), "--osl-stddev", "0",
               "--tokenizer", spec.tokenizer,
               "--artifact-dir", str(spec.artifact_dir),
               "--export-level", "records",
               "--random-seed", str(spec.seed),
               "--request-timeout-seconds", f"{spec.request_timeout_s:g}",
               "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry"]
        if spec.streaming:
            cmd.append("--streaming")
        if spec.warmup_requests > 0:
            cmd += ["--warmup-request-count", str(spec.warmup_requests)]
        if spec.ignore_eos:
            cmd += ["--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{spec.output_tokens}"]
        if spec.token_count_source == "server":
            cmd.append("--use-server-token-count")
        return cmd

    def parse(self, spec: RunSpec, *, driver_version: str, driver_cpu_s: float | None = None,
              started_at: str | None = None) -> RunMetrics:
        return parse_aiperf_export(spec, spec.artifact_dir, driver_version=driver_version,
                                   driver_cpu_s=driver_cpu_s, started_at=started_at)

    def grid_command(self, grid: RunGrid) -> list[str]:
        """One ``aiperf profile`` for a whole arm visit: every concurrency (a sweep) x every run (trials)."""
        spec = grid.spec
        cmd = self.command(spec)
        cmd[cmd.index("--concurrency") + 1] = ",".join(str(c) for c in grid.concurrencies)
        if grid.window_s is not None:  # the same window at every point, whatever the arm's speed
            i = cmd.index("--request-count")
            cmd[i:i + 2] = ["--benchmark-duration", f"{grid.window_s:g}",
                            "--benchmark-grace-period", f"{spec.request_timeout_s:g}"]
        if grid.warmup_s is not None:
            if "--warmup-request-count" in cmd:
                i = cmd.index("--warmup-request-count")
                del cmd[i:i + 2]
            cmd += ["--warmup-duration", f"{grid.warmup_s:g}"]
        cmd[cmd.index("--random-seed") + 1] = str(spec.seed + grid.run_indices[0])
        if len(grid.run_indices) > 1:  # AIPerf refuses its multi-run flags for one trial
            cmd += ["--num-profile-runs", str(len(grid.run_indices)), "--vary-seed-per-trial",
                    "--no-profile-run-disable-warmup-after-first", "--profile-run-cooldown-seconds", "0"]
        return cmd

    def run_grid(self, grid: RunGrid, *, on_point: Callable[[int, int], None] | None = None) -> list[RunMetrics]:
        """Run one visit as one AIPerf invocation and read each (run, concurrency) point back as its own run.

        AIPerf 0.12 runs the trials one after the other, each sweeping the concurrencies in order, each with its
        own warm-up and its own prompts (``--vary-seed-per-trial``: no prompt repeats inside the visit, so the
        prefix cache, reset before the visit, never serves one); it writes
        ``profile_runs/trial_<k>/concurrency_<c>/``. ``on_point(run_index, concurrency)`` is called while the
        invocation runs, once per point whose summary AIPerf has written (progress only: every point is read back
        after the invocation ends)."""
        from dataclasses import replace

        self.require_available()
        spec = grid.spec
        cmd = self.grid_command(grid)
        with PointWatch(grid, on_point):
            version, started_at, cpu_s = self.invoke(spec, cmd, timeout_s=spec.timeout_s * len(grid.run_indices)
                                                     * len(grid.concurrencies))

        def read() -> list[RunMetrics]:
            out = []
            for k, run_index in enumerate(grid.run_indices, start=1):
                for c in grid.concurrencies:
                    point = replace(spec, concurrency=c, run_index=run_index,
                                    request_count=grid.request_counts.get(c, spec.request_count),
                                    artifact_dir=_point_dir(spec.artifact_dir, k, c, grid))
                    m = parse_aiperf_export(point, point.artifact_dir, driver_version=version,
                                            started_at=started_at, driver_cpu_s=None, window_s=grid.window_s)
                    out.append(m.model_copy(update={
                        "started_at": _point_started_at(point.artifact_dir) or started_at,
                        "notes": [*m.notes, f"one of {len(grid.run_indices)} x {len(grid.concurrencies)} points of "
                                            f"one AIPerf invocation ({cpu_s:.1f} CPU s in all)"]}))
            return out

        return self.read_back(cmd, read)


@dataclass(frozen=True)
class RunGrid:
    """One arm visit for one AIPerf invocation: ``spec`` with every run index and concurrency of the visit.
    ``window_s``/``warmup_s``: seconds of load / warm-up per point instead of request counts; ``request_counts``:
    the count each concurrency was asked for (when the window is a count, it must be the same at every point)."""

    spec: RunSpec
    run_indices: tuple[int, ...]
    concurrencies: tuple[int, ...]
    request_counts: dict[int, int] = field(default_factory=dict)
    window_s: float | None = None
    warmup_s: float | None = None


class PointWatch:
    """While a visit's AIPerf invocation runs, call ``on_point(run_index, concurrency)`` once per point whose
    summary file has appeared, polling every ``interval_s`` in a daemon thread; nothing at all without
    ``on_point``. A callback that raises is not called again (progress must never fail a measurement)."""

    def __init__(self, grid: RunGrid, on_point: Callable[[int, int], None] | None, interval_s: float = 2.0):
        self.grid, self.on_point, self.interval_s = grid, on_point, interval_s
        self.seen: set[tuple[int, int]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def points(self) -> list[tuple[int, int, Path]]:
        return [(run_index, c, _point_dir(self.grid.spec.artifact_dir, k, c, self.grid) / SUMMARY_FILE)
                for k, run_index in enumerate(self.grid.run_indices, start=1) for c in self.grid.concurrencies]

    def scan(self) -> None:
        for run_index, c, summary in self.points():
            if (run_index, c) not in self.seen and summary.is_file():
                self.seen.add((run_index, c))
                if self.on_point is not None:
                    try:
                        self.on_point(run_index, c)
                    except Exception:
                        self.on_point = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.scan()

    def __enter__(self) -> "PointWatch":
        if self.on_point is not None and len(self.grid.run_indices) * len(self.grid.concurrencies) > 1:
            self._thread = threading.Thread(target=self._loop, name="aiperf-point-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def _point_dir(base: Path, trial: int, concurrency: int, grid: RunGrid) -> Path:
    """Where AIPerf 0.12 writes one point: ``profile_runs/trial_<k>/concurrency_<c>/`` with several trials and
    concurrencies, ``profile_runs/run_<k>/`` with several trials of one concurrency, ``concurrency_<c>/`` with one
    trial of several, the artifact folder itself with one of each."""
    several = len(grid.concurrencies) > 1
    if len(grid.run_indices) > 1:
        runs = base / "profile_runs"
        return runs / f"trial_{trial:04d}" / f"concurrency_{concurrency}" if several else runs / f"run_{trial:04d}"
    return base / f"concurrency_{concurrency}" if several else base


def _point_started_at(point_dir: Path) -> str | None:
    """When a point's profiling phase began (its phase manifest, or its run config's file time)."""
    from datetime import datetime, timezone

    try:
        manifest = json.loads((point_dir / MANIFEST_FILE).read_text())
        start = next(p["start_ns"] for p in manifest["phases"] if p.get("phase_kind") == "profiling")
        return datetime.fromtimestamp(int(start) / 1e9, timezone.utc).isoformat()
    except (OSError, ValueError, KeyError, StopIteration, TypeError):
        pass
    try:
        return datetime.fromtimestamp((point_dir / SUMMARY_FILE).stat().st_mtime, timezone.utc).isoformat()
    except OSError:
        return None


def _stat(summary: dict, tag: str, stat: str) -> float | None:
    entry = summary.get(tag)
    if not isinstance(entry, dict) or entry.get(stat) is None:
        return None
    return float(entry[stat])


def _profiling_window_s(artifact_dir: Path) -> float | None:
    """The profiling phase's window from phase_manifest.json: what AIPerf divides by for its rates
    (its ``benchmark_duration`` differs from it by milliseconds)."""
    try:
        manifest = json.loads((artifact_dir / MANIFEST_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    for phase in manifest.get("phases") or []:
        if phase.get("phase_kind") == "profiling" and phase.get("start_ns") and phase.get("end_ns"):
            return (int(phase["end_ns"]) - int(phase["start_ns"])) / 1e9
    return None


def parse_aiperf_export(spec: RunSpec, artifact_dir: Path, *, driver_version: str,
                        driver_cpu_s: float | None = None, started_at: str | None = None,
                        window_s: float | None = None) -> RunMetrics:
    """Read AIPerf's summary JSON and per-request JSONL in ``artifact_dir`` into RunMetrics."""
    summary_path = artifact_dir / SUMMARY_FILE
    records_path = artifact_dir / RECORDS_FILE
    if not summary_path.is_file() or not records_path.is_file():
        raise RunFailed(f"AIPerf wrote no {SUMMARY_FILE} / {RECORDS_FILE} under {artifact_dir}; "
                        f"driver log:\n{log_tail(artifact_dir / 'driver.log', 30)}",
                        hint="read the driver log; --export-level records is needed for the JSONL")
    summary = json.loads(summary_path.read_text())
    records = []
    for line in records_path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if (rec.get("metadata") or {}).get("benchmark_phase") == "profiling":
                records.append(rec)

    notes: list[str] = []
    failed = [r for r in records if r.get("error")]
    completed = [r for r in records if not r.get("error")]
    count_key = "usage_completion_tokens" if spec.token_count_source == "server" else "output_sequence_length"
    out_tokens = []
    for rec in completed:
        metrics = rec.get("metrics") or {}
        entry = metrics.get(count_key) or metrics.get("output_sequence_length") or {}
        if entry.get("value") is None:
            notes.append(f"a completed request has no {count_key}; counted as 0 output tokens")
        out_tokens.append(int(entry.get("value") or 0))
    mismatches = sum(1 for n in out_tokens if n != spec.output_tokens) if spec.ignore_eos else None

    summary_completed = _stat(summary, "request_count", "avg")
    summary_errors = _stat(summary, "error_request_count", "avg") or 0.0
    if summary_completed is not None and int(summary_completed) != len(completed):
        notes.append(f"AIPerf summary counts {int(summary_completed)} completed requests, the records {len(completed)}")
    if int(summary_errors) != len(failed):
        notes.append(f"AIPerf summary counts {int(summary_errors)} errors, the records {len(failed)}")
    summary_mismatch = _stat(summary, "osl_mismatch_count", "avg")
    if mismatches is not None and summary_mismatch is not None and int(summary_mismatch) != mismatches:
        notes.append(f"AIPerf's osl_mismatch_count is {int(summary_mismatch)}, InferCrane counts {mismatches} "
                     "(AIPerf may allow a tolerance)")
    if summary.get("was_cancelled"):
        notes.append("AIPerf reports the run as cancelled")
    if window_s is None and len(records) != spec.request_count:
        notes.append(f"{len(records)} profiling records for {spec.request_count} requested")
    if window_s is not None and len(records) < MIN_WINDOW_REQUESTS:
        notes.append(f"only {len(records)} requests in the {window_s:g} s window: its p95 rests on too few requests "
                     "to mean much")
    for err in summary.get("error_summary") or []:
        details = err.get("error_details") or {}
        notes.append(f"{err.get('count')} x error {details.get('code')} {details.get('type')}: "
                     f"{str(details.get('message'))[:160]}")

    latencies: dict[str, float | None] = {}
    for prefix, tag in METRIC_TAGS.items():
        for p in ("p50", "p95", "p99"):
            value = _stat(summary, tag, p) if completed else None
            if prefix in ("ttft", "tpot") and not spec.streaming:
                value = None  # without streaming there is no first token to time
            latencies[f"{prefix}_{p}_ms"] = value
    duration_s = _profiling_window_s(artifact_dir)
    if duration_s is None:
        duration_s = _stat(summary, "benchmark_duration", "avg") or 0.0
        notes.append(f"no {MANIFEST_FILE}: duration_s is AIPerf's benchmark_duration, not the rate window")
    return RunMetrics(
        arm=spec.arm, recipe_sha256=spec.recipe_sha256, run_index=spec.run_index, concurrency=spec.concurrency,
        driver="aiperf", driver_version=str(summary.get("aiperf_version") or driver_version),
        token_count_source=spec.token_count_source, streaming=spec.streaming,
        expected_output_tokens=spec.output_tokens, raw_export_path=str(summary_path),
        driver_cpu_s=driver_cpu_s, started_at=started_at,
        requests_sent=len(records), requests_completed=len(completed), failures=len(failed),
        output_length_mismatches=mismatches, output_tokens_total=sum(out_tokens),
        duration_s=duration_s,
        output_tok_s=(_stat(summary, "output_token_throughput", "avg") or 0.0) if completed else 0.0,
        request_s=(_stat(summary, "request_throughput", "avg") or 0.0) if completed else 0.0,
        notes=notes, **latencies)

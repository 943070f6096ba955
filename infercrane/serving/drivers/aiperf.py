"""NVIDIA AIPerf (0.12.0) as a driver: ``aiperf profile`` in a subprocess, then its JSON exports.

Command (flags as AIPerf 0.12.0's ``aiperf profile --help`` lists them): ``--model``, ``--url``,
``--endpoint-type completions|chat``, ``--streaming``, ``--concurrency``, ``--request-count``,
``--warmup-request-count``, ``--isl``/``--isl-stddev 0``, ``--osl``/``--osl-stddev 0``,
``--extra-inputs ignore_eos:true`` and ``min_tokens:<osl>`` (fixed output lengths),
``--use-server-token-count``, ``--tokenizer``, ``--artifact-dir``, ``--export-level records``,
``--random-seed``, ``--request-timeout-seconds``; UI, server-metrics scraping and GPU telemetry off. The workload's
load options, under AIPerf's own names: ``--request-rate R --arrival-pattern poisson|constant`` for an open loop (the
concurrency then caps the requests in flight), the workload's ``extra_inputs`` as one JSON ``--extra-inputs``; the API
key and headers (``engine.ServerAccess``) as placeholders, through ``aiperf_env`` (``AiperfDriver.command``), so that
no secret is on a command line; ``scrub_exports`` takes the header values out of AIPerf's summaries afterwards.
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

Blocks (``RunGrid``, ``run_grid``): one ``aiperf profile --config FILE`` process per block, a profiling phase per
window. A block can be started ahead (``AiperfDriver.prestart``) through ``drivers.aiperf_gate``, which holds AIPerf
after its start-up until a gate file exists: ``run_grid(grid, prestarted=...)`` creates the file and watches the block
from there; ``block_accounting`` then tells the hidden start-up (``hidden_startup_s``) from what was left to see.
"""
from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from infercrane.errors import DriverExited, InputError, RunFailed, WindowsLost
from infercrane.serving.drivers import Driver, RunSpec, Started
from infercrane.serving.drivers.aiperf_env import placeholder
from infercrane.serving.drivers.aiperf_gate import OPENED as GATE_OPENED, WAITING as GATE_WAITING
from infercrane.serving.engine import log_tail
from infercrane.serving.metrics import RunMetrics

PINNED_VERSION = "0.12.0"  # the seed's; the version a plan uses is whichever is installed, recorded with every run
SUPPORTED_VERSIONS = ("0.12.0", "0.13.0")  # exports, config (phases) and log lines read the same in both
SUMMARY_FILE = "profile_export_aiperf.json"
RECORDS_FILE = "profile_export.jsonl"
MANIFEST_FILE = "phase_manifest.json"
MIN_WINDOW_REQUESTS = 20  # below this, a time window's p95 is close to its maximum
# A time window ends when AIPerf stops sending; it then waits for the requests in flight (the window's drain). A drain
# above this share of the window is said in the window's notes: the throughput then depends on where the requests'
# rounds ended. On the H200 at c = 100, 1000 -> 500 tokens, 10 s windows drained 0.27-0.98 s, and four drained
# 1.61-1.73 s and read about a tenth low; eager vLLM's 2 s requests at c = 32 drained up to 1.88 s
# (docs/benchmarks/2026-12-03-h200-poc-one-sitting-fourth-try/, the blocks' driver.log). Windows of a request count
# have no such tail.
DRAIN_NOTE_SHARE = 0.15
DRAIN_NOTE = "AIPerf waited on the requests in flight after this time window's end"

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
        if version not in SUPPORTED_VERSIONS:
            return True, (f"aiperf {version} (InferCrane reads the exports of {', '.join(SUPPORTED_VERSIONS)}; "
                          "another version may differ)")
        return True, f"aiperf {version}"

    def scrub(self, spec: RunSpec) -> None:
        scrub_exports(spec)

    def secret_env(self, spec: RunSpec) -> dict[str, str]:
        """``INFERCRANE_API_KEY`` and ``INFERCRANE_HEADER_<i>``: what the placeholders of ``command`` (through
        ``aiperf_env``) and of ``block_config`` (AIPerf's own ``${VAR}`` substitution) stand for."""
        out = {API_KEY_VAR: spec.api_key} if spec.api_key is not None else {}
        return out | {f"{HEADER_VAR}{i}": value for i, (_, value) in enumerate(spec.headers)}

    def command(self, spec: RunSpec) -> list[str]:
        """One ``aiperf profile`` run. A rate (``spec.request_rate``) adds ``--request-rate R --arrival-pattern P``
        (the concurrency then caps the requests in flight, as in AIPerf); the warm-up requests are sent the same way
        (AIPerf's warm-up takes the profiling load's rate and pattern unless told otherwise). ``extra_inputs`` go as one
        JSON ``--extra-inputs``. With an API key, headers or extra inputs, the command runs through ``aiperf_env``:
        placeholders where the secrets go (``--api-key ${INFERCRANE_API_KEY}``, ``--header {"NAME":
        "${INFERCRANE_HEADER_0}"}``, JSON so that a comma in a value stays in it), their values in the environment
        (``secret_env``), and the header and extra-input values kept as typed (``aiperf_env.keep_pairs``)."""
        if spec.trace is not None:
            raise InputError("a trace workload runs as an AIPerf block (run_grid: its config's mooncake_trace dataset "
                             "and fixed_schedule phase), not as one command line")
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
        if spec.request_rate is not None:
            cmd += ["--request-rate", repr(float(spec.request_rate)), "--arrival-pattern", spec.arrival_pattern]
        if spec.extra_inputs:
            cmd += ["--extra-inputs", json.dumps(dict(spec.extra_inputs), sort_keys=True)]
        if spec.slos:
            cmd += ["--goodput", " ".join(f"{METRIC_TAGS[s.metric]}:{s.max_ms:g}" for s in spec.slos)]
        if spec.api_key is None and not spec.headers and not spec.extra_inputs:
            return cmd
        if spec.api_key is not None:
            cmd += ["--api-key", placeholder(API_KEY_VAR)]
        for i, (name, _) in enumerate(spec.headers):
            cmd += ["--header", json.dumps({name: placeholder(f"{HEADER_VAR}{i}")})]
        return [sys.executable, "-m", "infercrane.serving.drivers.aiperf_env", "--", *cmd[3:]]

    def parse(self, spec: RunSpec, *, driver_version: str, driver_cpu_s: float | None = None,
              started_at: str | None = None) -> RunMetrics:
        return parse_aiperf_export(spec, spec.artifact_dir, driver_version=driver_version,
                                   driver_cpu_s=driver_cpu_s, started_at=started_at)

    def block_config(self, grid: RunGrid) -> dict[str, Any]:
        """The AIPerf YAML config of one block: the flags of ``command`` in AIPerf's config form (its own converter
        writes the same shape), a warm-up phase, then one profiling phase per window (``grid.windows()``).

        Load: a ``concurrency`` phase per window, or with a rate (``spec.request_rate``) a ``poisson`` or ``constant``
        phase with ``rate`` and the concurrency as its cap (AIPerf 0.12's ``config/phases.py``); the warm-up phase
        has the windows' shape. ``extra_inputs`` join the endpoint's ``extra``. Secrets: the endpoint's ``apiKey``
        and ``headers`` hold placeholders ``${INFERCRANE_...}``, which AIPerf replaces from its environment
        (``secret_env``) when it reads the file, so the file on disk holds no key nor header value (``_secret``)."""
        spec = grid.spec
        endpoint: dict[str, Any] = {"urls": [spec.base_url], "type": spec.endpoint, "timeout": spec.request_timeout_s,
                                    "streaming": spec.streaming,
                                    "useServerTokenCount": spec.token_count_source == "server"}
        extra = dict(spec.extra_inputs)
        if spec.ignore_eos:  # a trace's lines each ask their own output length (max_tokens): ignore_eos makes it exact
            extra |= {"ignore_eos": True} if spec.trace is not None \
                else {"ignore_eos": True, "min_tokens": spec.output_tokens}
        if extra:
            endpoint["extra"] = extra
        if spec.api_key is not None:
            endpoint["apiKey"] = _secret(API_KEY_VAR)
        if spec.headers:
            endpoint["headers"] = {name: _secret(f"{HEADER_VAR}{i}") for i, (name, _) in enumerate(spec.headers)}
        seed = spec.seed + grid.run_indices[0]
        if spec.trace is not None:
            dataset = trace_dataset(spec.trace, seed)
        elif spec.prompts_file is not None:
            dataset = {"name": "main", "type": "file", "path": str(spec.prompts_file), "format": "single_turn",
                       "sampling": "sequential", "randomSeed": seed, "osl": {"mean": float(spec.output_tokens)}}
        else:
            dataset = {"name": "main", "type": "synthetic", "entries": grid.prompt_entries, "randomSeed": seed,
                       "prompts": {"isl": {"mean": float(spec.input_tokens), "stddev": 0.0},
                                   "osl": {"mean": float(spec.output_tokens), "stddev": 0.0}}}
        def load(concurrency: int) -> dict[str, Any]:
            if spec.trace is not None:  # the trace's schedule, the concurrency a cap on the requests in flight
                return {"type": "fixed_schedule", "concurrency": concurrency}
            if spec.request_rate is None:
                return {"type": "concurrency", "concurrency": concurrency}
            return {"type": spec.arrival_pattern, "rate": float(spec.request_rate), "concurrency": concurrency}

        first = grid.windows()[0]
        warm: dict[str, Any] = {"name": WARMUP_PHASE, "kind": "warmup", **load(first.concurrency)}
        if grid.warmup_s is not None:
            warm["duration"] = grid.warmup_s
        else:
            warm["requests"] = max(1, grid.warmup_requests)
        phases = [warm] if (grid.warmup_s or grid.warmup_requests) else []
        for w in grid.windows():
            phase: dict[str, Any] = {"name": w.name, "kind": "profiling", **load(w.concurrency)}
            if spec.trace is not None:
                pass  # the trace's lines are the window: fixed_schedule needs no stop condition
            elif grid.window_s is not None:
                phase |= {"duration": grid.window_s, "gracePeriod": spec.request_timeout_s}
            else:
                phase["requests"] = grid.request_counts.get(w.concurrency, spec.request_count)
            phases.append(phase)
        slos = {"slos": {METRIC_TAGS[s.metric]: s.max_ms for s in spec.slos}} if spec.slos else {}
        return {"benchmark": {
            "models": {"items": [{"name": spec.served_model}]},
            "endpoint": endpoint,
            "datasets": [dataset],
            "phases": phases,
            "artifacts": {"dir": str(spec.artifact_dir), "records": ["jsonl"]},
            "tokenizer": {"name": spec.tokenizer},
            "gpuTelemetry": {"enabled": False},
            "serverMetrics": {"enabled": False},
            "runtime": {"ui": "none"},
            **slos,
        }, "randomSeed": seed}

    def grid_command(self, grid: RunGrid, config_path: Path) -> list[str]:
        """``aiperf profile --config FILE`` for one block."""
        return [sys.executable, "-m", "aiperf", "profile", "--config", str(config_path)]

    def gated_command(self, grid: RunGrid, config_path: Path, gate: Path) -> list[str]:
        """The block's AIPerf held at ``gate`` (``drivers.aiperf_gate``): it starts up, then sends nothing until the
        gate file exists."""
        return [sys.executable, "-m", "infercrane.serving.drivers.aiperf_gate", str(gate), "--",
                "profile", "--config", str(config_path)]

    def supports_prestart(self) -> bool:
        """Whether a block can be started ahead, held at a gate (``prestart``): the installed AIPerf has the start
        the gate holds back (``aiperf_gate.gate_available``)."""
        from infercrane.serving.drivers.aiperf_gate import gate_available

        ok, _ = self.available()
        return ok and gate_available()

    def write_block_config(self, grid: RunGrid) -> Path:
        import yaml

        grid.spec.artifact_dir.mkdir(parents=True, exist_ok=True)
        config_path = grid.spec.artifact_dir / BLOCK_CONFIG_FILE
        config_path.write_text(yaml.safe_dump(self.block_config(grid), sort_keys=False))
        return config_path

    def prestart(self, grid: RunGrid) -> PreStarted:
        """Start one block's AIPerf process now, held at a gate (``aiperf_gate``): it spends its start-up (services,
        tokenizer, dataset) while whatever runs now runs, and sends no request until ``run_grid(grid,
        prestarted=...)`` opens the gate. ``PreStarted.kill`` ends a block that will not run. UnavailableError when
        the installed AIPerf cannot be held (``supports_prestart``)."""
        from infercrane.errors import UnavailableError

        self.require_available()
        if not self.supports_prestart():
            raise UnavailableError(f"aiperf {self.version()} cannot be held at a gate (no "
                                   "SystemController._start_profiling_all_services): a block cannot be started ahead",
                                   hint="run the block without a pre-start (run_grid without prestarted)")
        config_path = self.write_block_config(grid)
        gate = grid.spec.artifact_dir / GATE_FILE
        gate.unlink(missing_ok=True)
        cmd = self.gated_command(grid, config_path, gate)
        started_t = time.time()
        version, _, started = self.start_invoke(grid.spec, cmd, env=STREAM_RECORDS_ENV)
        return PreStarted(grid=grid, cmd=cmd, gate=gate, process=started, driver_version=version, started_t=started_t)

    def run_grid(self, grid: RunGrid, *, on_window: Callable[[RunMetrics], None] | None = None,
                 on_progress: Callable[[str], None] | None = None,
                 prestarted: PreStarted | None = None) -> list[RunMetrics]:
        """Run one block (``RunGrid``) as one AIPerf process and read each window back as soon as its phase ends.

        AIPerf runs the warm-up, then the windows back to back in one process (its start-up paid once); it streams
        every request's record to ``profile_export.jsonl`` as it is processed and logs each phase's end with the
        phase's window (``start_ns`` .. ``requests_end_ns``). ``PhaseWatch`` reads a window from those as soon as
        its records are all on disk and hands it to ``on_window`` (the runner records it and writes its receipt), so
        a failure later in the block loses nothing already measured: the error propagates after every finished
        window has been delivered. When the process ends normally each window is checked against AIPerf's own
        per-phase summary (``phases/<name>/profile_export_aiperf.json``); a difference is a note. Returns the
        windows in order. A process that ends short of its windows, normally or with a non-zero exit (``DriverExited``:
        the engine not found dead), raises ``WindowsLost`` (the windows before are delivered; ``run_plan`` runs the
        rest again in a new process if the engine is alive).

        ``prestarted``: this block's process, started ahead by ``prestart`` and held at its gate; the gate is opened
        now (``PreStarted.opened_t``) and the block watched from there as one started here would be (its time limit
        counts from the gate). Without it, the process is started here, ungated."""
        self.require_available()
        spec = grid.spec
        if prestarted is None:
            config_path = self.write_block_config(grid)
            cmd = self.grid_command(grid, config_path)
            version, _, process = self.start_invoke(spec, cmd, env=STREAM_RECORDS_ENV)
        else:
            if prestarted.grid.spec.artifact_dir != spec.artifact_dir:
                prestarted.kill()
                raise ValueError(f"the pre-started block writes to {prestarted.grid.spec.artifact_dir}, not "
                                 f"{spec.artifact_dir}")
            cmd, version, process = prestarted.cmd, prestarted.driver_version, prestarted.process
            prestarted.open()
        watch = PhaseWatch(grid, driver_version=version, on_window=on_window, on_progress=on_progress)
        timeout = grid.timeout_s()
        aimed = [*cmd, spec.base_url]  # the block's command names its engine in its config file: read_back finds it so

        def lost(how: str) -> WindowsLost:
            missing = watch.windows[len(watch.delivered)]
            return WindowsLost(f"AIPerf {how} without finishing window {missing.name} (run {missing.run_index} at "
                               f"c={missing.concurrency}): {len(watch.delivered)} of {len(watch.windows)} windows of "
                               f"the block were read; driver log:\n{log_tail(spec.artifact_dir / 'driver.log', 30)}",
                               finished=len(watch.delivered),
                               hint="read the driver log and AIPerf's log (logs/aiperf.log in the block's folder)")

        try:
            self.finish_invoke(process, timeout_s=timeout, on_tick=watch.scan)
        except BaseException as exc:
            scrub_exports(spec)
            watch.finish(ended_normally=False)
            if not isinstance(exc, DriverExited):
                raise
            err: RunFailed = exc  # a non-zero exit: the windows left can run again, unless the engine has died
            if len(watch.delivered) < len(watch.windows):
                err = lost(exc.how)
                err.__cause__ = exc

            def exited() -> None:
                raise err
            self.read_back(aimed, exited)  # raises: the engine's failure if it has died, else err
        scrub_exports(spec)
        watch.finish(ended_normally=True)
        if len(watch.delivered) < len(watch.windows):
            def short() -> None:
                raise lost("ended")
            self.read_back(aimed, short)
        return watch.delivered


@dataclass
class PreStarted:
    """A block's AIPerf process started ahead (``AiperfDriver.prestart``) and held at ``gate``: ``started_t`` when it
    was started, ``opened_t`` when its gate was opened (epoch seconds)."""

    grid: RunGrid
    cmd: list[str]
    gate: Path
    process: Started
    driver_version: str
    started_t: float
    opened_t: float | None = None

    def running(self) -> bool:
        return self.process.running()

    def waiting(self) -> bool:
        """Whether AIPerf has started up and waits at the gate (its line is in the driver log)."""
        try:
            return GATE_WAITING in self.process.log_path.read_text(errors="replace")
        except OSError:
            return False

    def open(self) -> None:
        """Let AIPerf start sending (once)."""
        if self.opened_t is None:
            self.gate.touch()
            self.opened_t = time.time()

    def kill(self) -> None:
        """End the held process and everything it started, without opening the gate (idempotent)."""
        try:
            self.process.kill()
        finally:
            scrub_exports(self.grid.spec)


WARMUP_PHASE = "warmup"
BLOCK_CONFIG_FILE = "aiperf-config.yaml"
API_KEY_VAR = "INFERCRANE_API_KEY"  # the driver's environment variables that hold the secrets (secret_env)
HEADER_VAR = "INFERCRANE_HEADER_"
# AIPerf reads a config value that is one ${VAR} alone as a number or a boolean when the value looks like one
# (aiperf/config/loader/env_vars.py, _coerce_scalar_string), which a header or key field refuses; a second, never set
# variable with an empty default after it keeps the value text.
_KEEP_TEXT = "${INFERCRANE_KEEPS_THIS_TEXT:}"


def _secret(var: str) -> str:
    """The config value AIPerf replaces with variable ``var`` of its environment, as text."""
    return placeholder(var) + _KEEP_TEXT


def trace_dataset(replay: Any, seed: int) -> dict[str, Any]:
    """AIPerf's file dataset for a trace (``serving.trace.TraceReplay``): mooncake_trace format, its block size where
    stated, its time scale as ``synthesis.speedup_ratio``."""
    dataset: dict[str, Any] = {"name": "main", "type": "file", "path": str(replay.path), "format": "mooncake_trace",
                               "randomSeed": seed}
    if replay.block_size is not None:
        dataset["block_size"] = replay.block_size
    if replay.speedup != 1.0:
        dataset["synthesis"] = {"speedup_ratio": float(replay.speedup)}
    return dataset


def scrub_exports(spec: RunSpec) -> None:
    """Redact the header values AIPerf wrote into its summaries. AIPerf 0.12 records its input config in every
    ``profile_export_aiperf.json`` (``input_config.endpoint``): the API key redacted, but a header's value in clear
    unless the header's name is one it knows carries a credential (``aiperf/common/redact.py``: Authorization,
    X-API-Key, ...). Each such file under the spec's artifacts is rewritten with ``<redacted>`` for every header of
    the spec; nothing else in it changes. A file that cannot be read or written is left as it is."""
    if not spec.headers:
        return
    from infercrane.serving.engine import REDACTED

    names = {name for name, _ in spec.headers}
    for path in spec.artifact_dir.rglob(SUMMARY_FILE):
        try:
            doc = json.loads(path.read_text())
            headers = ((doc.get("input_config") or {}).get("endpoint") or {}).get("headers")
            if not isinstance(headers, dict) or not any(k in names and v != REDACTED for k, v in headers.items()):
                continue
            headers.update({k: REDACTED for k in headers if k in names})
            path.write_text(json.dumps(doc, indent=2))
        except (OSError, ValueError, AttributeError):
            continue

GATE_FILE = "aiperf-gate.open"  # a pre-started block's AIPerf sends nothing before this file exists (aiperf_gate)
LOG_FILE = Path("logs") / "aiperf.log"
# AIPerf buffers its per-request records (100 by default) before writing them; one at a time, every finished request
# is on disk when its phase's end is logged, so a block that fails keeps every window it finished.
STREAM_RECORDS_ENV = {"AIPERF_RECORD_EXPORT_BATCH_SIZE": "1"}


@dataclass(frozen=True)
class Window:
    """One measurement window of a block: AIPerf phase ``name`` = run ``run_index`` at ``concurrency``."""

    name: str
    run_index: int
    concurrency: int


@dataclass(frozen=True)
class RunGrid:
    """One block: ``spec`` with every run index and concurrency the block measures, each (run, concurrency) one window
    (AIPerf profiling phase), runs in order, each sweeping the concurrencies in order. ``window_s``: seconds of load
    per window (else ``request_counts`` per concurrency); ``warmup_s`` / ``warmup_requests``: one warm-up before the
    first window, excluded; ``prompt_entries``: synthetic prompts AIPerf makes for the block, in order (a prompt
    repeats only after that many requests)."""

    spec: RunSpec
    run_indices: tuple[int, ...]
    concurrencies: tuple[int, ...]
    request_counts: dict[int, int] = field(default_factory=dict)
    window_s: float | None = None
    warmup_s: float | None = None
    warmup_requests: int = 0
    prompt_entries: int = 1000

    def windows(self) -> list[Window]:
        return [Window(f"r{r:02d}_c{c}", r, c) for r in self.run_indices for c in self.concurrencies]

    def timeout_s(self) -> float:
        """The block's time limit: the spec's per-run limit per window."""
        return self.spec.timeout_s * max(1, len(self.windows()))


_WARMUP_DONE = re.compile(rf"Phase {WARMUP_PHASE} \(warmup\) complete .*elapsed=([0-9.]+)s")
_PHASE_DONE = re.compile(r"Phase complete: PhaseRecordsStats\((?P<body>.*)\)\s*$")
_FIELD = re.compile(r"(\w+)=('(?:[^']*)'|[^,()]+)")


def parse_phase_done(line: str) -> dict[str, Any] | None:
    """The fields of AIPerf 0.12's records-manager line that ends a phase (``Phase complete: PhaseRecordsStats(...)``):
    phase_name, start_ns, requests_end_ns, final_requests_completed, final_request_errors, ...; None for another
    line."""
    m = _PHASE_DONE.search(line)
    if m is None:
        return None
    out: dict[str, Any] = {}
    for key, raw in _FIELD.findall(m.group("body")):
        raw = raw.strip()
        if raw.startswith("'"):
            out[key] = raw.strip("'")
        elif raw in ("None", "True", "False"):
            out[key] = {"None": None, "True": True, "False": False}[raw]
        else:
            try:
                out[key] = int(raw)
            except ValueError:
                out[key] = raw
    return out if "phase_name" in out or "phase_index" in out else None


class PhaseWatch:
    """Reads a block's windows as AIPerf finishes them (``scan``, called about every second while AIPerf runs;
    ``finish`` once it has ended). A window is read when AIPerf has logged its phase's end and its records are all in
    ``profile_export.jsonl`` (or the process has ended); windows are delivered in block order, each to ``on_window``
    exactly once. A callback that raises stops the block (the error propagates): the runner's receipt writing is
    part of not losing a window."""

    def __init__(self, grid: RunGrid, *, driver_version: str, on_window: Callable[[RunMetrics], None] | None = None,
                 on_progress: Callable[[str], None] | None = None):
        self.grid, self.version = grid, driver_version
        self.on_window, self.on_progress = on_window, on_progress
        self.windows = grid.windows()
        self.delivered: list[RunMetrics] = []
        self.done: dict[str, dict[str, Any]] = {}  # phase name -> its end line's fields
        self._log_pos = 0
        self._log_rest = ""
        self._rec_pos = 0
        self._rec_rest = ""
        self.records: dict[str, list[dict[str, Any]]] = {}
        # AIPerf's phase index of each window (the warm-up, when the block has one, is phase 0): a phase AIPerf logs
        # or records without its name (seen once with 0.12.0: phase_name=None in the end line) is matched by index
        first = 1 if (grid.warmup_s or grid.warmup_requests) else 0
        self.by_index = {first + i: w.name for i, w in enumerate(self.windows)}
        self.named_by_index: set[str] = set()

    def _name(self, fields: dict[str, Any], kind: Any) -> str | None:
        """The window a phase end line or record belongs to: its phase name, else its phase index's window for a
        profiling phase (``by_index``); None for the warm-up and anything else."""
        name = fields.get("phase_name")
        if name:
            return name
        if kind not in ("profiling", "CreditPhase.PROFILING") or not isinstance(fields.get("phase_index"), int):
            return None
        name = self.by_index.get(fields["phase_index"])
        if name is not None:
            self.named_by_index.add(name)
        return name

    @property
    def base(self) -> Path:
        return self.grid.spec.artifact_dir

    def _read_new(self, path: Path, pos_attr: str, rest_attr: str) -> list[str]:
        try:
            with open(path, "rb") as f:
                f.seek(getattr(self, pos_attr))
                data = f.read()
        except OSError:
            return []
        setattr(self, pos_attr, getattr(self, pos_attr) + len(data))
        text = getattr(self, rest_attr) + data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        setattr(self, rest_attr, lines.pop())  # an unfinished last line waits for the next read
        return lines

    def _ingest(self) -> None:
        for line in self._read_new(self.base / LOG_FILE, "_log_pos", "_log_rest"):
            fields = parse_phase_done(line)
            if fields is None:
                continue
            name = self._name(fields, fields.get("phase_kind") or fields.get("phase"))
            if name is not None and name != WARMUP_PHASE:
                self.done[name] = fields
        for line in self._read_new(self.base / RECORDS_FILE, "_rec_pos", "_rec_rest"):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            meta = rec.get("metadata") or {}
            name = self._name(meta, meta.get("benchmark_phase")) if meta.get("benchmark_phase") == "profiling" \
                else None
            if name is not None:
                self.records.setdefault(name, []).append(rec)

    def _ready(self, w: Window, ended: bool) -> bool:
        fields = self.done.get(w.name)
        if fields is None:
            return False
        want = int(fields.get("final_requests_completed") or 0)
        return ended or len(self.records.get(w.name, [])) >= want

    def scan(self, ended: bool = False) -> None:
        self._ingest()
        while len(self.delivered) < len(self.windows):
            w = self.windows[len(self.delivered)]
            if not self._ready(w, ended):
                return
            m = self.read_window(w)
            self.delivered.append(m)
            if self.on_progress is not None:
                self.on_progress(f"run {w.run_index} c={w.concurrency}: window {len(self.delivered)}/"
                                 f"{len(self.windows)} of this block read")
            if self.on_window is not None:
                self.on_window(m)

    def read_window(self, w: Window) -> RunMetrics:
        from dataclasses import replace
        from datetime import datetime, timezone

        fields = self.done[w.name]
        start, end = int(fields["start_ns"]), int(fields.get("requests_end_ns") or fields.get("sent_end_ns"))
        spec = replace(self.grid.spec, concurrency=w.concurrency, run_index=w.run_index,
                       request_count=self.grid.request_counts.get(w.concurrency, self.grid.spec.request_count))
        notes = []
        if w.name in self.named_by_index:
            notes.append("AIPerf logged or recorded this window's phase without its name; matched by its phase index")
        if fields.get("was_cancelled"):
            notes.append("AIPerf reports the window as cancelled")
        if self.grid.window_s is not None and fields.get("requests_end_ns") and fields.get("sent_end_ns"):
            drain = (int(fields["requests_end_ns"]) - int(fields["sent_end_ns"])) / 1e9
            if drain > DRAIN_NOTE_SHARE * self.grid.window_s:
                notes.append(f"{DRAIN_NOTE} for {drain:.2f} s ({drain / self.grid.window_s:.0%} of its "
                             f"{self.grid.window_s:g} s): its throughput depends on where the requests' rounds ended; "
                             "windows of a request count (request_count instead of window_s) have no such tail")
        got, want = len(self.records.get(w.name, [])), int(fields.get("final_requests_completed") or 0)
        if got < want:
            notes.append(f"{got} of the {want} requests AIPerf counted in this window have a record on disk (its "
                         "process ended before writing the rest)")
        m = metrics_from_records(spec, self.records.get(w.name, []), window_s=(end - start) / 1e9,
                                 driver_version=self.version, by_time=self.grid.window_s is not None,
                                 raw_export_path=str(self.summary_path(w)))
        started = datetime.fromtimestamp(start / 1e9, timezone.utc).isoformat()
        return m.model_copy(update={"started_at": started, "notes": [*m.notes, *notes,
                                    f"window {w.name} of a {len(self.windows)}-window AIPerf block"]})

    def summary_path(self, w: Window) -> Path:
        """AIPerf's summary of window ``w``: its phase's own (``phases/<name>/``); a block of one window gets only the
        run's summary, at the top."""
        own = self.base / "phases" / w.name / SUMMARY_FILE
        return self.base / SUMMARY_FILE if len(self.windows) == 1 and not own.is_file() else own

    def finish(self, *, ended_normally: bool) -> None:
        """Read every window AIPerf finished; when it ended normally, check each against its per-phase summary."""
        self.scan(ended=True)
        if not ended_normally:
            return
        for w, m in zip(self.windows, self.delivered):
            for note in check_against_summary(m, self.summary_path(w)):
                m.notes.append(note)


def block_accounting(grid: RunGrid, *, arm: str, started: float, ended: float,
                     prestarted_t: float | None = None) -> dict[str, Any]:
    """Where one block's wall time went, from AIPerf's log (each phase's ``start_ns`` .. ``requests_end_ns``) and the
    process's start and end (epoch seconds): ``startup_s`` (process start to the warm-up: AIPerf's services,
    tokenizer and dataset), ``warmup_s`` (AIPerf's own elapsed time of the warm-up phase), ``windows_s`` (the finished
    windows, added up), ``gaps_s`` / ``max_gap_s`` (between one window's last response and the next window's start),
    ``tail_s`` (the last phase's end to the process's end: AIPerf's exports and shut-down).

    A pre-started block (``prestarted_t``: when its process was started, ahead, held at its gate; ``started``: when
    the gate was opened) adds ``prestarted: true`` and ``hidden_startup_s`` (process start to gate open, spent while
    the previous block ran), and ``gate_wait_s`` (of those, the seconds AIPerf had finished starting up and waited at
    the gate, from its driver log) when the log says; its ``startup_s`` is what was left to see: gate open to the
    warm-up."""
    windows, warmup_s = [], 0.0
    try:
        for line in (grid.spec.artifact_dir / LOG_FILE).read_text(errors="replace").splitlines():
            fields = parse_phase_done(line)
            end = fields and (fields.get("requests_end_ns") or fields.get("sent_end_ns"))
            if fields is not None and fields.get("start_ns") and end and fields["phase_name"] != WARMUP_PHASE:
                windows.append((int(fields["start_ns"]) / 1e9, int(end) / 1e9))
            elif (m := _WARMUP_DONE.search(line)) is not None:
                warmup_s = float(m.group(1))
    except OSError:
        pass
    gaps = [b[0] - a[1] for a, b in zip(windows, windows[1:])]
    out: dict[str, Any] = {"arm": arm, "artifacts": str(grid.spec.artifact_dir),
                           "windows_planned": len(grid.windows()), "windows_finished": len(windows),
                           "wall_s": round(ended - started, 3)}
    if windows:
        out |= {"startup_s": round(windows[0][0] - started - warmup_s, 3), "warmup_s": round(warmup_s, 3),
                "windows_s": round(sum(b - a for a, b in windows), 3),
                "gaps_s": round(sum(gaps), 3), "max_gap_s": round(max(gaps), 3) if gaps else 0.0,
                "tail_s": round(ended - windows[-1][1], 3)}
    if prestarted_t is not None:
        out |= {"prestarted": True, "hidden_startup_s": round(started - prestarted_t, 3)}
        wait = gate_wait_s(grid.spec.artifact_dir / "driver.log")
        if wait is not None:
            out["gate_wait_s"] = round(wait, 3)
    return out


_GATE_OPENED = re.compile(rf"^{re.escape(GATE_OPENED)} ([0-9.]+) s", re.M)


def gate_wait_s(driver_log: Path) -> float | None:
    """The seconds a pre-started AIPerf waited at its gate after its start-up (``aiperf_gate``'s line), or None."""
    try:
        m = _GATE_OPENED.search(driver_log.read_text(errors="replace"))
    except OSError:
        return None
    return float(m.group(1)) if m else None


_CONFIGURED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) .*AIPerf System is CONFIGURED\s*$", re.M)


def configured_at(grid: RunGrid) -> float | None:
    """When the block's AIPerf had finished starting up (its log's "AIPerf System is CONFIGURED", a local time), in
    epoch seconds; None before that, or when the log does not say."""
    from datetime import datetime

    try:
        m = _CONFIGURED.search((grid.spec.artifact_dir / LOG_FILE).read_text(errors="replace"))
        return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp() if m else None
    except (OSError, ValueError):
        return None


def window_spans(grid: RunGrid) -> list[tuple[str, float, float]]:
    """(phase name, start, end) in epoch seconds of each window AIPerf has finished so far, from its log."""
    out = []
    try:
        text = (grid.spec.artifact_dir / LOG_FILE).read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        fields = parse_phase_done(line)
        end = fields and (fields.get("requests_end_ns") or fields.get("sent_end_ns"))
        if fields is not None and fields.get("start_ns") and end and fields["phase_name"] != WARMUP_PHASE:
            out.append((fields["phase_name"], int(fields["start_ns"]) / 1e9, int(end) / 1e9))
    return out


def metrics_from_records(spec: RunSpec, records: list[dict[str, Any]], *, window_s: float, driver_version: str,
                         by_time: bool, raw_export_path: str) -> RunMetrics:
    """One window's RunMetrics from its AIPerf records: what AIPerf's summary computes from the same records (rates
    over the phase's window ``start_ns`` .. ``requests_end_ns``; percentiles interpolated linearly, numpy's default),
    checked equal to AIPerf's per-phase summary in ``check_against_summary``."""
    import numpy as np

    notes: list[str] = []
    failed = [r for r in records if r.get("error")]
    completed = [r for r in records if not r.get("error")]
    out_tokens = _output_tokens(spec, completed, notes)
    mismatches = _mismatches(spec, completed, out_tokens)
    if not by_time and len(records) != spec.request_count:
        notes.append(f"{len(records)} profiling records for {spec.request_count} requested")
    if by_time and len(records) < MIN_WINDOW_REQUESTS:
        notes.append(f"only {len(records)} requests in the {window_s:.3g} s window: its p95 rests on too few requests "
                     "to mean much")
    errors: dict[str, int] = {}
    for r in failed:
        err = r.get("error") or {}
        key = f"error {err.get('code')} {err.get('type')}: {str(err.get('message'))[:160]}"
        errors[key] = errors.get(key, 0) + 1
    notes += [f"{n} x {k}" for k, n in errors.items()]

    def pct(tag: str) -> dict[str, float | None]:
        vals = [v for r in completed if (v := record_value(r, tag)) is not None]
        if not vals:
            return {"p50": None, "p95": None, "p99": None}
        q = np.percentile(np.asarray(vals, dtype=np.float64), [50, 95, 99])
        return {"p50": float(q[0]), "p95": float(q[1]), "p99": float(q[2])}

    latencies: dict[str, float | None] = {}
    for prefix, tag in METRIC_TAGS.items():
        values = pct(tag)
        for p in ("p50", "p95", "p99"):
            value = values[p]
            if prefix in ("ttft", "tpot") and not spec.streaming:
                value = None
            latencies[f"{prefix}_{p}_ms"] = value
    osl = sum(int(((r.get("metrics") or {}).get("output_sequence_length") or {}).get("value") or 0) for r in completed)
    return RunMetrics(**from_requests(spec, completed, len(failed), window_s, records, notes),
        arm=spec.arm, recipe_sha256=spec.recipe_sha256, run_index=spec.run_index, concurrency=spec.concurrency,
        driver="aiperf", driver_version=driver_version, token_count_source=spec.token_count_source,
        streaming=spec.streaming, expected_output_tokens=spec.output_tokens, raw_export_path=raw_export_path,
        requests_sent=len(records), requests_completed=len(completed), failures=len(failed),
        output_length_mismatches=mismatches, output_tokens_total=sum(out_tokens), duration_s=window_s,
        output_tok_s=osl / window_s if completed and window_s > 0 else 0.0,
        request_s=len(completed) / window_s if completed and window_s > 0 else 0.0,
        notes=notes, **latencies)


def _mismatches(spec: RunSpec, completed: list[dict[str, Any]], out_tokens: list[int]) -> int | None:
    """Completed requests whose output is not the length asked: the workload's, or a trace's line's own; None when
    lengths were not fixed (ignore_eos off)."""
    if not spec.ignore_eos:
        return None
    if spec.trace is None:
        return sum(1 for n in out_tokens if n != spec.output_tokens)
    from infercrane.serving.trace import record_line

    asked = spec.trace.output_lengths
    lines = [record_line(r.get("metadata") or {}) for r in completed]
    return sum(1 for line, n in zip(lines, out_tokens) if line is None or not 0 <= line < len(asked)
               or n != asked[line])


def record_value(rec: dict[str, Any], tag: str) -> float | None:
    """One AIPerf record's value of metric ``tag`` (in the record's unit), or None when it has none."""
    entry = (rec.get("metrics") or {}).get(tag)
    return float(entry["value"]) if isinstance(entry, dict) and entry.get("value") is not None else None


def _count(rec: dict[str, Any], tag: str) -> int | None:
    """A record's token count under ``tag`` (falling back to AIPerf's own ``input_sequence_length``), or None."""
    value = record_value(rec, tag if (rec.get("metrics") or {}).get(tag) else "input_sequence_length")
    return None if value is None else int(value)


def request_latencies(rec: dict[str, Any]) -> dict[str, float | None]:
    """One AIPerf record's per-request latencies as ``decide.slo`` names them (milliseconds)."""
    return {prefix: record_value(rec, tag) for prefix, tag in METRIC_TAGS.items()}


def from_requests(spec: RunSpec, completed: list[dict[str, Any]], failed: int, window_s: float,
                  records: list[dict[str, Any]], notes: list[str]) -> dict[str, Any]:
    """What a window's per-request records give besides the summary figures: the input token throughput (the
    server's prompt token count where ``token_count_source`` is server), goodput and each SLO's attainment
    (``spec.slos``, ``decide.slo.slo_result``), and for a trace workload how closely the requests kept the trace's
    schedule (``serving.trace.arrival_check``; a note when not within its tolerance)."""
    out: dict[str, Any] = {}
    prompt = [_count(r, "usage_prompt_tokens" if spec.token_count_source == "server" else "input_sequence_length")
              for r in completed]
    if completed and window_s > 0 and all(n is not None for n in prompt):
        out["input_tok_s"] = sum(prompt) / window_s  # type: ignore[arg-type]
    if spec.slos:
        from infercrane.decide.slo import slo_result

        result = slo_result([request_latencies(r) for r in completed], failed, window_s, spec.slos)
        out |= {"slo": result, "goodput_req_s": result.goodput_req_s}
    if spec.trace is not None:
        from infercrane.serving.trace import arrival_check

        arrival = arrival_check(spec.trace, records)
        out["arrival"] = arrival
        if not arrival["within"]:
            lag = arrival.get("lag_abs_ms") or {}
            notes.append(f"trace replay off schedule: {arrival['matched']} of {arrival['trace_requests']} requests "
                         f"matched, {arrival.get('beyond_tolerance')} started more than {arrival['tolerance_ms']:g} ms "
                         f"from their place (largest {lag.get('max')} ms)")
    return out


def _output_tokens(spec: RunSpec, completed: list[dict[str, Any]], notes: list[str]) -> list[int]:
    count_key = "usage_completion_tokens" if spec.token_count_source == "server" else "output_sequence_length"
    out = []
    for rec in completed:
        metrics = rec.get("metrics") or {}
        entry = metrics.get(count_key) or metrics.get("output_sequence_length") or {}
        if entry.get("value") is None:
            notes.append(f"a completed request has no {count_key}; counted as 0 output tokens")
        out.append(int(entry.get("value") or 0))
    return out


SUMMARY_CHECKED = {"output_tok_s": ("output_token_throughput", "avg"), "request_s": ("request_throughput", "avg"),
                   **{f"{p}_{q}_ms": (tag, q) for p, tag in METRIC_TAGS.items() for q in ("p50", "p95", "p99")}}


def check_against_summary(m: RunMetrics, summary_path: Path, rel: float = 1e-6) -> list[str]:
    """Notes for every figure of ``m`` that differs from AIPerf's per-phase summary by more than ``rel`` (none when
    they agree); one note when the summary is missing or unreadable."""
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError) as exc:
        return [f"AIPerf's per-phase summary {summary_path.name} could not be read ({type(exc).__name__}): the "
                "window's figures are InferCrane's reading of AIPerf's records only"]
    out = good_count_check(m.slo, summary)
    for field_name, (tag, stat) in SUMMARY_CHECKED.items():
        mine, theirs = getattr(m, field_name), _stat(summary, tag, stat)
        if mine is None or theirs is None:
            continue
        if abs(mine - theirs) > rel * max(abs(theirs), 1e-12):
            out.append(f"{field_name}: InferCrane read {mine:.6g} from AIPerf's records, AIPerf's summary says "
                       f"{theirs:.6g}")
    return out


def good_count_check(slo: Any, summary: dict) -> list[str]:
    """A note when AIPerf's own count of requests within every SLO (its ``good_request_count``, from the same
    thresholds) differs from InferCrane's (``decide.slo``); none when they agree or there are no SLOs."""
    if slo is None:
        return []
    theirs = _stat(summary, "good_request_count", "avg")
    if theirs is None:
        return ["AIPerf's summary has no good_request_count: the goodput is InferCrane's reading of the records only"]
    if int(theirs) != slo.good_requests:
        return [f"good requests: InferCrane counts {slo.good_requests} within every SLO, AIPerf's summary "
                f"{int(theirs)}"]
    return []


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
    out_tokens = _output_tokens(spec, completed, notes)
    mismatches = _mismatches(spec, completed, out_tokens)

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
    extra = from_requests(spec, completed, len(failed), duration_s, records, notes)
    notes += good_count_check(extra.get("slo"), summary)
    return RunMetrics(**extra,
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

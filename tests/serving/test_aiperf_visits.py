"""A whole arm visit as one real AIPerf invocation against the test server: every run a trial, every concurrency a
sweep point, time windows; each point comes back as its own run and the receipt decides from them."""
from __future__ import annotations

import pytest

from infercrane.decide.policy import load_policy
from infercrane.env.capture import provenance
from infercrane.receipts.validate import write_receipt
from infercrane.serving.receipt import build_document, plan_config
from infercrane.serving.workload import WORKLOAD_SCHEMA_VERSION, Workload, run_plan


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sandwich_visits_each_run_as_one_aiperf_block(tmp_path, ts_recipe, stand_in_dir, offline_env):
    slow = ts_recipe("--ttft-ms", "30", "--itl-ms", "4", name="slow", model=str(stand_in_dir))
    fast = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", name="fast", model=str(stand_in_dir))
    w = Workload(schema_version=WORKLOAD_SCHEMA_VERSION, name="visits", concurrency=[1, 2], input_tokens=32,
                 output_tokens=16, window_s=1.0, warmup_s=0.5, runs_per_arm=3, arm_order="sandwich")
    progress: list[str] = []
    landed: list[tuple[str, int, int]] = []
    result = run_plan([slow, fast], w, out_dir=tmp_path / "art", drivers="aiperf", startup_timeout_s=60,
                      on_progress=progress.append, on_run=lambda m: landed.append((m.arm, m.run_index,
                                                                                    m.concurrency)))
    # each window is read as AIPerf finishes it, once, in block order
    reads = [line for line in progress if "of this block read" in line]
    assert reads[0] == "slow run 0 c=1: window 1/4 of this block read" and len(reads) == len(set(reads)) == 12
    # sandwich: slow (runs 0-1), fast (0-2), slow (2): three blocks, three AIPerf processes, one config each
    logs = sorted(p.relative_to(tmp_path / "art").as_posix() for p in (tmp_path / "art").rglob("driver.log"))
    assert logs == ["fast/visit01/driver.log", "slow/visit00/driver.log", "slow/visit02/driver.log"]
    points = [(m.arm, m.run_index, m.concurrency) for m in result.runs]
    assert points == landed == [("slow", 0, 1), ("slow", 0, 2), ("slow", 1, 1), ("slow", 1, 2),
                                ("fast", 0, 1), ("fast", 0, 2), ("fast", 1, 1), ("fast", 1, 2), ("fast", 2, 1),
                                ("fast", 2, 2), ("slow", 2, 1), ("slow", 2, 2)]
    for m in result.runs:
        assert m.ok and m.requests_completed > 0 and m.duration_s > 0.5, m
        assert m.raw_export_path.endswith(f"/phases/r{m.run_index:02d}_c{m.concurrency}/profile_export_aiperf.json")
        # InferCrane's reading of the records agrees with AIPerf's own per-phase summary (a difference is a note)
        assert not [n for n in m.notes if "AIPerf's summary says" in n or "could not be read" in n], m.notes
    tpot = {arm: sorted(m.tpot_p50_ms for m in result.runs if m.arm == arm) for arm in ("slow", "fast")}
    assert max(tpot["fast"]) < min(tpot["slow"])  # 1 ms against 4 ms per token: each window is its own arm's
    assert [b["arm"] for b in result.blocks] == ["slow", "fast", "slow"]
    for b in result.blocks:
        assert b["windows_finished"] == b["windows_planned"] and b["startup_s"] > 0 and b["warmup_s"] > 0
        assert b["windows_s"] > 0.9 * b["windows_finished"] and 0 <= b["max_gap_s"] < 1.0
    prov = provenance(config=plan_config("ab", [slow.resolved(), fast.resolved()], w, {"order": None}),
                      command_line=["test"])
    doc = build_document(result, kind="ab", policy=load_policy("serving"), provenance=prov)
    r = write_receipt(doc, tmp_path / "ab.json").document
    assert r["paired_aiperf"]["workload"]["window_s"] == 1.0
    assert {(d["recipe"], d["concurrency"]) for d in r["paired_aiperf"]["drift"]} == {
        (a, c) for a in ("slow", "fast") for c in (1, 2)}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("aiperf_exit", [None, 3])
def test_an_engine_crash_in_window_k_keeps_windows_before_it(tmp_path, ts_recipe, stand_in_dir, offline_env,
                                                            monkeypatch, aiperf_exit):
    """The test server exits after a number of requests in the middle of the first block: the windows AIPerf finished
    before are in the partial plan, the failure is the engine's, whether AIPerf then ends normally or with an error
    (exit code 3: not a retry, the engine being dead)."""
    import shlex

    from infercrane.errors import RunFailed
    from infercrane.serving.drivers.aiperf import AiperfDriver

    if aiperf_exit is not None:
        real = AiperfDriver.grid_command
        monkeypatch.setattr(AiperfDriver, "grid_command", lambda self, grid, path: [
            "bash", "-c", f"{shlex.join(real(self, grid, path))}; exit {aiperf_exit}"])

    # c = 1, 10 ms + 15 x 1 ms per request: ~40 requests a 1 s window; the crash lands in the third or fourth window
    crashing = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", "--crash-after", "110", name="crashing",
                         model=str(stand_in_dir))
    w = Workload(schema_version=WORKLOAD_SCHEMA_VERSION, name="crash", concurrency=[1], input_tokens=32,
                 output_tokens=16, window_s=1.0, runs_per_arm=6, arm_order="sequential")
    with pytest.raises(RunFailed) as err:
        run_plan([crashing], w, out_dir=tmp_path / "art", drivers="aiperf", startup_timeout_s=60, order="sequential")
    partial = err.value.partial
    assert str(err.value).startswith("engine ")  # the engine's failure, not "driver aiperf exited"
    measured = [m.run_index for m in partial.runs if m.ok]
    # the windows measured before the crash are kept, in order; any window AIPerf ran against the dead engine is
    # recorded too, as what it was: failed requests, no measurement
    assert 1 <= len(measured) < 6 and measured == list(range(len(measured)))
    assert all(m.failures > 0 and m.requests_completed == 0 for m in partial.runs[len(measured) + 1:])
    assert partial.blocks and partial.blocks[0]["windows_finished"] >= len(partial.runs)


def _aiperf_losing_windows(monkeypatch, blocks: int | None) -> list:
    """AIPerf that runs only the warm-up and first window of its first ``blocks`` blocks (every block: None) and
    exits normally, as AIPerf 0.12 did once under load (its records manager lost a phase's end): the windows after
    are never measured. Returns the artifact folders of the blocks cut."""
    from infercrane.serving.drivers.aiperf import AiperfDriver

    real, cut = AiperfDriver.block_config, []

    def losing(self, grid):
        cfg = real(self, grid)
        if blocks is None or len(cut) < blocks:
            cut.append(grid.spec.artifact_dir)
            cfg["benchmark"]["phases"] = cfg["benchmark"]["phases"][:2]
        return cfg

    monkeypatch.setattr(AiperfDriver, "block_config", losing)
    return cut


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_windows_aiperf_lost_run_again_at_once_on_the_same_engine(tmp_path, ts_recipe, stand_in_dir, offline_env,
                                                                   monkeypatch):
    cut = _aiperf_losing_windows(monkeypatch, blocks=1)
    recipe = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", name="one", model=str(stand_in_dir))
    w = Workload(schema_version=WORKLOAD_SCHEMA_VERSION, name="lost", concurrency=[1, 2], input_tokens=32,
                 output_tokens=16, window_s=1.0, warmup_s=0.5, runs_per_arm=3, arm_order="sequential")
    result = run_plan([recipe], w, out_dir=tmp_path / "art", drivers="aiperf", startup_timeout_s=60,
                      order="sequential")
    assert result.complete and len(cut) == 1
    # every planned window measured once, in plan order, on the one engine
    assert [(m.run_index, m.concurrency) for m in result.runs] == [(r, c) for r in range(3) for c in (1, 2)]
    assert all(m.ok and m.requests_completed > 0 for m in result.runs) and len(result.engines) == 1
    # the lost block, then its windows left in as few grids as keep their order: r00's c=2, then runs 1-2
    first, *retries = result.blocks
    assert first["windows_planned"] == 6 and first["windows_finished"] == 1 and "retry" not in first
    assert first["windows_lost"] == ["r00_c2", "r01_c1", "r01_c2", "r02_c1", "r02_c2"]
    assert [(b["retry"], b["windows_planned"], b["windows_finished"]) for b in retries] == [(1, 1, 1), (1, 4, 4)]
    assert [b["artifacts"] for b in retries] == [str(tmp_path / "art/one/visit00" / f"retry1-{k}") for k in (0, 1)]
    assert result.runs[0].raw_export_path.startswith(str(tmp_path / "art/one/visit00/phases"))
    assert all("/retry1-" in m.raw_export_path for m in result.runs[1:])
    note = next(n for n in result.notes if "ran again" in n)
    assert "AIPerf ended without finishing window r00_c2" in note and "retry 1 of 1" in note


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_block_whose_aiperf_exits_non_zero_has_its_windows_left_run_again(tmp_path, ts_recipe, stand_in_dir,
                                                                           offline_env, monkeypatch):
    import shlex

    from infercrane.serving.drivers.aiperf import AiperfDriver

    cut = _aiperf_losing_windows(monkeypatch, blocks=1)  # the first block runs its first window only ...
    real = AiperfDriver.grid_command

    def failing(self, grid, config_path):  # ... and then exits with code 3, the engine alive
        cmd = real(self, grid, config_path)
        return ["bash", "-c", shlex.join(cmd) + "; exit 3"] if grid.spec.artifact_dir == cut[0] else cmd

    monkeypatch.setattr(AiperfDriver, "grid_command", failing)
    recipe = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", name="one", model=str(stand_in_dir))
    w = Workload(schema_version=WORKLOAD_SCHEMA_VERSION, name="exits", concurrency=[1], input_tokens=32,
                 output_tokens=16, window_s=1.0, warmup_s=0.5, runs_per_arm=3, arm_order="sequential")
    result = run_plan([recipe], w, out_dir=tmp_path / "art", drivers="aiperf", startup_timeout_s=60,
                      order="sequential")
    assert result.complete and len(cut) == 1
    assert [m.run_index for m in result.runs] == [0, 1, 2] and all(m.ok for m in result.runs)
    first, retry = result.blocks
    assert (first["windows_finished"], first["windows_lost"]) == (1, ["r01_c1", "r02_c1"])
    assert (retry["retry"], retry["windows_finished"]) == (1, 2)
    note = next(n for n in result.notes if "ran again" in n)
    assert "AIPerf exited with code 3 without finishing window r01_c1" in note


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_retry_that_loses_windows_too_stops_the_plan_with_what_was_measured(tmp_path, ts_recipe, stand_in_dir,
                                                                              offline_env, monkeypatch):
    from infercrane.errors import WindowsLost

    _aiperf_losing_windows(monkeypatch, blocks=None)
    recipe = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", name="one", model=str(stand_in_dir))
    w = Workload(schema_version=WORKLOAD_SCHEMA_VERSION, name="lost", concurrency=[1], input_tokens=32,
                 output_tokens=16, window_s=1.0, warmup_s=0.5, runs_per_arm=3, arm_order="sequential")
    with pytest.raises(WindowsLost) as err:
        run_plan([recipe], w, out_dir=tmp_path / "art", drivers="aiperf", startup_timeout_s=60, order="sequential")
    partial = err.value.partial
    assert err.value.finished == 1 and "window r02_c1" in str(err.value)
    assert [m.run_index for m in partial.runs] == [0, 1] and all(m.ok for m in partial.runs)
    assert [(b.get("retry"), b["windows_lost"]) for b in partial.blocks] == [(None, ["r01_c1", "r02_c1"]),
                                                                             (1, ["r02_c1"])]
    assert not partial.complete and any(n.startswith("stopped part-way: AIPerf ended") for n in partial.notes)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_concurrency_visit_reads_each_trial(tmp_path, ts_recipe, stand_in_dir, offline_env):
    from infercrane.serving.drivers import RunSpec
    from infercrane.serving.drivers.aiperf import AiperfDriver, RunGrid
    from infercrane.serving.engine import Engine
    from infercrane.serving.workload import resolve_tokenizer

    recipe = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", model=str(stand_in_dir))
    tok, env = resolve_tokenizer(recipe.resolved())
    with Engine(recipe, log_dir=tmp_path / "engines", startup_timeout_s=30) as engine:
        spec = RunSpec(base_url=engine.base_url, served_model=engine.served_model, tokenizer=tok,
                       endpoint="completions", streaming=True, ignore_eos=True, input_tokens=32, output_tokens=16,
                       concurrency=2, request_count=12, warmup_requests=2, seed=0, token_count_source="server",
                       request_timeout_s=30.0, artifact_dir=tmp_path / "visit", timeout_s=240.0, arm="ts",
                       recipe_sha256=engine.recipe.sha256, run_index=3, env=env)
        runs = AiperfDriver().run_grid(RunGrid(spec=spec, run_indices=(3, 4), concurrencies=(2,),
                                               request_counts={2: 12}))
    assert [(m.run_index, m.concurrency, m.requests_completed) for m in runs] == [(3, 2, 12), (4, 2, 12)]
    assert runs[0].raw_export_path != runs[1].raw_export_path
    assert all(m.output_tok_s > 0 and m.notes[-1] == f"window r0{m.run_index}_c2 of a 2-window AIPerf block"
               for m in runs)


def _phase_done_line(name: str, start_ns: int, end_ns: int, completed: int) -> str:
    return (f"2026-12-03 04:02:43.444 - records_manager - INFO - Received CREDIT_PHASE_COMPLETE message, Phase "
            f"complete: PhaseRecordsStats(phase=CreditPhase.PROFILING, phase_index=1, profiling_index=0, "
            f"phase_name='{name}', phase_kind='profiling', start_ns={start_ns}, sent_end_ns={end_ns - 5}, "
            f"requests_end_ns={end_ns}, total_expected_requests=None, final_requests_completed={completed}, "
            f"final_requests_cancelled=0, final_request_errors=0, timeout_triggered=True, was_cancelled=False, "
            f"records_end_ns=None, success_records={completed}, error_records=0)\n")


def _record(name: str, ttft: float, osl: int = 4) -> str:
    import json

    return json.dumps({"metadata": {"benchmark_phase": "profiling", "phase_name": name},
                       "metrics": {"time_to_first_token": {"value": ttft}, "inter_token_latency": {"value": 1.0},
                                   "request_latency": {"value": ttft + 3.0}, "output_sequence_length": {"value": osl},
                                   "usage_completion_tokens": {"value": osl}}}) + "\n"


def test_phase_watch_reads_each_window_once_in_order_when_its_records_are_on_disk(tmp_path):
    from infercrane.serving.drivers import RunSpec
    from infercrane.serving.drivers.aiperf import LOG_FILE, RECORDS_FILE, PhaseWatch, RunGrid, parse_phase_done

    spec = RunSpec(base_url="http://127.0.0.1:1", served_model="m", tokenizer="t", endpoint="completions",
                   streaming=True, ignore_eos=True, input_tokens=8, output_tokens=4, concurrency=1, request_count=1,
                   warmup_requests=0, seed=0, token_count_source="server", request_timeout_s=10.0,
                   artifact_dir=tmp_path / "visit00", timeout_s=60.0, arm="a", recipe_sha256="0" * 64, run_index=3)
    grid = RunGrid(spec=spec, run_indices=(3, 4), concurrencies=(1, 8), window_s=2.0)
    assert [w.name for w in grid.windows()] == ["r03_c1", "r03_c8", "r04_c1", "r04_c8"]
    got: list[tuple[int, int, int]] = []
    watch = PhaseWatch(grid, driver_version="0.12.0", on_window=lambda m: got.append(
        (m.run_index, m.concurrency, m.requests_completed)))
    log, recs = spec.artifact_dir / LOG_FILE, spec.artifact_dir / RECORDS_FILE
    log.parent.mkdir(parents=True)
    watch.scan()
    assert got == []
    line = _phase_done_line("r03_c1", 1_000_000_000, 3_000_000_000, 2)
    assert parse_phase_done(line)["requests_end_ns"] == 3_000_000_000
    log.write_text(line)
    recs.write_text(_record("r03_c1", 10.0))
    watch.scan()
    assert got == []  # its end is logged, one of its two records is not on disk yet
    with open(recs, "a") as f:
        f.write(_record("r03_c1", 20.0) + _record("r03_c8", 5.0)[:30])  # and half a line of the next window
    watch.scan()
    watch.scan()
    assert got == [(3, 1, 2)]  # once only
    m = watch.delivered[0]
    assert m.duration_s == 2.0 and m.output_tok_s == 8 / 2.0 and m.request_s == 1.0
    assert m.ttft_p50_ms == 15.0 and m.ttft_p95_ms == 19.5  # linear interpolation, as AIPerf computes it
    # the process dies with window r03_c8 half read and its end never logged: what finished is kept, nothing else
    watch.finish(ended_normally=False)
    assert got == [(3, 1, 2)] and len(watch.delivered) == 1


def test_a_time_window_that_waited_long_on_requests_in_flight_says_so(tmp_path):
    # on the H200 at c = 100, 1000 -> 500 tokens: 10 s windows drained 0.27-1.73 s, and the longest drains read low
    from infercrane.serving.drivers import RunSpec
    from infercrane.serving.drivers.aiperf import DRAIN_NOTE, LOG_FILE, RECORDS_FILE, PhaseWatch, RunGrid

    spec = RunSpec(base_url="http://127.0.0.1:1", served_model="m", tokenizer="t", endpoint="completions",
                   streaming=True, ignore_eos=True, input_tokens=8, output_tokens=4, concurrency=1, request_count=1,
                   warmup_requests=0, seed=0, token_count_source="server", request_timeout_s=10.0,
                   artifact_dir=tmp_path / "v", timeout_s=60.0, arm="a", recipe_sha256="0" * 64, run_index=0)
    grid = RunGrid(spec=spec, run_indices=(0, 1), concurrencies=(1,), window_s=10.0)
    (spec.artifact_dir / LOG_FILE).parent.mkdir(parents=True)
    short = _phase_done_line("r00_c1", 0, 10_300_000_000, 1).replace("sent_end_ns=10299999995",
                                                                      "sent_end_ns=10000000000")
    long = _phase_done_line("r01_c1", 11_000_000_000, 22_700_000_000, 1).replace("sent_end_ns=22699999995",
                                                                                 "sent_end_ns=21000000000")
    (spec.artifact_dir / LOG_FILE).write_text(short + long)
    (spec.artifact_dir / RECORDS_FILE).write_text(_record("r00_c1", 1.0) + _record("r01_c1", 1.0))
    watch = PhaseWatch(grid, driver_version="0.12.0")
    watch.scan()
    first, second = watch.delivered
    assert not any(n.startswith(DRAIN_NOTE) for n in first.notes)  # 0.3 s of 10: under DRAIN_NOTE_SHARE
    said = [n for n in second.notes if n.startswith(DRAIN_NOTE)]
    assert said and "for 1.70 s (17% of its 10 s)" in said[0] and "request_count" in said[0]
    counted = RunGrid(spec=spec, run_indices=(0, 1), concurrencies=(1,), request_counts={1: 1})
    watch = PhaseWatch(counted, driver_version="0.12.0")
    watch.scan()
    assert not any(n.startswith(DRAIN_NOTE) for m in watch.delivered for n in m.notes)  # a request count: no tail


def test_phase_watch_callback_errors_stop_the_block(tmp_path):
    from infercrane.serving.drivers import RunSpec
    import json

    from infercrane.serving.drivers.aiperf import LOG_FILE, RECORDS_FILE, PhaseWatch, RunGrid

    spec = RunSpec(base_url="http://127.0.0.1:1", served_model="m", tokenizer="t", endpoint="completions",
                   streaming=True, ignore_eos=True, input_tokens=8, output_tokens=4, concurrency=1, request_count=1,
                   warmup_requests=0, seed=0, token_count_source="server", request_timeout_s=10.0,
                   artifact_dir=tmp_path / "v", timeout_s=60.0, arm="a", recipe_sha256="0" * 64, run_index=0)
    grid = RunGrid(spec=spec, run_indices=(0,), concurrencies=(1,), window_s=1.0)
    (spec.artifact_dir / LOG_FILE).parent.mkdir(parents=True)
    (spec.artifact_dir / LOG_FILE).write_text(_phase_done_line("r00_c1", 0, 1_000_000_000, 1))
    (spec.artifact_dir / RECORDS_FILE).write_text(_record("r00_c1", 1.0))

    def disk_full(m):
        raise OSError("no space left to write the receipt")

    with pytest.raises(OSError, match="no space"):
        PhaseWatch(grid, driver_version="x", on_window=disk_full).scan()


def test_a_phase_logged_and_recorded_without_its_name_is_matched_by_its_index(tmp_path):
    # seen once with AIPerf 0.12.0: the records manager logged a window's end as phase_name=None
    from infercrane.serving.drivers import RunSpec
    import json

    from infercrane.serving.drivers.aiperf import LOG_FILE, RECORDS_FILE, PhaseWatch, RunGrid

    spec = RunSpec(base_url="http://127.0.0.1:1", served_model="m", tokenizer="t", endpoint="completions",
                   streaming=True, ignore_eos=True, input_tokens=8, output_tokens=4, concurrency=1, request_count=1,
                   warmup_requests=0, seed=0, token_count_source="server", request_timeout_s=10.0,
                   artifact_dir=tmp_path / "v", timeout_s=60.0, arm="a", recipe_sha256="0" * 64, run_index=0)
    grid = RunGrid(spec=spec, run_indices=(0,), concurrencies=(1, 8), window_s=2.0, warmup_s=1.0)  # warm-up: phase 0
    (spec.artifact_dir / LOG_FILE).parent.mkdir(parents=True)
    nameless = _phase_done_line("x", 1_000_000_000, 3_000_000_000, 1).replace(
        "phase_index=1, profiling_index=0, phase_name='x'", "phase_index=2, profiling_index=1, phase_name=None")
    (spec.artifact_dir / LOG_FILE).write_text(nameless)  # the second window's end, before the first's is read
    record = json.loads(_record("x", 4.0))
    record["metadata"] = {"benchmark_phase": "profiling", "phase_name": None, "phase_index": 2}
    warm = {"metadata": {"benchmark_phase": "warmup", "phase_name": None, "phase_index": 0}, "metrics": {}}
    (spec.artifact_dir / RECORDS_FILE).write_text(json.dumps(warm) + "\n" + json.dumps(record) + "\n")
    watch = PhaseWatch(grid, driver_version="0.12.0")
    watch.scan()
    assert not watch.delivered  # the second window (phase 2) has ended, the first has not: delivered in order
    assert set(watch.done) == {"r00_c8"} and len(watch.records["r00_c8"]) == 1 and "r00_c1" not in watch.records
    with open(spec.artifact_dir / LOG_FILE, "a") as f:  # the first window, named as usual
        f.write(_phase_done_line("r00_c1", 0, 1_000_000_000, 1))
    with open(spec.artifact_dir / RECORDS_FILE, "a") as f:
        f.write(_record("r00_c1", 2.0))
    watch.finish(ended_normally=True)
    assert [m.concurrency for m in watch.delivered] == [1, 8]
    first, second = watch.delivered
    assert not any("phase index" in n for n in first.notes)
    assert second.requests_completed == 1 and any("matched by its phase index" in n for n in second.notes)

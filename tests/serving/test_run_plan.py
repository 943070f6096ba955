"""Plan execution: engines per segment, prefix-cache resets, artifacts, partial results, nothing left running.

The driver here is a small stand-in that sends two real requests to the engine (so the engine must be up
and serving the right model) and records what it saw; real AIPerf runs are in test_aiperf_live.py.
"""
from __future__ import annotations

import json
import urllib.request

import pytest

import infercrane.serving.drivers as drivers_mod
from infercrane.errors import InputError, RunFailed, UnavailableError
from infercrane.serving.drivers import Driver, RunSpec
from infercrane.proc import group_alive
from infercrane.serving.metrics import RunMetrics
from infercrane.serving.workload import WORKLOAD_SCHEMA_VERSION, Workload, resolve_tokenizer, run_arm, run_plan


class ProbeDriver(Driver):
    """Sends two completions per run and reports their latency; remembers every spec and server counter."""

    name = "probe"

    def __init__(self, interrupt_at: int | None = None) -> None:
        self.seen: list[tuple[RunSpec, dict]] = []
        self.interrupt_at = interrupt_at

    def available(self) -> tuple[bool, str]:
        return True, "test probe"

    def version(self) -> str:
        return "0"

    def run(self, spec: RunSpec) -> RunMetrics:
        if self.interrupt_at is not None and len(self.seen) == self.interrupt_at:
            raise KeyboardInterrupt
        with urllib.request.urlopen(f"{spec.base_url}/stats", timeout=5) as resp:
            self.seen.append((spec, json.loads(resp.read())))
        spec.artifact_dir.mkdir(parents=True, exist_ok=True)
        tokens, failures = 0, 0
        for _ in range(2):
            body = json.dumps({"model": spec.served_model, "prompt": "x", "max_tokens": spec.output_tokens,
                               "ignore_eos": True}).encode()
            req = urllib.request.Request(f"{spec.base_url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    tokens += json.loads(resp.read())["usage"]["completion_tokens"]
            except OSError:  # as a real driver does: a failed request, not a crashed driver
                failures += 1
        return RunMetrics(arm=spec.arm, recipe_sha256=spec.recipe_sha256, run_index=spec.run_index,
                          concurrency=spec.concurrency, driver="probe", driver_version="0",
                          token_count_source="server", streaming=False, expected_output_tokens=spec.output_tokens,
                          raw_export_path=str(spec.artifact_dir), requests_sent=2, requests_completed=2 - failures,
                          failures=failures, output_length_mismatches=0, output_tokens_total=tokens,
                          duration_s=0.1, output_tok_s=10.0 * tokens, request_s=10.0 * (2 - failures),
                          e2e_p50_ms=1.0 if tokens else None)


@pytest.fixture
def probe(monkeypatch):
    holder: dict[str, ProbeDriver] = {}
    real = drivers_mod.get_driver

    def get_driver(name: str) -> Driver:
        if name in ("probe", "probe2"):
            return holder.setdefault(name, ProbeDriver())
        return real(name)

    monkeypatch.setattr(drivers_mod, "get_driver", get_driver)
    return holder


def workload(**kw) -> Workload:
    data = dict(schema_version=WORKLOAD_SCHEMA_VERSION, name="w", concurrency=[1, 2], input_tokens=8,
                output_tokens=4, runs_per_arm=3, arm_order="sandwich")
    data.update(kw)
    return Workload(**data)


def test_sandwich_plan_runs_end_to_end(tmp_path, ts_recipe, probe):
    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="a", model="model-a")
    b = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="b", model="model-b")
    called: list[RunMetrics] = []
    result = run_plan([a, b], workload(), out_dir=tmp_path, drivers="probe", tokenizer="unused", on_run=called.append)
    assert result.complete
    got = [(m.arm, m.run_index, m.concurrency) for m in result.runs]
    assert got == [(p.arm, p.run_index, p.concurrency) for p in result.plan]
    assert got[:4] == [("a", 0, 1), ("a", 0, 2), ("a", 1, 1), ("a", 1, 2)]
    assert got[-2:] == [("a", 2, 1), ("a", 2, 2)]
    assert called == result.runs
    # three engine lifetimes, A B A, each stopped, none left running
    assert [e.recipe_name for e in result.engines] == ["a", "b", "a"]
    for rec in result.engines:
        assert rec.returncode is not None and rec.stopped_at and rec.version
        assert not group_alive(rec.pid)
        assert (tmp_path / "engines").is_dir() and rec.log_path.startswith(str(tmp_path / "engines"))
    # each run reached the right engine, after a prefix-cache reset of that engine
    driver = probe["probe"]
    per_engine: dict[str, list[int]] = {}
    for spec, stats in driver.seen:
        assert spec.served_model == f"model-{spec.arm}"
        per_engine.setdefault(spec.base_url, []).append(stats["prefix_cache_resets"])
        assert spec.artifact_dir == tmp_path / spec.arm / f"run{spec.run_index:02d}" / f"c{spec.concurrency}"
        assert spec.recipe_sha256 == result.recipes[spec.arm].sha256
    for resets in per_engine.values():
        assert resets == list(range(1, len(resets) + 1))
    assert result.recipes["a"].sha256
    assert any("measurement window was 0.10 s" in n for n in result.notes)  # the probe reports 0.1 s windows


def test_run_arm_is_one_engine(tmp_path, ts_recipe, probe):
    result = run_arm(ts_recipe("--ttft-ms", "0", "--itl-ms", "0"), workload(concurrency=[3]), out_dir=tmp_path,
                     drivers="probe", tokenizer="unused")
    assert [(m.run_index, m.concurrency) for m in result.runs] == [(0, 3), (1, 3), (2, 3)]
    assert len(result.engines) == 1 and result.order == "sequential"


def test_engine_crash_stops_plan_with_partial_results(tmp_path, ts_recipe, probe):
    from infercrane.serving.warmup import rounds_for

    # readiness uses 1 request, the engine warm-up one a round (at c=1), each probe run 2: the engine exits right after
    # the first run
    w = workload(concurrency=[1])
    n = 1 + rounds_for(w) + 2
    crashy = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--crash-after", str(n), name="crashy")
    with pytest.raises(RunFailed) as err:
        run_plan([crashy], w, out_dir=tmp_path, drivers="probe", tokenizer="unused", order="sequential")
    partial = err.value.partial
    assert not partial.complete and len(partial.runs) == 1 and partial.runs[0].ok
    assert "crashy" in str(err.value) and f"crashing after {n} requests" in str(err.value)  # the log tail
    assert partial.engines[0].returncode is not None and not group_alive(partial.engines[0].pid)
    assert any("stopped part-way" in n for n in partial.notes)


def test_ctrl_c_mid_plan_stops_engines(tmp_path, ts_recipe, probe):
    probe["probe"] = ProbeDriver(interrupt_at=1)
    with pytest.raises(KeyboardInterrupt):
        run_plan([ts_recipe("--ttft-ms", "0", name="a"), ts_recipe("--ttft-ms", "0", name="b")],
                 workload(concurrency=[1]), out_dir=tmp_path, drivers="probe", tokenizer="unused")
    assert len(probe["probe"].seen) == 1  # interrupted at the second run
    for log in (tmp_path / "engines").glob("*.log"):
        assert "testserver: stopped" in log.read_text()


def test_preflight_fails_before_any_engine_starts(tmp_path, ts_recipe):
    bad = ts_recipe("--no-such-flag")
    with pytest.raises(InputError, match="--no-such-flag"):
        run_plan([bad], workload(), out_dir=tmp_path, drivers="aiperf", tokenizer="unused", order="sequential")
    assert not (tmp_path / "engines").exists()
    with pytest.raises(InputError, match="unknown driver"):
        run_plan([ts_recipe()], workload(), out_dir=tmp_path, drivers="nope", tokenizer="unused", order="sequential")
    with pytest.raises(InputError, match="share a name"):
        run_plan([ts_recipe(), ts_recipe()], workload(), out_dir=tmp_path, tokenizer="unused")


def test_on_start_is_called_once_preflight_passed_and_before_any_engine(tmp_path, ts_recipe, probe):
    calls: list[bool] = []

    def on_start() -> None:
        calls.append((tmp_path / "ok" / "engines").exists())

    with pytest.raises(InputError):
        run_plan([ts_recipe("--no-such-flag")], workload(), out_dir=tmp_path / "bad", drivers="probe",
                 tokenizer="unused", order="sequential", on_start=on_start)
    assert calls == []
    run_plan([ts_recipe("--ttft-ms", "0", "--itl-ms", "0")], workload(concurrency=[1]),
             out_dir=tmp_path / "ok", drivers="probe", tokenizer="unused", order="sequential", on_start=on_start)
    assert calls == [False]  # once, and no engine had started yet


def test_vllm_bench_unavailable_without_vllm(tmp_path, ts_recipe):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(UnavailableError, match="vllm-bench"):
        run_plan([ts_recipe()], workload(), out_dir=tmp_path, drivers="vllm-bench", tokenizer="unused",
                 order="sequential")


def test_tokenizer_resolution(stand_in_dir, ts_recipe):
    tok, env = resolve_tokenizer(ts_recipe(model=str(stand_in_dir)).resolved())
    if (stand_in_dir / "infercrane_stand_in.json").exists():
        assert tok == "Qwen/Qwen3-0.6B" and env["HF_HUB_OFFLINE"] == "1" and "HF_HUB_CACHE" in env
    else:
        assert tok == str(stand_in_dir.resolve())
    assert resolve_tokenizer(ts_recipe(), "/some/dir") == ("/some/dir", {})
    with pytest.raises(InputError, match="has no tokenizer"):
        resolve_tokenizer(ts_recipe())


def test_several_drivers_drive_the_same_engine_at_every_point(tmp_path, ts_recipe, probe):
    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="a", model="model-a")
    result = run_plan([a], workload(concurrency=[1]), out_dir=tmp_path, drivers=["probe", "probe2"],
                      tokenizer="unused", order="sequential")
    assert result.complete and len(result.engines) == 1
    assert [(m.run_index, m.concurrency) for m in result.runs] == [(0, 1), (0, 1), (1, 1), (1, 1), (2, 1), (2, 1)]
    first, second = probe["probe"], probe["probe2"]
    # each driver saw the same engine, and had its own artifact folder per point
    assert {s.base_url for s, _ in first.seen} == {s.base_url for s, _ in second.seen}
    assert {s.artifact_dir.name for s, _ in first.seen} == {"probe"}
    assert {s.artifact_dir.name for s, _ in second.seen} == {"probe2"}
    with pytest.raises(InputError):
        run_plan([a], workload(), out_dir=tmp_path, drivers=["probe", "probe"], tokenizer="unused")


def test_coresident_engines_start_together_and_serve_every_visit(tmp_path, ts_recipe, probe):
    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="a", model="model-a")
    b = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="b", model="model-b")
    result = run_plan([a, b], workload(), out_dir=tmp_path, drivers="probe", tokenizer="unused", coresident=True)
    assert result.complete
    # sandwich A B A on two engines that stayed up: one lifetime per arm, each knowing the other
    assert [e.recipe_name for e in result.engines] == ["a", "b"]
    assert [e.coresident_with for e in result.engines] == [["b"], ["a"]]
    for rec in result.engines:
        assert rec.returncode is not None and not group_alive(rec.pid)
    seen: dict[str, set[str]] = {}
    for spec, _ in probe["probe"].seen:
        seen.setdefault(spec.arm, set()).add(spec.base_url)
    assert all(len(v) == 1 for v in seen.values()) and seen["a"] != seen["b"]
    assert any("co-resident engines: a, b" in n for n in result.notes)


def test_coresident_engines_that_cannot_start_fall_back_to_one_at_a_time(tmp_path, ts_recipe, probe):
    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="a", model="model-a")
    # b refuses to start beside another engine in this test: it crashes before answering (readiness needs 1 request)
    b = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--crash-after", "0", name="b", model="model-b")
    with pytest.raises(RunFailed) as err:
        run_plan([a, b], workload(concurrency=[1]), out_dir=tmp_path, drivers="probe", tokenizer="unused",
                 coresident=True)
    logs = sorted(p.name for p in (tmp_path / "engines").glob("*.log"))
    assert logs == ["00-a.log", "01-b.log", "coresident-a.log", "coresident-b.log"]  # together first, then one by one
    notes = err.value.partial.notes
    assert any("did not all start" in n and "one engine at a time instead" in n for n in notes), notes
    assert [m.arm for m in err.value.partial.runs] == ["a", "a"]  # a's first visit ran on its own engine, then b failed


def test_shared_prompts_hand_one_file_per_point_to_every_driver_and_arm(tmp_path, ts_recipe, probe, stand_in_dir):
    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="a", model=str(stand_in_dir))
    b = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--seed", "1", name="b", model=str(stand_in_dir))
    w = workload(prompts="shared", request_count=4, warmup_requests=1)
    result = run_plan([a, b], w, out_dir=tmp_path, drivers=["probe", "probe2"])
    assert result.complete
    files: dict[tuple[int, int], set] = {}
    for driver in ("probe", "probe2"):
        for s, _ in probe[driver].seen:
            assert s.prompts_file is not None and s.prompts_file.is_file()
            files.setdefault((s.run_index, s.concurrency), set()).add((s.arm, driver, s.prompts_file))
    assert set(files) == {(r, c) for r in range(3) for c in (1, 2)}
    for point, seen in files.items():  # both arms and both drivers at a point: one file
        assert {(arm, d) for arm, d, _ in seen} == {(arm, d) for arm in "ab" for d in ("probe", "probe2")}
        assert len({f for _, _, f in seen}) == 1, point
    assert len({f for seen in files.values() for _, _, f in seen}) == 6
    assert any(n.startswith("prompts: shared") for n in result.notes)
    # without shared prompts the drivers make their own
    plain = run_plan([a], workload(concurrency=[1]), out_dir=tmp_path / "plain", drivers="probe",
                     order="sequential")
    assert plain.complete and all(s.prompts_file is None for s, _ in probe["probe"].seen[-3:])


def test_a_finished_plan_accounts_for_its_wall_time(tmp_path, ts_recipe, probe):
    from infercrane.serving.receipt import time_accounting

    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="a", model="model-a")
    b = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="b", model="model-b")
    result = run_plan([a, b], workload(), out_dir=tmp_path, drivers="probe", tokenizer="unused")
    assert result.wall_s and result.wall_s > 0
    t = time_accounting(result, [])
    assert t["wall_s"] == result.wall_s
    assert t["measured_s"] == pytest.approx(0.1 * len(result.runs))  # the probe reports 0.1 s windows
    # the probe's windows are nominal, not timed: their share can exceed 1 on a fast machine; only the arithmetic counts
    assert t["measured_share"] == pytest.approx(t["measured_s"] / t["wall_s"])
    assert "engine_up_s" not in t  # a plan of one driver invocation per point has no AIPerf blocks to account for
    # with blocks: engine-up time is the wall time less the start-ups of the engines the plan launched
    result.blocks.append({"arm": "a", "startup_s": 2.0, "warmup_s": 1.0, "gaps_s": 0.01, "tail_s": 1.5,
                          "max_gap_s": 0.01})
    engines = [{"startup_s": 0.25, "launched_by_infercrane": True}, {"startup_s": 9.0, "launched_by_infercrane": False}]
    t = time_accounting(result, engines)
    assert t["engine_up_s"] == pytest.approx(result.wall_s - 0.25, abs=1e-3)
    assert t["measured_share_of_engine_up"] == pytest.approx(t["measured_s"] / t["engine_up_s"], rel=1e-3)
    assert (t["blocks"], t["blocks_startup_s"], t["blocks_tail_s"]) == (1, 2.0, 1.5)


def test_each_engine_is_warmed_once_before_its_first_measured_run(tmp_path, ts_recipe, probe):
    from infercrane.receipts.models_v2 import EngineRecord as ReceiptEngine
    from infercrane.serving.receipt import engine_record
    from infercrane.serving.warmup import rounds_for

    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="a", model="model-a")
    b = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="b", model="model-b")
    w = workload(concurrency=[1, 2])
    ROUNDS = rounds_for(w)  # noqa: N806 - one round: windows of a request count
    result = run_plan([a, b], w, out_dir=tmp_path, drivers="probe", tokenizer="unused", coresident=True)
    assert len(result.engines) == 2  # co-resident: a's two visits (sandwich) are one engine
    for rec in result.engines:
        assert rec.warmup["requests"] == ROUNDS * (1 + 2) and rec.warmup["concurrencies"] == [1, 2]
        assert ReceiptEngine.model_validate(engine_record(rec)).warmup.requests == ROUNDS * 3
    finished = {}  # arm -> the server's finished requests seen at the start of each probe run, in order
    for spec, stats in probe["probe"].seen:
        finished.setdefault(spec.arm, []).append(stats["finished_requests"])
    for arm, counts in finished.items():
        assert counts[0] >= ROUNDS * 3, (arm, counts)  # the warm-up came before the first measured run
        assert all(y - x == 2 for x, y in zip(counts, counts[1:])), (arm, counts)  # and never again: 2 per probe run


class TimedProbe(ProbeDriver):
    """The probe with real windows (start, duration), a pause between runs so that no two windows touch."""

    def run(self, spec: RunSpec) -> RunMetrics:
        import time
        from datetime import datetime, timezone

        time.sleep(2.2)
        start, t0 = datetime.now(timezone.utc).isoformat(), time.monotonic()
        m = super().run(spec)
        return m.model_copy(update={"started_at": start, "duration_s": time.monotonic() - t0})


def test_a_compile_the_engine_logs_inside_a_window_is_recorded_against_that_run(tmp_path, ts_recipe, probe, caplog):
    from infercrane.receipts.models_v2 import EngineRecord as ReceiptEngine
    from infercrane.serving.receipt import engine_record

    probe["probe"] = TimedProbe()
    # readiness 1 request, warm-up 2 (c = 1), then 2 per probe run: the 6th finished request is run 1's second
    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--log-jit-after", "6", name="a", model="model-a")
    result = run_plan([a], workload(concurrency=[1]), out_dir=tmp_path, drivers="probe", tokenizer="unused",
                      order="sequential")
    (rec,) = result.engines
    assert [(j["kernel"], j["runs"]) for j in rec.jit_during_serving] == [("testserver_kernel",
                                                                           ["a run 1 at c=1 (probe)"])]
    assert ReceiptEngine.model_validate(engine_record(rec)).jit_during_serving[0].kernel == "testserver_kernel"
    assert any("Triton JIT compile of testserver_kernel" in n and "a run 1 at c=1 (probe)" in n
               for n in result.notes), result.notes
    assert any("testserver_kernel" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)  # said live


def test_a_log_whose_compiles_cannot_be_read_is_a_note_not_a_failure(tmp_path, ts_recipe, probe, monkeypatch):
    import infercrane.serving.jit as jit

    def broken(events, runs):
        raise ValueError("bad stamp")

    monkeypatch.setattr(jit, "attribute", broken)
    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="a", model="model-a")
    result = run_plan([a], workload(concurrency=[1]), out_dir=tmp_path, drivers="probe", tokenizer="unused",
                      order="sequential")
    assert result.complete and len(result.runs) == 3
    assert any("its log's compiles could not be read (ValueError: bad stamp)" in n for n in result.notes)


def test_a_coresident_engine_keeps_its_compiles_against_runs_of_its_earlier_visits(tmp_path, ts_recipe, probe):
    probe["probe"] = TimedProbe()
    # readiness 1 request, warm-up 2 (c = 1), then 2 per probe run: the 4th finished request is a's run 0
    a = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", "--log-jit-after", "4", name="a", model="model-a")
    b = ts_recipe("--ttft-ms", "0", "--itl-ms", "0", name="b", model="model-b")
    result = run_plan([a, b], workload(concurrency=[1]), out_dir=tmp_path, drivers="probe", tokenizer="unused",
                      coresident=True)  # sandwich: a (runs 0, 1), b, a (run 2) on the same engine of a
    rec_a = next(r for r in result.engines if r.recipe_name == "a")
    assert [(j["kernel"], j["runs"]) for j in rec_a.jit_during_serving] == [("testserver_kernel",
                                                                             ["a run 0 at c=1 (probe)"])]
    assert sum("testserver_kernel" in n for n in result.notes) == 1  # noted once, at the visit that held it

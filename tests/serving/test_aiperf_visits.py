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
def test_sandwich_visits_each_run_as_one_aiperf_invocation(tmp_path, ts_recipe, stand_in_dir, offline_env):
    slow = ts_recipe("--ttft-ms", "30", "--itl-ms", "4", name="slow", model=str(stand_in_dir))
    fast = ts_recipe("--ttft-ms", "10", "--itl-ms", "1", name="fast", model=str(stand_in_dir))
    w = Workload(schema_version=WORKLOAD_SCHEMA_VERSION, name="visits", concurrency=[1, 2], input_tokens=32,
                 output_tokens=16, window_s=1.0, warmup_s=0.5, runs_per_arm=3, arm_order="sandwich")
    progress: list[str] = []
    result = run_plan([slow, fast], w, out_dir=tmp_path / "art", drivers="aiperf", startup_timeout_s=60,
                      on_progress=progress.append)
    # while a visit runs, its finished points are announced (each at most once; the last may only be read at the end)
    assert progress and len(progress) == len(set(progress)) <= 12
    assert "slow run 0 c=1: measured, point 1/4 of this visit" in progress[0]
    # sandwich: slow (runs 0-1), fast (0-2), slow (2): three visits, three AIPerf invocations
    logs = sorted(p.relative_to(tmp_path / "art").as_posix() for p in (tmp_path / "art").rglob("driver.log"))
    assert logs == ["fast/visit01/driver.log", "slow/visit00/driver.log", "slow/visit02/driver.log"]
    points = [(m.arm, m.run_index, m.concurrency) for m in result.runs]
    assert points == [("slow", 0, 1), ("slow", 0, 2), ("slow", 1, 1), ("slow", 1, 2),
                      ("fast", 0, 1), ("fast", 0, 2), ("fast", 1, 1), ("fast", 1, 2), ("fast", 2, 1), ("fast", 2, 2),
                      ("slow", 2, 1), ("slow", 2, 2)]
    for m in result.runs:
        assert m.ok and m.requests_completed > 0 and m.duration_s > 0.5, m
        assert f"/visit" in m.raw_export_path and f"/concurrency_{m.concurrency}/" in m.raw_export_path
    tpot = {arm: sorted(m.tpot_p50_ms for m in result.runs if m.arm == arm) for arm in ("slow", "fast")}
    assert max(tpot["fast"]) < min(tpot["slow"])  # 1 ms against 4 ms per token: each point is its own arm's
    prov = provenance(config=plan_config("ab", [slow.resolved(), fast.resolved()], w, {"order": None}),
                      command_line=["test"])
    doc = build_document(result, kind="ab", policy=load_policy("serving"), provenance=prov)
    r = write_receipt(doc, tmp_path / "ab.json").document
    assert r["paired_aiperf"]["workload"]["window_s"] == 1.0
    assert {(d["recipe"], d["concurrency"]) for d in r["paired_aiperf"]["drift"]} == {
        (a, c) for a in ("slow", "fast") for c in (1, 2)}


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


def test_point_watch_reports_each_written_point_once_and_survives_a_bad_callback(tmp_path):
    from infercrane.serving.drivers import RunSpec
    from infercrane.serving.drivers.aiperf import SUMMARY_FILE, PointWatch, RunGrid

    spec = RunSpec(base_url="http://127.0.0.1:1", served_model="m", tokenizer="t", endpoint="completions",
                   streaming=True, ignore_eos=True, input_tokens=8, output_tokens=4, concurrency=1, request_count=1,
                   warmup_requests=0, seed=0, token_count_source="server", request_timeout_s=10.0,
                   artifact_dir=tmp_path / "visit00", timeout_s=60.0, arm="a", recipe_sha256="0" * 64, run_index=3)
    grid = RunGrid(spec=spec, run_indices=(3, 4), concurrencies=(1, 8))
    calls: list[tuple[int, int]] = []
    watch = PointWatch(grid, lambda r, c: calls.append((r, c)))
    watch.scan()
    assert calls == []
    first = tmp_path / "visit00/profile_runs/trial_0001/concurrency_8"
    first.mkdir(parents=True)
    (first / SUMMARY_FILE).write_text("{}")
    watch.scan()
    watch.scan()
    assert calls == [(3, 8)]  # trial 1 is run index 3; once only
    second = tmp_path / "visit00/profile_runs/trial_0002/concurrency_1"
    second.mkdir(parents=True)
    (second / SUMMARY_FILE).write_text("{}")
    watch.scan()
    assert calls == [(3, 8), (4, 1)]

    def broken(r, c):
        raise RuntimeError("console gone")

    bad = PointWatch(grid, broken)
    bad.scan()  # raises nothing; the callback is dropped
    assert bad.on_point is None and len(bad.seen) == 2

"""Serving receipts from synthetic runs (test data, not measurements): medians, the seed's derived fields,
statistics and decision agree and validate; two drivers' figures are set side by side; a partial plan gives a
receipt marked incomplete with no decision."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from infercrane.decide.policy import load_policy
from infercrane.env.capture import provenance
from infercrane.errors import InputError
from infercrane.receipts.validate import check_document, write_receipt
from infercrane.serving.metrics import RunMetrics
from infercrane.serving.receipt import build_document, plan_config, statistic_metric
from infercrane.serving.workload import PlanResult, load_workload, plan_runs


def _run(arm: str, run: int, c: int, tok_s: float, driver: str = "aiperf", ttft: float = 50.0) -> RunMetrics:
    return RunMetrics(arm=arm, recipe_sha256="0" * 64, run_index=run, concurrency=c, driver=driver,
                      driver_version="1", token_count_source="server", streaming=True, expected_output_tokens=64,
                      raw_export_path=f"{arm}/run{run:02d}/c{c}/{driver}.json", requests_sent=100,
                      requests_completed=100, failures=0,
                      output_length_mismatches=0, output_tokens_total=6400, duration_s=6400 / tok_s,
                      output_tok_s=tok_s, request_s=tok_s / 64, ttft_p50_ms=ttft * 0.8, ttft_p95_ms=ttft,
                      ttft_p99_ms=ttft * 1.1, tpot_p50_ms=1000 / tok_s * c, tpot_p95_ms=1100 / tok_s * c,
                      tpot_p99_ms=1200 / tok_s * c, e2e_p50_ms=100.0, e2e_p95_ms=64000 / tok_s * c,
                      e2e_p99_ms=70000 / tok_s * c, started_at="2026-12-01T00:00:00+00:00")


def _plan(stand_in_dir: Path, ts_recipe, arms: list[str], workload, drivers: list[str]) -> PlanResult:
    recipes = {a: ts_recipe(name=a, model=str(stand_in_dir)).resolved() for a in arms}
    return PlanResult(workload=workload, recipes=recipes, drivers=drivers, order="sequential",
                      plan=plan_runs(arms, workload, "sequential"))


def _two_driver_bench(tmp_path: Path, stand_in_dir: Path, ts_recipe, w, c: int, aiperf: list[float],
                      vllm: list[float]) -> dict:
    """A complete serve bench receipt of one recipe at concurrency ``c``: run i read ``aiperf[i]`` by AIPerf and
    ``vllm[i]`` by vllm bench serve (output tok/s)."""
    result = _plan(stand_in_dir, ts_recipe, ["compiled"], w, ["aiperf", "vllm-bench"])
    for i, (a, b) in enumerate(zip(aiperf, vllm)):
        result.runs += [_run("compiled", i, c, a), _run("compiled", i, c, b, "vllm-bench")]
    result.complete = True
    doc = build_document(result, kind="bench", policy=load_policy("serving"), provenance=_prov(result, "bench"))
    return write_receipt(doc, tmp_path / "bench.json").document


def _prov(result: PlanResult, kind: str) -> dict:
    config = plan_config(kind, list(result.recipes.values()), result.workload, {"order": result.order})
    p = provenance(config=config, command_line=["test"])
    p["hardware"] = p["hardware"] | {"gpu": "test-gpu"}
    return p


def test_ab_receipt_from_five_runs_each(tmp_path: Path, stand_in_dir: Path, ts_recipe) -> None:
    w = load_workload("seed-paired").with_overrides(concurrency=[8], runs_per_arm=5)
    result = _plan(stand_in_dir, ts_recipe, ["slow", "fast"], w, ["aiperf"])
    result.runs += [_run("slow", i, 8, 400 + i, ttft=100 + i) for i in range(5)]
    result.runs += [_run("fast", i, 8, 2400 + 10 * i, ttft=60 + i) for i in range(5)]
    result.complete = True
    doc = build_document(result, kind="ab", policy=load_policy("serving"), provenance=_prov(result, "ab"))
    r = write_receipt(doc, tmp_path / "ab.json").document
    pa = r["paired_aiperf"]
    assert [m["output_tokens_per_second"] for m in pa["measurements"]] == [402, 2420]
    assert pa["comparisons"][0]["throughput_speedup"] == round(2420 / 402, 4)
    assert pa["comparisons"][0]["ttft_p95_reduction_percent"] == round((102 - 62) / 102 * 100, 2)
    assert pa["decision_code"] == "accept" and "5 v 5 runs" in pa["reason"]
    assert r["model"]["weights"] == "dummy" and r["complete"] is True
    assert r["model"]["hidden_size"] == 1024 and r["model"]["layers"] == 28


def test_bench_receipt_sets_two_drivers_side_by_side(tmp_path: Path, stand_in_dir: Path, ts_recipe) -> None:
    w = load_workload("public-1000").with_overrides(runs_per_arm=3)
    r = _two_driver_bench(tmp_path, stand_in_dir, ts_recipe, w, 100, [15000 + i for i in range(3)],
                          [15300 + i for i in range(3)])
    pw = r["public_workload_reproduction"]
    assert [(a["driver"], a["output_tokens_per_second"]) for a in pw["arms"]] == [("aiperf", 15001),
                                                                                   ("vllm-bench", 15301)]
    assert pw["driver_agreement"][0].startswith("c=100 output_tokens_per_second: vllm-bench 1.53e+04 vs aiperf 1.5e+04")
    assert "(+2.00 percent; 95 percent CI of the ratio" in pw["driver_agreement"][0]
    assert pw["driver_agreement"][0].endswith("3 v 3 runs): INSUFFICIENT runs to judge agreement")
    tput = r["bench"]["driver_agreement"][0]
    assert tput["metric"] == "output_tokens_per_second" and tput["within_target"] is True
    assert tput["difference_percent"] == (15301 / 15001 - 1) * 100
    assert tput["spread_percent"] == 2 / 15301 * 100 and tput["within_run_spread"] is False


def test_bench_over_several_concurrencies_compares_drivers_at_each(tmp_path: Path, stand_in_dir: Path,
                                                                   ts_recipe) -> None:
    w = load_workload("seed-paired").with_overrides(runs_per_arm=3)
    result = _plan(stand_in_dir, ts_recipe, ["compiled"], w, ["aiperf", "vllm-bench"])
    for c, base in ((1, 400.0), (8, 3000.0), (32, 9000.0)):
        for i in range(3):
            # vllm-bench 10 % above AIPerf at c=8, otherwise 1 % above; AIPerf's runs scatter by 30 % at c=32
            scale = 1.10 if c == 8 else 1.01
            spread = 0.3 * base * (i - 1) if c == 32 else 0.0
            result.runs += [_run("compiled", i, c, base + spread), _run("compiled", i, c, base * scale, "vllm-bench")]
    result.complete = True
    doc = build_document(result, kind="bench", policy=load_policy("serving"), provenance=_prov(result, "bench"))
    r = write_receipt(doc, tmp_path / "bench.json").document
    assert r.get("public_workload_reproduction") is None  # the seed's block holds one concurrency
    b = r["bench"]
    assert [(m["concurrency"], m["driver"]) for m in b["measurements"]] == [
        (c, d) for c in (1, 8, 32) for d in ("aiperf", "vllm-bench")]
    tput = {a["concurrency"]: a for a in b["driver_agreement"] if a["metric"] == "output_tokens_per_second"}
    assert tput[1]["within_target"] is True and tput[8]["within_target"] is False
    assert round(tput[8]["difference_percent"], 6) == 10.0 and tput[8]["within_run_spread"] is False
    assert round(tput[32]["reference_spread_percent"], 6) == 60.0 and tput[32]["within_run_spread"] is True


def test_validator_catches_a_bench_agreement_that_its_runs_do_not_support(tmp_path: Path, stand_in_dir: Path,
                                                                           ts_recipe) -> None:
    from infercrane.receipts.validate import check_document

    w = load_workload("public-1000").with_overrides(runs_per_arm=3)
    result = _plan(stand_in_dir, ts_recipe, ["compiled"], w, ["aiperf", "vllm-bench"])
    for i in range(3):
        result.runs += [_run("compiled", i, 100, 15000 + 100 * i), _run("compiled", i, 100, 15900 + i, "vllm-bench")]
    result.complete = True
    doc = build_document(result, kind="bench", policy=load_policy("serving"), provenance=_prov(result, "bench"))
    doc = json.loads(json.dumps(write_receipt(doc, tmp_path / "ok.json").document))
    assert check_document(doc)[1] == []
    doc["bench"]["driver_agreement"][0]["within_target"] = True  # +5.9 % is not within 2 %
    doc["bench"]["driver_agreement"][0]["spread_percent"] = 9.0
    doc["bench"]["measurements"][1]["output_tokens_per_second"] = 15000.0
    paths = {p for p, _ in check_document(doc)[1]}
    assert {"bench.driver_agreement[0].within_target", "bench.driver_agreement[0].spread_percent",
            "bench.measurements[1].output_tokens_per_second", "bench.driver_agreement[0].median"} <= paths


def test_partial_plan_gives_an_incomplete_receipt_without_decision(tmp_path: Path, stand_in_dir: Path,
                                                                     ts_recipe) -> None:
    w = load_workload("seed-paired").with_overrides(concurrency=[8])
    result = _plan(stand_in_dir, ts_recipe, ["slow", "fast"], w, ["aiperf"])
    result.runs += [_run("slow", 0, 8, 400)]
    doc = build_document(result, kind="ab", policy=load_policy("serving"), provenance=_prov(result, "ab"),
                         incomplete_reason="interrupted")
    r = write_receipt(doc, tmp_path / "partial.json").document
    assert r["complete"] is False and r["incomplete_reason"] == "interrupted"
    assert r.get("paired_aiperf") is None and len(r["runs"]) == 1
    assert json.loads((tmp_path / "partial.json").read_text())["content_sha256"] == r["content_sha256"]


def _agreement_of(tmp_path: Path, stand_in_dir: Path, ts_recipe, aiperf: list[float], vllm: list[float]) -> dict:
    w = load_workload("public-1000").with_overrides(runs_per_arm=len(aiperf))
    r = _two_driver_bench(tmp_path, stand_in_dir, ts_recipe, w, 100, aiperf, vllm)
    return next(a for a in r["bench"]["driver_agreement"] if a["metric"] == "output_tokens_per_second")


def test_driver_agreement_is_a_verdict_on_an_interval(tmp_path: Path, stand_in_dir: Path, ts_recipe) -> None:
    base = [15000.0, 15010.0, 15020.0, 15030.0, 15040.0]
    agree = _agreement_of(tmp_path, stand_in_dir, ts_recipe, base, [x * 1.005 for x in base])
    assert agree["verdict"] == "AGREE" and 0.98 <= agree["ci_low"] <= agree["ci_high"] <= 1.02
    far = _agreement_of(tmp_path, stand_in_dir, ts_recipe, base, [x * 1.10 for x in base])
    assert far["verdict"] == "DISAGREE" and far["ci_low"] > 1.02
    # one driver's runs scatter across the 2 percent edge: the interval crosses it, no verdict either way
    wide = _agreement_of(tmp_path, stand_in_dir, ts_recipe, base, [14700.0, 15000.0, 15300.0, 15600.0, 15900.0])
    assert wide["verdict"] == "UNDECIDED" and wide["ci_low"] < 1.02 < wide["ci_high"]
    assert wide["within_target"] is True  # the point estimate alone would have said "agree"


def test_shared_prompts_are_recorded_and_the_plan_rebuilds(tmp_path: Path, stand_in_dir: Path, ts_recipe) -> None:
    from infercrane.serving.receipt import plan_result_from_receipt

    w = load_workload("seed-paired-two-drivers").with_overrides(concurrency=[8], runs_per_arm=3)
    r = _two_driver_bench(tmp_path, stand_in_dir, ts_recipe, w, 8, [400 + i for i in range(3)],
                          [410 + i for i in range(3)])
    assert r["bench"]["workload"]["prompts"] == "shared"
    rebuilt, kind = plan_result_from_receipt(r)
    assert kind == "bench" and rebuilt.workload.prompts == "shared" and rebuilt.workload == w
    plain = _plan(stand_in_dir, ts_recipe, ["compiled"], load_workload("seed-paired-counts").with_overrides(
        concurrency=[8], runs_per_arm=3), ["aiperf"])
    plain.runs += [_run("compiled", i, 8, 400 + i) for i in range(3)]
    plain.complete = True
    doc = build_document(plain, kind="bench", policy=load_policy("serving"), provenance=_prov(plain, "bench"))
    assert "prompts" not in doc["bench"]["workload"]


def test_time_accounting_is_derived_from_the_runs_and_the_plan_wall_time(tmp_path: Path, stand_in_dir: Path,
                                                                          ts_recipe) -> None:
    from infercrane.hashing import HASH_FIELD, content_hash
    from infercrane.receipts.validate import check_document

    w = load_workload("seed-paired").with_overrides(concurrency=[8], runs_per_arm=5)
    result = _plan(stand_in_dir, ts_recipe, ["slow", "fast"], w, ["aiperf"])
    result.runs += [_run("slow", i, 8, 400 + i) for i in range(5)] + [_run("fast", i, 8, 2400 + i) for i in range(5)]
    result.complete, result.wall_s = True, 120.0
    doc = write_receipt(build_document(result, kind="ab", policy=load_policy("serving"),
                                       provenance=_prov(result, "ab")), tmp_path / "ab.json").document
    t = doc["paired_aiperf"]["time_accounting"]
    windows = sum(m.duration_s for m in result.runs)
    assert doc["plan_wall_s"] == 120.0 and t["measured_s"] == windows and t["measured_share"] == windows / 120.0
    edited = {k: v for k, v in json.loads(json.dumps(doc)).items() if k != HASH_FIELD}
    edited["paired_aiperf"]["time_accounting"]["measured_share"] = 0.9
    edited[HASH_FIELD] = content_hash(edited)
    assert any(p.startswith("paired_aiperf.time_accounting") for p, _ in check_document(edited)[1])


def test_a_runs_notes_are_kept_ok_or_failed_and_an_older_layout_still_rebuilds(tmp_path: Path, stand_in_dir: Path,
                                                                                 ts_recipe) -> None:
    from infercrane.serving.receipt import plan_result_from_receipt

    w = load_workload("seed-paired").with_overrides(concurrency=[8], runs_per_arm=3)
    result = _plan(stand_in_dir, ts_recipe, ["slow", "fast"], w, ["aiperf"])
    drained = "the window drained for 0.40 s (4% of its 10 s)"
    result.runs += [_run("slow", i, 8, 400 + i).model_copy(update={"notes": [drained] if i == 0 else []})
                    for i in range(3)]
    failed = _run("fast", 0, 8, 2400).model_copy(update={"failures": 2, "notes": ["2 x error 500 a; b", "cancelled"]})
    result.runs += [failed, *[_run("fast", i, 8, 2400 + i) for i in (1, 2)]]
    result.complete = True
    doc = write_receipt(build_document(result, kind="ab", policy=load_policy("serving"),
                                       provenance=_prov(result, "ab")), tmp_path / "ab.json").document
    runs = {(r["recipe"], r["run_index"]): r for r in doc["runs"]}
    assert runs["slow", 0]["status"] == "ok" and runs["slow", 0]["notes"] == [drained]
    assert runs["fast", 0]["error"] == "2 failed requests, 0 output-length mismatches"
    assert runs["fast", 0]["notes"] == ["2 x error 500 a; b", "cancelled"]
    rebuilt, _ = plan_result_from_receipt(doc)
    assert [m.notes for m in rebuilt.runs] == [m.notes for m in result.runs]
    # the layout before ``notes``: a failed run's notes end its error; an ok run's are not kept
    old = {**doc, "runs": [{k: v for k, v in r.items() if k != "notes"} for r in doc["runs"]]}
    for r in old["runs"]:
        if r["error"]:
            r["error"] += "; 2 x error 500 a; b; cancelled"
    rebuilt, _ = plan_result_from_receipt(old)
    assert rebuilt.runs[3].notes == ["2 x error 500 a", "b", "cancelled"] and rebuilt.runs[0].notes == []
    old["runs"][0]["error"] = "dropped"  # a rebuilt run must still reproduce its record exactly
    with pytest.raises(InputError, match=r"runs\[0\] cannot be rebuilt exactly"):
        plan_result_from_receipt(old)


def _goodput_ab(tmp_path: Path, stand_in_dir: Path, ts_recipe, good_a: int, good_b: int, policy,
                order: str = "sandwich") -> dict:
    """A complete A/B receipt (sandwich: 12 window pairs; sequential: 6 runs per arm at each of 2 concurrencies; 100
    requests in 2 s windows) decided on goodput:
    every window of arm A kept ``good_a`` requests within the SLOs, every one of B ``good_b``; B's windows last
    2 s + 2 ms x (run % 3), so that the pairs are not all identical."""
    from infercrane.decide.slo import slo_result

    w = load_workload("quick")
    arms = ["eager", "compiled"]
    recipes = {a: ts_recipe(name=a, model=str(stand_in_dir)).resolved() for a in arms}
    result = PlanResult(workload=w, recipes=recipes, drivers=["aiperf"], order=order, plan=plan_runs(arms, w, order),
                        analysis="pairs" if order == "sandwich" else "runs")
    for arm, good in (("eager", good_a), ("compiled", good_b)):
        for i in range(w.runs_per_arm):
            for c in w.concurrency:
                duration = 2.0 + (0.002 * (i % 3) if arm == "compiled" else 0.0)
                reqs = [{"ttft": 10.0 if k < good else 1000.0, "tpot": 5.0} for k in range(100)]
                slo = slo_result(reqs, 0, duration, policy.slos)
                result.runs.append(_run(arm, i, c, 6400 / duration).model_copy(update={
                    "goodput_req_s": slo.goodput_req_s, "slo": slo}))
    result.complete = True
    doc = build_document(result, kind="ab", policy=policy, provenance=_prov(result, "ab"))
    return write_receipt(doc, tmp_path / f"ab-{good_a}-{good_b}-{policy.goodput_continuity}-{order}.json").document


def test_an_arm_that_keeps_no_request_within_the_slos_enters_the_goodput_pairs(tmp_path: Path, stand_in_dir: Path,
                                                                               ts_recipe) -> None:
    slo = load_policy("serving", "serving-slo")
    assert slo.goodput_continuity == 0.5  # the packaged default, declared once in serving.yaml
    # A meets nothing in any window, B keeps 98 of 100: every window pair enters as (good + 0.5) / window, accept
    doc = _goodput_ab(tmp_path, stand_in_dir, ts_recipe, 0, 98, slo)
    pa = doc["paired_aiperf"]
    primary = pa["family"]["tests"][0]
    assert primary["metric"] == "goodput_req_s" and primary["n_pairs"] == 12
    assert "Haldane-Anscombe" in primary["estimand"]
    by_hand = [math.log((98.5 / (2.0 + 0.002 * k)) / (0.5 / 2.0)) for k in (0, 1, 2) for _ in range(4)]
    assert primary["ratio_b_over_a"] == pytest.approx(math.exp(sum(by_hand) / 12), rel=1e-12)
    assert primary["verdict"] == "BETTER" and pa["decision_code"] == "accept"
    # the per-concurrency description reads goodput as the decision does, and says so: A's windows kept none
    good = [s for s in pa["statistics"] if s["metric"] == "goodput_req_s"]
    assert len(good) == 2 and all(s["continuity_requests"] == 0.5 and s["a_values"] == [0.25] * 6 for s in good)
    assert all("continuity_requests" not in s for s in pa["statistics"] if s["metric"] != "goodput_req_s")
    assert statistic_metric(good[0]) == "goodput_req_s, (good + 0.5) / window"
    assert statistic_metric(pa["statistics"][0]) == pa["statistics"][0]["metric"]
    unlabelled = copy.deepcopy(doc)  # a receipt that drops the label is told so by deciding again
    unlabelled["paired_aiperf"]["statistics"][pa["statistics"].index(good[0])]["continuity_requests"] = None
    _, problems = check_document(unlabelled)
    assert any("continuity_requests" in where for where, _ in problems), problems
    # without the correction (a receipt decided before the key): no pair of goodput, no decision
    old = slo.model_copy(update={"goodput_continuity": None})
    doc = _goodput_ab(tmp_path, stand_in_dir, ts_recipe, 0, 98, old)
    primary = doc["paired_aiperf"]["family"]["tests"][0]
    assert primary["ratio_b_over_a"] is None and "Haldane-Anscombe" not in primary["estimand"]
    assert doc["paired_aiperf"]["decision_code"] == "inconclusive"
    # both arms keep every request in every window: equivalent, so no gain to adopt
    doc = _goodput_ab(tmp_path, stand_in_dir, ts_recipe, 100, 100, slo)
    assert doc["paired_aiperf"]["decision_code"] == "reject"
    assert "equivalent" in doc["paired_aiperf"]["decision"]
    # the run design reads the same corrected values: accept at each concurrency; without the key a zero stops it
    doc = _goodput_ab(tmp_path, stand_in_dir, ts_recipe, 0, 98, slo, order="sequential")
    assert doc["paired_aiperf"]["decision_code"] == "accept", doc["paired_aiperf"]["reason"]
    with pytest.raises(InputError, match="every run must be finite and > 0"):
        _goodput_ab(tmp_path, stand_in_dir, ts_recipe, 0, 98, old, order="sequential")

"""Trace workloads against the test server, through real AIPerf: every window replays the trace on its schedule (each
request's start checked against its place, from AIPerf's per-request records, within ``CI_TOLERANCE_MS``), with
the output length each line asks, from a reset prefix cache; SLOs give each window its goodput (AIPerf's own count
checked against InferCrane's); ``serve ab`` decides a trace A/B on goodput and prices it."""
from __future__ import annotations

import json

import pytest

from infercrane.decide.slo import Slo
from infercrane.serving.trace import TraceSpec, generate

FAST = ("--ttft-ms", "10", "--itl-ms", "1")
# The tolerance these tests state. InferCrane's default (ARRIVAL_TOLERANCE_MS) is 50 ms; here AIPerf, the servers and
# another test process share a 2-core CI machine, where a start was seen more than 50 ms off. 200 ms still fails a
# replay that ignores the schedule: the trace spans about 0.7 s at twice its speed, so requests sent back to back, or
# at the recorded speed, land hundreds of milliseconds from their places. It checks the replay, not a GPU host's jitter.
CI_TOLERANCE_MS = 200.0
SLOW = ("--ttft-ms", "200", "--itl-ms", "1")
TTFT_SLO = Slo(metric="ttft", percentile=95, max_ms=100)  # the fast server keeps it, the slow one never can


def write_trace(path, n=30, rate=20.0):
    spec = TraceSpec.model_validate({"requests": n, "rate_per_s": rate, "arrival": "poisson", "seed": 4,
                                     "input_length": {"kind": "uniform", "low": 20, "high": 60},
                                     "output_length": {"kind": "uniform", "low": 4, "high": 12}})
    path.write_text(generate(spec))
    return path


def trace_workload(trace, **kw):
    from infercrane.serving.workload import WORKLOAD_SCHEMA_VERSION, Workload

    data = dict(schema_version=WORKLOAD_SCHEMA_VERSION, name="trace-test", concurrency=[16], input_tokens=40,
                output_tokens=8, trace=str(trace), runs_per_arm=3, arm_order="interleaved",
                arrival_tolerance_ms=CI_TOLERANCE_MS)
    return Workload(**(data | kw))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_each_window_replays_the_trace_on_its_schedule(tmp_path, ts_recipe, stand_in_dir, offline_env):
    from infercrane.serving.trace import read_trace
    from infercrane.serving.workload import run_plan

    trace = write_trace(tmp_path / "t.jsonl")
    asked = read_trace(trace)
    w = trace_workload(trace, trace_speedup=2.0)
    fast = ts_recipe(*FAST, name="fast", model=str(stand_in_dir))
    slow = ts_recipe(*SLOW, name="slow", model=str(stand_in_dir))
    result = run_plan([fast, slow], w, out_dir=tmp_path / "plan", slos=[TTFT_SLO], coresident=True)
    assert result.complete and len(result.runs) == 6
    span_s = (asked.requests[-1].timestamp - asked.requests[0].timestamp) / 1000.0 / 2.0
    for m in result.runs:
        assert m.requests_sent == m.requests_completed == len(asked.requests)
        assert m.output_length_mismatches == 0  # each line's own output length, exactly
        assert m.output_tokens_total == sum(r.output_length for r in asked.requests)
        arrival = m.arrival
        assert arrival["matched"] == len(asked.requests) and arrival["within"], arrival
        assert arrival["lag_abs_ms"]["max"] <= CI_TOLERANCE_MS and arrival["tolerance_ms"] == CI_TOLERANCE_MS
        assert m.duration_s >= 0.9 * span_s  # the window spans the replay (at twice the recorded speed) ...
        assert m.duration_s <= span_s + 2.0  # ... and not much more
        assert not any(n.startswith(("good requests:", "trace replay off schedule")) for n in m.notes), m.notes
        if m.arm == "fast":
            assert m.slo.good_requests == len(asked.requests) and m.slo.all_met
            assert m.goodput_req_s == pytest.approx(m.request_s)
        else:
            assert m.slo.good_requests == 0 and m.goodput_req_s == 0.0 and not m.slo.met["ttft"]
        assert m.input_tok_s is not None and m.input_tok_s > 0
    blocks = [b for b in result.blocks if b.get("windows_finished")]
    assert len(blocks) == 6 and all(b["windows_planned"] == 1 for b in blocks)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_serve_ab_decides_a_trace_on_goodput_and_prices_it(tmp_path, stand_in_dir, offline_env, capsys):
    from infercrane.cli import main
    from infercrane.receipts.validate import load_receipt
    from infercrane.serving.trace import read_trace

    trace = write_trace(tmp_path / "t.jsonl")
    wl = tmp_path / "w.yaml"
    wl.write_text(json.dumps(trace_workload(trace).model_dump(mode="json")))
    policy = tmp_path / "p.yaml"
    policy.write_text("schema_version: infercrane.serving-policy/v1\nprimary_metric: goodput_req_s\n"
                      "guard_metrics: [ttft_p95_ms]\nmin_pairs: 3\n"
                      "slos: [{metric: e2e, percentile: 95, max_ms: 185}]\n")
    # A's outputs take 50 ms a token: a request is within 185 ms end to end only with at most 4 tokens (10 + 3 x 50 =
    # 160 ms; 5 tokens take 210): 2 of this trace's 30; B's (1 ms a token) all are
    recipes = []
    for name, args in (("slow", ("--ttft-ms", "10", "--itl-ms", "50")), ("fast", FAST)):
        r = tmp_path / f"{name}.yaml"
        r.write_text(f"schema_version: infercrane.serving-recipe/v1\nname: {name}\nengine: testserver\n"
                     f"model: {stand_in_dir}\nengine_args: {json.dumps(list(args))}\n")
        recipes.append(str(r))
    out = tmp_path / "ab.json"
    rc = main(["serve", "ab", *recipes, "--workload", str(wl), "--policy", str(policy), "--gpu-price", "H100=2.0",
               "--coresident", "--out", str(out)])
    assert rc == 0
    doc = load_receipt(out).document
    block = doc["paired_aiperf"]
    assert block["workload"]["trace"]["sha256"] and block["workload"]["trace"]["name"] == str(trace)
    primary = block["family"]["tests"][0]
    assert primary["metric"] == "goodput_req_s" and primary["n_pairs"] == 3
    short = sum(r.output_length <= 4 for r in read_trace(trace).requests)
    for r in doc["runs"]:
        assert r["slo"]["good_requests"] == (short if r["recipe"] == "slow" else 30), r["slo"]
        assert r["arrival"]["within"], r["arrival"]
    assert primary["verdict"] == "BETTER" and primary["ratio_b_over_a"] > 2.0
    assert doc["qualification_boundary"].startswith(f"performance under a replayed request trace ({trace}")
    cost = doc["cost"]  # a CPU machine: no GPU type, nothing priced, and the reason given
    assert cost["price"] is None and cost["per_recipe"] == [] and "no GPU type" in cost["note"]
    assert doc["provenance"]["config"]["options"]["gpu_price_table"]["gpus"]["H100"]["usd_per_gpu_hour"] == 2.0
    assert load_receipt(out).document["cost"] == cost  # validates: every derived block, the cost included
    # the shipped trace gate: every rule holds but the one a CPU run cannot keep (measured on a GPU)
    capsys.readouterr()
    assert main(["gate", str(out), "--rules", "release-trace", "--json"]) == 1
    results = {r["name"]: r["passed"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert results == {"receipts validate": True, "complete": True, "measured on a GPU": False,
                       "candidate accepted": True, "candidate within the SLOs": True, "recent": True}

"""serve bench --find-max-rate: the search's steps on made-up outcomes, and a search against a test server of known
capacity (``--slots``: past slots / request time per second, waits grow and TTFT with them)."""
from __future__ import annotations

import json
import math

import pytest

from infercrane.serving.ratesearch import Probe, RateSearch, bracket, next_rate, summary


def run_search(search: RateSearch, capacity: float) -> list[Probe]:
    probes: list[Probe] = []
    while (rate := next_rate(probes, search)) is not None:
        probes.append(Probe(rate=rate, met=rate <= capacity, windows=[]))
    return probes


def test_the_search_probes_the_ends_then_bisects_in_log_space_to_the_resolution():
    search = RateSearch(low=1, high=64, max_probes=20, resolution=0.05)
    probes = run_search(search, capacity=10.0)
    assert [p.rate for p in probes[:3]] == [1, 64, 8.0]  # low, high, then sqrt(1 x 64)
    b = bracket(probes)
    assert b["max_rate_met"] <= 10.0 < b["min_rate_missed"]
    assert b["min_rate_missed"] / b["max_rate_met"] <= 1.05 and b["monotone"]
    # each bisection halves the bracket's log-ratio: from 64x, ceil(log2(log 64 / log 1.05)) steps after the ends
    assert len(probes) == 2 + math.ceil(math.log2(math.log(64) / math.log(1.05)))


def test_the_search_stops_at_the_ends_and_at_max_probes():
    assert [p.rate for p in run_search(RateSearch(low=2, high=8), capacity=1.0)] == [2]  # nothing meets
    s = summary(run_search(RateSearch(low=2, high=8), capacity=1.0), RateSearch(low=2, high=8))
    assert s["max_rate_met"] is None and "no rate in range" in s["said"]
    probes = run_search(RateSearch(low=2, high=8), capacity=100.0)
    assert [p.rate for p in probes] == [2, 8]
    assert "at least" in summary(probes, RateSearch(low=2, high=8))["said"]
    assert len(run_search(RateSearch(low=1, high=1000, max_probes=4), capacity=10.0)) == 4


def test_a_bracket_from_outcomes_that_are_not_monotone_uses_the_lowest_miss():
    probes = [Probe(rate=r, met=m, windows=[]) for r, m in ((1, True), (8, False), (4, True), (16, True))]
    b = bracket(probes)
    assert (b["max_rate_met"], b["min_rate_missed"], b["monotone"]) == (4, 8, False)
    assert "either way" in summary(probes, RateSearch(low=1, high=16))["said"]


def test_a_range_must_be_ordered():
    with pytest.raises(ValueError, match="above its low end"):
        RateSearch(low=8, high=8)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_find_max_rate_brackets_a_test_servers_capacity(tmp_path, stand_in_dir, offline_env):
    from infercrane.cli import main

    recipe = tmp_path / "ts.yaml"
    # 2 slots, 20 + 7 x 5 = 55 ms a request: about 36 requests per second before the waits grow
    recipe.write_text("schema_version: infercrane.serving-recipe/v1\nname: ts\nengine: testserver\n"
                      f"model: {stand_in_dir}\nengine_args: [--slots, '2', --ttft-ms, '20', --itl-ms, '5']\n")
    policy = tmp_path / "p.yaml"
    policy.write_text("schema_version: infercrane.serving-policy/v1\n"
                      "slos: [{metric: ttft, percentile: 90, max_ms: 150}]\n")
    out = tmp_path / "rate.json"
    rc = main(["serve", "bench", str(recipe), "--find-max-rate", "--rate-range", "8", "256", "--max-probes", "5",
               "--policy", str(policy), "--workload", "quick", "--isl", "32", "--osl", "8", "--request-count", "60",
               "--concurrency", "32", "--out", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == "infercrane.rate-search/v1" and doc["complete"] is True
    rates = [p["rate"] for p in doc["probes"]]
    assert rates[:2] == [8, 256] and len(rates) <= 5
    assert all(len(p["windows"]) == 3 for p in doc["probes"])
    r = doc["result"]
    assert r["max_rate_met"] is not None and r["min_rate_missed"] is not None
    assert 8 <= r["max_rate_met"] < r["min_rate_missed"] <= 256
    assert r["max_rate_met"] <= 1.5 * 36.4  # no rate far past the server's capacity keeps the TTFT bound
    assert "not a confidence interval" in r["method"]

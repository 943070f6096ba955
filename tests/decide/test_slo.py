"""SLOs and goodput (decide/slo.py) against hand-computed cases, and the policy's SLO keys."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from infercrane.decide.policy import hashed_fields, load_policy, policy_sha256, shipped_policies
from infercrane.decide.slo import Slo, slo_result

TTFT_P95 = Slo(metric="ttft", percentile=95, max_ms=100)
TPOT_P90 = Slo(metric="tpot", percentile=90, max_ms=10)


def reqs(*rows):
    return [dict(zip(("ttft", "tpot", "e2e"), row)) for row in rows]


def test_goodput_counts_requests_within_every_bound_over_the_window():
    # 4 completed: (1) both in, (2) TTFT out, (3) TPOT out, (4) both in; 1 failed; a 2 s window
    r = slo_result(reqs((50, 5, 500), (150, 5, 600), (80, 12, 700), (100, 10, 800)), 1, 2.0, [TTFT_P95, TPOT_P90])
    assert r.requests == 5 and r.good_requests == 2
    assert r.goodput_req_s == pytest.approx(1.0)  # 2 good / 2 s
    assert r.attainment == {"ttft": pytest.approx(3 / 5), "tpot": pytest.approx(3 / 5)}  # bounds inclusive
    assert r.met == {"ttft": False, "tpot": False} and r.all_met is False


def test_an_slo_is_met_when_its_attainment_reaches_the_percentile():
    rows = [(10, 1, 100)] * 19 + [(500, 1, 100)]  # 19 of 20 within the TTFT bound: 95 %
    r = slo_result(reqs(*rows), 0, 4.0, [TTFT_P95])
    assert r.attainment["ttft"] == pytest.approx(0.95) and r.met["ttft"] is True and r.all_met is True
    assert r.good_requests == 19 and r.goodput_req_s == pytest.approx(19 / 4)
    r = slo_result(reqs(*rows), 1, 4.0, [TTFT_P95])  # one failure: 19 of 21
    assert r.attainment["ttft"] == pytest.approx(19 / 21) and r.met["ttft"] is False


def test_a_request_without_the_metric_is_outside_its_bound():
    r = slo_result(reqs((10, None, 100), (10, 2, 100)), 0, 1.0, [TPOT_P90])
    assert r.good_requests == 1 and r.attainment["tpot"] == pytest.approx(0.5)


def test_no_request_no_goodput():
    r = slo_result([], 3, 1.0, [TTFT_P95])
    assert (r.requests, r.good_requests, r.goodput_req_s, r.all_met) == (3, 0, 0.0, False)
    assert slo_result([], 0, 0.0, [TTFT_P95]).met == {"ttft": False}


def test_one_bound_per_metric_and_sane_bounds():
    with pytest.raises(ValueError, match="ttft more than once"):
        slo_result([], 0, 1.0, [TTFT_P95, Slo(metric="ttft", percentile=99, max_ms=200)])
    for bad in ({"metric": "itl", "percentile": 95, "max_ms": 1}, {"metric": "ttft", "percentile": 100, "max_ms": 1},
                {"metric": "ttft", "percentile": 95, "max_ms": 0}):
        with pytest.raises(ValidationError):
            Slo(**bad)


def test_policy_slos_goodput_needs_them_and_old_hashes_hold(tmp_path):
    packaged = load_policy("serving")
    assert packaged.slos == []
    assert "slos" not in hashed_fields(packaged)  # a receipt decided before SLOs keeps its policy hash
    f = tmp_path / "p.yaml"
    f.write_text("schema_version: infercrane.serving-policy/v1\nprimary_metric: goodput_req_s\n")
    with pytest.raises(Exception, match="names none"):
        load_policy("serving", f)
    assert "serving-slo" in shipped_policies("serving")
    slo = load_policy("serving", "serving-slo")
    assert slo.primary_metric == "goodput_req_s" and [s.metric for s in slo.slos] == ["ttft", "tpot"]
    assert policy_sha256(slo) != policy_sha256(packaged)

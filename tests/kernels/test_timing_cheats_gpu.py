"""Candidates that cheat the timing (tests/kernels/fixtures/timing_cheaters.py) end ``incorrect`` or ``timer fault``,
with a receipt that keeps the baseline's timings, a reject decision and exit 0: never a speed verdict, never exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercrane.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "timing_cheaters.py"

CASES = [
    # (function, what it patches at import, the failure it must end in)
    ("wrong_when_timed", "", "incorrect"),
    ("patched_events", "patched_events", "timer_fault"),
    ("patched_sync_side_stream", "patched_sync_side_stream", "incorrect"),
    ("right_at_one_row_only", "", "incorrect"),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "cheat", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_timing_cheat_ends_in_its_own_word(tmp_path, monkeypatch, name, cheat, expected):
    monkeypatch.setenv("INFERCRANE_TEST_CHEAT", cheat)  # the candidate's worker reads it at import
    out = tmp_path / "k.json"
    rc = main(["kernel", "screen", "--rows", "1", "8", "--impls", "eager", "user", "--modes", "launch,graph",
               "--trials", "3", "--samples", "10", "--candidate", f"{FIXTURE}:{name}", "--out", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    impls = {i["key"]: i for i in doc["result"]["implementations"]}
    user = impls["user"]
    assert user["status"] == "failed", user["status"]
    assert user["failure"] == expected, (user["failure"], user["error"][:500])
    assert doc["decision_code"] == "reject"
    assert impls["eager"]["status"] == "ok" and impls["eager"]["timings"]  # the baseline's timings are kept
    assert not any(c["candidate"] == "user" for c in doc["result"]["comparisons"])  # no speed verdict


@pytest.mark.gpu
def test_patched_events_in_cold_mode_disagree_with_the_driver_event_pair(tmp_path, monkeypatch):
    """Cold samples claim tens of microseconds, under what InferCrane's clock around a job can bound: there the second
    timer (the driver-API event pair, out of reach of a patch of torch's events) is what keeps a speed claim out."""
    from importlib import resources

    monkeypatch.setenv("INFERCRANE_TEST_CHEAT", "patched_events")
    policy = tmp_path / "cold.yaml"  # the shipped kernel policy, deciding on cold timings
    shipped = resources.files("infercrane.decide.policies").joinpath("kernel.yaml").read_text()
    policy.write_text(shipped.replace("timing_mode: graph", "timing_mode: cold"))
    out = tmp_path / "k.json"
    rc = main(["kernel", "screen", "--rows", "1", "8", "--impls", "eager", "user", "--modes", "cold",
               "--policy", str(policy), "--trials", "3", "--samples", "10",
               "--candidate", f"{FIXTURE}:patched_events", "--out", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    impls = {i["key"]: i for i in doc["result"]["implementations"]}
    user = impls["user"]
    cells = [c for c in user["timings"] if c["mode"] == "cold"]
    assert cells and all(any(f.startswith("timer_disagreement") for f in c["flags"]) for c in cells), \
        [c["flags"] for c in cells]
    assert all(c["timer_disagreement"] < -0.5 for c in cells)  # torch's events read 10x fast; the driver's do not
    assert doc["decision_code"] != "accept"
    assert not any(c["candidate"] == "user" and c["verdict"] in ("FASTER", "SLOWER", "SAME")
                   for c in doc["result"]["comparisons"])
    assert impls["eager"]["status"] == "ok" and impls["eager"]["timings"]

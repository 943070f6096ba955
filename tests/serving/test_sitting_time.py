"""A sitting's time accounting: unions of engine-up, engine start-up and measured-window intervals on the wall clock."""
from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from infercrane.serving.receipt import sitting_time, time_accounting

T0 = 1_800_000_000.0


def iso(t: float) -> str:
    return datetime.fromtimestamp(T0 + t, timezone.utc).isoformat()


def engine(start: float, ready_after: float | None, stop: float | None) -> SimpleNamespace:
    return SimpleNamespace(started_at=iso(start), ready_after_s=ready_after, stopped_at=iso(stop) if stop else None)


def window(start: float, length: float, ok: bool = True) -> dict:
    return {"started_at": iso(start), "duration_s": length, "status": "ok" if ok else "error",
            "requests_completed": 10 if ok else 0}


def test_engines_up_together_count_once_and_a_failed_window_is_not_measured():
    # two engines start together at 100 s, ready at 200 and 210 s; one stops at 600, the other at 800; the sitting
    # ends at 820 s. Windows: 300-400 and 350-450 overlap (counted once), 500-510 ok, 700-710 failed.
    engines = [engine(100, 100, 600), engine(100, 110, 800)]
    runs = [window(300, 100), window(350, 100), window(500, 10), window(700, 10, ok=False)]
    t = sitting_time(engines, runs, start=T0, end=T0 + 820)
    assert t["wall_s"] == pytest.approx(820)
    assert t["engine_up_s"] == pytest.approx(600)  # 200 .. 800
    assert t["engines_starting_s"] == pytest.approx(110)  # 100 .. 210
    assert t["measured_s"] == pytest.approx(160)  # 300 .. 450 and 500 .. 510
    assert t["measured_share_of_engine_up"] == pytest.approx(160 / 600)
    assert t["engines"] == 2
    # where the rest went: 200-300 before the first window, 450-500 between, 510-800 after (the failed window too)
    assert [(u["from_s"], u["to_s"], u["s"]) for u in t["unmeasured_up"]] == [(200, 300, 100), (450, 500, 50),
                                                                             (510, 800, 290)]
    assert sum(u["s"] for u in t["unmeasured_up"]) == pytest.approx(t["engine_up_s"] - t["measured_s"])


def test_stretches_shorter_than_the_listing_floor_are_counted_but_not_listed():
    from infercrane.serving.receipt import UNMEASURED_MIN_S

    gap = UNMEASURED_MIN_S / 2
    t = sitting_time([engine(0, 10, 100)], [window(10 + gap, 40), window(50 + 2 * gap, 100)], start=T0, end=T0 + 100)
    assert t["unmeasured_up"] == [] and t["measured_s"] == pytest.approx(90 - 2 * gap)


def test_an_engine_still_up_at_the_end_counts_to_the_end_and_one_never_ready_only_starts():
    t = sitting_time([engine(0, 50, None), engine(0, None, 30)], [window(60, 20)], start=T0, end=T0 + 100)
    assert t["engine_up_s"] == pytest.approx(50) and t["engines_starting_s"] == pytest.approx(50)
    assert t["measured_share_of_engine_up"] == pytest.approx(20 / 50)
    assert sitting_time([], [], start=T0, end=T0 + 10)["measured_share_of_engine_up"] is None


def test_a_plan_subtracts_only_the_start_ups_inside_its_wall_time():
    result = SimpleNamespace(wall_s=420.0, runs=[SimpleNamespace(ok=True, requests_completed=5, duration_s=300.0)],
                             blocks=[{"startup_s": 20.0}])
    own = [{"startup_s": 90.0}, {"startup_s": 10.0}]
    assert time_accounting(result, own)["engine_up_s"] == pytest.approx(320)
    pooled = [{"startup_s": 90.0, "started_by_sitting": True}, {"startup_s": 98.0, "started_by_sitting": True}]
    t = time_accounting(result, pooled)  # started before the plan: all 420 s had engines up
    assert t["engine_up_s"] == pytest.approx(420) and t["measured_share_of_engine_up"] == pytest.approx(300 / 420)

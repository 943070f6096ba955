"""Workloads: presets, derived defaults, validation, and the run plan of each arm order."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from infercrane.errors import InputError
from infercrane.serving.workload import (THREE_RUNS_NOTE, WORKLOAD_SCHEMA_VERSION, Workload, engine_starts,
                                         load_workload, plan_runs, workload_presets)


def workload(**kw) -> Workload:
    data = dict(schema_version=WORKLOAD_SCHEMA_VERSION, name="w", concurrency=[1, 8], input_tokens=128,
                output_tokens=64)
    data.update(kw)
    return Workload(**data)


def test_presets_match_the_seed():
    assert {"seed-paired", "public-1000"} <= set(workload_presets())
    seed = load_workload("seed-paired")
    assert (seed.concurrency, seed.input_tokens, seed.output_tokens, seed.streaming) == ([1, 8, 32], 128, 64, True)
    assert seed.ignore_eos and seed.runs_per_arm == 5
    public = load_workload("public-1000")
    assert (public.concurrency, public.input_tokens, public.output_tokens) == ([100], 1000, 500)
    assert public.requests_at(100) == 1000


def test_derived_request_and_warmup_counts():
    w = workload(concurrency=[1, 8, 32])
    assert [w.requests_at(c) for c in w.concurrency] == [64, 384, 1536]
    assert [w.warmup_at(c) for c in w.concurrency] == [4, 16, 64]
    fixed = workload(request_count=40, warmup_requests=0)
    assert fixed.requests_at(8) == 40 and fixed.warmup_at(8) == 0
    assert any("requests per point derived" in n for n in w.notes())


def test_three_runs_allowed_with_note_fewer_rejected():
    assert THREE_RUNS_NOTE in workload(runs_per_arm=3).notes()
    assert THREE_RUNS_NOTE not in workload(runs_per_arm=5).notes()
    with pytest.raises(ValueError, match="runs_per_arm"):
        workload(runs_per_arm=2)


@pytest.mark.parametrize("kw, field", [
    (dict(concurrency=[]), "concurrency"),
    (dict(concurrency=[4, 4]), "concurrency"),
    (dict(concurrency=[0]), "concurrency"),
    (dict(output_tokens=1), "output_tokens"),
    (dict(arm_order="random"), "arm_order"),
    (dict(request_count=4, concurrency=[8]), "request_count"),
    (dict(bogus=1), "bogus"),
])
def test_bad_workload_names_the_field(kw, field):
    with pytest.raises(InputError) as err:
        workload().with_overrides(**kw)
    assert field in str(err.value)


def test_plan_sequential():
    plan = plan_runs(["A", "B"], workload(runs_per_arm=3), "sequential")
    assert [(p.arm, p.run_index, p.concurrency) for p in plan[:6]] == [
        ("A", 0, 1), ("A", 0, 8), ("A", 1, 1), ("A", 1, 8), ("A", 2, 1), ("A", 2, 8)]
    assert [p.arm for p in plan[6:]] == ["B"] * 6
    assert engine_starts(plan) == {"A": 1, "B": 1}


def test_plan_interleaved():
    plan = plan_runs(["A", "B"], workload(runs_per_arm=3), "interleaved")
    assert [(p.arm, p.run_index) for p in plan[::2]] == [("A", 0), ("B", 0), ("A", 1), ("B", 1), ("A", 2), ("B", 2)]
    assert engine_starts(plan) == {"A": 3, "B": 3}
    assert len({p.segment for p in plan}) == 6


def test_plan_sandwich_a_b_a():
    plan = plan_runs(["A", "B"], workload(runs_per_arm=5, concurrency=[4]), "sandwich")
    assert [(p.arm, p.run_index) for p in plan] == [
        ("A", 0), ("A", 1), ("A", 2), ("B", 0), ("B", 1), ("B", 2), ("B", 3), ("B", 4), ("A", 3), ("A", 4)]
    assert engine_starts(plan) == {"A": 2, "B": 1}
    assert [p.segment for p in plan] == [0, 0, 0, 1, 1, 1, 1, 1, 2, 2]


@pytest.mark.parametrize("order", ["sequential", "interleaved", "sandwich"])
def test_every_order_covers_every_run_once(order):
    w = workload(runs_per_arm=4, concurrency=[1, 8, 32])
    plan = plan_runs(["A", "B"], w, order)
    counts = Counter((p.arm, p.run_index, p.concurrency) for p in plan)
    assert set(counts.values()) == {1}
    assert len(counts) == 2 * 4 * 3
    # one engine lifetime serves one arm
    for seg in {p.segment for p in plan}:
        assert len({p.arm for p in plan if p.segment == seg}) == 1


def test_plan_rejects_bad_arms():
    w = workload()
    with pytest.raises(InputError, match="needs two arms"):
        plan_runs(["A"], w, "sandwich")
    with pytest.raises(InputError, match="exactly two arms"):
        plan_runs(["A", "B", "C"], w, "sandwich")
    with pytest.raises(InputError, match="repeat"):
        plan_runs(["A", "A"], w, "sequential")
    assert engine_starts(plan_runs(["A"], w, "sequential")) == {"A": 1}


def test_unknown_preset_lists_presets():
    with pytest.raises(InputError) as err:
        load_workload("seed")
    assert "seed-paired" in str(err.value)


def test_comma_separated_drivers_and_concurrency_read_like_space_separated() -> None:
    from pydantic import ValidationError

    from infercrane.serving.config import ServeConfig

    assert ServeConfig(drivers=["aiperf,vllm-bench"]).drivers == ("aiperf", "vllm-bench")
    assert ServeConfig(drivers=["aiperf", "vllm-bench"]).drivers == ("aiperf", "vllm-bench")
    assert ServeConfig(concurrency=["1,8", "32"]).concurrency == (1, 8, 32)
    with pytest.raises(ValidationError):
        ServeConfig(drivers=["aiperf,locust"])


def test_a_blocks_prompts_follow_the_rate_measured_else_the_warm_up_else_a_guess():
    from infercrane.serving.workload import (MAX_PROMPT_ENTRIES, MIN_PROMPT_ENTRIES, PROMPTS_PER_SLOT_SECOND,
                                             WARMUP_RATE_MARGIN, block_prompt_entries, load_workload)

    public = load_workload("public-1000").model_copy(update={"window_s": 10.0})
    # a first block with nothing seen: the guess per slot, capped (20 000 prompts of 1000 tokens at start-up)
    assert PROMPTS_PER_SLOT_SECOND * 100 * 10 * 5 * 1.25 > MAX_PROMPT_ENTRIES
    assert block_prompt_entries(public, [100], 5, {}, None) == MAX_PROMPT_ENTRIES
    # its engine's warm-up at c = 100 took 3.5 s a round (~29 requests/s): that rate, doubled, with 25 % to spare
    warm = {"round_s": {"100": [4.0, 3.5]}}
    expected = math.ceil(1.25 * WARMUP_RATE_MARGIN * (100 / 3.5) * 10 * 5)
    assert block_prompt_entries(public, [100], 5, {}, warm) == expected < MAX_PROMPT_ENTRIES / 5
    # a rate measured in an earlier block wins over both
    assert block_prompt_entries(public, [100], 5, {100: 30.0}, warm) == math.ceil(1.25 * 30 * 10 * 5)
    # the warm-up covers only the concurrencies it ran; the others fall back to the guess; never below the floor
    paired = workload(window_s=8.0, concurrency=[1, 8])
    assert block_prompt_entries(paired, [1, 8], 1, {}, {"round_s": {"1": [0.5]}}) == math.ceil(
        1.25 * (WARMUP_RATE_MARGIN * 2 + PROMPTS_PER_SLOT_SECOND * 8) * 8)
    assert block_prompt_entries(paired, [1], 1, {1: 0.1}, None) == MIN_PROMPT_ENTRIES
    # request counts: the block's requests, whatever the rates
    counts = workload(concurrency=[1, 8])
    assert block_prompt_entries(counts, [1, 8], 2, {1: 99.0}, warm) == max(
        MIN_PROMPT_ENTRIES, math.ceil(1.25 * 2 * (counts.requests_at(1) + counts.requests_at(8))))


def test_a_window_of_a_request_count_is_estimated_from_the_shortest_measured_so_far():
    from types import SimpleNamespace

    from infercrane.serving.workload import MIN_WINDOW_S, load_workload, window_estimate_s

    timed = load_workload("quick")
    counted = timed.with_overrides(window_s=None, request_count=40)
    run = lambda d, ok=True, n=40: SimpleNamespace(duration_s=d, ok=ok, requests_completed=n)  # noqa: E731
    assert window_estimate_s(timed, [run(9.0)]) == timed.window_s  # a time window is what it says
    assert window_estimate_s(counted, []) == MIN_WINDOW_S  # nothing measured yet
    assert window_estimate_s(counted, [run(11.7), run(10.2), run(3.0, ok=False), run(2.0, n=0)]) == 10.2


@pytest.mark.parametrize("field", ["request_count", "requests_per_slot", "min_requests", "warmup_requests"])
def test_a_request_count_given_to_a_workload_of_time_windows_replaces_its_windows(field):
    from infercrane.serving.workload import load_workload

    timed = load_workload("quick")
    assert timed.window_s == 2 and timed.warmup_s == 1
    counted = timed.with_overrides(**{field: 12})
    assert counted.window_s is None and counted.warmup_s is None and getattr(counted, field) == 12
    assert counted.description.startswith(timed.description) and f"{field} given" in counted.description
    assert "time windows" not in " ".join(counted.notes())
    # the windows stay where they are asked for too, or where no count is given
    assert timed.with_overrides(request_count=12, window_s=3).window_s == 3
    assert timed.with_overrides(runs_per_arm=4).window_s == 2

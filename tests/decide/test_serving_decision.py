import numpy as np
import pytest
from pydantic import ValidationError

from infercrane.decide import ServingArm, decide_serving
from infercrane.errors import InputError
from infercrane.stats import EquivalenceVerdict

EQ = EquivalenceVerdict


def arm(recipe, phrase, n, tok_s, ttft_ms, latency_ms, noise=0.001, seed=0):
    rng = np.random.default_rng(seed)

    def runs(center):
        return list(center * (1 + rng.normal(0, noise, n)))

    return ServingArm(
        recipe=recipe, phrase=phrase,
        runs={"output_tok_s": runs(tok_s), "ttft_p95_ms": runs(ttft_ms), "e2e_p95_ms": runs(latency_ms)},
    )


def test_half_percent_lower_throughput_reads_equivalent_not_worse():
    a = arm("balanced", "balanced mode", 6, 12950.0, 393.7, 3961.6, seed=1)
    b = arm("throughput", "throughput mode", 6, 12950.0 * 0.995, 393.7, 3961.6, seed=2)
    d = decide_serving(a, b)
    assert d.primary.verdict is EQ.EQUIVALENT
    assert d.decision == "reject"
    assert d.decision_text.startswith(
        "reject throughput mode for this workload; output throughput was equivalent to balanced mode within ±1 percent"
    )
    assert "worse" not in d.decision_text.lower() and "WORSE" not in d.reason
    assert "EQUIVALENT within ±1 percent" in d.reason and "Mann-Whitney p = " in d.reason


def test_better_throughput_accepts():
    a = arm("eager", "eager", 6, 88.98, 35.27, 779.9, seed=3)
    b = arm("compiled", "compiled vLLM", 6, 573.16, 15.51, 116.1, seed=4)
    d = decide_serving(a, b)
    assert d.decision == "accept"
    assert d.decision_text == "accept compiled vLLM over eager for this workload"
    assert d.primary.verdict is EQ.BETTER and all(g.verdict is EQ.BETTER for g in d.guards)  # latencies went down
    assert d.primary.p_value < 0.05 and d.primary.ci_lo > 1.01


def test_worse_guard_rejects_in_seed_style():
    a = arm("balanced", "balanced mode", 6, 12950.27, 393.73, 3961.6, seed=5)
    b = arm("throughput", "throughput mode", 6, 12880.34, 407.45, 3951.1, seed=6)
    d = decide_serving(a, b)
    ttft = next(g for g in d.guards if g.metric == "ttft_p95_ms")
    assert ttft.verdict is EQ.WORSE and d.primary.verdict is EQ.EQUIVALENT
    assert d.decision == "reject"
    assert d.decision_text.startswith(
        "reject throughput mode for this workload; output throughput was equivalent within ±1 percent ("
    )
    assert "and it worsened p95 TTFT by 3." in d.decision_text


def test_worse_primary_rejects():
    a = arm("a", "recipe A", 6, 1000.0, 50.0, 500.0, seed=7)
    b = arm("b", "recipe B", 6, 950.0, 50.0, 500.0, seed=8)
    d = decide_serving(a, b)
    assert d.decision == "reject"
    assert d.decision_text.startswith("reject recipe B for this workload; it reduced output throughput by 5.")


def test_three_runs_per_arm_is_inconclusive_and_says_why():
    a = arm("eager", "eager", 3, 88.98, 35.27, 779.9, seed=9)
    b = arm("compiled", "compiled vLLM", 3, 573.16, 15.51, 116.1, seed=10)
    d = decide_serving(a, b)
    assert d.decision == "inconclusive"
    assert "a rank test cannot reach 0.05 with 3 v 3 runs (smallest p = 0.1)" in d.decision_text
    # The CI alone says BETTER, but the rank test cannot confirm it with 3 runs.
    assert d.primary.ci_verdict is EQ.BETTER and d.primary.verdict is EQ.INCONCLUSIVE
    assert d.primary.p_value == pytest.approx(0.1)


def test_noisy_runs_straddling_the_margin_are_inconclusive():
    a = arm("a", "recipe A", 8, 1000.0, 50.0, 500.0, noise=0.02, seed=11)
    b = arm("b", "recipe B", 8, 1005.0, 50.0, 500.0, noise=0.02, seed=12)
    d = decide_serving(a, b)
    assert d.primary.verdict is EQ.INCONCLUSIVE
    assert d.decision == "inconclusive"
    assert d.decision_text.startswith("no decision on recipe B over recipe A for this workload")


def test_single_run_per_arm_has_no_interval():
    a = arm("a", "recipe A", 1, 1000.0, 50.0, 500.0, seed=13)
    b = arm("b", "recipe B", 1, 1100.0, 50.0, 500.0, seed=14)
    d = decide_serving(a, b)
    assert d.decision == "inconclusive" and d.primary.ci_lo is None and d.primary.p_value is None
    assert d.primary.ratio_b_over_a == pytest.approx(b.runs["output_tok_s"][0] / a.runs["output_tok_s"][0])


def test_missing_metric_and_ragged_runs_are_input_errors():
    a = arm("a", "recipe A", 6, 1000.0, 50.0, 500.0)
    b = ServingArm(recipe="b", phrase="recipe B", runs={"output_tok_s": [1.0] * 6})
    with pytest.raises(InputError, match="has no runs of 'ttft_p95_ms'"):
        decide_serving(a, b)
    with pytest.raises(ValidationError, match="counts differ"):
        ServingArm(recipe="b", phrase="B", runs={"output_tok_s": [1.0] * 6, "ttft_p95_ms": [1.0] * 5})

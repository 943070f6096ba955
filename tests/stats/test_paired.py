"""Window-pair statistics: the geometric-mean B/A with its t interval and t test, and what a design of pairs can
show."""
import math

import numpy as np
import pytest
from scipy import stats

from infercrane.stats.paired import (
    design_for,
    detectable_log_ratio,
    equivalence_probability,
    paired_ratio,
    t_test_p,
)

LOG_RATIOS = np.array([0.01, 0.02, 0.03, 0.04])
A = np.array([100.0, 250.0, 80.0, 1000.0])  # window values of A; B = A * exp(LOG_RATIOS), pair by pair


def test_hand_checked_ratio_interval_and_p() -> None:
    # mean 0.025, sd = sqrt(0.0005 / 3) = 0.012910, se = 0.006455, t = 3.873 with 3 df, t_0.975,3 = 3.1824
    r = paired_ratio(A, A * np.exp(LOG_RATIOS), confidence=0.95)
    assert r.ratio == pytest.approx(math.exp(0.025))
    assert r.sd_log == pytest.approx(math.sqrt(0.0005 / 3))
    half = 3.182446305284263 * math.sqrt(0.0005 / 3) / 2
    assert (r.ci_lo, r.ci_hi) == pytest.approx((math.exp(0.025 - half), math.exp(0.025 + half)))
    assert (r.ci_lo, r.ci_hi) == pytest.approx((1.004467, 1.046596), abs=1e-6)
    assert r.p_value == pytest.approx(0.030466, abs=1e-6)
    assert (r.n_pairs, r.df, r.confidence, r.note) == (4, 3, 0.95, None)


@pytest.mark.parametrize("n", [2, 3, 10, 57])
def test_interval_and_p_are_scipys_t_interval_and_ttest_1samp(n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.lognormal(5.0, 0.3, n)
    b = a * rng.lognormal(0.01, 0.03, n)
    d = np.log(b) - np.log(a)
    r = paired_ratio(a, b, confidence=0.9)
    lo, hi = stats.t.interval(0.9, n - 1, loc=d.mean(), scale=stats.sem(d))
    assert (r.ci_lo, r.ci_hi) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-12)
    assert r.p_value == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue, rel=1e-10)
    assert r.ratio == pytest.approx(stats.gmean(b / a), rel=1e-12)


def test_the_pair_is_the_replicate() -> None:
    # a factor shared by both windows of a pair (a slower moment, a different concurrency) leaves the result alone
    b = A * np.exp(LOG_RATIOS)
    shared = np.array([0.5, 3.0, 1.1, 0.2])
    moved, r = paired_ratio(A * shared, b * shared, confidence=0.95), paired_ratio(A, b, confidence=0.95)
    assert (moved.ratio, moved.ci_lo, moved.ci_hi, moved.p_value) == pytest.approx((r.ratio, r.ci_lo, r.ci_hi,
                                                                                    r.p_value), rel=1e-9)
    # ... while which windows pair up sets the spread: the point (a ratio of geometric means) stays, the interval
    # widens when the pairs no longer share their factors
    crossed = paired_ratio(A, b[::-1], confidence=0.95)
    assert crossed.ratio == pytest.approx(r.ratio) and crossed.sd_log > 50 * r.sd_log
    assert crossed.ci_hi / crossed.ci_lo > 10 * (r.ci_hi / r.ci_lo)


def test_swapping_the_arms_inverts_the_ratio_and_keeps_p() -> None:
    b = A * np.exp(LOG_RATIOS)
    r, s = paired_ratio(A, b, confidence=0.95), paired_ratio(b, A, confidence=0.95)
    assert s.ratio == pytest.approx(1 / r.ratio) and s.p_value == pytest.approx(r.p_value)
    assert (s.ci_lo, s.ci_hi) == pytest.approx((1 / r.ci_hi, 1 / r.ci_lo))


def test_every_interval_and_test_names_its_method() -> None:
    r = paired_ratio(A, A * np.exp(LOG_RATIOS), confidence=0.95)
    assert "geometric mean" in r.method and "the window pair is the replicate" in r.method
    assert "Student-t 95 % interval" in r.method and "3 df" in r.method
    assert r.test_method.startswith("one-sample two-sided t test") and "3 df" in r.test_method


def test_identical_log_ratios_give_a_degenerate_but_finite_result() -> None:
    same = paired_ratio([100.0, 100.0, 100.0], [103.0, 103.0, 103.0], confidence=0.95)
    assert same.sd_log == 0.0 and same.ratio == pytest.approx(1.03)
    assert same.ci_lo == same.ci_hi == same.ratio and same.p_value == 0.0
    assert "sd 0" in (same.note or "")
    equal = paired_ratio([100.0, 250.0], [100.0, 250.0], confidence=0.95)
    assert (equal.ratio, equal.ci_lo, equal.ci_hi, equal.p_value) == (1.0, 1.0, 1.0, 1.0)


@pytest.mark.parametrize(("a", "b", "match"), [
    ([1.0, 2.0], [1.0], "pair up one to one"),
    ([1.0], [1.0], "at least 2"),
    ([], [], "at least 2"),
    ([1.0, 0.0], [1.0, 1.0], "finite and > 0"),
    ([1.0, 2.0], [1.0, -2.0], "finite and > 0"),
    ([1.0, float("nan")], [1.0, 1.0], "finite and > 0"),
    ([1.0, 2.0], [1.0, float("inf")], "finite and > 0"),
])
def test_bad_input_is_refused(a: list[float], b: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        paired_ratio(a, b, confidence=0.95)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5])
def test_confidence_must_lie_strictly_between_0_and_1(confidence: float) -> None:
    with pytest.raises(ValueError, match="confidence"):
        paired_ratio(A, A * 1.01, confidence=confidence)


def test_t_test_p_is_two_sided() -> None:
    assert t_test_p(0.0, 5) == 1.0
    assert t_test_p(2.5706, 5) == pytest.approx(0.05, abs=1e-4)  # t_0.975,5
    assert t_test_p(-3.0, 7) == t_test_p(3.0, 7) == pytest.approx(2 * stats.t.sf(3.0, 7))


# --------------------------------------------------------------------------------------------- design_for


def _design(n: int, **kw: float) -> object:
    return design_for(n, **({"cv": 0.02, "m_tests": 3, "alpha": 0.05, "margin": 0.01} | kw))


def test_design_power_is_the_noncentral_t_power() -> None:
    d = _design(15)
    sd, t_c = math.sqrt(2) * 0.02, stats.t.ppf(1 - 0.05 / 6, 14)
    ncp = math.log(1.03) * math.sqrt(15) / sd
    assert d.sd_log == pytest.approx(sd) and d.t_critical == pytest.approx(t_c)
    assert d.power_at_effect == pytest.approx(stats.nct.sf(t_c, 14, ncp) + stats.nct.cdf(-t_c, 14, ncp))
    assert (d.test_level, d.ci_level) == pytest.approx((0.05 / 3, 1 - 0.05 / 3))


def test_the_detectable_change_is_detected_with_the_asked_power() -> None:
    d = _design(15, power=0.9)
    again = _design(15, effect=d.detectable_change, power=0.9)
    assert again.power_at_effect == pytest.approx(0.9, abs=1e-6)
    assert detectable_log_ratio(15, d.sd_log, 0.05 / 3, 0.9) == pytest.approx(math.log1p(d.detectable_change))
    assert _design(60).detectable_change < d.detectable_change  # more pairs detect less


def test_equivalence_probability_matches_a_simulation_of_equal_arms() -> None:
    rng = np.random.default_rng(3)
    n, sd, level = 40, math.sqrt(2) * 0.02, 0.05 / 3
    x = rng.normal(0.0, sd, size=(40_000, n))
    half = stats.t.ppf(1 - level / 2, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    inside = (x.mean(axis=1) - half >= math.log(0.99)) & (x.mean(axis=1) + half <= math.log(1.01))
    assert equivalence_probability(n, sd, level, 0.01) == pytest.approx(inside.mean(), abs=0.01)


def test_pairs_for_equivalence_is_the_fewest_that_reach_the_target() -> None:
    d = _design(15)
    need = d.pairs_for_equivalence
    assert need is not None and not d.equivalence_reachable
    sd, level = d.sd_log, d.test_level
    assert equivalence_probability(need, sd, level, 0.01) >= 0.8 > equivalence_probability(need - 1, sd, level, 0.01)
    there = _design(need)
    assert there.equivalence_reachable and there.pairs_for_equivalence == need
    assert _design(15, margin=0.05).equivalence_reachable  # a wider band is reachable with the same pairs


def test_a_t_test_has_no_smallest_p() -> None:
    d = _design(2)
    assert d.min_achievable_p is None and "no smallest p" in d.min_p_note


@pytest.mark.parametrize("kw", [{"n": 1}, {"cv": 0.0}, {"m_tests": 0}, {"alpha": 1.0}, {"margin": 0.0},
                                {"power": 1.0}, {"effect": -1.0}])
def test_design_for_refuses_impossible_designs(kw: dict) -> None:
    n = kw.pop("n", 15)
    with pytest.raises(ValueError):
        _design(n, **kw)

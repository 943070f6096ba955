import math

import numpy as np
import pytest
import scipy.stats

from infercrane.stats import min_achievable_p, rank_test


def test_min_achievable_p_three_per_arm_is_one_tenth():
    assert min_achievable_p(3, 3) == pytest.approx(0.1)
    assert min_achievable_p(4, 4) == pytest.approx(2 / 70)
    assert min_achievable_p(5, 5) < 0.05 <= min_achievable_p(3, 3)


def test_fully_separated_3v3_reaches_exactly_the_minimum():
    r = rank_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert r.p_value == pytest.approx(0.1) and r.min_achievable_p == pytest.approx(0.1)
    assert r.method == "exact-permutation"


def test_ties_never_go_below_the_minimum():
    # scipy's default switches to the normal approximation on ties and reports p ~ 0.047 here.
    assert scipy.stats.mannwhitneyu([1, 1, 1], [2, 2, 2]).pvalue < 0.05
    r = rank_test([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert r.p_value >= r.min_achievable_p == pytest.approx(0.1)


def test_agrees_with_scipy_exact_without_ties():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 6), rng.normal(1, 1, 5)
    assert rank_test(a, b).p_value == pytest.approx(scipy.stats.mannwhitneyu(a, b, method="exact").pvalue)


def test_large_groups_use_the_asymptotic_test():
    rng = np.random.default_rng(1)
    r = rank_test(rng.normal(0, 1, 50), rng.normal(0.5, 1, 50))
    assert r.method == "asymptotic" and r.p_value < 0.05
    assert math.isclose(r.min_achievable_p, 2 / math.comb(100, 50))


def test_identical_groups_give_p_one():
    assert rank_test([2.0] * 5, [2.0] * 5).p_value == pytest.approx(1.0)

"""Paired proportions: Wilson intervals, Newcombe's hybrid score interval of a paired difference, and the items a
non-inferiority claim needs."""
import numpy as np
import pytest

from infercrane.stats.proportions import (PairedCounts, items_to_show_margin, paired_difference_interval, wilson)


def test_wilson_matches_the_tabulated_interval() -> None:
    # 8 of 10 at 95 %: the textbook Wilson score interval (0.4902, 0.9433)
    assert wilson(8, 10, 0.95) == pytest.approx((0.4902, 0.9433), abs=5e-5)
    assert wilson(0, 10, 0.95)[0] == 0.0 and wilson(10, 10, 0.95)[1] == pytest.approx(1.0)


def test_counts_give_rates_and_difference() -> None:
    t = PairedCounts(both=60, reference_only=5, candidate_only=15, neither=20)
    assert (t.n, t.reference_rate, t.candidate_rate) == (100, 0.65, 0.75)
    assert t.difference == pytest.approx(0.10)
    with pytest.raises(ValueError, match="at least one"):
        PairedCounts(0, 0, 0, 0)
    with pytest.raises(ValueError, match="reference_only must be >= 0"):
        PairedCounts(1, -1, 0, 0)


def test_interval_holds_the_estimate_and_mirrors_when_the_arms_swap() -> None:
    t = PairedCounts(both=60, reference_only=5, candidate_only=15, neither=20)
    lo, hi = paired_difference_interval(t, 0.95)
    assert lo < t.difference < hi
    swapped = PairedCounts(both=60, reference_only=15, candidate_only=5, neither=20)
    assert paired_difference_interval(swapped, 0.95) == pytest.approx((-hi, -lo))
    assert paired_difference_interval(t, 0.90)[0] > lo  # a lower level: a narrower interval


def test_no_changed_item_still_leaves_a_width_that_shrinks_with_items() -> None:
    small = paired_difference_interval(PairedCounts(40, 0, 0, 10), 0.90)
    large = paired_difference_interval(PairedCounts(160, 0, 0, 40), 0.90)
    assert small[0] == pytest.approx(-small[1]) and small[0] < 0
    assert small[0] < large[0] < 0


def test_every_item_changed_stays_inside_minus_one_to_one() -> None:
    lo, hi = paired_difference_interval(PairedCounts(0, 30, 0, 0), 0.95)
    assert -1.0 <= lo < -0.8 and hi < -0.8


def test_coverage_is_near_its_level() -> None:
    """Simulated tables of known difference: the 95 % interval covers it about 95 % of the time (Newcombe's method
    10 is slightly conservative)."""
    rng = np.random.default_rng(7)
    for n, probs in [(100, [0.6, 0.05, 0.1, 0.25]), (40, [0.5, 0.1, 0.15, 0.25])]:
        truth = probs[2] - probs[1]
        hits = sum(lo <= truth <= hi for lo, hi in (
            paired_difference_interval(PairedCounts(*map(int, rng.multinomial(n, probs))), 0.95)
            for _ in range(1500)))
        assert 0.93 <= hits / 1500 <= 0.985, (n, hits / 1500)


def test_items_to_show_margin_is_the_first_count_that_can() -> None:
    n = items_to_show_margin(0.8, 0.05, 0.90)
    assert n is not None and n > 1

    def lower(m: int) -> float:
        right = round(0.8 * m)
        return paired_difference_interval(PairedCounts(right, 0, 0, m - right), 0.90)[0]

    assert lower(n) >= -0.05 > lower(n - 1)
    assert items_to_show_margin(0.8, 0.001, 0.90, limit=100) is None
    with pytest.raises(ValueError, match="margin"):
        items_to_show_margin(0.8, 0.0, 0.9)

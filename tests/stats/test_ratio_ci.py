import numpy as np
import pytest
import scipy.stats

from infercrane.stats import b_over_a_ci, ratio_ci, speedup_ci

LOG_SIGMA = 0.05


def _lognormal(rng, median, n):
    return rng.lognormal(np.log(median), LOG_SIGMA, n)


def test_speedup_direction_and_ci_covers_known_ratio():
    rng = np.random.default_rng(1234)
    baseline_t_us = _lognormal(rng, 10.0, 200)
    candidate_t_us = _lognormal(rng, 8.0, 200)  # true speedup 1.25
    ci = speedup_ci(baseline_t_us, candidate_t_us, seed=7)
    assert ci.definition == "median(baseline_t) / median(candidate_t)"
    assert ci.ci_lo < 1.25 < ci.ci_hi
    assert ci.ci_lo <= ci.ratio <= ci.ci_hi
    assert ci.ci_method == "percentile" and ci.n_numerator == ci.n_denominator == 200


def test_b_over_a_is_b_divided_by_a():
    a, b = [100.0, 101.0, 99.0, 100.5, 99.5], [110.0, 111.0, 109.0, 110.5, 109.5]
    ci = b_over_a_ci(a, b)
    assert ci.definition == "median(B) / median(A)"
    assert ci.ratio == pytest.approx(1.1)
    assert ratio_ci(b, a).ratio == ci.ratio


def test_coverage_near_nominal_on_synthetic_data():
    rng = np.random.default_rng(2024)
    true_ratio, hits, trials = 1.25, 0, 100
    for i in range(trials):
        ci = speedup_ci(_lognormal(rng, 10.0, 40), _lognormal(rng, 8.0, 40), n_resamples=1000, seed=i)
        hits += ci.ci_lo <= true_ratio <= ci.ci_hi
    assert 0.85 <= hits / trials <= 1.0


def test_same_seed_same_interval_and_other_seed_differs():
    rng = np.random.default_rng(3)
    x, y = _lognormal(rng, 5.0, 30), _lognormal(rng, 5.0, 30)
    assert speedup_ci(x, y, seed=11) == speedup_ci(x, y, seed=11)
    assert speedup_ci(x, y, seed=11).ci_lo != speedup_ci(x, y, seed=12).ci_lo


def test_matches_scipy_bootstrap_directly():
    rng = np.random.default_rng(5)
    x, y = _lognormal(rng, 3.0, 25), _lognormal(rng, 2.0, 25)
    ours = ratio_ci(x, y, n_resamples=500, seed=9)
    ref = scipy.stats.bootstrap(
        (x, y),
        lambda p, q, axis=-1: np.median(p, axis=axis) / np.median(q, axis=axis),
        n_resamples=500,
        vectorized=True,
        paired=False,
        method="percentile",
        rng=np.random.default_rng(9),
    )
    assert (ours.ci_lo, ours.ci_hi) == (ref.confidence_interval.low, ref.confidence_interval.high)


def test_bca_on_degenerate_data_is_an_error_not_nan():
    with pytest.raises(ValueError, match="percentile"):
        ratio_ci([5.0] * 5, [5.0] * 5, ci_method="BCa")


@pytest.mark.parametrize(
    "num, den, kwargs, words",
    [
        ([1.0], [1.0, 2.0], {}, "at least 2"),
        ([1.0, -1.0], [1.0, 2.0], {}, "strictly positive"),
        ([1.0, np.nan], [1.0, 2.0], {}, "NaN"),
        ([1.0, 2.0], [1.0, 2.0], {"confidence": 1.0}, "confidence"),
        ([1.0, 2.0], [1.0, 2.0], {"n_resamples": 10}, "n_resamples"),
        ([1.0, 2.0], [1.0, 2.0], {"statistic": "mode"}, "statistic"),
    ],
)
def test_bad_arguments_raise(num, den, kwargs, words):
    with pytest.raises(ValueError, match=words):
        ratio_ci(num, den, **kwargs)

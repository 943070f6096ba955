"""The trial-level speedup interval: coverage under between-trial spread, the point inside its interval in every
case, pairing by trial id, p-values that agree with the interval, and too few trials refused."""
import math

import numpy as np
import pytest
import scipy.stats
from pydantic import ValidationError

from infercrane.stats import MIN_PAIRED_TRIALS, TrialSpeedup, Verdict, speedup_ci, trial_speedup

M = 0.02


def _speedup(base, cand, base_ids=None, cand_ids=None, confidence=0.95, same_margin=M) -> TrialSpeedup:
    base_ids = list(range(len(base))) if base_ids is None else base_ids
    cand_ids = list(range(len(cand))) if cand_ids is None else cand_ids
    return trial_speedup(base, cand, base_ids, cand_ids, confidence=confidence, same_margin=same_margin)


def _simulate(rng, n_experiments, *, trials, samples, true_speedup, sigma_within, sigma_between, sigma_drift):
    """Log-normal per-call times: a per-round drift shared by both implementations (they are timed in the same
    interleaved round), a per-trial effect of each implementation, and independent noise per sample."""
    shape = (n_experiments, trials, 1)
    drift = rng.normal(0.0, sigma_drift, shape)
    log_base = math.log(10.0) + drift + rng.normal(0.0, sigma_between, shape)
    log_cand = math.log(10.0 / true_speedup) + drift + rng.normal(0.0, sigma_between, shape)
    noise = (n_experiments, trials, samples)
    return (np.exp(log_base + rng.normal(0.0, sigma_within, noise)),
            np.exp(log_cand + rng.normal(0.0, sigma_within, noise)))


def test_coverage_with_between_trial_spread_and_why_the_sample_bootstrap_fails():
    # The H200 measurement: between-trial spread about 2.6x the within-trial error, 5 trials of 20 samples.
    true_speedup, n = 1.10, 300
    base, cand = _simulate(np.random.default_rng(20240601), n, trials=5, samples=20, true_speedup=true_speedup,
                           sigma_within=0.01, sigma_between=0.026, sigma_drift=0.03)
    ids = list(range(5))
    trial_hits = sample_hits = 0
    for i in range(n):
        t = trial_speedup(base[i], cand[i], ids, ids, confidence=0.95, same_margin=M)
        trial_hits += t.ci_lo <= true_speedup <= t.ci_hi
        # The old kernel-lab interval: every sample resampled as independent (fewer resamples to stay fast).
        b = speedup_ci(base[i].ravel(), cand[i].ravel(), confidence=0.95, n_resamples=500, seed=i)
        sample_hits += b.ci_lo <= true_speedup <= b.ci_hi
    trial_coverage, sample_coverage = trial_hits / n, sample_hits / n
    assert trial_coverage >= 0.93, f"trial-level interval covers {trial_coverage:.1%} at nominal 95%"
    assert sample_coverage < 0.80, f"sample bootstrap covers {sample_coverage:.1%}: expected far below 95%"


def test_interval_is_the_student_t_interval_of_the_log_ratios():
    base = [[10.0, 10.2, 9.9], [10.5, 10.4, 10.6], [9.8, 9.7, 9.9], [10.1, 10.0, 10.3]]
    cand = [[8.0, 8.1, 7.9], [8.6, 8.5, 8.4], [7.7, 7.8, 7.9], [8.2, 8.0, 8.1]]
    t = _speedup(base, cand)
    d = np.log(np.median(base, axis=1) / np.median(cand, axis=1))
    half = scipy.stats.t.ppf(0.975, 3) * np.std(d, ddof=1) / 2.0
    assert t.ratio == pytest.approx(math.exp(d.mean()), rel=1e-12)
    assert (t.ci_lo, t.ci_hi) == pytest.approx((math.exp(d.mean() - half), math.exp(d.mean() + half)), rel=1e-12)
    assert t.trial_speedups == pytest.approx(list(np.exp(d)), rel=1e-12)
    assert t.ratio == pytest.approx(t.baseline_t_us / t.candidate_t_us, rel=1e-12)
    assert t.n_trials == 4 and t.verdict is Verdict.FASTER and t.method.startswith("paired-trial Student t")


@pytest.mark.parametrize("case", ["identical", "tiny", "three", "last_bit", "huge"])
def test_point_lies_inside_its_interval_exactly(case):
    rng = np.random.default_rng(7)
    if case == "identical":  # sd = 0
        base, cand = [[5.0, 5.0, 5.0]] * 5, [[4.0, 4.0, 4.0]] * 5
    elif case == "tiny":  # spread at the last bits of a double
        base = [[5.0 * (1 + k * 2.2e-16)] for k in range(5)]
        cand = [[4.0]] * 5
    elif case == "three":
        base, cand = [[5.0], [5.3], [4.8]], [[5.1], [4.9], [5.0]]
    elif case == "last_bit":  # the value a receipt once reported just outside its own interval
        r = 0.9837397734349712
        base, cand = [[r * c] for c in (1.0, 1.0000000000000002, 0.9999999999999998)], [[1.0]] * 3
    else:
        base, cand = rng.lognormal(0, 1.0, (3, 4)).tolist(), rng.lognormal(0, 1.0, (3, 4)).tolist()
    t = _speedup(base, cand)
    assert t.ci_lo <= t.ratio <= t.ci_hi
    if case == "identical":
        assert t.ci_lo == t.ratio == t.ci_hi == 1.25 and t.log_sd == 0.0
        assert (t.p_faster, t.p_slower) == (0.0, 1.0) and t.verdict is Verdict.FASTER


def test_point_inside_interval_over_many_near_degenerate_cases():
    rng = np.random.default_rng(11)
    for _ in range(2000):
        n = int(rng.integers(3, 7))
        level = rng.uniform(0.5, 2.0)
        eps = 10.0 ** rng.uniform(-16, -9)
        base = (level * (1 + eps * rng.standard_normal(n)))[:, None]
        t = _speedup(base.tolist(), [[1.0]] * n)
        assert t.ci_lo <= t.ratio <= t.ci_hi


def test_trials_are_paired_by_id_and_unpaired_ones_named():
    # Trial 1 of the baseline lost every sample (all rejected), trial 3 of the candidate likewise.
    base = [[10.0], [10.4], [9.0], [11.0]]
    cand = [[5.0], [5.2], [4.5], [5.5]]
    t = _speedup(base, cand, base_ids=[0, 2, 3, 4], cand_ids=[0, 1, 2, 4])
    assert t.trial_ids == [0, 2, 4] and t.unpaired_trial_ids == [1, 3]
    assert t.trial_speedups == pytest.approx([10.0 / 5.0, 10.4 / 4.5, 11.0 / 5.5])  # trial 2: base 10.4, cand 4.5


def test_pairing_removes_drift_shared_by_a_round():
    # Each round moves both implementations by up to 30 percent; their ratio stays 1.5 within 0.1 percent.
    drift = [1.0, 1.3, 0.8, 1.15, 0.9]
    wobble = [1.0, 1.001, 0.999, 1.0005, 0.9995]
    t = _speedup([[15.0 * d * w] for d, w in zip(drift, wobble)], [[10.0 * d] for d in drift])
    assert t.ci_hi / t.ci_lo < 1.003 and t.verdict is Verdict.FASTER


@pytest.mark.parametrize("n", [0, 1, 2])
def test_fewer_than_three_paired_trials_support_no_claim(n):
    t = _speedup([[2.0, 2.1]] * n, [[1.0, 1.1]] * n)
    assert MIN_PAIRED_TRIALS == 3
    assert t.verdict is Verdict.INSUFFICIENT and t.reason
    assert t.ci_lo is t.ci_hi is t.p_faster is t.p_slower is t.p_same is None
    assert (t.ratio is None) == (n == 0)


def test_p_values_agree_with_the_interval_against_the_band():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(3, 8))
        d = rng.normal(rng.uniform(-0.06, 0.06), rng.uniform(0.001, 0.04), n)
        t = _speedup(np.exp(d)[:, None].tolist(), [[1.0]] * n)
        tail = 0.025
        assert (t.p_faster < tail) == (t.ci_lo > 1 + M)
        assert (t.p_slower < tail) == (t.ci_hi < 1 - M)
        assert (t.p_same < tail) == (1 - M <= t.ci_lo and t.ci_hi <= 1 + M)
        expected = (Verdict.FASTER if t.ci_lo > 1 + M else Verdict.SLOWER if t.ci_hi < 1 - M
                    else Verdict.SAME if (1 - M <= t.ci_lo and t.ci_hi <= 1 + M) else Verdict.AMBIGUOUS)
        assert t.verdict is expected


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="trial ids"):
        trial_speedup([[1.0]], [[1.0]], [0, 1], [0], confidence=0.95, same_margin=M)
    with pytest.raises(ValueError, match="appears twice"):
        trial_speedup([[1.0], [1.0]], [[1.0]], [0, 0], [0], confidence=0.95, same_margin=M)
    with pytest.raises(ValueError, match="strictly positive"):
        _speedup([[1.0], [0.0], [1.0]], [[1.0]] * 3)
    with pytest.raises(ValueError, match="empty"):
        _speedup([[1.0], [], [1.0]], [[1.0]] * 3)
    with pytest.raises(ValueError, match="confidence"):
        _speedup([[1.0]] * 3, [[1.0]] * 3, confidence=1.0)


def test_the_model_refuses_a_point_outside_its_interval():
    good = _speedup([[2.0], [2.1], [1.9]], [[1.0]] * 3).model_dump()
    with pytest.raises(ValidationError, match="lies outside its interval"):
        TrialSpeedup.model_validate(good | {"ci_lo": good["ratio"] * 1.001, "ci_hi": good["ratio"] * 1.01})
    with pytest.raises(ValidationError, match="support no claim"):
        TrialSpeedup.model_validate(good | {"trial_ids": [0, 1], "baseline_trial_t_us": [2.0, 2.1],
                                            "candidate_trial_t_us": [1.0, 1.0], "trial_speedups": [2.0, 2.1]})

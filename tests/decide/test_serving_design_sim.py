"""The paired window design, simulated through ``decide_serving_paired``: coverage, false decisions, power and the
reach of equivalence at the default design, and the design's numbers as ``design_for`` states them; then the paired
rule case by case, the policy keys it added, and the per-statistic bootstrap seed of the unpaired path.

Default design: concurrencies 1, 8, 32 and ``DEFAULT_TRIALS`` trials per arm in the order A1 B1 B2 A2 (A's first
ceil(T/2) trials, B's trials, A's remaining trials; window j of A1 pairs with window j of B1, window j of B2 with
window j of A2), so ``3 * T`` window pairs per metric. Window values are log-normal: ``log value = log base +
log(true B/A) for B + drift * t + N(0, cv^2)``, where ``t`` runs from 0 to 1 over the session's windows in the order
they ran (each trial sweeps the concurrencies in order) and the drift is shared by both engines. The log ratio of a
pair then has sd ``sqrt(2) * cv``, as ``design_for`` assumes. Guards are drawn with the same CV and no effect.
Fixed seeds; every rate below is a deterministic function of its seed.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from infercrane.decide.policy import load_policy
from infercrane.decide.serving import PairedServingDecision, decide_serving_paired
from infercrane.stats.compare import EquivalenceVerdict
from infercrane.stats.paired import design_for

CONCURRENCIES = (1, 8, 32)
DEFAULT_TRIALS = 5
PHRASES = ("eager vLLM", "compiled vLLM")
# Typical magnitudes per concurrency (only ratios matter; distinct bases catch a pairing that crosses concurrencies).
BASE = {"output_tok_s": (390.0, 2600.0, 7800.0), "ttft_p95_ms": (22.0, 65.0, 115.0),
        "e2e_p95_ms": (200.0, 240.0, 315.0)}
POLICY = load_policy("serving")
FAMILY = (POLICY.primary_metric, *POLICY.guard_metrics)
DRIFT = 0.03  # a 3 % change of both engines from the first window of the session to the last


def abba_pairs(trials: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window pair of the ABBA design: (concurrency index, A's time, B's time), times in [0, 1] in run order."""
    first, second = math.ceil(trials / 2), trials // 2
    trial_a = [*range(first), *range(2 * first + second, 2 * first + 2 * second)]  # A1, then A2
    trial_b = [*range(first, 2 * first), *range(2 * first, 2 * first + second)]  # B1, then B2
    n_c = len(CONCURRENCIES)
    ci = np.repeat(np.arange(n_c)[None, :], trials, axis=0).ravel()
    slot = lambda trial: (np.asarray(trial)[:, None] * n_c + np.arange(n_c)[None, :]).ravel()  # noqa: E731
    last = 2 * trials * n_c - 1
    return ci, slot(trial_a) / last, slot(trial_b) / last


def simulate(trials: int, reps: int, *, cv: float, true_ratio: dict[str, float] | None = None, drift: float = 0.0,
             seed: int) -> list[PairedServingDecision]:
    """``reps`` decisions of the ABBA design, each on freshly drawn windows (``true_ratio``: metric -> B/A)."""
    rng = np.random.default_rng(seed)
    ci, t_a, t_b = abba_pairs(trials)
    conc = [CONCURRENCIES[i] for i in ci]
    draws = {}
    for metric in FAMILY:  # vectorised: every repetition of a metric at once
        base = np.log(np.asarray(BASE[metric]))[ci]
        shift = math.log((true_ratio or {}).get(metric, 1.0))
        log_a = base + drift * t_a + rng.normal(0.0, cv, size=(reps, ci.size))
        log_b = base + shift + drift * t_b + rng.normal(0.0, cv, size=(reps, ci.size))
        draws[metric] = (np.exp(log_a), np.exp(log_b))
    return [decide_serving_paired({m: list(zip(conc, a[r].tolist(), b[r].tolist())) for m, (a, b) in draws.items()},
                                  POLICY, phrases=PHRASES, workload="the simulated workload")
            for r in range(reps)]


def wrong_for_identical_arms(d: PairedServingDecision) -> bool:
    """Identical arms: accept is wrong, and so is a reject that rests on a WORSE verdict; "reject, equivalent, no gain
    to adopt" and inconclusive are right."""
    worse = any(m.verdict is EquivalenceVerdict.WORSE for m in [d.primary, *d.guards])
    return d.decision == "accept" or (d.decision == "reject" and worse)


def test_abba_pairs_windows_of_adjacent_blocks_at_one_concurrency() -> None:
    ci, t_a, t_b = abba_pairs(5)
    assert ci.size == 15 and (np.bincount(ci) == 5).all()
    last = 2 * 5 * 3 - 1
    # first half: B after A by 3 trials (9 windows); second half: B before A by 2 trials (6 windows)
    offsets = np.round((t_b - t_a) * last).astype(int)
    assert sorted(set(offsets.tolist())) == [-6, 9] and (offsets == 9).sum() == 9 and (offsets == -6).sum() == 6
    assert abba_pairs(6)[1].size == 18 and np.isclose(np.mean(abba_pairs(6)[2] - abba_pairs(6)[1]), 0.0)


def test_default_design_as_design_for_states_it() -> None:
    n = len(CONCURRENCIES) * DEFAULT_TRIALS
    d = design_for(n, cv=POLICY.prior_window_cv, m_tests=POLICY.family_size, alpha=POLICY.alpha,
                   margin=POLICY.equivalence_margin)
    assert (d.n_pairs, d.m_tests, d.test_level) == (15, 3, pytest.approx(0.05 / 3))
    assert d.detectable_change == pytest.approx(0.0267, abs=5e-4)  # 3 % is detectable with power 0.8 ...
    assert d.power_at_effect == pytest.approx(0.890, abs=2e-3) and d.power_at_effect >= 0.8
    assert not d.equivalence_reachable and d.equivalence_probability < 0.001  # ... but ±1 % equivalence is not:
    assert d.pairs_for_equivalence == 111  # 37 trials per arm at three concurrencies
    assert d.min_achievable_p is None and "no smallest p" in d.min_p_note
    assert POLICY.min_pairs <= n
    # one trial fewer per arm misses the power requirement: T = 5 is the smallest default
    fewer = design_for(n - len(CONCURRENCIES), cv=POLICY.prior_window_cv, m_tests=POLICY.family_size,
                       alpha=POLICY.alpha, margin=POLICY.equivalence_margin)
    assert fewer.power_at_effect < 0.8


def test_primary_interval_covers_the_true_ratio_under_linear_drift() -> None:
    truth = 1.02
    decisions = simulate(DEFAULT_TRIALS, 1000, cv=0.02, true_ratio={POLICY.primary_metric: truth}, drift=DRIFT,
                         seed=11)
    covered = np.mean([d.primary.ratio.ci_lo <= truth <= d.primary.ratio.ci_hi for d in decisions])
    assert covered >= 0.93, covered
    assert decisions[0].primary.ratio.confidence == pytest.approx(1 - 0.05 / 3)


def test_identical_arms_rarely_get_a_wrong_decision() -> None:
    decisions = simulate(DEFAULT_TRIALS, 2000, cv=0.05, seed=12)
    wrong = np.mean([wrong_for_identical_arms(d) for d in decisions])
    assert wrong <= 0.05, wrong
    assert all(d.m_tests == 3 and d.family == "primary + guards, pooled over concurrencies" for d in decisions[:3])


def test_a_three_percent_gain_on_the_primary_is_accepted() -> None:
    decisions = simulate(DEFAULT_TRIALS, 600, cv=0.02, true_ratio={POLICY.primary_metric: 1.03}, seed=13)
    accepted = np.mean([d.decision == "accept" for d in decisions])
    assert accepted >= 0.80, accepted


def test_equivalence_is_reached_with_the_pairs_design_for_asks() -> None:
    need = design_for(15, cv=0.02, m_tests=POLICY.family_size, alpha=POLICY.alpha,
                      margin=POLICY.equivalence_margin).pairs_for_equivalence
    trials = math.ceil(need / len(CONCURRENCIES))
    decisions = simulate(trials, 200, cv=0.02, seed=14)
    equivalent = np.mean([d.primary.verdict is EquivalenceVerdict.EQUIVALENT for d in decisions])
    assert equivalent > 0.5, equivalent
    said = next(d for d in decisions if d.primary.verdict is EquivalenceVerdict.EQUIVALENT)
    assert said.decision == "reject" and "no gain to adopt" in said.decision_text


def test_the_default_design_does_not_reach_equivalence() -> None:
    decisions = simulate(DEFAULT_TRIALS, 200, cv=0.02, seed=15)
    assert np.mean([d.primary.verdict is EquivalenceVerdict.EQUIVALENT for d in decisions]) < 0.02


# --------------------------------------------------------------------------------------------- the rule, case by case


def _pairs(ratios: dict[str, float], *, n_per_c: int = 5, cv: float = 0.004, seed: int = 0) -> dict:
    """Window pairs of every family metric, B/A = ``ratios`` (1 where absent), small noise."""
    rng = np.random.default_rng(seed)
    out = {}
    for metric in FAMILY:
        rows = []
        for i, c in enumerate(CONCURRENCIES):
            a = BASE[metric][i] * np.exp(rng.normal(0.0, cv, n_per_c))
            b = BASE[metric][i] * ratios.get(metric, 1.0) * np.exp(rng.normal(0.0, cv, n_per_c))
            rows += [(c, float(x), float(y)) for x, y in zip(a, b)]
        out[metric] = rows
    return out


def _decide(pairs: dict, policy=POLICY) -> PairedServingDecision:
    return decide_serving_paired(pairs, policy, phrases=PHRASES, workload="the seed workload")


def test_a_clear_gain_is_accepted_and_the_family_is_named_with_its_control() -> None:
    d = _decide(_pairs({"output_tok_s": 1.05}))
    assert d.decision == "accept" and d.decision_text == "accept compiled vLLM over eager vLLM for the seed workload"
    assert d.primary.verdict is EquivalenceVerdict.BETTER and d.primary.n_pairs == 15
    assert d.primary.estimand.startswith("geometric mean B/A over all 15 window pairs")
    assert d.primary.estimand.endswith("concurrencies 1, 8, 32")
    assert "Holm step-down" in d.family_control and "1 - alpha / m = 98.33 %" in d.family_control
    assert d.interval_level == pytest.approx(1 - 0.05 / 3) and d.primary.ratio.confidence == d.interval_level
    assert "98.33 % interval on the mean log ratio" in d.primary.ratio.method
    from infercrane.stats.family import holm_adjust

    raw = [m.ratio.p_value for m in [d.primary, *d.guards]]
    assert [m.p_holm for m in [d.primary, *d.guards]] == pytest.approx(holm_adjust(raw))


def test_a_worse_guard_rejects_even_with_a_better_primary() -> None:
    d = _decide(_pairs({"output_tok_s": 1.05, "ttft_p95_ms": 1.04}))
    assert d.decision == "reject" and d.guards[0].verdict is EquivalenceVerdict.WORSE
    assert "worsened p95 TTFT by" in d.decision_text


def test_a_lower_latency_guard_is_better_not_worse() -> None:
    d = _decide(_pairs({"output_tok_s": 1.05, "e2e_p95_ms": 0.95}))
    assert d.decision == "accept" and d.guards[1].verdict is EquivalenceVerdict.BETTER


def test_an_equivalent_primary_rejects_with_no_gain_to_adopt() -> None:
    d = _decide(_pairs({}, n_per_c=20, cv=0.002))
    assert d.primary.verdict is EquivalenceVerdict.EQUIVALENT
    assert d.decision == "reject" and "equivalent to eager vLLM within ±1 percent" in d.decision_text
    assert "no gain to adopt" in d.decision_text


def test_a_small_significant_gain_inside_the_band_is_equivalent_not_better() -> None:
    d = _decide(_pairs({"output_tok_s": 1.004}, n_per_c=20, cv=0.002))
    assert d.primary.ratio.p_value < 1e-6 and d.primary.verdict is EquivalenceVerdict.EQUIVALENT


def test_an_unresolved_primary_is_inconclusive() -> None:
    d = _decide(_pairs({"output_tok_s": 1.01}, cv=0.03, seed=4))
    assert d.primary.verdict is EquivalenceVerdict.INCONCLUSIVE and d.decision == "inconclusive"
    assert "not resolved by the window pairs" in d.decision_text


def test_too_few_pairs_say_what_would_fix_it() -> None:
    few = _pairs({"output_tok_s": 1.05}, n_per_c=3)  # 9 pairs < min_pairs 10
    d = _decide(few)
    assert d.decision == "inconclusive"
    assert "fewer than the policy's min_pairs = 10" in d.decision_text and "measure at least 1 more window pair" \
        in d.decision_text
    assert all(m.p_holm is None and m.verdict is EquivalenceVerdict.INCONCLUSIVE for m in [d.primary, *d.guards])
    assert d.primary.ratio is not None  # the evidence is still shown
    looser = POLICY.model_copy(update={"min_pairs": 9})
    assert _decide(few, looser).decision == "accept"


def test_per_concurrency_ratios_are_description_outside_the_family() -> None:
    d = _decide(_pairs({"output_tok_s": 1.05}))
    assert {(e.metric, e.concurrency) for e in d.per_concurrency} == {(m, c) for m in FAMILY for c in CONCURRENCIES}
    for e in d.per_concurrency:
        assert e.in_decision_family is False and e.role.startswith("descriptive: not part of the decision's family")
        assert e.n_pairs == 5 and e.ratio.confidence == POLICY.confidence


def test_bad_pairs_are_refused_by_name() -> None:
    from infercrane.errors import InputError

    pairs = _pairs({})
    with pytest.raises(InputError, match="no window pairs of 'e2e_p95_ms'"):
        _decide({k: v for k, v in pairs.items() if k != "e2e_p95_ms"})
    pairs["ttft_p95_ms"][0] = (1, 0.0, 5.0)
    with pytest.raises(InputError, match="ttft_p95_ms: every A window value must be finite and > 0"):
        _decide(pairs)
    with pytest.raises(InputError, match="phrases"):
        decide_serving_paired(_pairs({}), POLICY, phrases=("only A",), workload="w")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- policy and seeds

OLD_POLICY = {"schema_version": "infercrane.serving-policy/v1", "primary_metric": "output_tok_s",
              "guard_metrics": ["ttft_p95_ms", "e2e_p95_ms"], "equivalence_margin": 0.01, "confidence": 0.95,
              "bootstrap_resamples": 2000, "bootstrap_seed": 0, "min_runs_per_arm": 5,
              "driver_agreement_percent": 2.0}


def test_a_policy_without_the_new_keys_loads_and_keeps_its_hash() -> None:
    from infercrane.decide.policy import ServingPolicy, policy_sha256
    from infercrane.hashing import config_hash

    old = ServingPolicy.model_validate(OLD_POLICY)
    assert (old.min_pairs, old.family_control, old.prior_window_cv, old.per_statistic_seed) == (10, "holm", 0.02, False)
    assert policy_sha256(old) == config_hash(OLD_POLICY)  # the hash a receipt decided before the keys recorded
    assert POLICY.per_statistic_seed and POLICY.bootstrap_resamples == 20000
    assert policy_sha256(POLICY) != policy_sha256(old)
    assert policy_sha256(old.model_copy(update={"min_pairs": 12})) != policy_sha256(old)


def test_the_statistic_seed_is_a_stable_hash_of_its_identity() -> None:
    from infercrane.decide.serving import bootstrap_seed_for, statistic_seed

    assert statistic_seed(0, "output_tok_s", 1) == 104758914  # SHA-256 of '[0,"output_tok_s",1]', first 4 bytes
    seeds = {statistic_seed(s, m, c) for s in (0, 1) for m in FAMILY for c in CONCURRENCIES}
    assert len(seeds) == 2 * len(FAMILY) * len(CONCURRENCIES)
    from infercrane.decide.policy import ServingPolicy

    old = ServingPolicy.model_validate(OLD_POLICY)
    assert bootstrap_seed_for(old, "output_tok_s", 8) == 0
    assert bootstrap_seed_for(POLICY, "output_tok_s", 8) == statistic_seed(0, "output_tok_s", 8)


def test_interval_method_names_the_seed_rule_and_keeps_the_old_sentence_for_old_policies() -> None:
    from infercrane.decide.serving import interval_method

    assert interval_method(OLD_POLICY) == (
        "percentile bootstrap of median(B) / median(A), each arm's runs resampled independently (the run is the "
        "replicate), 2000 resamples, seed 0")
    assert interval_method(POLICY).endswith("seed per statistic: the first 4 bytes of SHA-256 of the JSON [0, metric, "
                                            "concurrency], recorded with the statistic")
    assert "20000 resamples" in interval_method(POLICY.model_dump())


RECEIPT = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "2026-12-01-h200-serving"
           / "seed-paired-eager-vs-compiled.json")


def _endpoint_moves(resamples: int, base_seeds: range) -> float:
    """Largest relative spread of a CI endpoint over ``base_seeds``, across the 5 v 5 statistics of a recorded A/B."""
    from infercrane.decide.serving import ServingArm, compare_metric

    worst = 0.0
    for s in json.loads(RECEIPT.read_text())["paired_aiperf"]["statistics"]:
        arm_a = ServingArm(recipe="eager", phrase="eager vLLM", runs={s["metric"]: s["a_values"]})
        arm_b = ServingArm(recipe="compiled", phrase="compiled vLLM", runs={s["metric"]: s["b_values"]})
        cis = [compare_metric(s["metric"], arm_a, arm_b,
                              POLICY.model_copy(update={"bootstrap_seed": k, "bootstrap_resamples": resamples}),
                              concurrency=s["concurrency"]) for k in base_seeds]
        for end in ("ci_lo", "ci_hi"):
            v = np.array([getattr(c, end) for c in cis])
            worst = max(worst, float((v.max() - v.min()) / np.median(v)))
    return worst


def test_another_seed_moves_no_endpoint_by_more_than_half_a_percent() -> None:
    # 5 v 5 runs as recorded on an H200 (12 statistics: 3 concurrencies x 4 metrics, run CVs of 1-15 %)
    assert _endpoint_moves(POLICY.bootstrap_resamples, range(6)) <= 0.005
    assert _endpoint_moves(2000, range(6)) > 0.005  # the old resample count did move them


def test_the_seed_is_recorded_with_the_statistic() -> None:
    from infercrane.decide.serving import ServingArm, compare_metric, statistic_seed

    arm_a = ServingArm(recipe="eager", phrase="eager vLLM", runs={"output_tok_s": [100.0, 101.0, 99.0, 100.5, 99.5]})
    arm_b = ServingArm(recipe="compiled", phrase="compiled vLLM", runs={"output_tok_s": [103.0, 104.0, 102.0,
                                                                                       103.5, 102.5]})
    mc = compare_metric("output_tok_s", arm_a, arm_b, POLICY, concurrency=8)
    assert (mc.bootstrap_seed, mc.bootstrap_resamples) == (statistic_seed(0, "output_tok_s", 8), 20000)

"""Window pairs: the B/A ratio of two recipes measured in paired time windows, and what a design of pairs can show.

In a paired window design both engines stay up and a load generator measures fixed-length time windows in blocks run
in the counterbalanced order A1 B1 B2 A2: window j of A1 is paired with window j of B1 (same concurrency), and window
j of B2 with window j of A2. A **pair is the replicate**. Within a pair the two windows sit close in time, so slow
drift largely cancels in ``log(b_i / a_i)``; a linear drift cancels in the mean over the two halves of ABBA (B after A
in one half, before it in the other).

``paired_ratio(a, b)``: the estimand is the geometric mean of the per-pair ratios,
``exp(mean_i log(b_i / a_i))``. Its interval is the Student-t interval of the mean log ratio,
``mean ± t_{(1 + confidence) / 2, n - 1} * sd / sqrt(n)``, exponentiated (so it is a ratio interval, asymmetric
around the point); its test is the one-sample two-sided t test of ``mean log ratio = 0``
(the p of ``scipy.stats.ttest_1samp``, ``t_test_p``). Both assume the log ratios are roughly normal and independent
between pairs.

``design_for(n_pairs, cv=..., m_tests=..., alpha=..., margin=...)``: what a design of ``n_pairs`` pairs can show
before anything is measured, from an assumed per-window coefficient of variation (formulas in its docstring).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

MIN_PAIRS = 2  # a sample sd, and so a t interval, needs two pairs
_MAX_PAIRS_SEARCHED = 1_000_000  # design_for: "needs more than this" reads as unreachable


# --------------------------------------------------------------------------------------------- one paired ratio


class PairedRatio(BaseModel):
    """The geometric-mean B/A ratio over window pairs, its t interval and t test, and how they were made."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ratio: float = Field(gt=0, description="exp(mean log(b_i / a_i)): the geometric mean of the per-pair B/A")
    ci_lo: float = Field(gt=0)
    ci_hi: float = Field(gt=0)
    confidence: float = Field(gt=0, lt=1)
    p_value: float = Field(ge=0, le=1, description="two-sided one-sample t test of mean log(B/A) = 0")
    n_pairs: int = Field(ge=MIN_PAIRS)
    df: int = Field(ge=1, description="degrees of freedom of the t interval and test: n_pairs - 1")
    mean_log: float = Field(description="mean of log(b_i / a_i)")
    sd_log: float = Field(ge=0, description="sample sd (ddof 1) of log(b_i / a_i)")
    method: str = Field(description="how the ratio and its interval were made")
    test_method: str
    note: str | None = Field(default=None, description="set when the log ratios are all identical (sd 0)")


def _pair_arrays(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xa = np.asarray(a, dtype=np.float64).ravel()
    xb = np.asarray(b, dtype=np.float64).ravel()
    if xa.size != xb.size:
        raise ValueError(f"a and b must pair up one to one; got {xa.size} and {xb.size} values")
    if xa.size < MIN_PAIRS:
        raise ValueError(f"{xa.size} window pair(s); a t interval needs at least {MIN_PAIRS}")
    for name, x in (("a", xa), ("b", xb)):
        if not np.isfinite(x).all() or (x <= 0).any():
            raise ValueError(f"{name}: every window value must be finite and > 0, got {x.tolist()}")
    return xa, xb


def paired_method(n_pairs: int, confidence: float) -> str:
    """The method sentence of a ``paired_ratio`` interval."""
    return (f"geometric mean of B/A over window pairs, exp(mean log(B_i / A_i)); the window pair is the replicate; "
            f"Student-t {confidence * 100:.4g} % interval on the mean log ratio with {n_pairs - 1} df "
            f"({n_pairs} pairs), exponentiated")


def paired_test_method(n_pairs: int) -> str:
    """The method sentence of a ``paired_ratio`` test."""
    return (f"one-sample two-sided t test of mean log(B_i / A_i) = 0, {n_pairs - 1} df: p = 2 P(T > |t|), "
            "t = mean / (sd / sqrt(n)) (the p of scipy.stats.ttest_1samp)")


def paired_ratio(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    confidence: float,
) -> PairedRatio:
    """B/A over window pairs ``(a[i], b[i])``: geometric-mean ratio, t interval at ``confidence``, two-sided t test.

    Values must be finite and > 0, the same number in ``a`` and ``b``, at least 2 pairs (ValueError otherwise).

    Degenerate input: when every log ratio is identical (sample sd exactly 0) there is no spread to build an interval
    from. The result is then finite but degenerate: the interval is the point itself, and p is 0 when the common log
    ratio is not 0 (every pair shows the same change) and 1 when it is 0 (every pair is equal); ``note`` says so.
    Such data is almost always a recording error (one window copied), not a measurement.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    xa, xb = _pair_arrays(a, b)
    from scipy import special as _sp  # deferred, as everywhere in infercrane.stats

    d = np.log(xb) - np.log(xa)
    n = int(d.size)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    common = dict(confidence=confidence, n_pairs=n, df=n - 1, mean_log=mean, sd_log=sd,
                  method=paired_method(n, confidence), test_method=paired_test_method(n))
    if sd == 0.0:
        point = math.exp(mean)
        return PairedRatio(ratio=point, ci_lo=point, ci_hi=point, p_value=0.0 if mean != 0.0 else 1.0,
                           note="every pair has the same log ratio (sd 0): the interval is the point, and p is "
                                "0 for a common change, 1 for none (degenerate, not an estimate of spread)",
                           **common)
    se = sd / math.sqrt(n)
    half = float(_sp.stdtrit(n - 1, 0.5 + confidence / 2.0)) * se
    return PairedRatio(ratio=math.exp(mean), ci_lo=math.exp(mean - half), ci_hi=math.exp(mean + half),
                       p_value=t_test_p(mean / se, n - 1), **common)


def t_test_p(t: float, df: int) -> float:
    """Two-sided p of a t statistic: ``2 * P(T_df > |t|)``, the p-value ``scipy.stats.ttest_1samp`` gives (computed
    with the Student-t distribution function ``scipy.special.stdtr``, without ttest_1samp's per-call overhead, which
    the decision simulations would pay thousands of times)."""
    from scipy import special as _sp

    return min(1.0, max(0.0, 2.0 * float(_sp.stdtr(df, -abs(t)))))


# --------------------------------------------------------------------------------------------- design


class PairedDesign(BaseModel):
    """What a paired window design can show, from an assumed per-window CV (``design_for``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_pairs: int
    cv: float = Field(description="assumed per-window coefficient of variation")
    sd_log: float = Field(description="assumed sd of one log ratio: sqrt(2) * cv")
    m_tests: int = Field(description="tests in the decision's family")
    alpha: float = Field(description="family-wise level")
    test_level: float = Field(description="two-sided level of the Holm first step: alpha / m_tests")
    ci_level: float = Field(description="level of each interval of the family: 1 - alpha / m_tests")
    t_critical: float = Field(description="t_{1 - alpha / (2 m_tests), n_pairs - 1}")
    power_target: float = Field(description="probability asked of detection and of equivalence")
    detectable_change: float = Field(description="smallest B/A change (fraction, upward: B/A = 1 + this) that the "
                                                 "test detects with probability power_target")
    effect: float
    power_at_effect: float = Field(description="probability that the test detects a B/A change of 1 + effect")
    margin: float
    equivalence_probability: float = Field(description="probability that the interval of two exactly equal arms "
                                                       "lies inside [1 - margin, 1 + margin]")
    equivalence_reachable: bool = Field(description="equivalence_probability >= power_target")
    pairs_for_equivalence: int | None = Field(description="fewest pairs for equivalence_probability >= "
                                                          "power_target; None beyond a million")
    min_achievable_p: float | None = Field(description="None: a t test has no smallest p")
    min_p_note: str
    method: str


def _t_power(ncp: float, df: int, t_crit: float) -> float:
    """Two-sided t test power: P(|T'| > t_crit) for T' noncentral t with ``df`` and noncentrality ``ncp``."""
    from scipy import stats as _st

    # P(T'(ncp) < -t) = P(T'(-ncp) > t): the upper tail of the mirrored variable, which scipy evaluates without the
    # NaN its lower tail gives far out; a tail scipy cannot evaluate is 0 to double precision there.
    upper = float(_st.nct.sf(t_crit, df, ncp))
    lower = float(_st.nct.sf(t_crit, df, -ncp))
    return (upper if math.isfinite(upper) else 1.0) + (lower if math.isfinite(lower) else 0.0)


def _t_crit(level: float, df: int) -> float:
    from scipy import stats as _st

    return float(_st.t.ppf(1.0 - level / 2.0, df))


def detectable_log_ratio(n_pairs: int, sd_log: float, level: float, power: float) -> float:
    """Smallest |mean log ratio| a two-sided one-sample t test at ``level`` detects with ``power`` (n pairs, sd).

    Solves ``P(|T'| > t_{1 - level/2, n-1}) = power`` for the noncentrality ``ncp = delta * sqrt(n) / sd`` of the
    noncentral t ``T'`` (``scipy.stats.nct``) and returns ``delta``.
    """
    from scipy.optimize import brentq

    df, t_crit = n_pairs - 1, _t_crit(level, n_pairs - 1)
    hi = t_crit + 4.0
    while _t_power(hi, df, t_crit) < power:
        hi *= 2.0
    ncp = brentq(lambda x: _t_power(x, df, t_crit) - power, 0.0, hi, xtol=1e-10)
    return ncp * sd_log / math.sqrt(n_pairs)


def equivalence_probability(n_pairs: int, sd_log: float, level: float, margin: float) -> float:
    """Probability that the ``1 - level`` t interval of two exactly equal arms lies inside ``[1 - margin, 1 + margin]``.

    With log ratios ~ N(0, sd^2): the mean ``M ~ N(0, se^2)``, ``se = sd / sqrt(n)``, and independently
    ``S^2 = sd^2 Q / df`` with ``Q ~ chi2(df)``, ``df = n - 1``. The interval ``M ± h``,
    ``h = t_c * se * sqrt(Q / df)``
    (``t_c = t_{1 - level/2, df}``), lies inside ``[L, U] = [log(1 - margin), log(1 + margin)]`` when
    ``L + h <= M <= U - h``, so ``P = ∫ f_Q(q) [Φ((U - h(q)) / se) - Φ((L + h(q)) / se)] dq`` over the ``q`` where
    ``2 h(q) <= U - L``, integrated numerically.
    """
    from scipy import integrate

    df = n_pairs - 1
    t_c, se = _t_crit(level, df), sd_log / math.sqrt(n_pairs)
    lo, up = math.log(1.0 - margin), math.log(1.0 + margin)
    q_max = df * ((up - lo) / (2.0 * t_c * se)) ** 2
    log_norm = -(df / 2.0) * math.log(2.0) - math.lgamma(df / 2.0)  # chi2(df) density, in closed form for speed

    def phi(z: float) -> float:
        return 0.5 * math.erfc(-z / math.sqrt(2.0))

    def inside(q: float) -> float:
        if q <= 0.0:
            return 0.0
        h = t_c * se * math.sqrt(q / df)
        density = math.exp(log_norm + (df / 2.0 - 1.0) * math.log(q) - q / 2.0)
        return density * (phi((up - h) / se) - phi((lo + h) / se))

    # Split the range at the chi2 bulk so that quad sees where the mass is.
    edges = sorted({0.0, min(q_max, max(df - 2.0, 0.0) + 1e-9), q_max})
    total = sum(integrate.quad(inside, a, b, limit=200)[0] for a, b in zip(edges, edges[1:]) if b > a)
    return min(1.0, max(0.0, total))


def pairs_for_equivalence(sd_log: float, level: float, margin: float, target: float) -> int | None:
    """Fewest pairs (>= 2) whose ``equivalence_probability`` reaches ``target``; None if a million do not.

    The probability rises with the number of pairs (both the spread of the mean and the t quantile shrink), so the
    smallest such number is found by doubling and then bisection."""
    def ok(n: int) -> bool:
        return equivalence_probability(n, sd_log, level, margin) >= target

    if ok(MIN_PAIRS):
        return MIN_PAIRS
    lo, hi = MIN_PAIRS, 4
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > _MAX_PAIRS_SEARCHED:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def design_for(
    n_pairs: int,
    *,
    cv: float,
    m_tests: int,
    alpha: float,
    margin: float,
    effect: float = 0.03,
    power: float = 0.8,
) -> PairedDesign:
    """What ``n_pairs`` window pairs can show when each window varies with coefficient of variation ``cv``.

    Assumptions: windows independent, log ratios normal with sd ``sqrt(2) * cv`` (two windows, each with sd of its log
    about ``cv``), no drift left after pairing, and the same B/A in every pair (a pooled set of pairs whose B/A differs
    between concurrencies has a larger spread, so this is the best case). The decision reads a family of ``m_tests``
    tests at family-wise ``alpha``:

    * ``detectable_change``: the smallest B/A change ``exp(delta) - 1`` a two-sided one-sample t test at the Holm
      first-step level ``alpha / m_tests`` detects with probability ``power``, from the noncentral t
      (``detectable_log_ratio``); later Holm steps test at up to ``alpha``, so this is the change the first-ranked
      metric needs;
    * ``power_at_effect``: the probability that test detects a B/A change of ``1 + effect``;
    * ``equivalence_probability``: the probability that the ``1 - alpha / m_tests`` interval of two exactly equal
      arms lies inside ``[1 - margin, 1 + margin]`` (``equivalence_probability``); ``equivalence_reachable`` when it
      is at least ``power``, and ``pairs_for_equivalence`` the fewest pairs for that;
    * ``min_achievable_p``: None. A t test has no floor on p: with 2 or more pairs p reaches any value above 0 when
      the pairs agree closely enough (unlike a rank test on a few runs, whose smallest p is fixed by the counts).
    """
    if n_pairs < MIN_PAIRS:
        raise ValueError(f"a design needs at least {MIN_PAIRS} pairs, got {n_pairs}")
    if not cv > 0 or m_tests < 1 or not 0 < alpha < 1 or not 0 < margin < 1 or not 0 < power < 1 or effect <= -1:
        raise ValueError(f"need cv > 0, m_tests >= 1, 0 < alpha, margin, power < 1 and effect > -1; got cv={cv}, "
                         f"m_tests={m_tests}, alpha={alpha}, margin={margin}, power={power}, effect={effect}")
    sd = math.sqrt(2.0) * cv
    level = alpha / m_tests
    df = n_pairs - 1
    t_c = _t_crit(level, df)
    delta = detectable_log_ratio(n_pairs, sd, level, power)
    p_eq = equivalence_probability(n_pairs, sd, level, margin)
    return PairedDesign(
        n_pairs=n_pairs, cv=cv, sd_log=sd, m_tests=m_tests, alpha=alpha, test_level=level, ci_level=1.0 - level,
        t_critical=t_c, power_target=power, detectable_change=math.exp(delta) - 1.0, effect=effect,
        power_at_effect=_t_power(abs(math.log1p(effect)) * math.sqrt(n_pairs) / sd, df, t_c), margin=margin,
        equivalence_probability=p_eq, equivalence_reachable=p_eq >= power,
        pairs_for_equivalence=pairs_for_equivalence(sd, level, margin, power),
        min_achievable_p=None,
        min_p_note=f"a t test has no smallest p: with {n_pairs} pairs p goes below any level when the pairs agree "
                   "closely enough",
        method=(f"log ratios ~ N(delta, (sqrt(2) * cv)^2), independent pairs, no drift; two-sided one-sample t test "
                f"at alpha / m = {level:.4g} ({df} df), power from the noncentral t (scipy.stats.nct); equivalence "
                f"from the {(1 - level) * 100:.4g} % t interval of equal arms against ±{margin:g}"),
    )

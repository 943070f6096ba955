"""The flag rule (``kernels/harness/compare.py``): "a flag voids only what it could change".

Under ``widen_ratio`` (a new screen's rule) a comparison whose flags are only timer disagreements keeps its verdict
when it still holds on the interval widened by the product of each flagged cell's timer ratio ``max(1 + d, 1 / (1 +
d))`` (``widen``, the rule before it: ``1 + |d|``); any other flag voids it;
INSUFFICIENT stays INSUFFICIENT. Under ``void`` (every receipt before the rule was recorded) any flag voids it. The
comparison carries its rule and widened interval, its validator checks both, re-deriving a result uses the rule it
records, and the decision's family reads the comparison's own verdict after the rule.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from evidence import archived

from infercrane.decide.kernel import (
    BaselineTiming,
    KernelDecisionInputs,
    ShapeResult,
    compare_timings,
    decide_kernel,
)
from infercrane.decide.policy import KernelPolicy, load_policy
from infercrane.kernels.harness.compare import (
    apply_flag_rule,
    comparison_policy,
    decision_inputs,
    with_comparisons,
)
from infercrane.kernels.receipt import derive
from infercrane.receipts.screen_result import Comparison, ScreenResult, WidenedInterval
from infercrane.receipts.models_v3 import DecodeStep
from infercrane.stats import Verdict
from infercrane.stats.trials import trial_speedup

# H200, five trials, timer disagreements on most graph-mode cells; the decision's reason quoted every flag (5 kB)
EXECUTOR = archived("2026-12-02-h200-executors/receipts.tar.xz/local-fused_add_rmsnorm.h200.json")
KERNEL_CUDA = archived("2026-12-01-h200-kernel-in-vllm/evidence-compiled-cuda.tar.xz/apply/kernel.json")

WOBBLE = (-1.0, -0.5, 0.0, 0.5, 1.0)
TD = "timer_disagreement: trial 4 median 1.2 us vs second timer 1.0 us (+20.0%, limit ±5%; events)"


def speedup(ratio: float, spread: float = 0.002, n: int = 5, margin: float = 0.02):
    base = [[ratio * math.exp(spread * w)] * 3 for w in WOBBLE[:n]]
    cand = [[1.0] * 3 for _ in range(n)]
    return trial_speedup(base, cand, list(range(n)), list(range(n)), confidence=0.95, same_margin=margin)


def cell(*flags: str, d: float | None = None) -> SimpleNamespace:
    """What the rule reads of a timing cell: its flags and its signed timer disagreement."""
    return SimpleNamespace(flags=list(flags), timer_disagreement=d)


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def _loaded(path: Path) -> tuple[dict, ScreenResult, KernelPolicy]:
    doc = _doc(path)
    return doc, ScreenResult.model_validate(doc["result"]), KernelPolicy.model_validate(doc["policy"])


# --------------------------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("ratio, d_cand, d_ref, verdict, holds", [
    (1.5, 0.12, 0.0, Verdict.FASTER, True),      # far above the band: survives a 12 % widening
    (1.05, 0.12, 0.0, Verdict.FASTER, False),    # 5 % faster: a 12 % widening reaches into the band
    (0.6, -0.10, 0.08, Verdict.SLOWER, True),    # the sign of d does not matter
    (1.0, 0.06, 0.0, Verdict.SAME, False),       # a SAME band of ±2 % cannot hold a 6 % widening
])
def test_timer_disagreements_widen_the_interval_and_keep_a_verdict_that_still_holds(ratio, d_cand, d_ref, verdict,
                                                                                    holds):
    sp = speedup(ratio)
    assert sp.verdict is verdict
    mine = cell(TD, d=d_cand) if d_cand else cell()
    theirs = cell(TD, d=d_ref) if d_ref else cell()
    got, widened = apply_flag_rule(sp, mine, theirs, "widen")
    k = (1 + abs(d_cand)) * (1 + abs(d_ref))
    assert widened is not None and widened.factor == pytest.approx(k)
    assert (widened.ci_lo, widened.ci_hi) == pytest.approx((sp.ci_lo / k, sp.ci_hi * k))
    assert widened.holds is holds and got is (verdict if holds else Verdict.FLAGGED)
    # the old rule voids it whatever its size
    assert apply_flag_rule(sp, mine, theirs, "void") == (Verdict.FLAGGED, None)
    assert apply_flag_rule(sp, mine, theirs, None) == (Verdict.FLAGGED, None)


@pytest.mark.parametrize("d", [-0.9, -0.3, 0.3, 2.0])
def test_widen_ratio_widens_by_the_ratio_of_the_two_timers_whichever_way(d):
    """A primary that reads 10x fast (d = -0.9) is known only within a factor 10; 'widen' took it for 1.9."""
    sp = speedup(7.5, spread=0.01)  # 7.5x faster by the primary timer
    got, widened = apply_flag_rule(sp, cell(TD, d=d), cell(), "widen_ratio")
    k = max(1 + d, 1 / (1 + d))
    assert widened.factor == pytest.approx(k)
    assert got is (Verdict.FASTER if sp.ci_lo / k > 1 + sp.same_margin else Verdict.FLAGGED)
    _, old = apply_flag_rule(sp, cell(TD, d=d), cell(), "widen")
    assert old.factor == pytest.approx(1 + abs(d)) and old.factor <= widened.factor + 1e-12
    if d == -0.9:
        assert got is Verdict.FLAGGED and old.holds  # the old rule kept "7.5x faster" on a timer 10x off
    assert apply_flag_rule(sp, cell(TD, d=-1.0), cell(), "widen_ratio") == (Verdict.FLAGGED, None)


def test_same_survives_a_small_widening_and_ambiguous_stays_ambiguous():
    same = speedup(1.0, spread=0.0, margin=0.05)
    assert same.verdict is Verdict.SAME
    v, w = apply_flag_rule(same, cell(TD, d=0.03), cell(), "widen")
    assert v is Verdict.SAME and w.holds and 0.95 <= w.ci_lo and w.ci_hi <= 1.05
    amb = speedup(1.02, spread=0.01)
    assert amb.verdict is Verdict.AMBIGUOUS
    v, w = apply_flag_rule(amb, cell(TD, d=0.4), cell(TD, d=-0.4), "widen")
    assert v is Verdict.AMBIGUOUS and w.holds  # widening cannot make it a claim, nor take one away


@pytest.mark.parametrize("other", [
    "below_floor: median 0.05 us < empty-kernel floor in graph mode 0.2 us: impossible",
    "no_second_timer: not run", "outputs_not_finite: the in-place buffers held NaN/inf after timing",
    "timer_fault: trial 2: the worker's samples add up to 10 us but InferCrane's clock saw 900 us",
    "something_new: a kind this rule does not know",
])
def test_any_other_flag_voids_the_comparison(other):
    sp = speedup(1.5)
    assert apply_flag_rule(sp, cell(other), cell(), "widen") == (Verdict.FLAGGED, None)
    assert apply_flag_rule(sp, cell(TD, d=0.01), cell(other), "widen") == (Verdict.FLAGGED, None)  # mixed: voided


def test_insufficient_stays_insufficient_and_a_disagreement_without_its_figure_voids():
    few = speedup(1.5, n=2)
    assert few.verdict is Verdict.INSUFFICIENT
    for flags in ((TD,), ("below_floor: x",)):
        assert apply_flag_rule(few, cell(*flags, d=0.2), cell(), "widen") == (Verdict.INSUFFICIENT, None)
    assert apply_flag_rule(few, cell(TD, d=0.2), cell(), "void") == (Verdict.FLAGGED, None)
    assert apply_flag_rule(speedup(1.5), cell(TD, d=None), cell(), "widen") == (Verdict.FLAGGED, None)
    with pytest.raises(ValueError, match="unknown flag rule"):
        apply_flag_rule(speedup(1.5), cell(), cell(), "shrink")


# --------------------------------------------------------------------------------------------- the comparison


def _comparison(sp, flags, verdict, rule, widened=None):
    return Comparison(candidate="user", reference="eager", reference_kind="baseline", rows=8, mode="graph",
                      speedup=sp, flags=flags, verdict=verdict, flag_rule=rule, widened=widened)


def test_a_comparison_validates_its_verdict_under_its_own_rule():
    sp = speedup(1.5)
    flags = [f"user: {TD}"]
    w = WidenedInterval.of(sp, 1.2)
    assert _comparison(sp, flags, Verdict.FASTER, "widen", w).flag_kinds() == ["timer_disagreement"]
    # under 'widen', a verdict the widened interval does not hold must be FLAGGED, and a kept one must be kept
    lost = WidenedInterval.of(speedup(1.05), 1.2)
    assert not lost.holds
    _comparison(speedup(1.05), flags, Verdict.FLAGGED, "widen", lost)
    with pytest.raises(ValidationError, match="expected FLAGGED"):
        _comparison(speedup(1.05), flags, Verdict.FASTER, "widen", lost)
    with pytest.raises(ValidationError, match="expected FASTER"):
        _comparison(sp, flags, Verdict.FLAGGED, "widen", w)
    # a widened interval that does not follow from the speedup and its factor
    with pytest.raises(ValidationError, match="does not follow"):
        _comparison(sp, flags, Verdict.FASTER, "widen", w.model_copy(update={"ci_lo": w.ci_lo * 1.5}))
    # an old receipt's comparison (no rule: 'void'): any flag is FLAGGED, and nothing is widened
    _comparison(sp, flags, Verdict.FLAGGED, None)
    with pytest.raises(ValidationError, match="expected FLAGGED"):
        _comparison(sp, flags, Verdict.FASTER, None)
    with pytest.raises(ValidationError, match="only widen and widen_ratio widen"):
        _comparison(sp, flags, Verdict.FLAGGED, "void", w)
    # another kind cannot be widened away
    floor = ["eager: below_floor: impossible"]
    with pytest.raises(ValidationError, match="only timer disagreements"):
        _comparison(sp, floor, Verdict.FASTER, "widen", w)
    _comparison(sp, floor, Verdict.FLAGGED, "widen")
    # INSUFFICIENT stays INSUFFICIENT under 'widen', is FLAGGED under 'void'
    few = speedup(1.5, n=2)
    _comparison(few, floor, Verdict.INSUFFICIENT, "widen")
    _comparison(few, floor, Verdict.FLAGGED, None)


# --------------------------------------------------------------------------------------------- a screen's result


def test_every_committed_receipt_re_derives_under_the_rule_it_records():
    """No rule recorded: 'void', and re-deriving leaves the comparisons and their record exactly as they were."""
    doc, res, pol = _loaded(EXECUTOR)
    assert "flag_rule" not in res.comparison_policy
    again = with_comparisons(res, pol)
    def key(c: dict) -> tuple:
        return (c["candidate"], c["reference"], c["rows"], c["mode"], c["flags"], c["verdict"],
                (c.get("family") or {}).get("verdict"), c["speedup"]["verdict"])

    assert [key(c.model_dump(mode="json")) for c in again.comparisons] == \
        [key(c) for c in doc["result"]["comparisons"]]
    assert sum(c.verdict is Verdict.FLAGGED for c in again.comparisons) > 50
    assert again.comparison_policy == doc["result"]["comparison_policy"]
    assert all(c.flag_rule is None and c.widened is None for c in again.comparisons)


def test_a_new_screen_records_widen_and_re_deriving_it_keeps_widen():
    doc, res, pol = _loaded(EXECUTOR)
    widened = with_comparisons(res, pol, flag_rule="widen")
    assert widened.comparison_policy == comparison_policy(pol, "widen") and \
        widened.comparison_policy["flag_rule"] == "widen"
    assert all(c.flag_rule == "widen" for c in widened.comparisons)
    cells = {(i.key, c.rows, c.mode): c for i in res.implementations for c in i.timings}
    kept = lost = 0
    for c in widened.comparisons:
        if not c.flags:
            assert c.widened is None and c.verdict is c.speedup.verdict
            continue
        assert set(c.flag_kinds()) == {"timer_disagreement"}  # this screen's only kind
        mine, theirs = cells[(c.candidate, c.rows, c.mode)], cells[(c.reference, c.rows, c.mode)]
        k = (1 + (abs(mine.timer_disagreement) if mine.flags else 0)) * \
            (1 + (abs(theirs.timer_disagreement) if theirs.flags else 0))
        assert c.widened is not None and c.widened.factor == pytest.approx(k)
        assert c.verdict is (c.speedup.verdict if c.widened.holds else Verdict.FLAGGED)
        kept += c.widened.holds
        lost += not c.widened.holds
    assert kept and lost  # on this H200 screen some verdicts survive the widening and some do not
    # validation and `kernel decide` call with_comparisons without a rule: the recorded one is used
    again = with_comparisons(widened, pol)
    assert again.comparisons == widened.comparisons and again.comparison_policy == widened.comparison_policy
    # and the void rule, asked for, is recorded as such
    assert with_comparisons(res, pol, flag_rule="void").comparison_policy["flag_rule"] == "void"


def test_the_decision_family_reads_the_comparison_s_own_verdict_after_the_rule():
    _, res, pol = _loaded(EXECUTOR)
    widened = with_comparisons(res, pol, flag_rule="widen")
    inputs = decision_inputs(widened, "triton", policy=pol)
    by = {(c.reference, c.rows, c.mode): c for c in widened.comparisons if c.candidate == "triton"}
    timings = [(s.rows, t) for s in inputs.shapes for t in s.timings]
    assert timings and all(t.verdict is by[(t.baseline, rows, t.timing_mode)].verdict for rows, t in timings)
    assert any(t.flags and t.verdict is not Verdict.FLAGGED and t.widened_by for _, t in timings)
    d = decide_kernel(inputs, pol)
    for s in d.shapes:
        for c in s.comparisons:
            mark = by[(c.baseline, s.rows, pol.timing_mode)].family
            assert c.verdict is by[(c.baseline, s.rows, pol.timing_mode)].verdict
            if c.in_family:  # the decision's Holm and the receipt's family marks agree
                assert c.family_verdict is mark.verdict and c.p_slower_holm == mark.p_slower_holm
    assert d.family.tested == next(c.family.tested for c in widened.comparisons
                                   if c.candidate == "triton" and c.family)
    # under 'void' the same screen had fewer comparisons with a verdict
    assert decide_kernel(decision_inputs(res, "triton", policy=pol), pol).family.tested < d.family.tested


def test_a_kept_verdict_counts_in_the_decision_and_a_flag_without_one_blocks_it():
    pol = load_policy("kernel")

    def t(baseline, ratio, **kw):
        base = compare_timings(baseline, "graph", [[ratio * math.exp(0.002 * w)] * 3 for w in WOBBLE],
                               [[1.0] * 3] * 5, list(range(5)), list(range(5)), policy=pol)
        return BaselineTiming(**(base.model_dump() | kw))

    flag = [f"torch_compile: {TD}"]
    kept = t("torch_compile", 2.0, flags=flag, verdict=Verdict.FASTER, timer_disagreement=0.2, widened_by=1.2)
    shapes = [ShapeResult(rows=r, correct=True, timings=[t("eager", 3.0), kept, t("vllm_vendor", 2.0)])
              for r in (1, 8)]
    d = decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes), pol)
    assert d.decision == "retain" and "faster than the best baseline at every shape" in d.reason
    assert d.family.tested == d.family.size == 6
    # the same flag without the comparison's verdict: the old reading, FLAGGED
    old = [ShapeResult(rows=s.rows, correct=True, timings=[t("eager", 3.0), t("torch_compile", 2.0, flags=flag),
                                                         t("vllm_vendor", 2.0)]) for s in shapes]
    d = decide_kernel(KernelDecisionInputs(candidate="c", shapes=old), pol)
    assert d.decision == "inconclusive" and d.family.tested == 4
    # a verdict the comparison could not have
    with pytest.raises(ValidationError, match="its speedup's"):
        t("eager", 3.0, verdict=Verdict.SLOWER)
    with pytest.raises(ValidationError, match="only a comparison whose interval was widened"):
        t("torch_compile", 2.0, flags=flag, verdict=Verdict.FASTER)


# --------------------------------------------------------------------------------------------- the reason


def test_the_reason_counts_flagged_comparisons_and_names_their_kinds():
    doc, res, pol = _loaded(EXECUTOR)
    assert len(doc["reason"]) > 5000 and doc["reason"].count("timer_disagreement") > 10  # as committed, every flag
    step = DecodeStep.model_validate(doc["decode_step"]) if doc.get("decode_step") else None
    new = derive(with_comparisons(res, pol, flag_rule="widen"), pol, step)
    reasons = [new["reason"]] + [o["reason"] for o in new["other_candidates"]]
    assert all(len(r) < 1200 for r in reasons), [len(r) for r in reasons]
    assert all(r.count("timer_disagreement") <= 3 for r in reasons)
    assert ("no verdict against torch.compile at rows 1, 8, 32, 128, 512 (flagged: 5 comparisons; "
            "timer_disagreement up to 18.0 %; 5 of them lost their verdict on the interval widened by the timers' "
            "disagreement)") in " ".join(reasons)
    # the receipt keeps every flag, in its comparisons
    assert sum(len(c["flags"]) for c in doc["result"]["comparisons"]) > 50


def test_flagged_kinds_and_the_largest_disagreement():
    pol = load_policy("kernel")

    def t(baseline, flags, d=None):
        base = compare_timings(baseline, "graph", [[2.0 * math.exp(0.002 * w)] * 3 for w in WOBBLE],
                               [[1.0] * 3] * 5, list(range(5)), list(range(5)), policy=pol)
        return BaselineTiming(**(base.model_dump() | {"flags": flags, "verdict": Verdict.FLAGGED,
                                                      "timer_disagreement": d}))

    shapes = [
        ShapeResult(rows=1, correct=True, timings=[
            t("eager", []), t("torch_compile", [f"user: {TD}"], d=0.182), t("vllm_vendor", [])]),
        ShapeResult(rows=8, correct=True, timings=[
            t("eager", []), t("torch_compile", [f"user: {TD}", "torch_compile: below_floor: impossible"], d=0.07),
            t("vllm_vendor", [])]),
    ]
    d = decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes), pol)
    assert ("no verdict against torch.compile at rows 1, 8 (flagged: 2 comparisons; timer_disagreement up to "
            "18.2 %, below_floor)") in d.reason
    assert "impossible" not in d.reason
    # a receipt from before the rule (flag_rule None) quotes them as it did, so that it decides again to the letter
    old = decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes, flag_rule=None), pol)
    assert f"flagged: user: {TD}" in old.reason and "below_floor: impossible" in old.reason

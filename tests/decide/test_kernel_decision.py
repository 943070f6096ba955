import math

import numpy as np
import pytest
from pydantic import ValidationError

from infercrane.decide import (
    BaselineTiming,
    KernelDecisionInputs,
    KernelPolicy,
    ShapeResult,
    SkippedBaseline,
    amdahl_ceiling,
    compare_timings,
    decide_kernel,
    load_policy,
)
from infercrane.errors import InputError
from infercrane.stats import Verdict

RETAIN = "retain as a correct kernel candidate, but do not integrate into serving yet"


def policy(**update) -> KernelPolicy:
    return KernelPolicy.model_validate(load_policy("kernel").model_dump() | update)


# Per-trial wobble of the speedup around its value, mean zero in log space: 5 trials give a 95 percent t interval of
# about ±spread around the point.
WOBBLE = (-1.0, -0.5, 0.0, 0.5, 1.0)


def timing(baseline, candidate_t_us, baseline_t_us, spread=0.002, mode="graph", confidence=0.95, n_trials=5,
           flags=()):
    """Trial-level timing of the candidate against ``baseline`` with a known speedup baseline_t_us / candidate_t_us."""
    wobble = WOBBLE if n_trials == 5 else tuple(range(n_trials))
    base = [[baseline_t_us * math.exp(spread * w)] * 3 for w in wobble[:n_trials]]
    cand = [[candidate_t_us] * 3 for _ in range(n_trials)]
    return compare_timings(baseline, mode, base, cand, list(range(n_trials)), list(range(n_trials)),
                           policy=policy(confidence=confidence), flags=list(flags))


def fast_shapes(rows=(1, 8, 32), candidate_t_us=0.95, best_t_us=1.0):
    return [
        ShapeResult(rows=r, correct=True, timings=[
            timing("eager", candidate_t_us, 3.0),
            timing("torch_compile", candidate_t_us, best_t_us),
            timing("vllm_vendor", candidate_t_us, best_t_us * 1.05),
        ])
        for r in rows
    ]


def ceiling(candidate_t_us, baseline_t_us, decode_step_ms, rows=1):
    return amdahl_ceiling(
        calls_per_step=56, candidate_t_us=candidate_t_us, baseline_t_us=baseline_t_us, baseline="torch_compile",
        decode_step_ms=decode_step_ms, decode_step_source="user: --decode-step-ms", rows=rows, timing_mode="graph",
    )


# Seed receipt 001 (H100, graph-free timings there; here labelled graph): cuda_ms, triton_ms, vllm_vendor_ms.
SEED_001 = {
    1: (0.0063238095, 0.0057315490, 0.0061709504),
    8: (0.0062146404, 0.0057071985, 0.0059874664),
    32: (0.0062647089, 0.0056925958, 0.0061256776),
    128: (0.0065897802, 0.0060422572, 0.0064790368),
    512: (0.0080932022, 0.0071286684, 0.0071722340),
}


def test_incorrect_shape_rejects_whatever_the_speed():
    shapes = fast_shapes()
    shapes[1] = ShapeResult(rows=8, correct=False, correctness_detail="max abs err 0.31 > 0.016 at index (0, 5)")
    d = decide_kernel(KernelDecisionInputs(candidate="Triton candidate", shapes=shapes))
    assert d.decision == "reject"
    assert d.decision_text == "reject Triton candidate for serving integration"
    assert d.reason.startswith("incorrect on 1 of 3 shapes (rows 8): rows 8: max abs err 0.31")


def test_slower_than_seed_baselines_rejects_with_percent_ranges():
    shapes = [
        ShapeResult(rows=r, correct=True, timings=[
            timing("triton", cuda * 1e3, triton * 1e3), timing("vllm_vendor", cuda * 1e3, vendor * 1e3),
        ])
        for r, (cuda, triton, vendor) in SEED_001.items()
    ]
    d = decide_kernel(
        KernelDecisionInputs(candidate="handwritten CUDA candidate", shapes=shapes),
        policy(counted_baselines=["triton", "vllm_vendor"]),
    )
    assert d.decision == "reject"
    assert d.decision_text == "reject handwritten CUDA candidate for serving integration"
    assert d.reason.startswith(
        "correct on every shape, but 8.9-13.5 percent slower than the Triton candidate and "
        "2.5-12.8 percent slower than the vLLM vendor kernel at rows 1, 8, 512"
    )
    at_128 = next(s for s in d.shapes if s.rows == 128)
    vendor_128 = next(c for c in at_128.comparisons if c.baseline == "vllm_vendor")
    assert vendor_128.verdict is Verdict.SAME  # 1.7 percent slower is inside the ±2 percent band
    assert at_128.best_baseline == "triton"
    # 2.3 percent slower at rows 32: just beyond the band by its own interval, not after Holm over 10 comparisons
    vendor_32 = next(c for s in d.shapes if s.rows == 32 for c in s.comparisons if c.baseline == "vllm_vendor")
    assert vendor_32.verdict is Verdict.SLOWER and vendor_32.family_verdict is Verdict.AMBIGUOUS
    assert vendor_32.p_slower_holm > vendor_32.speedup.p_slower
    assert (d.family.size, d.family.tested, d.family.rows) == (10, 10, [1, 8, 32, 128, 512])
    assert (d.family.adjustment, d.family.alpha, d.family.baselines) == ("holm", pytest.approx(0.05),
                                                                         ["triton", "vllm_vendor"])
    assert "family: 10 comparisons (the Triton candidate, the vLLM vendor kernel at rows 1, 8, 32, 128, 512, graph" \
           " timing); 'slower than a baseline somewhere' is Holm-adjusted" in d.reason


def test_faster_but_small_ceiling_retains():
    inputs = KernelDecisionInputs(
        candidate="Triton candidate", shapes=fast_shapes(), ceilings=[ceiling(0.95, 1.0, 3.0, 1), ceiling(0.95, 1.0, 2.0, 8)],
    )
    d = decide_kernel(inputs)
    assert d.decision == "retain" and d.decision_text == RETAIN
    assert "the isolated win is only 50 ns per call (5.0 percent faster than the best baseline at every shape)" in d.reason
    assert "the optimistic decode Amdahl ceiling is about 1.9-2.9 percent" in d.reason
    assert "below the policy's 1 percent" in d.reason


def test_faster_and_large_ceiling_accepts():
    inputs = KernelDecisionInputs(
        candidate="Triton candidate", shapes=fast_shapes(candidate_t_us=0.5), ceilings=[ceiling(0.5, 1.0, 0.4)],
    )
    d = decide_kernel(inputs)
    assert d.decision == "accept"
    assert d.decision_text == "accept Triton candidate for serving integration"
    assert "expected end-to-end gain 7.53 percent, at least the policy's 1 percent" in d.reason


def test_faster_only_at_some_shapes_retains():
    shapes = fast_shapes(rows=(1, 8))
    shapes.append(ShapeResult(rows=512, correct=True, timings=[
        timing("eager", 1.0, 3.0), timing("torch_compile", 1.0, 1.005), timing("vllm_vendor", 1.0, 1.2),
    ]))
    d = decide_kernel(KernelDecisionInputs(candidate="Triton candidate", shapes=shapes, ceilings=[ceiling(0.5, 1.0, 0.4)]))
    assert d.decision == "retain"
    assert "faster than the best baseline at rows 1, 8, but the candidate does not consistently beat torch.compile" in d.reason
    assert "same within ±2 percent as torch.compile at rows 512" in d.reason


def test_same_everywhere_rejects_as_no_measurable_gain():
    shapes = fast_shapes(candidate_t_us=0.995)
    d = decide_kernel(KernelDecisionInputs(candidate="Triton candidate", shapes=shapes))
    assert d.decision == "reject"
    assert "no measurable gain" in d.reason and "same within ±2 percent as torch.compile at rows 1, 8, 32" in d.reason


def test_skipped_counted_baseline_blocks_accept_and_is_named():
    shapes = [
        ShapeResult(rows=r, correct=True, timings=[timing("eager", 0.5, 3.0), timing("torch_compile", 0.5, 1.0)])
        for r in (1, 8)
    ]
    inputs = KernelDecisionInputs(
        candidate="Triton candidate", shapes=shapes, ceilings=[ceiling(0.5, 1.0, 0.4)],
        skipped_baselines=[SkippedBaseline(baseline="vllm_vendor", reason="vllm not importable")],
    )
    d = decide_kernel(inputs)
    assert d.decision == "retain"
    assert "the vLLM vendor kernel skipped (vllm not importable)" in d.reason


def test_no_ceiling_retains():
    d = decide_kernel(KernelDecisionInputs(candidate="Triton candidate", shapes=fast_shapes(candidate_t_us=0.5)))
    assert d.decision == "retain" and "end-to-end Amdahl ceiling is unknown" in d.reason


def test_only_policy_mode_counts():
    shapes = [
        ShapeResult(rows=1, correct=True, timings=[
            timing(b, 0.5, t, mode="launch") for b, t in (("eager", 3.0), ("torch_compile", 1.0), ("vllm_vendor", 1.0))
        ])
    ]
    with pytest.raises(InputError, match="decides on 'graph' timings, but the inputs hold none"):
        decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes))
    assert decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes), policy(timing_mode="launch")).timing_mode == "launch"


def test_missing_counted_baseline_and_confidence_mismatch_are_input_errors():
    shapes = [ShapeResult(rows=1, correct=True, timings=[timing("eager", 0.5, 3.0)])]
    with pytest.raises(InputError, match=r"neither measured nor skipped"):
        decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes))
    shapes = [ShapeResult(rows=1, correct=True, timings=[timing("eager", 0.5, 3.0, confidence=0.9)])]
    with pytest.raises(InputError, match="confidence 0.9"):
        decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes), policy(counted_baselines=["eager"]))


def test_margin_mismatch_is_an_input_error():
    shapes = [ShapeResult(rows=1, correct=True, timings=[timing("eager", 0.5, 3.0)])]
    with pytest.raises(InputError, match=r"SAME band ±0.02, but the policy decides at 0.95 and ±0.05"):
        decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes), policy(counted_baselines=["eager"],
                                                                                  same_margin=0.05))


def test_compare_timings_from_trials():
    rng = np.random.default_rng(42)
    trial_effect = rng.lognormal(0.0, 0.02, (5, 1))  # between-trial spread, shared by both in a round
    baseline_us = (trial_effect * rng.lognormal(np.log(1.0), 0.01, (5, 20))).tolist()
    candidate_us = (trial_effect * rng.lognormal(np.log(0.8), 0.01, (5, 20))).tolist()
    t = compare_timings("torch_compile", "graph", baseline_us, candidate_us, range(5), range(5),
                        policy=load_policy("kernel"))
    assert t.speedup.ratio == pytest.approx(1.25, rel=0.01) and t.speedup.ci_lo > 1.02
    assert t.speedup.verdict is Verdict.FASTER and t.speedup.n_trials == 5
    medians = np.median(candidate_us, axis=1)
    assert t.candidate_t_us == pytest.approx(float(np.exp(np.mean(np.log(medians)))))
    assert t.speedup.ratio == pytest.approx(t.baseline_t_us / t.candidate_t_us, rel=1e-12)


# --------------------------------------------------------------------------------------------- decision rows


def test_bandwidth_rows_are_reported_but_not_decided_on_by_default():
    shapes = fast_shapes(rows=(1, 8), candidate_t_us=0.5)
    shapes.append(ShapeResult(rows=4096, correct=True, timings=[  # 20 percent slower than torch.compile at prefill
        timing("eager", 12.0, 30.0), timing("torch_compile", 12.0, 10.0), timing("vllm_vendor", 12.0, 10.5),
    ]))
    inputs = KernelDecisionInputs(candidate="Triton candidate", shapes=shapes, ceilings=[ceiling(0.5, 1.0, 0.4)])
    d = decide_kernel(inputs)
    assert d.decision == "accept"
    assert "percent faster than the best baseline at every decision row" in d.reason
    assert "rows 4096 are measured but not decided on (above 512 rows)" in d.reason
    assert d.family.rows == [1, 8] and d.family.size == 6 and d.family.reported_rows == [4096]
    big = next(s for s in d.shapes if s.rows == 4096)
    assert not big.in_decision and all(not c.in_family and c.family_verdict is None for c in big.comparisons)
    assert next(c for c in big.comparisons if c.baseline == "torch_compile").verdict is Verdict.SLOWER  # reported
    d = decide_kernel(inputs, policy(decide_on_bandwidth_rows=True))
    assert d.decision == "reject" and "slower than torch.compile at rows 4096" in d.reason


def test_bandwidth_rows_still_count_for_correctness():
    shapes = fast_shapes(rows=(1, 8), candidate_t_us=0.5)
    shapes.append(ShapeResult(rows=4096, correct=False, correctness_detail="max abs err 0.5 at index (4095, 0)"))
    d = decide_kernel(KernelDecisionInputs(candidate="Triton candidate", shapes=shapes))
    assert d.decision == "reject" and d.reason.startswith("incorrect on 1 of 3 shapes (rows 4096)")


def test_no_decision_row_is_inconclusive():
    shapes = [ShapeResult(rows=4096, correct=True, timings=[
        timing("eager", 5.0, 30.0), timing("torch_compile", 5.0, 10.0), timing("vllm_vendor", 5.0, 10.5)])]
    d = decide_kernel(KernelDecisionInputs(candidate="Triton candidate", shapes=shapes))
    assert d.decision == "inconclusive" and d.decision_text == "no decision on Triton candidate for serving integration"
    assert "none of rows 4096 is a decision row" in d.reason and d.family.size == 0


# --------------------------------------------------------------------------------------------- family control


def _marginal(baseline="eager"):
    """About 3 percent slower, one-sided p_slower near 0.011: SLOWER alone, not among four such after Holm."""
    t = timing(baseline, 1.0, 0.97, spread=0.008)
    assert t.speedup.verdict is Verdict.SLOWER and 0.025 / 4 < t.speedup.p_slower < 0.025 / 2
    return t


def test_one_marginal_slowdown_rejects_but_four_do_not_survive_holm():
    eager_only = policy(counted_baselines=["eager"])
    fast = [ShapeResult(rows=r, correct=True, timings=[timing("eager", 0.5, 3.0)]) for r in (1, 8)]
    one = decide_kernel(KernelDecisionInputs(candidate="c", shapes=[
        ShapeResult(rows=32, correct=True, timings=[_marginal()])]), eager_only)
    assert one.decision == "reject" and "percent slower than eager PyTorch (graph timing" in one.reason
    assert one.family.size == 1 and one.shapes[0].comparisons[0].p_slower_holm == one.shapes[0].comparisons[0].speedup.p_slower

    # Every comparison of the family is a chance to read "slower" wrongly, the clearly faster ones included
    # (their p_slower is near 1, and they still count in m).

    four = decide_kernel(KernelDecisionInputs(candidate="c", shapes=fast + [
        ShapeResult(rows=r, correct=True, timings=[_marginal()]) for r in (32, 64, 128, 256)]), eager_only)
    assert four.decision == "retain"
    assert ("slower than eager PyTorch by its own interval but not after the Holm adjustment at rows 32, 64, 128, "
            "256") in four.reason
    marginal = [c for s in four.shapes if s.rows >= 32 for c in s.comparisons]
    assert all(c.verdict is Verdict.SLOWER and c.family_verdict is Verdict.AMBIGUOUS for c in marginal)
    assert all(c.p_slower_holm == pytest.approx(6 * c.speedup.p_slower) for c in marginal)
    assert four.family.size == 6 and four.family.tail_alpha == pytest.approx(0.025)


# --------------------------------------------------------------------------------------------- no verdict


def test_a_flagged_comparison_blocks_accept_and_is_quoted():
    shapes = fast_shapes(candidate_t_us=0.5)
    flag = "user: timer_disagreement: events 0.50 us vs do_bench_cudagraph 0.71 us"
    shapes[1] = ShapeResult(rows=8, correct=True, timings=[
        timing("eager", 0.5, 3.0), timing("torch_compile", 0.5, 1.0, flags=[flag]), timing("vllm_vendor", 0.5, 1.05),
    ])
    d = decide_kernel(KernelDecisionInputs(candidate="Triton candidate", shapes=shapes, ceilings=[ceiling(0.5, 1.0, 0.4)]))
    assert d.decision == "retain"
    assert "it is not shown to beat every counted baseline at every decision row" in d.reason
    # the reason counts and names the flags' kinds; every flag stays in the receipt's comparisons
    assert "no verdict against torch.compile at rows 8 (flagged: 1 comparison; timer_disagreement)" in d.reason
    assert flag not in d.reason
    flagged = next(c for s in d.shapes if s.rows == 8 for c in s.comparisons if c.baseline == "torch_compile")
    assert flagged.verdict is flagged.family_verdict is Verdict.FLAGGED and flagged.p_slower_holm is None
    assert flagged.speedup.verdict is Verdict.FASTER  # the numbers alone would have said so
    assert d.family.size == 9 and d.family.tested == 8 and "9 comparisons, 8 with a verdict" in d.reason


def test_everything_flagged_or_too_few_trials_is_inconclusive():
    flag = "user: below_floor: 0.05 us < graph floor 0.21 us"
    flagged = [ShapeResult(rows=r, correct=True, timings=[
        timing(b, 0.5, t, flags=[flag]) for b, t in (("eager", 3.0), ("torch_compile", 1.0), ("vllm_vendor", 1.0))])
        for r in (1, 8)]
    d = decide_kernel(KernelDecisionInputs(candidate="c", shapes=flagged))
    assert d.decision == "inconclusive" and "support no speed claim at rows 1, 8" in d.reason
    assert "no verdict against eager PyTorch at rows 1, 8 (flagged: 2 comparisons; below_floor)" in d.reason
    few = [ShapeResult(rows=1, correct=True, timings=[
        timing(b, 0.5, t, n_trials=2) for b, t in (("eager", 3.0), ("torch_compile", 1.0), ("vllm_vendor", 1.0))])]
    d = decide_kernel(KernelDecisionInputs(candidate="c", shapes=few))
    assert d.decision == "inconclusive"
    assert "no verdict against eager PyTorch at rows 1 (2 paired trials; a between-trial interval needs at least 3)" \
        in d.reason
    assert all(c.verdict is Verdict.INSUFFICIENT for c in d.shapes[0].comparisons)


def test_same_at_one_row_and_flagged_at_the_other_is_inconclusive_not_reject():
    flag = "user: timer_disagreement: 12 percent"
    shapes = [
        ShapeResult(rows=1, correct=True, timings=[
            timing("eager", 0.995, 3.0), timing("torch_compile", 0.995, 1.0), timing("vllm_vendor", 0.995, 1.2)]),
        ShapeResult(rows=8, correct=True, timings=[
            timing("eager", 0.5, 3.0), timing("torch_compile", 0.5, 1.0, flags=[flag]), timing("vllm_vendor", 0.5, 1.2)]),
    ]
    d = decide_kernel(KernelDecisionInputs(candidate="c", shapes=shapes))
    assert d.decision == "inconclusive" and "support no speed claim at rows 8" in d.reason
    assert "same within ±2 percent as torch.compile at rows 1" in d.reason

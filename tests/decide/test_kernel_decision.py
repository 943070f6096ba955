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


def timing(baseline, candidate_t_us, baseline_t_us, ci_half_width=0.002, mode="graph", confidence=0.95):
    s = baseline_t_us / candidate_t_us
    return BaselineTiming(
        baseline=baseline, timing_mode=mode, candidate_t_us=candidate_t_us, baseline_t_us=baseline_t_us,
        speedup=s, speedup_ci_lo=s * (1 - ci_half_width), speedup_ci_hi=s * (1 + ci_half_width),
        confidence=confidence,
    )


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
        "2.3-12.8 percent slower than the vLLM vendor kernel at rows 1, 8, 32, 512"
    )
    at_128 = next(s for s in d.shapes if s.rows == 128)
    vendor_128 = next(c for c in at_128.comparisons if c.baseline == "vllm_vendor")
    assert vendor_128.verdict is Verdict.SAME  # 1.7 percent slower is inside the ±2 percent band
    assert at_128.best_baseline == "triton"


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


def test_inconsistent_timing_is_rejected():
    with pytest.raises(ValidationError, match="is not baseline_t_us / candidate_t_us"):
        BaselineTiming(
            baseline="eager", timing_mode="graph", candidate_t_us=1.0, baseline_t_us=2.0, speedup=1.5,
            speedup_ci_lo=1.4, speedup_ci_hi=1.6, confidence=0.95,
        )


def test_compare_timings_from_samples():
    rng = np.random.default_rng(42)
    baseline_us = rng.lognormal(np.log(1.0), 0.01, 300)
    candidate_us = rng.lognormal(np.log(0.8), 0.01, 300)
    t = compare_timings("torch_compile", "graph", baseline_us, candidate_us, policy=load_policy("kernel"))
    assert t.speedup == pytest.approx(1.25, rel=0.01) and t.speedup_ci_lo > 1.02
    assert t.candidate_t_us == pytest.approx(float(np.median(candidate_us)))

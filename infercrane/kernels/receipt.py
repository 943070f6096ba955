"""From a screen's raw result to a decision and an ``infercrane.cuda-kernel-screening-receipt/v2`` document.

Each candidate (ours, and the user's) is decided with the kernel policy (``infercrane.decide.kernel``). The receipt's
``candidate`` is the user's when one was screened, otherwise the best-decided of ours; the others go to
``other_candidates``. The decision table (``measurements``) holds medians in the policy's timing mode, in ms per call
as the seed format has them; every raw sample stays under ``timings``.
"""
from __future__ import annotations

import math
from typing import Any

from ..decide.amdahl import AmdahlCeiling, amdahl_ceiling
from ..decide.kernel import KernelDecision, decide_kernel
from ..decide.policy import KernelPolicy
from ..receipts.models_v2 import IMPL_KEYS, SCREENING_V2
from .harness.compare import decision_inputs
from .harness.runner import ImplementationResult, ScreenResult
from .ops.fused_add_rmsnorm.spec import OPERATOR, FusedAddRMSNormSpec

# Decode batches are small; larger row counts are prefill-like and get no decode ceiling.
DECODE_MAX_ROWS = 512
CANDIDATE_PHRASES = {"triton": "Triton candidate", "cuda": "handwritten CUDA candidate", "user": "user candidate"}
IMPLEMENTATION_NAMES = {"triton": "Triton kernel (InferCrane)", "cuda": "handwritten CUDA C++ compiled with NVRTC",
                        "user": "user candidate"}
DECISION_RANK = {"accept": 0, "retain": 1, "inconclusive": 2, "reject": 3}
QUALIFICATION_BOUNDARY = ("operator microbenchmark only; the end-to-end figures are Amdahl estimates from the op's "
                          "share of a decode step, not a serving measurement")
FUNCTIONAL_BOUNDARY = ("functional check on a CPU-only machine: correctness against the float32 oracle only; no "
                       "timing, so no speed or end-to-end claim")


def _impl(result: ScreenResult, key: str) -> ImplementationResult | None:
    return next((i for i in result.implementations if i.key == key), None)


def _cell_samples(impl: ImplementationResult, rows: int, mode: str) -> list[float] | None:
    for cell in impl.timings:
        if cell.rows == rows and cell.mode == mode:
            return cell.kept_samples_us if cell.summary_over == "kept" else [s for b in cell.blocks for s in b.samples_us]
    return None


def candidates_of(result: ScreenResult) -> list[str]:
    return [i.key for i in result.implementations if i.kind == "candidate"]


def ceilings_for(result: ScreenResult, key: str, spec: FusedAddRMSNormSpec, policy: KernelPolicy,
                 decode_step_ms: float | None, decode_step_source: str | None) -> list[AmdahlCeiling]:
    """One Amdahl ceiling per decode shape, against the fastest counted baseline measured there."""
    if decode_step_ms is None or spec.calls_per_decode_step is None or result.run_kind != "timed":
        return []
    impl = _impl(result, key)
    out = []
    for rows in (r for r in result.rows if r <= DECODE_MAX_ROWS):
        mine = _cell_samples(impl, rows, policy.timing_mode) if impl else None
        if not mine:
            continue
        best: tuple[float, str] | None = None
        for b in result.implementations:
            if b.key not in policy.counted_baselines or b.status != "ok":
                continue
            theirs = _cell_samples(b, rows, policy.timing_mode)
            if theirs:
                t = _median(theirs)
                best = min(best, (t, b.key)) if best else (t, b.key)
        if best is None:
            continue
        out.append(amdahl_ceiling(calls_per_step=spec.calls_per_decode_step, candidate_t_us=_median(mine),
                                  baseline_t_us=best[0], baseline=best[1], decode_step_ms=decode_step_ms,
                                  decode_step_source=decode_step_source or "user", rows=rows,
                                  timing_mode=policy.timing_mode))
    return out


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def _functional_decision(result: ScreenResult, key: str) -> tuple[str, str, str]:
    impl = _impl(result, key)
    phrase = CANDIDATE_PHRASES.get(key, key)
    if impl is None or impl.status == "skipped":
        return "inconclusive", f"no decision on the {phrase}", f"skipped: {impl.skip_reason if impl else 'not run'}"
    bad = [c for c in impl.correctness if not c.passed]
    if impl.status == "failed" or bad:
        why = "; ".join(c.failure_summary() for c in bad) or impl.error or "failed"
        return "reject", f"reject {phrase}: incorrect", f"incorrect against the float32 oracle: {why}"
    rows = ", ".join(str(c.rows) for c in impl.correctness)
    return ("inconclusive", f"no speed decision on the {phrase} (functional check only)",
            f"correct against the float32 oracle at rows {rows} on {result.device.name}; no GPU, so nothing was timed "
            "and nothing is claimed about speed")


def _correctness_records(impl: ImplementationResult, rows_screened: list[int]) -> list[dict[str, Any]]:
    out = []
    for c in impl.correctness:
        tensors = [t for chk in c.checks for t in chk.tensors]
        abs_errs = [t.max_abs_err for t in tensors if t.max_abs_err is not None]
        rel_errs = [t.max_rel_err for t in tensors if t.max_rel_err is not None]
        first_bad = next(((list(t.first_bad_index), t.name) for t in tensors if t.first_bad_index is not None), None)
        contract = next((chk.contract_error for chk in c.checks if chk.contract_error), None)
        mismatched = sum(t.mismatched for t in tensors)
        passed = c.passed and not mismatched and not contract and bool(abs_errs)
        out.append({
            "implementation": impl.key, "rows": c.rows, "passed": passed, "checks": max(len(c.checks), 1),
            "rule": f"{c.tolerance.rule}; atol = {c.tolerance.atol_scale:g} * rms(ref); {c.stream}",
            "rtol": c.tolerance.rtol, "atol": c.tolerance.atol_scale,
            "max_abs_err": max(abs_errs) if abs_errs else None, "max_rel_err": max(rel_errs) if rel_errs else None,
            "mismatched": mismatched, "first_bad_index": first_bad[0] if first_bad else None,
            "first_bad_tensor": first_bad[1] if first_bad else None,
            "error": contract or (None if passed or mismatched else (c.failure_summary() or "failed")),
        })
    if impl.status == "failed":  # a crash or timeout before a row was checked: that row failed with the error
        checked = {c.rows for c in impl.correctness}
        tol = impl.correctness[0].tolerance if impl.correctness else None
        for rows in (r for r in rows_screened if r not in checked):
            out.append({"implementation": impl.key, "rows": rows, "passed": False, "checks": 1,
                        "rule": tol.rule if tol else "not reached", "rtol": tol.rtol if tol else 0.0,
                        "atol": tol.atol_scale if tol else 0.0, "mismatched": 0,
                        "error": f"{impl.failure or 'failed'}: {impl.error or impl.exit_signal or 'no detail'}"})
    return out


def _timing_records(impl: ImplementationResult) -> list[dict[str, Any]]:
    out = []
    for cell in impl.timings:
        samples = cell.kept_samples_us if cell.summary_over == "kept" else [s for b in cell.blocks for s in b.samples_us]
        clocks_before = [b.clock_before_mhz for b in cell.blocks if b.clock_before_mhz is not None]
        clocks_after = [b.clock_after_mhz for b in cell.blocks if b.clock_after_mhz is not None]
        out.append({
            "implementation": impl.key, "rows": cell.rows, "mode": cell.mode, "samples_us": samples,
            "median_us": cell.summary.median, "q1_us": cell.summary.q1, "q3_us": cell.summary.q3, "n": cell.summary.n,
            "bytes_moved": cell.bytes_moved, "achieved_gbps": cell.achieved_gbps,
            "sm_clock_mhz_before": float(min(clocks_before)) if clocks_before else None,
            "sm_clock_mhz_after": float(min(clocks_after)) if clocks_after else None,
            "throttled": cell.throttled,
        })
    return out


def _measurements(result: ScreenResult, key: str, mode: str) -> list[dict[str, Any]]:
    rows_out = []
    by_impl = {i.key: i for i in result.implementations if i.status == "ok"}
    for rows in result.rows:
        row: dict[str, Any] = {"rows": rows}
        for k in IMPL_KEYS:
            impl = by_impl.get(k)
            cell = next((c for c in impl.timings if c.rows == rows and c.mode == mode), None) if impl else None
            if cell is not None:
                row[f"{k}_ms"] = cell.summary.median / 1000.0
        if f"{key}_ms" not in row:
            continue
        for k in IMPL_KEYS:
            if k != key and f"{k}_ms" in row:
                row[f"speedup_vs_{k}"] = row[f"{k}_ms"] / row[f"{key}_ms"]
        rows_out.append(row)
    return rows_out


def _comparison_records(result: ScreenResult) -> list[dict[str, Any]]:
    """One record per comparison that has an interval. The record's verdict can only be FASTER / SLOWER / SAME /
    AMBIGUOUS: a FLAGGED comparison is recorded as AMBIGUOUS (not called) and its ``method`` starts with "FLAGGED, no
    verdict" and quotes the flags; an INSUFFICIENT one (fewer than 3 paired trials) has no interval and no record,
    and the decision's reason names it. ``method`` also carries the trial count, the p-values and, inside the
    decision family, the Holm-adjusted p_slower and family verdict."""
    out = []
    for c in result.comparisons:
        s = c.speedup
        if s.ci_lo is None or s.ci_hi is None or s.ratio is None:
            continue
        parts = [f"{s.definition}; {s.method}",
                 f"{s.n_trials} paired trials (ids {', '.join(map(str, s.trial_ids))})"
                 + (f", unpaired {', '.join(map(str, s.unpaired_trial_ids))} left out" if s.unpaired_trial_ids else ""),
                 f"p_faster {s.p_faster:.3g}, p_slower {s.p_slower:.3g}, p_same {s.p_same:.3g} against the band "
                 f"±{s.same_margin:g}"]
        if c.family is not None:
            holm = "not tested" if c.family.p_slower_holm is None else f"{c.family.p_slower_holm:.3g}"
            parts.append(f"decision family of {c.family.size} ({c.family.tested} tested): Holm-adjusted p_slower "
                         f"{holm}, family verdict {c.family.verdict.value}")
        else:
            parts.append("outside the decision family")
        verdict = c.verdict.value
        if c.verdict.value not in ("FASTER", "SLOWER", "SAME", "AMBIGUOUS"):
            parts.insert(0, f"{verdict}, no verdict ({'; '.join(c.flags)}); the interval would read "
                            f"{s.verdict.value}")
            verdict = "AMBIGUOUS"
        out.append({
            "candidate": c.candidate, "baseline": c.reference, "rows": c.rows, "mode": c.mode, "speedup": s.ratio,
            "ci_low": s.ci_lo, "ci_high": s.ci_hi, "confidence": s.confidence, "verdict": verdict,
            "method": "; ".join(parts),
        })
    return out


def _launch_config(key: str, spec: FusedAddRMSNormSpec) -> dict[str, Any]:
    """The kernel's own launch configuration at each screened row count, as it reports it."""
    try:
        if key == "triton":
            from .ops.fused_add_rmsnorm.triton_kernel import triton_config as cfg
        elif key == "cuda":
            from .ops.fused_add_rmsnorm.cuda_kernel import cuda_config as cfg
        else:
            return {}
        return {str(r): cfg(r, spec.hidden_size) for r in spec.rows}
    except Exception as e:  # a description, never a reason to lose the receipt
        return {"error": f"{type(e).__name__}: {e}"}


def build_document(
    result: ScreenResult,
    spec: FusedAddRMSNormSpec,
    policy: KernelPolicy,
    *,
    provenance: dict[str, Any],
    model_source: str,
    decode_step_ms: float | None,
    decode_step_source: str | None,
    launch_configs: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, KernelDecision | tuple[str, str, str]]]:
    """The receipt document and each candidate's decision. ``launch_configs`` (key -> config) records the kernels'
    launch configurations as measured; by default they are read from the kernels in this process, which is right
    only when this process is the one that measured."""
    timed = result.run_kind == "timed"
    decisions: dict[str, tuple[str, str, str]] = {}
    full: dict[str, KernelDecision | tuple[str, str, str]] = {}
    ceilings_by_key: dict[str, list[AmdahlCeiling]] = {}
    for key in candidates_of(result):
        impl = _impl(result, key)
        if not timed or impl is None or impl.status == "skipped":
            decisions[key] = _functional_decision(result, key)
            full[key] = decisions[key]
            continue
        ceilings = ceilings_for(result, key, spec, policy, decode_step_ms, decode_step_source)
        ceilings_by_key[key] = ceilings
        inputs = decision_inputs(result, key, policy=policy, phrase=CANDIDATE_PHRASES.get(key, key), ceilings=ceilings)
        d = decide_kernel(inputs, policy)
        decisions[key] = (d.decision, d.decision_text, d.reason)
        full[key] = d
    if not decisions:
        raise ValueError("no candidate was screened")
    primary = "user" if "user" in decisions else min(
        decisions, key=lambda k: (DECISION_RANK[decisions[k][0]], _mean_log_time(result, k, policy.timing_mode)))
    code, text, reason = decisions[primary]
    impl = _impl(result, primary)
    cand_checks = [c for c in (impl.correctness if impl else []) if c.rows in result.rows]
    correct_all = bool(cand_checks) and all(c.passed for c in cand_checks) and len(cand_checks) == len(result.rows)
    hw = provenance["hardware"]
    doc: dict[str, Any] = {
        "schema_version": SCREENING_V2,
        "recorded_at": provenance["recorded_at"],
        "evidence_class": "real-gpu-microbenchmark" if timed else "cpu-functional-check",
        "app_id": provenance["run_id"],
        "model_shape_source": {
            "id": spec.model_id or "unspecified", "revision": spec.model_revision, "hidden_size": spec.hidden_size,
            "rms_norm_eps": spec.eps, "num_hidden_layers": spec.num_layers, "dtype": spec.dtype, "source": model_source,
        },
        "hardware": hw,
        "software": provenance["software"],
        "candidate": {
            "operator": OPERATOR,
            "implementation": IMPLEMENTATION_NAMES.get(primary, primary) if primary != "user" else f"user candidate {impl.source}",
            "key": primary,
            "source": impl.source if impl else "unknown",
            "dtype": spec.dtype,
            "in_place": bool(impl.in_place) if impl and impl.in_place is not None else False,
            "threads_per_block": None,
            "launch_config": (launch_configs.get(primary, {"note": "not recorded with the measurement"})
                              if launch_configs is not None else _launch_config(primary, spec)),
            "correctness": ("passed against the float32 oracle on every measured shape" if correct_all else
                            "FAILED against the float32 oracle: " + "; ".join(
                                c.failure_summary() for c in cand_checks if not c.passed) if cand_checks else
                            f"not checked: {impl.skip_reason or impl.error if impl else 'not run'}"),
        },
        "measurements_timing_mode": policy.timing_mode if timed else None,
        "measurements": _measurements(result, primary, policy.timing_mode) if timed else [],
        "decision": text,
        "decision_code": code,
        "reason": reason,
        "qualification_boundary": QUALIFICATION_BOUNDARY if timed else FUNCTIONAL_BOUNDARY,
        "other_candidates": [
            {"implementation": k, "decision": t, "decision_code": c, "reason": r}
            for k, (c, t, r) in decisions.items() if k != primary
        ],
        "implementations": [{
            "key": i.key, "label": i.label, "kind": i.kind, "in_place": i.in_place, "source": i.source,
            "status": i.status, "reason": i.skip_reason or i.error,
            "details": {k: v for k, v in {"notes": i.notes, "provenance": i.provenance,
                                          "failure": i.failure, "exit_signal": i.exit_signal}.items() if v},
        } for i in result.implementations],
        "correctness": [r for i in result.implementations for r in _correctness_records(i, result.rows)],
        "timings": [t for i in result.implementations for t in _timing_records(i)],
        "comparisons": _comparison_records(result) if timed else [],
        "timing_method": dict(result.methods) | {"correctness": result.correctness_method,
                                                 "interleaving": result.interleaving},
        "calibration": result.calibration.model_dump(mode="json") if result.calibration else
                       {"note": result.calibration_note or "no calibration (functional run)"},
        "amdahl": [c.model_dump(mode="json") for c in ceilings_by_key.get(primary, [])],
        "policy": policy.model_dump(mode="json"),
        "provenance": provenance,
    }
    return doc, full


def _mean_log_time(result: ScreenResult, key: str, mode: str) -> float:
    impl = _impl(result, key)
    times = [c.summary.median for c in (impl.timings if impl else []) if c.mode == mode]
    return sum(math.log(t) for t in times) / len(times) if times else math.inf

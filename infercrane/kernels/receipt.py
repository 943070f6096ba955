"""From a screen's result to an ``infercrane.cuda-kernel-screening-receipt/v3`` document, and back again.

``derive(result, policy, decode_step)`` computes every field of the receipt that follows from the evidence: each
candidate's decision (``infercrane.decide.kernel``), the receipt's ``candidate`` (the user's when one was screened,
otherwise the best-decided of ours; the others go to ``other_candidates``), the seed-format decision table
(``measurements``: medians in the policy's timing mode, ms per call, with ``speedup_vs_<impl>`` as ratios of those
medians — a description; the decision reads the trial-level comparisons) and the Amdahl ceilings.
``build_document`` writes them beside the result; ``receipts.validate`` calls ``derive`` again on the receipt's own
result and policy, so a receipt whose decision does not follow from its evidence does not validate.

The decode step is one step for every decision row (``decode_step``), or one per row count (``decode_steps``): a
decode batch of ``c`` sequences is ``c`` rows, so the step measured at concurrency ``c`` (``tpot_decode_steps``) is
the step of ``rows = c``, and each row's ceiling divides by its own step. A row without a step gets no ceiling.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

Problem = tuple[str, str]

from ..decide.amdahl import AmdahlCeiling, amdahl_ceiling
from ..decide.kernel import KernelDecision, decide_kernel
from ..decide.policy import KernelPolicy, policy_sha256
from ..receipts.models_v2 import IMPL_KEYS
from ..receipts.models_v3 import SCREENING_V3
from .harness.compare import decision_inputs, failure_detail, recorded_flag_rule
from ..receipts.screen_result import FAILURE_WORDS, ImplementationResult, ScreenResult

CANDIDATE_PHRASES = {"triton": "Triton candidate", "cuda": "handwritten CUDA candidate", "user": "user candidate"}
IMPLEMENTATION_NAMES = {"triton": "Triton kernel (InferCrane)", "cuda": "handwritten CUDA C++ compiled with NVRTC",
                        "user": "user candidate"}
DECISION_RANK = {"accept": 0, "retain": 1, "inconclusive": 2, "reject": 3}
QUALIFICATION_BOUNDARY = ("operator microbenchmark only; the end-to-end figures are Amdahl estimates from the op's "
                          "share of a decode step, not a serving measurement")
FUNCTIONAL_BOUNDARY = ("functional check on a CPU-only machine: correctness against the float32 oracle only; no "
                       "timing, so no speed or end-to-end claim")
# The fields ``derive`` owns; ``receipts.validate`` compares each with a fresh derivation.
DERIVED_FIELDS = ("evidence_class", "candidate", "measurements_timing_mode", "measurements", "decision",
                  "decision_code", "reason", "qualification_boundary", "other_candidates", "amdahl")


def _impl(result: ScreenResult, key: str) -> ImplementationResult | None:
    return next((i for i in result.implementations if i.key == key), None)


def _cell_median(impl: ImplementationResult, rows: int, mode: str) -> float | None:
    cell = next((c for c in impl.timings if c.rows == rows and c.mode == mode), None)
    return cell.summary.median if cell is not None else None


def candidates_of(result: ScreenResult) -> list[str]:
    return [i.key for i in result.implementations if i.kind == "candidate"]


def step_at(decode_step: Any | None, rows: int) -> Any | None:
    """The decode step for a batch of ``rows``: the one step (``DecodeStep`` without rows) or, from a sequence of
    per-row steps, the one naming ``rows`` (None when there is none)."""
    if decode_step is None:
        return None
    if isinstance(decode_step, Sequence):
        return next((s for s in decode_step if s.rows == rows), None)
    return decode_step


def ceilings_for(result: ScreenResult, key: str, policy: KernelPolicy,
                 decode_step: Any | None) -> list[AmdahlCeiling]:
    """One Amdahl ceiling per decision row that has a decode step, against the fastest counted baseline measured
    there (medians)."""
    calls = result.spec.calls_per_decode_step
    impl = _impl(result, key)
    if decode_step is None or calls is None or result.run_kind != "timed" or impl is None:
        return []
    out = []
    for rows in (r for r in result.rows if policy.decides_on(r)):
        mine = _cell_median(impl, rows, policy.timing_mode)
        step = step_at(decode_step, rows)
        if mine is None or step is None:
            continue
        best: tuple[float, str] | None = None
        for b in result.implementations:
            if b.key not in policy.counted_baselines or b.status != "ok":
                continue
            t = _cell_median(b, rows, policy.timing_mode)
            if t is not None:
                best = min(best, (t, b.key)) if best else (t, b.key)
        if best is None:
            continue
        out.append(amdahl_ceiling(calls_per_step=calls, candidate_t_us=mine, baseline_t_us=best[0], baseline=best[1],
                                  decode_step_ms=step.ms, decode_step_source=step.source, rows=rows,
                                  timing_mode=policy.timing_mode))
    return out


def _functional_decision(result: ScreenResult, key: str) -> tuple[str, str, str]:
    impl = _impl(result, key)
    phrase = CANDIDATE_PHRASES.get(key, key)
    if impl is None or impl.status == "skipped":
        return "inconclusive", f"no decision on the {phrase}", f"skipped: {impl.skip_reason if impl else 'not run'}"
    if impl.failure == "harness":
        return ("inconclusive", f"no decision on the {phrase}",
                f"the harness failed, not the candidate, so nothing is decided: {impl.error}")
    bad = [c for c in impl.correctness if not c.passed]
    if impl.status == "failed" and not bad and impl.failure not in (None, "incorrect"):
        # its own fault, not a wrong answer: the reason starts with its word (as ``decide_kernel`` words it)
        word = FAILURE_WORDS.get(impl.failure, impl.failure)
        passed = ", ".join(str(c.rows) for c in impl.correctness if c.passed)
        return "reject", f"reject {phrase}: {word}", (
            f"{word}: {failure_detail(impl.failure, impl.error, impl.exit_signal)}"
            + (f"; correct against the float32 oracle at rows {passed} before it" if passed else ""))
    if impl.status == "failed" or bad:
        why = "; ".join(c.failure_summary() for c in bad) or impl.error or "failed"
        return "reject", f"reject {phrase}: incorrect", f"incorrect against the float32 oracle: {why}"
    rows = ", ".join(str(c.rows) for c in impl.correctness)
    return ("inconclusive", f"no speed decision on the {phrase} (functional check only)",
            f"correct against the float32 oracle at rows {rows} on {result.device.name}; no GPU, so nothing was timed "
            "and nothing is claimed about speed")


def _measurements(result: ScreenResult, key: str, mode: str) -> list[dict[str, Any]]:
    rows_out = []
    by_impl = {i.key: i for i in result.implementations if i.status == "ok"}
    for rows in result.rows:
        row: dict[str, Any] = {"rows": rows}
        for k in IMPL_KEYS:
            impl = by_impl.get(k)
            t = _cell_median(impl, rows, mode) if impl else None
            if t is not None:
                row[f"{k}_ms"] = t / 1000.0
        if f"{key}_ms" not in row:
            continue
        for k in IMPL_KEYS:
            if k != key and f"{k}_ms" in row:
                row[f"speedup_vs_{k}"] = row[f"{k}_ms"] / row[f"{key}_ms"]
        rows_out.append(row)
    return rows_out


def _mean_log_time(result: ScreenResult, key: str, mode: str) -> float:
    impl = _impl(result, key)
    times = [c.summary.median for c in (impl.timings if impl else []) if c.mode == mode]
    return sum(math.log(t) for t in times) / len(times) if times else math.inf


def decide_all(result: ScreenResult, policy: KernelPolicy, decode_step: Any | None
               ) -> dict[str, tuple[str, str, str, KernelDecision | None, list[AmdahlCeiling]]]:
    """Each candidate's ``(code, text, reason, decision, ceilings)``; ``decision`` is None for a functional run or
    a skipped candidate."""
    timed = result.run_kind == "timed"
    out: dict[str, tuple[str, str, str, KernelDecision | None, list[AmdahlCeiling]]] = {}
    for key in candidates_of(result):
        impl = _impl(result, key)
        if not timed or impl is None or impl.status == "skipped" or impl.failure == "harness":
            out[key] = (*_functional_decision(result, key), None, [])
            continue
        ceilings = ceilings_for(result, key, policy, decode_step)
        inputs = decision_inputs(result, key, policy=policy, phrase=CANDIDATE_PHRASES.get(key, key), ceilings=ceilings)
        d = decide_kernel(inputs, policy)
        out[key] = (d.decision, d.decision_text, d.reason, d, ceilings)
    if not out:
        raise ValueError("no candidate was screened")
    return out


def primary_of(result: ScreenResult, policy: KernelPolicy, decided: dict[str, tuple]) -> str:
    """The receipt's candidate: the user's when one was screened; else the best decision, a screened candidate
    before a skipped one, then the lower mean log time, then screening order."""
    order = candidates_of(result)

    def skipped(k: str) -> bool:
        impl = _impl(result, k)
        return impl is None or impl.status == "skipped"

    return "user" if "user" in decided else min(
        decided, key=lambda k: (DECISION_RANK[decided[k][0]], skipped(k), _mean_log_time(result, k, policy.timing_mode),
                                order.index(k)))


def _correctness_text(result: ScreenResult, impl: ImplementationResult | None) -> str:
    checks = [c for c in (impl.correctness if impl else []) if c.rows in result.rows]
    if checks and len(checks) == len(result.rows) and all(c.passed for c in checks):
        return "passed against the float32 oracle on every measured shape"
    # a timed result from before the flag rule was recorded words it as it did then, so that its receipt validates
    legacy = result.run_kind == "timed" and recorded_flag_rule(result) is None
    if checks and (legacy or any(not c.passed for c in checks)):
        return "FAILED against the float32 oracle: " + "; ".join(c.failure_summary() for c in checks if not c.passed)
    if checks:  # it stopped before the rest: those rows were never checked, not failed
        done = {c.rows for c in checks}
        why = (FAILURE_WORDS.get(impl.failure, impl.failure) if impl and impl.failure
               else "the screen was interrupted" if result.interrupted else "not run")
        return (f"passed against the float32 oracle at rows {', '.join(str(c.rows) for c in checks)}; not checked at "
                f"rows {', '.join(str(r) for r in result.rows if r not in done)}: {why}")
    return f"not checked: {(impl.skip_reason or impl.error) if impl else 'not run'}"


def derive(result: ScreenResult, policy: KernelPolicy, decode_step: Any | None) -> dict[str, Any]:
    """The receipt fields that follow from the result, the policy and the decode step (``DERIVED_FIELDS``).
    ``decode_step``: one ``DecodeStep`` for every row, a sequence of per-row ones, or None."""
    timed = result.run_kind == "timed"
    decided = decide_all(result, policy, decode_step)
    primary = primary_of(result, policy, decided)
    code, text, reason, _, ceilings = decided[primary]
    impl = _impl(result, primary)
    launch = dict(impl.provenance) if impl else {}
    return {
        "evidence_class": "real-gpu-microbenchmark" if timed else "cpu-functional-check",
        "candidate": {
            "operator": result.spec.operator,
            "implementation": (IMPLEMENTATION_NAMES.get(primary, primary) if primary != "user"
                               else f"user candidate {impl.source if impl else ''}"),
            "key": primary,
            "source": impl.source if impl else "unknown",
            "dtype": result.spec.dtype,
            "in_place": bool(impl.in_place) if impl and impl.in_place is not None else False,
            "threads_per_block": None,
            "launch_config": launch or {"note": "the implementation reported no launch configuration"},
            "correctness": _correctness_text(result, impl),
        },
        "measurements_timing_mode": policy.timing_mode if timed else None,
        "measurements": _measurements(result, primary, policy.timing_mode) if timed else [],
        "decision": text,
        "decision_code": code,
        "reason": reason,
        "qualification_boundary": QUALIFICATION_BOUNDARY if timed else FUNCTIONAL_BOUNDARY,
        "other_candidates": [
            {"implementation": k, "decision": t, "decision_code": c, "reason": r}
            for k, (c, t, r, _, _) in decided.items() if k != primary
        ],
        "amdahl": [c.model_dump(mode="json") for c in ceilings],
    }


def build_document(
    result: ScreenResult,
    policy: KernelPolicy,
    *,
    provenance: dict[str, Any],
    model_source: str,
    decode_step: Any | None = None,
    decided_from: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The v3 receipt: the result as measured, the policy and decode step, and everything ``derive`` gives.
    ``decode_step``: one ``DecodeStep`` (``decode_step``), a sequence of per-row ones (``decode_steps``), or None."""
    spec = result.spec
    per_row = isinstance(decode_step, Sequence)
    if per_row:
        decode_step = sorted(decode_step, key=lambda s: s.rows)
    doc: dict[str, Any] = {
        "schema_version": SCREENING_V3,
        "recorded_at": provenance["recorded_at"],
        "app_id": provenance["run_id"],
        "model_shape_source": {
            "id": spec.model_id or "unspecified", "revision": spec.model_revision, "op": spec.op,
            "operator": spec.operator, "hidden_size": spec.hidden_size, "rms_norm_eps": spec.eps,
            "num_hidden_layers": spec.num_layers, "dtype": spec.dtype, "source": model_source,
        },
        "hardware": provenance["hardware"],
        "software": provenance["software"],
        **derive(result, policy, decode_step),
        "decode_step": decode_step.model_dump(mode="json") if decode_step is not None and not per_row else None,
        **({"decode_steps": [s.model_dump(mode="json") for s in decode_step]} if per_row else {}),
        "policy": policy.model_dump(mode="json"),
        "policy_sha256": policy_sha256(policy),
        "result": result.model_dump(mode="json"),
        "decided_from": decided_from,
        "provenance": provenance,
    }
    return doc


def tpot_decode_steps(doc: dict[str, Any], recipe: str, rows: Sequence[int], label: str) -> list[Any]:
    """Per-row decode steps from a serving receipt: for each row count ``r`` that is one of its concurrencies, the
    median over the ok runs of ``recipe`` at concurrency ``r`` (of its primary driver) of TPOT p50 — the wall time of
    one decode step of a batch of ``r`` sequences, so of ``r`` rows. ``label`` names the receipt in each step's
    source. Row counts the receipt did not run give no step."""
    from ..receipts.models_v3 import DecodeStep

    primary = next(iter(doc.get("drivers") or {}), None)
    out = []
    for r in sorted(set(rows)):
        runs = [x for x in doc.get("runs", []) if x["recipe"] == recipe and x["concurrency"] == r
                and x["status"] == "ok" and x.get("tpot_p50_ms") and (primary is None or x["driver"] == primary)]
        if runs:
            ms = statistics.median(x["tpot_p50_ms"] for x in runs)
            out.append(DecodeStep(ms=ms, rows=r, source=(
                f"{label}: median over {len(runs)} runs of tpot_p50_ms, recipe {recipe!r}, concurrency {r} "
                f"(a decode batch of {r} row{'s' if r != 1 else ''})")))
    return out


def _digits(text: str | None) -> str:
    return "".join(ch for ch in str(text) if ch.isdigit())


def device_problems(r: Any) -> list[Problem]:
    """The device the screen measured (``result.device``, read by the harness on the device itself) against the
    hardware the receipt names: a GPU's name, compute capability, SM count, memory, L2 cache, driver and CUDA
    version where both record them; a functional run's machine names no GPU."""
    from ..env.capture import NO_GPU

    hw, dev = r.hardware, r.result.device
    if dev.type != "cuda":
        return [] if hw.gpu == NO_GPU else [("hardware.gpu", f"is {hw.gpu!r} but the screen ran on no GPU "
                                                             f"(result.device.type {dev.type!r})")]
    out: list[Problem] = []
    if hw.gpu != dev.name:
        out.append(("hardware.gpu", f"is {hw.gpu!r} but the screen measured {dev.name!r} (result.device.name)"))
    measured = {  # as env.capture.hardware records them
        "compute_capability": dev.compute_capability, "sm_count": dev.sm_count,
        "gpu_memory_gib": round(dev.total_memory_bytes / 2**30, 2) if dev.total_memory_bytes else None,
        "l2_cache_mib": round(dev.l2_cache_bytes / 2**20, 2) if dev.l2_cache_bytes else None,
        "driver": dev.driver, "cuda_runtime": dev.torch_cuda,
    }
    for field, value in measured.items():
        stated = getattr(hw, field)
        if stated is None or value is None:
            continue
        # a compute capability is "9.0" as the device reports it and "sm90" as hardware records it
        same = _digits(stated) == _digits(value) if field == "compute_capability" else stated == value
        if not same:
            out.append((f"hardware.{field}", f"is {stated!r} but the device the screen measured has {value!r} "
                                             "(result.device)"))
    return out


def record_problems(r: Any) -> list[Problem]:
    """The screen's window and the model it names: ``result.started_at`` before ``finished_at``, ``wall_s`` apart
    (within ``receipts.crosscheck.CLOCK_SKEW_S``); the model the shapes came from (``model_shape_source``) is the
    screen's (``result.spec``) and provenance's, and the spec's config fields are its shapes."""
    from ..receipts.crosscheck import CLOCK_SKEW_S

    res, shape = r.result, r.model_shape_source
    out: list[Problem] = []
    elapsed = (res.finished_at - res.started_at).total_seconds()
    if elapsed < 0:
        out.append(("result.finished_at", f"is {res.finished_at.isoformat()}, before result.started_at "
                                          f"({res.started_at.isoformat()})"))
    elif abs(elapsed - res.wall_s) > CLOCK_SKEW_S:
        out.append(("result.wall_s", f"is {res.wall_s:.1f} s but result.started_at .. finished_at is {elapsed:.1f} s"))
    for field, want in (("id", res.spec.model_id or "unspecified"), ("revision", res.spec.model_revision)):
        if getattr(shape, field) != want:
            out.append((f"model_shape_source.{field}", f"is {getattr(shape, field)!r} but the screen's spec says "
                                                       f"{want!r} (result.spec.model_{field})"))
    fields = res.spec.config_fields
    for key, want in (("hidden_size", res.spec.hidden_size), ("rms_norm_eps", res.spec.eps),
                      ("num_hidden_layers", res.spec.num_layers)):
        if key in fields and want is not None and fields[key] != want:
            out.append((f"result.spec.config_fields.{key}", f"is {fields[key]!r} but the spec screened {want!r}"))
    m = r.provenance.model
    if m is not None:
        for field, stated, want in (("id", m.id, shape.id), ("revision", m.revision, shape.revision),
                                    ("config_fields", m.config_fields, fields)):
            if stated != want:
                out.append((f"provenance.model.{field}", f"is {stated!r} but the screen's model is {want!r} "
                                                         f"(model_shape_source, result.spec)"))
    return out


def rederived_problems(r: Any) -> list[Problem]:
    """A v3 screen's rules (``receipts.registry.LAB_RULES``): the device measured is the hardware named and the
    model screened the model named (``device_problems``, ``record_problems``); everything derived is derived again
    from ``result`` under ``policy`` and ``decode_step``; each disagreement names its field path and both values."""
    from ..receipts.validate import derived_differences, differs, dump
    from . import registry
    from .harness.compare import with_comparisons
    from .harness.runner import summarize_cell

    out: list[Problem] = []
    res = r.result
    timed = res.run_kind == "timed"
    if (r.evidence_class == "real-gpu-microbenchmark") != timed:
        out.append(("evidence_class", f"is {r.evidence_class!r} but the result's run_kind is {res.run_kind!r}"))
    if r.app_id != r.provenance.run_id:
        out.append(("app_id", f"is {r.app_id!r} but provenance.run_id is {r.provenance.run_id!r}"))
    out += device_problems(r) + record_problems(r)
    shape = r.model_shape_source
    for field, want in (("op", res.spec.op), ("operator", res.spec.operator), ("hidden_size", res.spec.hidden_size),
                        ("rms_norm_eps", res.spec.eps), ("dtype", res.spec.dtype)):
        if getattr(shape, field) != want:
            out.append((f"model_shape_source.{field}", f"is {getattr(shape, field)!r} but the result's spec says "
                                                       f"{want!r}"))
    try:
        spec = registry.op_module(res.spec.op).SPEC(
            hidden_size=res.spec.hidden_size, eps=res.spec.eps, dtype=res.spec.dtype, rows=tuple(res.rows),
            num_layers=res.spec.num_layers)
    except Exception as e:  # an op this InferCrane does not know cannot be re-derived
        return out + [("result.spec.op", f"cannot be re-derived here: {type(e).__name__}: {e}")]
    for i, impl in enumerate(res.implementations):
        for j, cell in enumerate(impl.timings):
            want = summarize_cell(cell.rows, cell.mode, cell.blocks, spec.bytes_moved(cell.rows), res.calibration)
            out += differs(f"result.implementations[{i}].timings[{j}]", cell.model_dump(mode="json"),
                            want.model_dump(mode="json"), "its raw blocks and the calibration")
    if timed:
        want = with_comparisons(res, r.policy)
        for field in ("comparisons", "comparison_notes", "comparison_policy"):
            out += differs(f"result.{field}", dump(getattr(res, field)), dump(getattr(want, field)),
                            "comparing the timing cells under the policy")
    try:
        derived = derive(res, r.policy, r.decode_steps or r.decode_step)
    except Exception as e:
        return out + [("result", f"no decision can be derived from it: {type(e).__name__}: {e}")]
    return out + derived_differences(r, r.model_dump(mode="json"), derived, DERIVED_FIELDS,
                                      "deciding again from the result")

"""Receipts as a flat table (CSV) and a summary object (JSON) that a spreadsheet or a dashboard reads
(``infercrane export``); every column and key is listed, with its meaning, in ``docs/exports.md``.

The CSV has one header for every receipt (``COLUMNS``), so the exports of many receipts append into one table; a
column that does not apply to a row is empty. Two tables: ``measured`` (the default), one row per measured unit, and
``comparisons``, one row per comparison with its interval, its method and its verdict; ``row_kind`` names each row:

* a kernel screen (v3, v2): measured, ``timing`` (implementation x rows x timing mode), ``correctness``
  (implementation x rows) and ``implementation`` (one row for an implementation that has neither: skipped, or failed
  before its first check); compared, ``comparison`` (candidate x reference x rows x mode: the speedup, its interval
  and verdicts);
* a serving receipt (``serve ab``, ``serve bench``, ``kernel apply``): measured, ``run`` (one driver run of one arm at
  one concurrency, every metric recorded); compared, ``statistic`` (B/A of one metric at one concurrency),
  ``family_test`` (a paired design's decision family: one metric pooled over the concurrencies), ``agreement`` (two
  drivers on one engine) and ``prediction`` (a kernel's predicted B/A beside the measured one);
* a PoC receipt: the rows of each receipt it embeds, ``section`` naming it (``kernel.h200``, ``paired.h200``, …).

Every row carries its conditions (GPU and driver, model, software versions, and per lab the op, dtype and hidden size
or the workload, engine and driver) and, for a comparison, the lab's own verdict word beside its normalized reading
(``infercrane.decide.vocabulary``). The JSON summary gives per receipt its identity (kind, schema version, content
hash, recorded_at), conditions, boundary, and per section the decision, its reason and a headline comparison.

Values are the receipt's own, never recomputed: what ``receipt validate`` checked is what is exported. v1 seed
receipts carry medians only (no cells, runs or intervals) and are refused.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from pydantic import BaseModel

from ..decide.vocabulary import normalized
from ..errors import InputError
from ..receipts.models_v1 import POC_V1, SCREENING_V1
from ..receipts.models_v2 import (
    POC_V2,
    SCREENING_V2,
    CudaKernelScreeningReceiptV2,
    OptimizationPocReceiptV2,
)
from ..receipts.models_v3 import SCREENING_V3, CudaKernelScreeningReceiptV3
from ..receipts.validate import Receipt

EXPORT_SCHEMA = "infercrane.export-summary/v1"
FORMATS = ("csv", "json")

COMMON_COLUMNS = ("section", "row_kind", "schema_version", "receipt_sha256", "recorded_at", "evidence_class", "gpu",
                  "gpu_driver", "model", "model_revision", "software", "decision_code", "note")
KERNEL_COLUMNS = ("op", "operator", "dtype", "hidden", "run_kind", "implementation", "implementation_kind",
                  "implementation_status", "rows", "timing_mode", "trials", "calls_per_sample", "samples", "median_us",
                  "q1_us", "q3_us", "min_us", "max_us", "trial_median_min_us", "trial_median_max_us", "floor_us",
                  "achieved_gbps", "pct_of_copy_bandwidth", "second_timer_us", "timer_disagreement", "flags",
                  "correctness_passed", "checks", "max_abs_err", "max_rel_err", "rtol", "atol", "atol_scale")
RUN_METRICS = ("output_tokens_per_second", "request_throughput",
               *(f"{m}_{p}_ms" for m in ("ttft", "tpot", "latency") for p in ("p50", "p95", "p99")))
SERVING_COLUMNS = ("workload", "input_tokens", "output_tokens", "streaming", "window_s", "warmup_s",
                   "requests_per_point", "arm", "recipe", "engine", "engine_version", "driver", "driver_version",
                   "run_index", "concurrency", "started_at", "duration_s", "status", "ok", "requests_completed",
                   "failures", "length_mismatches", *RUN_METRICS, "token_count_source", "raw_export")
COMPARISON_COLUMNS = ("reference", "metric", "higher_is_better", "ratio", "ratio_definition", "ci_low", "ci_high",
                      "confidence", "p_value", "n", "predicted_ratio", "lab_verdict", "verdict", "family_lab_verdict",
                      "family_verdict", "role", "method")
COLUMNS: tuple[str, ...] = (*COMMON_COLUMNS, *KERNEL_COLUMNS, *SERVING_COLUMNS, *COMPARISON_COLUMNS)

# The two tables: what was measured (the default), and what was compared (each with its verdict words).
TABLES = ("measured", "comparisons")
MEASURED_KINDS = ("timing", "correctness", "implementation", "run")
COMPARISON_KINDS = ("comparison", "statistic", "family_test", "agreement", "prediction")
ROW_KINDS = (*MEASURED_KINDS, *COMPARISON_KINDS)
# What a headline comparison of the JSON summary carries: the row's identity and its comparison columns.
HEADLINE_KEYS = ("row_kind", "implementation", "recipe", "driver", "rows", "timing_mode", "concurrency",
                 *COMPARISON_COLUMNS, "note")


@dataclass
class Section:
    """One receipt's worth of evidence inside an export: a whole receipt, or one a PoC embeds."""

    name: str
    lab: str  # kernel | serving
    kind: str  # kernel-screen | serve-ab | serve-bench | kernel-apply
    model: BaseModel
    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- entry points


def export_text(receipt: Receipt, fmt: str, *, table: str = "measured", label: str | None = None) -> str:
    """The export of one validated receipt as text: ``csv`` (header + the rows of ``table``) or ``json`` (its
    summary object)."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: give one of {', '.join(FORMATS)}")
    if fmt == "csv":
        return to_csv(export_rows(receipt, table))
    return json.dumps(export_summary(receipt, label=label), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def export_rows(receipt: Receipt, table: str = "measured") -> list[dict[str, Any]]:
    """The rows of one table of the receipt's CSV, each a dict over exactly ``COLUMNS``: ``measured`` (timing cells,
    correctness checks, implementations without either, runs) or ``comparisons`` (kernel comparisons, serving
    statistics, family tests, driver agreement, predictions)."""
    if table not in TABLES:
        raise InputError(f"--table {table}: give one of {', '.join(TABLES)}")
    kinds = MEASURED_KINDS if table == "measured" else COMPARISON_KINDS
    return [row for s in sections(receipt) for row in s.rows if row["row_kind"] in kinds]


def export_summary(receipt: Receipt, *, label: str | None = None) -> dict[str, Any]:
    """The JSON summary object of one receipt (keys in ``docs/exports.md``, "JSON summary")."""
    m = receipt.model
    secs = sections(receipt)
    complete, incomplete = _completeness(m)
    hw = _hardware(m)
    model_id, revision = _model_id(m)
    return {
        "export_schema": EXPORT_SCHEMA,
        "receipt": label if label is not None else (str(receipt.path) if receipt.path is not None else None),
        "kind": _kind(m),
        "schema_version": receipt.schema_version,
        "content_sha256": getattr(m, "content_sha256", None),
        "recorded_at": _iso(m.recorded_at),
        "complete": complete,
        "incomplete_reason": incomplete,
        "evidence_class": getattr(m, "evidence_class", None),
        "gpu": hw.gpu if hw else None,
        "gpu_driver": hw.driver if hw else None,
        "model": model_id,
        "model_revision": revision,
        "software": dict(m.software),
        "qualification_boundary": m.qualification_boundary,
        "sections": [s.summary for s in secs],
    }


def to_csv(rows: Iterable[dict[str, Any]]) -> str:
    """``COLUMNS`` as the header, then one line per row (stdlib ``csv``, RFC 4180 quoting, ``\\n`` line ends)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in COLUMNS])
    return out.getvalue()


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)  # the shortest text that reads back as the same float
    if isinstance(v, datetime):
        return v.isoformat()
    return str(v)


# --------------------------------------------------------------------------------------------- sections


def sections(receipt: Receipt) -> list[Section]:
    """The receipt's sections, rows and summaries filled; a version without rows to export is refused."""
    v = receipt.schema_version
    m = receipt.model
    if v in (SCREENING_V1, POC_V1):
        raise InputError(f"{receipt.path}: {v} is a v1 seed receipt: it holds medians only (no timing cells, runs or "
                         "intervals), so there are no rows to export",
                         hint="export a receipt InferCrane writes (kernel screen v2/v3, serving or PoC v2); "
                              "`infercrane receipt show` displays this one")
    if v == SCREENING_V3:
        return [_kernel_v3("kernel", m)]
    if v == SCREENING_V2:
        return [_kernel_v2("kernel", m)]
    if v == POC_V2:
        if m.evidence is None:
            return _serving(_serving_section_name(m), m)
        return _poc(m)
    raise InputError(f"{receipt.path}: {v}: no export is defined for this receipt version",
                     hint="export a kernel screen (v2/v3), serving or PoC (v2) receipt")


def _poc(r: OptimizationPocReceiptV2) -> list[Section]:
    from ..poc.derive import EVIDENCE_SECTIONS
    from ..receipts.registry import model_for

    out: list[Section] = []
    ev = r.evidence
    for part in EVIDENCE_SECTIONS:
        for gpu, doc in getattr(ev, part).items():
            sub = model_for(doc["schema_version"]).model_validate(doc)  # validated whole with the PoC receipt
            name = f"{part}.{gpu}"
            if isinstance(sub, CudaKernelScreeningReceiptV3):
                out.append(_kernel_v3(name, sub))
            elif isinstance(sub, CudaKernelScreeningReceiptV2):
                out.append(_kernel_v2(name, sub))
            else:
                out += _serving(name, sub)
    return out


def _kind(m: BaseModel) -> str:
    if isinstance(m, (CudaKernelScreeningReceiptV3, CudaKernelScreeningReceiptV2)):
        return "kernel-screen"
    if isinstance(m, OptimizationPocReceiptV2):
        if m.evidence is not None:
            return "poc"
        if m.kernel_in_serving is not None:
            return "kernel-apply"
        return "serve-bench" if _is_bench(m) else "serve-ab"
    return "unknown"


def _is_bench(r: OptimizationPocReceiptV2) -> bool:
    if r.bench is not None or r.paired_aiperf is not None:
        return r.bench is not None
    return str(_config(r).get("command", "")).endswith("bench")


def _serving_section_name(r: OptimizationPocReceiptV2) -> str:
    return "bench" if _is_bench(r) else "ab"


def _config(r: OptimizationPocReceiptV2) -> dict[str, Any]:
    config = r.provenance.config
    return config.get("measured_config", config)  # a receipt decided again keeps the measured run's config


def _completeness(m: BaseModel) -> tuple[bool, str | None]:
    if isinstance(m, CudaKernelScreeningReceiptV3):
        return m.result.interrupted is None, m.result.interrupted
    if isinstance(m, OptimizationPocReceiptV2):
        return m.complete, m.incomplete_reason
    return True, None


def _hardware(m: BaseModel) -> Any:
    return getattr(m, "hardware", None) or m.provenance.hardware


def _model_id(m: BaseModel) -> tuple[str | None, str | None]:
    src = getattr(m, "model_shape_source", None) or getattr(m, "model", None)
    return (src.id, src.revision) if src is not None else (None, None)


def _iso(v: Any) -> Any:
    return v.isoformat() if isinstance(v, datetime) else v


def _software(m: BaseModel) -> str:
    return "; ".join(f"{k}={v}" for k, v in sorted(m.software.items()))


def _common(section: str, m: BaseModel) -> dict[str, Any]:
    """The columns every row of a receipt's section carries: identity and conditions."""
    hw = _hardware(m)
    model_id, revision = _model_id(m)
    row = dict.fromkeys(COLUMNS)
    row.update(section=section, schema_version=m.schema_version, receipt_sha256=getattr(m, "content_sha256", None),
               recorded_at=_iso(m.recorded_at), evidence_class=getattr(m, "evidence_class", None), gpu=hw.gpu,
               gpu_driver=hw.driver, model=model_id, model_revision=revision, software=_software(m))
    return row


def _verdict_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """row_kind -> normalized verdict -> how many rows of the section read it (comparison-like rows only)."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        if row["row_kind"] in COMPARISON_KINDS:
            kind = out.setdefault(row["row_kind"], {})
            kind[row["verdict"]] = kind.get(row["verdict"], 0) + 1
    return out


def _least_favourable(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row whose interval says least for the candidate: the lowest lower end of a higher-is-better ratio (the
    highest upper end of a lower-is-better one); rows without an interval come last, ties in receipt order."""
    def score(row: dict[str, Any]) -> tuple[int, float]:
        lo, hi = row["ci_low"], row["ci_high"]
        if lo is None or hi is None:
            return (1, 0.0)
        return (0, lo if row["higher_is_better"] else 1.0 / hi)

    return min(rows, key=score) if rows else None


def _headline(row: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else {k: row[k] for k in HEADLINE_KEYS}


def _section_summary(sec: Section, *, subject: str | None, reference: str | None, decision_code: str | None,
                     decision: str | None, reason: str | None, headline: dict[str, Any] | None,
                     headline_rule: str | None, timing_mode: str | None = None,
                     prediction: dict[str, Any] | None = None,
                     quality_gate: dict[str, Any] | None = None) -> dict[str, Any]:
    m = sec.model
    hw = _hardware(m)
    complete, incomplete = _completeness(m)
    return {
        "section": sec.name, "lab": sec.lab, "kind": sec.kind, "schema_version": m.schema_version,
        "receipt_sha256": getattr(m, "content_sha256", None), "recorded_at": _iso(m.recorded_at),
        "complete": complete, "incomplete_reason": incomplete, "evidence_class": getattr(m, "evidence_class", None),
        "gpu": hw.gpu, "subject": subject, "reference": reference, "timing_mode": timing_mode,
        "decision_code": decision_code, "decision": decision, "reason": reason,
        "qualification_boundary": m.qualification_boundary,
        "headline": _headline(headline), "headline_rule": headline_rule if headline is not None else None,
        "verdicts": _verdict_counts(sec.rows), "row_counts": _row_counts(sec.rows), "prediction": prediction,
        "quality_gate": quality_gate,
    }


def _row_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        out[row["row_kind"]] = out.get(row["row_kind"], 0) + 1
    return out


# --------------------------------------------------------------------------------------------- kernel lab

KERNEL_HEADLINE_RULE = ("the least favourable comparison of the candidate in the decision's family (the lowest lower "
                        "end of its speedup interval)")
KERNEL_V2_HEADLINE_RULE = ("the least favourable comparison of the candidate against a baseline in the decision's "
                           "timing mode (the lowest lower end of its speedup interval)")


def _decisions(r: Any) -> dict[str, str]:
    """implementation -> its decision code (the receipt's candidate and the other candidates; baselines have none)."""
    return {r.candidate.key: r.decision_code, **{o.implementation: o.decision_code for o in r.other_candidates}}


def _max(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _kernel_v3(name: str, r: CudaKernelScreeningReceiptV3) -> Section:
    res = r.result
    spec = res.spec
    decisions = _decisions(r)
    kinds = {i.key: i.kind for i in res.implementations}
    base = _common(name, r) | {"op": spec.op, "operator": spec.operator, "dtype": spec.dtype,
                               "hidden": spec.hidden_size, "run_kind": res.run_kind}
    rows: list[dict[str, Any]] = []
    for impl in res.implementations:
        who = base | {"implementation": impl.key, "implementation_kind": impl.kind,
                      "implementation_status": impl.status, "decision_code": decisions.get(impl.key)}
        for cell in impl.timings:
            s = cell.summary
            medians = cell.trial_medians()
            rows.append(who | {
                "row_kind": "timing", "rows": cell.rows, "timing_mode": cell.mode, "trials": len(cell.blocks),
                "calls_per_sample": cell.calls_per_sample, "samples": s.n, "median_us": s.median, "q1_us": s.q1,
                "q3_us": s.q3, "min_us": s.min, "max_us": s.max,
                "trial_median_min_us": min(medians) if medians else None,
                "trial_median_max_us": max(medians) if medians else None, "floor_us": cell.floor_us,
                "achieved_gbps": cell.achieved_gbps, "pct_of_copy_bandwidth": cell.pct_of_copy_bandwidth,
                "second_timer_us": cell.second_timer_us, "timer_disagreement": cell.timer_disagreement,
                "flags": "; ".join(cell.flags) or None})
        for c in impl.correctness:
            tensors = [t for check in c.checks for t in check.tensors]
            rows.append(who | {
                "row_kind": "correctness", "rows": c.rows, "correctness_passed": c.passed, "checks": len(c.checks),
                "max_abs_err": _max(t.max_abs_err for t in tensors),
                "max_rel_err": _max(t.max_rel_err for t in tensors),
                "rtol": c.tolerance.rtol, "atol_scale": c.tolerance.atol_scale,
                "note": c.failure_summary() or None})
        if not impl.timings and not impl.correctness:
            rows.append(who | {"row_kind": "implementation",
                               "note": impl.skip_reason or impl.error or (impl.failure and f"failed: {impl.failure}")})
    for comp in res.comparisons:
        sp = comp.speedup
        rows.append(base | {
            "row_kind": "comparison", "implementation": comp.candidate,
            "implementation_kind": kinds.get(comp.candidate),
            "decision_code": decisions.get(comp.candidate), "rows": comp.rows, "timing_mode": comp.mode,
            "reference": comp.reference, "metric": "speedup", "higher_is_better": True, "ratio": sp.ratio,
            "ratio_definition": sp.definition, "ci_low": sp.ci_lo, "ci_high": sp.ci_hi, "confidence": sp.confidence,
            "n": sp.n_trials, "lab_verdict": comp.verdict.value, "verdict": normalized(comp.verdict),
            "family_lab_verdict": comp.family.verdict.value if comp.family else None,
            "family_verdict": normalized(comp.family.verdict) if comp.family else None,
            "role": "family" if comp.family else "described", "flags": "; ".join(comp.flags) or None,
            "method": sp.method, "note": sp.reason})
    sec = Section(name=name, lab="kernel", kind="kernel-screen", model=r, rows=rows)
    family = [x for x in rows if x["row_kind"] == "comparison" and x["role"] == "family"
              and x["implementation"] == r.candidate.key]
    head = _least_favourable(family)
    sec.summary = _section_summary(sec, subject=r.candidate.key, reference=None, decision_code=r.decision_code,
                                   decision=r.decision, reason=r.reason, headline=head,
                                   headline_rule=KERNEL_HEADLINE_RULE, timing_mode=r.policy.timing_mode)
    return sec


def _kernel_v2(name: str, r: CudaKernelScreeningReceiptV2) -> Section:
    decisions = _decisions(r)
    kinds = {i.key: i.kind for i in r.implementations}
    base = _common(name, r) | {"op": _v2_op(r), "operator": r.candidate.operator,
                               "dtype": r.model_shape_source.dtype, "hidden": r.model_shape_source.hidden_size,
                               "run_kind": "timed" if r.evidence_class == "real-gpu-microbenchmark" else "functional"}
    status = {i.key: i for i in r.implementations}

    def who(key: str) -> dict[str, Any]:
        impl = status.get(key)
        return base | {"implementation": key, "implementation_kind": kinds.get(key),
                       "implementation_status": impl.status if impl else None, "decision_code": decisions.get(key)}

    rows: list[dict[str, Any]] = []
    for impl in r.implementations:
        timings = [t for t in r.timings if t.implementation == impl.key]
        checks = [c for c in r.correctness if c.implementation == impl.key]
        for t in timings:
            rows.append(who(impl.key) | {
                "row_kind": "timing", "rows": t.rows, "timing_mode": t.mode, "samples": t.n, "median_us": t.median_us,
                "q1_us": t.q1_us, "q3_us": t.q3_us, "min_us": min(t.samples_us), "max_us": max(t.samples_us),
                "achieved_gbps": t.achieved_gbps, "flags": "throttled" if t.throttled else None})
        for c in checks:
            rows.append(who(impl.key) | {
                "row_kind": "correctness", "rows": c.rows, "correctness_passed": c.passed, "checks": c.checks,
                "max_abs_err": c.max_abs_err, "max_rel_err": c.max_rel_err, "rtol": c.rtol, "atol": c.atol,
                "note": c.error})
        if not timings and not checks:
            rows.append(who(impl.key) | {"row_kind": "implementation", "note": impl.reason})
    for c in r.comparisons:
        rows.append(who(c.candidate) | {
            "row_kind": "comparison", "rows": c.rows, "timing_mode": c.mode, "reference": c.baseline,
            "metric": "speedup", "higher_is_better": True, "ratio": c.speedup,
            "ratio_definition": "baseline time / candidate time", "ci_low": c.ci_low, "ci_high": c.ci_high,
            "confidence": c.confidence, "lab_verdict": c.verdict, "verdict": normalized(c.verdict),
            "role": "described", "method": c.method})
    sec = Section(name=name, lab="kernel", kind="kernel-screen", model=r, rows=rows)
    mine = [x for x in rows if x["row_kind"] == "comparison" and x["implementation"] == r.candidate.key
            and x["timing_mode"] == r.measurements_timing_mode and kinds.get(x["reference"]) == "baseline"]
    head = _least_favourable(mine)
    sec.summary = _section_summary(sec, subject=r.candidate.key, reference=None, decision_code=r.decision_code,
                                   decision=r.decision, reason=r.reason, headline=head,
                                   headline_rule=KERNEL_V2_HEADLINE_RULE, timing_mode=r.measurements_timing_mode)
    return sec


def _v2_op(r: CudaKernelScreeningReceiptV2) -> str | None:
    op = r.provenance.config.get("op")
    return op if isinstance(op, str) else None


# --------------------------------------------------------------------------------------------- serving lab

SERVING_PAIRED_HEADLINE_RULE = ("the decision family's test the decision turns on: a primary or guard metric that "
                                "reads worse, else the primary test (each pooled over every window pair)")
SERVING_RUNS_HEADLINE_RULE = ("the statistic the decision turns on: the least favourable primary or guard statistic "
                              "that reads worse, else the primary metric's least favourable statistic over the "
                              "concurrencies (the interval end that says least for B)")


def _arms(r: OptimizationPocReceiptV2) -> tuple[str | None, str | None]:
    """(recipe A, recipe B) of an A/B: its comparisons' names, else its recorded configuration's order."""
    pa = r.paired_aiperf
    if pa is not None and pa.comparisons:
        return pa.comparisons[0].recipe_a, pa.comparisons[0].recipe_b
    names = list((_config(r).get("recipes") or {}))
    if not names:
        names = list(dict.fromkeys(run.recipe for run in r.runs))
    return (names + [None, None])[0], (names + [None, None])[1]


def _workload(r: OptimizationPocReceiptV2) -> dict[str, Any]:
    """The workload's conditions: the decided block's (``paired_aiperf`` / ``bench``), else the recorded
    configuration's (an incomplete receipt has no block)."""
    block = r.paired_aiperf or r.bench
    if block is not None:
        w = block.workload
        return {"workload": w.preset, "input_tokens": w.input_tokens, "output_tokens": w.output_tokens,
                "streaming": w.streaming, "window_s": w.window_s, "warmup_s": w.warmup_s,
                "_requests": dict(w.requests_per_point)}
    w = _config(r).get("workload") or {}
    return {"workload": w.get("name"), "input_tokens": w.get("input_tokens"), "output_tokens": w.get("output_tokens"),
            "streaming": w.get("streaming"), "window_s": w.get("window_s"), "warmup_s": w.get("warmup_s"),
            "_requests": {}}


def _engines(r: OptimizationPocReceiptV2) -> dict[str, tuple[str, str | None]]:
    """recipe -> (engine kind, its version(s) as the engine records give them, joined with '; ')."""
    out: dict[str, tuple[str, list[str]]] = {}
    for e in r.engines:
        kind, versions = out.setdefault(e.recipe, (e.engine, []))
        if e.version and e.version not in versions:
            versions.append(e.version)
    return {k: (kind, "; ".join(v) or None) for k, (kind, v) in out.items()}


def _role(metric: str, policy: dict[str, Any]) -> str:
    if metric == policy.get("primary_metric"):
        return "primary"
    return "guard" if metric in (policy.get("guard_metrics") or []) else "described"


def _serving(name: str, r: OptimizationPocReceiptV2) -> list[Section]:
    bench = _is_bench(r)
    a, b = (None, None) if bench else _arms(r)
    w = _workload(r)
    requests = w.pop("_requests")
    engines = _engines(r)
    pa = r.paired_aiperf
    code = pa.decision_code if pa is not None else (r.public_workload_reproduction.decision_code
                                                    if r.public_workload_reproduction is not None else None)
    base = _common(name, r) | w | {"decision_code": code}
    rows: list[dict[str, Any]] = []
    for run in r.runs:
        engine, engine_version = engines.get(run.recipe, (None, None))
        rows.append(base | {
            "row_kind": "run", "arm": "A" if run.recipe == a else ("B" if run.recipe == b else None),
            "recipe": run.recipe, "engine": engine, "engine_version": engine_version, "driver": run.driver,
            "driver_version": r.drivers.get(run.driver), "run_index": run.run_index, "concurrency": run.concurrency,
            "requests_per_point": requests.get(str(run.concurrency)), "started_at": _iso(run.started_at),
            "duration_s": run.duration_s, "status": run.status, "ok": run.status == "ok",
            "requests_completed": run.requests_completed, "failures": run.failures,
            "length_mismatches": run.length_mismatches, **{k: getattr(run, k) for k in RUN_METRICS},
            "token_count_source": run.token_count_source, "raw_export": run.raw_export,
            "note": "; ".join(n for n in (run.error, *run.notes) if n) or None})
    versus = base | {"arm": "B", "recipe": b, "reference": a}
    if pa is not None:
        versus |= {"driver": pa.primary_driver, "driver_version": r.drivers.get(pa.primary_driver)}
        for s in pa.statistics:
            paired = s.n_pairs is not None
            described = s.verdict is None or s.in_decision_family is False
            rows.append(versus | {
                "row_kind": "statistic", "concurrency": s.concurrency,
                "requests_per_point": requests.get(str(s.concurrency)), "metric": s.metric,
                "higher_is_better": s.higher_is_better, "ratio": s.ratio_b_over_a,
                "ratio_definition": ("geometric mean of B_i / A_i over window pairs" if paired
                                     else "median of B's runs / median of A's runs"),
                "ci_low": s.ci_low, "ci_high": s.ci_high, "confidence": s.confidence, "p_value": s.p_value,
                "n": s.n_pairs if paired else min(len(s.a_values), len(s.b_values)), "lab_verdict": s.verdict,
                "verdict": normalized(s.verdict), "role": "described" if described else _role(s.metric, r.policy),
                "method": s.interval_method})
        if pa.family is not None:
            for t in pa.family.tests:
                pooled = f"pooled over concurrencies {', '.join(map(str, t.concurrencies))}"
                rows.append(versus | {
                    "row_kind": "family_test", "metric": t.metric, "higher_is_better": t.higher_is_better,
                    "ratio": t.ratio_b_over_a, "ratio_definition": t.estimand, "ci_low": t.ci_low,
                    "ci_high": t.ci_high, "confidence": t.interval_level, "p_value": t.p_holm, "n": t.n_pairs,
                    "lab_verdict": t.verdict, "verdict": normalized(t.verdict), "role": t.role,
                    "method": t.interval_method, "note": f"{pooled}; {t.note}" if t.note else pooled})
    if r.bench is not None:
        for ag in r.bench.driver_agreement:
            rows.append(base | {
                "row_kind": "agreement", "recipe": r.bench.recipe, "driver": ag.driver,
                "driver_version": r.drivers.get(ag.driver), "reference": ag.reference_driver,
                "concurrency": ag.concurrency, "requests_per_point": requests.get(str(ag.concurrency)),
                "metric": ag.metric, "higher_is_better": None,
                "ratio": ag.ratio if ag.ratio is not None else ag.median / ag.reference_median,
                "ratio_definition": "median of this driver's runs / median of the reference driver's runs",
                "ci_low": ag.ci_low, "ci_high": ag.ci_high, "confidence": ag.confidence, "n": ag.runs,
                "lab_verdict": ag.verdict, "verdict": normalized(ag.verdict), "role": "agreement",
                "method": ag.interval_method,
                "note": f"target ±{ag.target_percent:g} percent; difference {ag.difference_percent:+.2f} percent"})
    prediction = None
    if r.kernel_in_serving is not None:
        prediction = _prediction_summary(r.kernel_in_serving.prediction)
        p = r.kernel_in_serving.prediction
        for c in p.get("concurrencies", []):
            measured = c.get("measured") or {}
            rows.append(versus | {
                "row_kind": "prediction", "implementation": p.get("candidate"), "timing_mode": p.get("mode"),
                "rows": c.get("decode_rows"), "concurrency": c.get("concurrency"),
                "requests_per_point": requests.get(str(c.get("concurrency"))), "metric": "output_tok_s",
                "higher_is_better": True, "ratio": measured.get("ratio_b_over_a"),
                "ratio_definition": "measured B/A output throughput (the A/B's statistic)",
                "ci_low": measured.get("ci_low"), "ci_high": measured.get("ci_high"),
                "confidence": measured.get("confidence"), "predicted_ratio": c.get("predicted_ratio"),
                "lab_verdict": c.get("verdict"), "verdict": normalized(c.get("verdict")), "role": "prediction",
                "method": p.get("verdict_rule"), "note": c.get("why")})
    sec = Section(name=name, lab="serving", kind=_kind(r), model=r, rows=rows)
    if pa is not None:
        decision, reason = pa.decision, pa.reason
        kind_read = "family_test" if pa.family is not None else "statistic"
        read = [x for x in rows if x["row_kind"] == kind_read and x["role"] in ("primary", "guard")]
        worse = [x for x in read if x["verdict"] == "worse"]
        head = _least_favourable(worse or [x for x in read if x["role"] == "primary"])
        rule = SERVING_PAIRED_HEADLINE_RULE if pa.family is not None else SERVING_RUNS_HEADLINE_RULE
    else:
        pw = r.public_workload_reproduction
        decision, reason = (pw.decision, pw.reason) if pw is not None else (None, None)
        head, rule = None, None
    sec.summary = _section_summary(sec, subject=r.bench.recipe if r.bench is not None else b, reference=a,
                                   decision_code=code, decision=decision, reason=reason, headline=head,
                                   headline_rule=rule, prediction=prediction, quality_gate=_quality_gate(r))
    sec.summary["slo"] = _slo_summary(r)
    if sec.summary["evidence_class"] is None:  # a serve ab / bench receipt: its class from what it drove
        from ..serving.receipt import serving_evidence_class

        sec.summary["evidence_class"] = serving_evidence_class(e.engine for e in r.engines)
    return [sec]


def _slo_summary(r: OptimizationPocReceiptV2) -> dict[str, Any] | None:
    """Per recipe, the runs that recorded SLOs and how many met every one (``decide.slo``), as ``infercrane gate``
    reads them; None where no run recorded SLOs."""
    out: dict[str, dict[str, int]] = {}
    for run in r.runs:
        if run.slo is None or run.status != "ok":
            continue
        entry = out.setdefault(run.recipe, {"runs": 0, "met": 0})
        entry["runs"] += 1
        entry["met"] += bool(run.slo.get("all_met"))
    return {"by_recipe": out} if out else None


def _quality_gate(r: OptimizationPocReceiptV2) -> dict[str, Any] | None:
    """A serving section's semantic-quality gate, as ``infercrane gate`` and a dashboard read it."""
    q = r.quality_gate
    if q is None:
        return None
    return {"ran": q.ran, "verdict": q.verdict, "reason": q.reason if q.ran else q.why_not}


def _prediction_summary(p: dict[str, Any]) -> dict[str, Any]:
    """The kernel lab's prediction beside the measurement, per concurrency (``decide.prediction``)."""
    return {
        "candidate": p.get("candidate"), "incumbent": p.get("incumbent"), "timing_mode": p.get("mode"),
        "verdict_rule": p.get("verdict_rule"),
        "concurrencies": [{
            "concurrency": c.get("concurrency"), "predicted_ratio": c.get("predicted_ratio"),
            "ratio": (c.get("measured") or {}).get("ratio_b_over_a"), "ci_low": (c.get("measured") or {}).get("ci_low"),
            "ci_high": (c.get("measured") or {}).get("ci_high"), "lab_verdict": c.get("verdict"),
            "verdict": normalized(c.get("verdict")), "informative": c.get("informative")}
            for c in p.get("concurrencies", [])],
    }

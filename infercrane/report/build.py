"""A receipt, validated, becomes a ``ReceiptReport``: its decisions, boundary and conditions first, then its
evidence as sections (``kernel.py`` for the kernel lab, ``serving.py`` for the serving lab). A receipt that does
not validate is refused: a report is never stronger than the evidence it draws."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .kernel import custom_kernel_sections, kernel_sections
from .model import Decision, ReceiptHead, ReceiptReport, Section

SCREENING = "infercrane.cuda-kernel-screening-receipt"
POC = "infercrane.optimization-poc-receipt"


def _versions(software: dict[str, Any], names: tuple[str, ...]) -> str:
    return ", ".join(f"{n} {software[n]}" for n in names if software.get(n))


def _screening_head(file: str, doc: dict[str, Any]) -> ReceiptHead:
    cand = doc.get("candidate") or {}
    decisions = [Decision(f"kernel screen: {cand.get('key') or cand.get('implementation', 'candidate')}",
                          doc["decision"], doc["reason"], doc.get("decision_code", ""))]
    decisions += [Decision(f"kernel screen: {o['implementation']}", o["decision"], o["reason"],
                           o.get("decision_code", "")) for o in doc.get("other_candidates", [])]
    hw = doc.get("hardware") or {}
    shape = doc.get("model_shape_source") or {}
    result = doc.get("result") or {}
    conditions = [
        ("GPU", f"{hw.get('gpu', '')} ({hw.get('compute_capability', '')}, driver {hw.get('driver', '')})"
         + (f"; requested {hw['gpu_request']}" if hw.get("gpu_request") else "")),
        ("software", _versions(doc.get("software") or {}, ("infercrane", "torch", "triton", "cupy", "vllm"))),
        ("op", f"{shape.get('operator', shape.get('op', ''))}: {shape.get('id', '')}, hidden "
               f"{shape.get('hidden_size', '')}, {shape.get('dtype', '')}"),
        ("decision reads", f"{doc.get('measurements_timing_mode') or 'no timing'} mode"),
    ]
    if result:
        conditions.append(("trials", f"{result.get('trials')} trials × {result.get('samples_per_trial')} samples; "
                                     f"rows {', '.join(map(str, result.get('rows') or []))}"))
    warnings = []
    if doc.get("evidence_class") == "cpu-functional-check":
        warnings.append("functional check on a CPU: correctness only, no timing claim")
    return ReceiptHead(file=file, schema_version=doc["schema_version"], kind="kernel screen", decisions=decisions,
                       qualification_boundary=doc["qualification_boundary"], conditions=conditions,
                       warnings=warnings)


def _poc_kind(doc: dict[str, Any]) -> str:
    if doc.get("kernel_in_serving"):
        return "kernel in vLLM"
    if doc.get("custom_kernel") or doc.get("evidence"):
        return "PoC"
    if doc.get("paired_aiperf"):
        return "serving A/B"
    return "serving benchmark"


def _kis_decision(kis: dict[str, Any]) -> Decision:
    pred = kis["prediction"]
    parts = []
    for c in pred.get("concurrencies", []):
        m = c["measured"]
        parts.append(f"c = {c['concurrency']}: predicted B/A {c['predicted_ratio']:.5f}, measured "
                     f"{m['ratio_b_over_a']:.4f} ({m['ci_low']:.4f}–{m['ci_high']:.4f}): {c['verdict']}"
                     + ("" if c.get("informative") else " (the interval is wider than the predicted effect)"))
    return Decision(f"prediction against measurement: {pred.get('candidate', '')} vs {pred.get('incumbent', '')}",
                    "; ".join(parts) or "no concurrency compared", pred.get("verdict_rule", ""))


def _poc_head(file: str, doc: dict[str, Any]) -> ReceiptHead:
    decisions = []
    ck = doc.get("custom_kernel")
    if isinstance(ck, dict):
        for key, g in ck.items():
            if isinstance(g, dict) and "decision" in g:
                decisions.append(Decision(f"custom kernel ({key}: {g.get('gpu', '')})", g["decision"],
                                          g.get("reason", ""), g.get("decision_code", "")))
    pa = doc.get("paired_aiperf")
    if pa:
        decisions.append(Decision(f"paired serving A/B ({pa.get('gpu', '')})", pa["decision"], pa.get("reason", ""),
                                  pa.get("decision_code", "")))
    pub = doc.get("public_workload_reproduction")
    if pub and pub.get("decision"):
        decisions.append(Decision("public workload", pub["decision"], pub.get("comparison_boundary", "")))
    if doc.get("kernel_in_serving"):
        decisions.append(_kis_decision(doc["kernel_in_serving"]))
    if not decisions and doc.get("bench"):
        decisions.append(Decision("serving benchmark", "no decision: a benchmark of one recipe measures, it does "
                                  "not compare", ""))
    model = doc.get("model") or {}
    workload = (pa or {}).get("workload") or ((doc.get("bench") or {}).get("workload")) or {}
    gpu = (pa or {}).get("gpu") or (doc.get("bench") or {}).get("gpu") or ""
    conditions = [
        ("GPU", gpu or "see each section"),
        ("model", f"{model.get('id', '')} (weights: {model.get('weights', 'real')})"),
        ("software", _versions(doc.get("software") or {}, ("infercrane", "vllm", "aiperf", "torch", "triton"))),
    ]
    if workload:
        conditions.append(("workload", f"{workload.get('preset', '')}: {workload.get('input_tokens')} → "
                                       f"{workload.get('output_tokens')} tokens, c = "
                                       f"{', '.join(map(str, workload.get('concurrency', [])))}, "
                                       f"{workload.get('profile_runs')} runs per arm, order "
                                       f"{workload.get('order', '')}"))
    warnings = []
    if doc.get("complete") is False:
        warnings.append(f"incomplete: {doc.get('incomplete_reason') or 'no reason recorded'}")
    if doc.get("evidence_class") == "functional-check":
        warnings.append("functional check: some of this evidence comes from a CPU or InferCrane's test server, "
                        "not from a GPU serving engine")
    return ReceiptHead(file=file, schema_version=doc["schema_version"], kind=_poc_kind(doc), decisions=decisions,
                       qualification_boundary=doc["qualification_boundary"], conditions=conditions,
                       warnings=warnings)


def _poc_sections(doc: dict[str, Any]) -> list[Section]:
    from .serving import serving_sections

    sections = custom_kernel_sections(doc)
    for gpu, kernel_doc in ((doc.get("evidence") or {}).get("kernel") or {}).items():
        if isinstance(kernel_doc, dict) and kernel_doc.get("result"):
            for s in kernel_sections(kernel_doc):
                s.title = f"kernel screen ({gpu}): {s.title}"
                for f in s.figures:
                    f.name = f"kernel-{gpu}-{f.name}"
                sections.append(s)
    return sections + serving_sections(doc)


def receipt_report(path: Path) -> ReceiptReport:
    """Validate ``path`` (raises ReceiptInvalid / InputError) and lay it out as a report."""
    from ..receipts.registry import family
    from ..receipts.validate import load_receipt

    doc = load_receipt(path).document
    fam = family(doc["schema_version"])
    if fam == SCREENING:
        return ReceiptReport(head=_screening_head(str(path), doc), sections=kernel_sections(doc))
    return ReceiptReport(head=_poc_head(str(path), doc), sections=_poc_sections(doc))

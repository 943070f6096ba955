"""A receipt, validated, becomes a ``ReceiptReport``: its decisions, boundary and conditions first, then its
evidence as sections (``kernel.py`` for the kernel lab, ``serving.py`` for the serving lab). A receipt that does
not validate is refused: a report is never stronger than the evidence it draws."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..receipts.registry import family
from .kernel import custom_kernel_sections, kernel_sections
from .model import Decision, ReceiptHead, ReceiptReport, Section

SCREENING = "infercrane.cuda-kernel-screening-receipt"


KINDS = (("kernel_in_serving", "kernel in vLLM"), ("custom_kernel", "PoC"), ("evidence", "PoC"),
         ("paired_aiperf", "serving A/B"), ("bench", "serving benchmark"),
         ("public_workload_reproduction", "serving benchmark"))


def _kind(doc: dict[str, Any]) -> str:
    if family(doc["schema_version"]) == SCREENING:
        return "kernel screen"
    return next((label for key, label in KINDS if doc.get(key)), "receipt")


def _head(file: str, doc: dict[str, Any]) -> ReceiptHead:
    """The page's head from the same reading of the receipt that ``receipt show`` leads with (``report.console``:
    every section's decision, reason and boundaries; the conditions its numbers hold under). A legacy format says so
    first: its decisions were not derived again."""
    from ..receipts.registry import legacy_note
    from .console import conditions, is_functional, verdicts

    decisions = []
    for v in verdicts(doc):
        reason = v.reason or ""
        for label, text in v.boundaries:
            if label != "qualification_boundary":  # the receipt's own boundary has its box on the page
                reason += f"{' | ' if reason else ''}{label.replace('_', ' ')}: {text}"
        decisions.append(Decision(section=v.name(), decision=v.decision or f"no decision: {v.note}",
                                  reason=reason, code=v.code or ""))
    legacy = legacy_note(doc["schema_version"])
    warnings = [f"LEGACY: {legacy}"] if legacy else []
    if doc.get("complete") is False:
        warnings.append(f"incomplete: {doc.get('incomplete_reason') or 'no reason recorded'}")
    parts = [p for p in doc.get("evidence_parts") or [] if isinstance(p, dict)]
    functional = [f"{p['section']} {p['gpu']}" for p in parts if is_functional(p)]
    if functional and len(functional) < len(parts):  # a merge of timed and functional parts: which is which
        measured = [f"{p['section']} {p['gpu']}" for p in parts if not is_functional(p)]
        warnings.append(f"functional check in part: {', '.join(functional)} come(s) from a CPU or InferCrane's test "
                        f"server, not from a GPU, and support(s) no speed claim; measured on a GPU: "
                        f"{', '.join(measured)}")
    elif is_functional(doc):
        warnings.append("functional check: some or all of this evidence comes from a CPU or InferCrane's test "
                        "server, not from a GPU; it supports no speed claim")
    return ReceiptHead(file=file, schema_version=doc["schema_version"], kind=_kind(doc), decisions=decisions,
                       qualification_boundary=doc["qualification_boundary"], conditions=conditions(doc),
                       warnings=warnings, legacy=legacy)


def _poc_sections(doc: dict[str, Any]) -> list[Section]:
    from ..poc.gpus import receipt_hardware
    from .console import device_label, is_functional, no_gpu
    from .serving import serving_sections

    sections = custom_kernel_sections(doc)
    for gpu, kernel_doc in ((doc.get("evidence") or {}).get("kernel") or {}).items():
        if isinstance(kernel_doc, dict) and kernel_doc.get("result"):
            device = receipt_hardware(kernel_doc).get("gpu")
            where = (f", {device_label(device, functional=is_functional(kernel_doc))}" if no_gpu(device) else
                     f" ({gpu})")
            for s in kernel_sections(kernel_doc):
                s.title = f"kernel screen{where}: {s.title}"
                for f in s.figures:
                    f.name = f"kernel-{gpu}-{f.name}"
                sections.append(s)
    return sections + serving_sections(doc)


def receipt_report(path: Path) -> ReceiptReport:
    """Validate ``path`` (raises ReceiptInvalid / InputError) and lay it out as a report."""
    from ..receipts.validate import load_receipt

    doc = load_receipt(path).document
    sections = kernel_sections(doc) if family(doc["schema_version"]) == SCREENING else _poc_sections(doc)
    return ReceiptReport(head=_head(str(path), doc), sections=sections)

"""PoC receipts built from receipts without running anything, for the PoC tests.

The GPU PoC is made of the committed H200 evidence (the kernel lab's fused add + RMSNorm screen and the seed-paired
eager-vs-compiled A/B, both measured on an H200) plus a public-workload A/B of synthetic runs (test data, not a
measurement) labelled as measured on the same GPU, so that every section of the receipt is filled from real-shaped
evidence in a fraction of a second.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from evidence import archived

from infercrane.hashing import HASH_FIELD, content_hash

REPO = Path(__file__).resolve().parents[2]
H200_KERNEL = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")
H200_PAIRED = REPO / "docs/benchmarks/2026-12-01-h200-serving/seed-paired-eager-vs-compiled.json"
H100 = "NVIDIA H100 80GB HBM3"


def rehash(doc: dict[str, Any]) -> dict[str, Any]:
    doc = {k: v for k, v in doc.items() if k != HASH_FIELD}
    doc[HASH_FIELD] = content_hash(doc)
    return doc


def _public_run(arm: str, run: int, c: int, tok_s: float, ttft: float) -> Any:
    from infercrane.serving.metrics import RunMetrics

    return RunMetrics(arm=arm, recipe_sha256="0" * 64, run_index=run, concurrency=c, driver="aiperf",
                      driver_version="0.12.0", token_count_source="server", streaming=True,
                      expected_output_tokens=500, raw_export_path=f"synthetic/{arm}/run{run:02d}", requests_sent=1000,
                      requests_completed=1000, failures=0, output_length_mismatches=0, output_tokens_total=500000,
                      duration_s=500000 / tok_s, output_tok_s=tok_s, request_s=tok_s / 500, ttft_p50_ms=ttft * 0.8,
                      ttft_p95_ms=ttft, ttft_p99_ms=ttft * 1.1, tpot_p50_ms=7.0, tpot_p95_ms=7.3, tpot_p99_ms=7.6,
                      e2e_p50_ms=3800.0, e2e_p95_ms=3960.0 + run, e2e_p99_ms=4100.0,
                      started_at="2026-12-01T00:00:00+00:00")


def synthetic_public_ab(hardware: dict[str, Any], model: dict[str, Any], policy: Any = None) -> dict[str, Any]:
    """A serve-ab receipt of balanced vs throughput on public-1000 from synthetic runs (test data)."""
    from infercrane.decide.policy import load_policy
    from infercrane.env.capture import provenance
    from infercrane.serving.receipt import build_document, plan_config
    from infercrane.serving.recipes import load_recipe
    from infercrane.serving.workload import PlanResult, load_workload, plan_runs

    recs = [load_recipe("balanced"), load_recipe("throughput")]
    w = load_workload("public-1000")
    result = PlanResult(workload=w, recipes={r.name: r for r in recs}, drivers=["aiperf"], order=w.arm_order,
                        plan=plan_runs([r.name for r in recs], w))
    result.runs += [_public_run("balanced", i, 100, 12950 + 3 * i, 394 + i) for i in range(5)]
    result.runs += [_public_run("throughput", i, 100, 12880 + 3 * i, 407 + i) for i in range(5)]
    result.complete = True
    prov = provenance(config=plan_config("ab", recs, w, {"order": None}), command_line=["test"], run_id="public-1",
                      hardware_info=hardware, model=model)
    doc = build_document(result, kind="ab", policy=policy or load_policy("serving"), provenance=prov)
    return rehash(doc)


def poc_of(docs: dict[str, dict[str, Any]], *, complete: bool = True) -> dict[str, Any]:
    """A PoC receipt document over ``docs`` (section -> receipt), as ``infercrane poc`` assembles it."""
    from infercrane.env.capture import provenance
    from infercrane.poc.derive import assemble, decide_with_steps, decode_steps_for, kernel_steps_agree
    from infercrane.poc.gpus import gpu_key_of_receipt

    ev: dict[str, Any] = {"kernel": {}, "paired": {}, "public": {}, "serving_gpu": None}
    for s in ("paired", "public"):
        if s in docs:
            ev[s][gpu_key_of_receipt(docs[s])] = docs[s]
            ev["serving_gpu"] = ev["serving_gpu"] or gpu_key_of_receipt(docs[s])
    if "kernel" in docs:
        k, g = docs["kernel"], gpu_key_of_receipt(docs["kernel"])
        if g in ev["paired"]:
            steps = decode_steps_for(k, ev["paired"][g])
            if not kernel_steps_agree(k, steps):
                k = decide_with_steps(k, steps, measured="kernel.json")
        ev["kernel"][g] = k
    from infercrane.poc.gpus import receipt_hardware

    # infercrane poc records the machine it ran on, the one that measured its sections
    machine = copy.deepcopy(receipt_hardware(next(docs[s] for s in ("kernel", "paired", "public") if s in docs)))
    prov = provenance(config={"command": "poc", "test": True}, command_line=["test"], run_id="poc-1",
                      hardware_info=machine)
    doc = assemble(ev, provenance=prov, complete=complete, incomplete_reason=None if complete else "test: partial")
    return rehash(doc)


def relabel(doc: dict[str, Any], gpu: str) -> dict[str, Any]:
    """A receipt as if measured on another GPU: its hardware blocks (and every embedded receipt's, and a kernel
    screen's measured device) renamed, every hash recomputed. For a PoC receipt the evidence is filed under the new
    GPU type and the sections derived again."""
    from infercrane.poc.derive import derive_sections
    from infercrane.poc.gpus import gpu_key

    doc = copy.deepcopy(doc)
    if doc.get("evidence") is not None:
        ev = doc["evidence"]
        for s in ("kernel", "paired", "public"):
            ev[s] = {gpu_key(gpu): relabel(d, gpu) for d in ev[s].values()}
        ev["serving_gpu"] = gpu_key(gpu) if ev["serving_gpu"] else None
        if ev["kernel"] and ev["paired"]:  # the kernel's decode steps name the paired receipt by its new hash
            from infercrane.poc.derive import decide_with_steps, decode_steps_for

            g = gpu_key(gpu)
            k = ev["kernel"][g]
            measured = {k2: v for k2, v in k.items() if k2 not in ("decode_steps",)}
            ev["kernel"][g] = decide_with_steps(rehash(measured | {"decode_step": None}),
                                                decode_steps_for(k, ev["paired"][g]), measured="kernel.json")
        doc.update({k: v for k, v in derive_sections(ev).items()})
    for hw in (doc.get("hardware"), (doc.get("provenance") or {}).get("hardware")):
        if hw is not None:
            hw["gpu"] = gpu
    for block in ("paired_aiperf", "bench"):
        if doc.get(block) and "gpu" in doc[block] and doc.get("evidence") is None:
            doc[block]["gpu"] = gpu
    if doc.get("cost") is not None and doc.get("evidence") is None:  # priced at the new GPU type's price
        from infercrane.serving.receipt import rederive

        doc["cost"] = rederive(doc)["cost"]
    if doc.get("result") is not None:  # a kernel receipt: the device its screen measured is the new GPU too
        from infercrane.kernels.receipt import derive
        from infercrane.receipts.models_v3 import CudaKernelScreeningReceiptV3

        doc["result"]["device"] |= {"type": "cuda", "name": gpu}
        k = CudaKernelScreeningReceiptV3.model_validate(doc)
        doc.update(derive(k.result, k.policy, k.decode_steps or k.decode_step))  # a functional reason names it
    return rehash(doc)


def on_device(doc: dict[str, Any], uuid: str, index: int = 0) -> dict[str, Any]:
    """A receipt as if measured on the device ``uuid`` (host index ``index``): its hardware blocks (and every embedded
    receipt's) say so, every hash recomputed. For a PoC receipt the sections are derived again."""
    from infercrane.poc.derive import derive_sections

    doc = copy.deepcopy(doc)
    if doc.get("evidence") is not None:
        ev = doc["evidence"]
        for s in ("kernel", "paired", "public"):
            ev[s] = {g: on_device(d, uuid, index) for g, d in ev[s].items()}
        if ev["kernel"] and ev["paired"]:  # the kernel's decode steps name the paired receipt by its new hash
            from infercrane.poc.derive import decide_with_steps, decode_steps_for

            for g, k in ev["kernel"].items():
                if g in ev["paired"]:
                    measured = {k2: v for k2, v in k.items() if k2 not in ("decode_steps",)}
                    ev["kernel"][g] = decide_with_steps(rehash(measured | {"decode_step": None}),
                                                        decode_steps_for(k, ev["paired"][g]), measured="kernel.json")
        doc.update(derive_sections(ev))
    for hw in (doc.get("hardware"), (doc.get("provenance") or {}).get("hardware")):
        if hw is not None:
            hw.update(gpu_uuid=uuid, gpu_index=index)
    return rehash(doc)

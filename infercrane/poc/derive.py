"""A PoC receipt's sections, derived from the receipts behind them (``evidence``).

``evidence`` holds, per GPU type key (``infercrane.poc.gpus``), the kernel v3 receipt of the screen (``kernel``) and
the ``serve ab`` receipts of the paired A/B (``paired``) and of the public-workload A/B (``public``), whole. From them:

* ``custom_kernel``: the seed's block; per GPU type the kernel receipt's table in the seed's names (``custom_ms``,
  ``vllm_ms``, ``speedup_vs_vllm``, ``speedup_vs_eager``), its correctness, decision and reason. The decision is the
  kernel receipt's, decided with one decode step per row count taken from that GPU's paired A/B
  (``decode_steps_for``: the candidate recipe B's median TPOT p50 at concurrency ``c`` for rows ``c``);
* ``paired_aiperf``: the paired A/B's block as that receipt states it;
* ``public_workload_reproduction``: the public A/B's two arms set against the workload's published example, the A/B's
  decision, and a comparison boundary that says what the published example discloses;
* ``runtime_compatibility``, ``drivers``, ``model``, the serving ``policy``, the ``qualification_boundary`` and the
  receipt's ``evidence_class``, the weakest of its parts' (``evidence_parts``: each embedded receipt's own class,
  named by section and GPU, so that a merge of a timed screen and a functional check says which part is which).

``infercrane poc`` and ``receipt merge`` write these; ``receipt validate`` derives them again from the embedded
receipts (after validating each of those fully) and names every field that disagrees.
"""
from __future__ import annotations

import copy
from typing import Any

from .gpus import gpu_key_of_receipt

Problem = tuple[str, str]

EVIDENCE_SECTIONS: tuple[str, ...] = ("kernel", "paired", "public")
# The PoC receipt fields this module owns; validation compares each with a fresh derivation.
DERIVED_FIELDS: tuple[str, ...] = ("evidence_class", "evidence_parts", "model", "custom_kernel", "paired_aiperf",
                                   "bench", "public_workload_reproduction", "runtime_compatibility",
                                   "qualification_boundary", "drivers", "policy", "policy_sha256", "quality_gate",
                                   "cost")
KERNEL_ONLY = "operator microbenchmark only; no end-to-end serving claim"
# The kernel table's baselines in the seed's names (``vllm_ms``: vLLM's own kernel).
SEED_BASELINES = (("vllm_vendor", "vllm"), ("eager", "eager"), ("torch_compile", "torch_compile"))


# --- which block comes from which GPU --------------------------------------------------------------------------

def section_gpu(evidence: dict[str, Any], section: str) -> str | None:
    """The GPU type whose ``section`` receipt is the PoC's top-level block: ``serving_gpu`` when that section has
    it, else the section's first GPU type in sorted order."""
    held = evidence.get(section) or {}
    if not held:
        return None
    chosen = evidence.get("serving_gpu")
    return chosen if chosen in held else sorted(held)[0]


def _top(evidence: dict[str, Any], section: str) -> dict[str, Any] | None:
    g = section_gpu(evidence, section)
    return evidence[section][g] if g is not None else None


def policy_identity(doc: dict[str, Any]) -> str:
    """The sha256 of the policy a receipt was decided under, read through the policy's own model (so a receipt written
    before a policy field existed compares by the value that stood in for it): the kernel policy of a kernel
    receipt, the serving policy (its workload notes aside) of a serving or PoC receipt."""
    from ..decide.policy import KernelPolicy, policy_sha256

    if "screening" in str(doc.get("schema_version")):
        return policy_sha256(KernelPolicy.model_validate(doc["policy"]))
    from ..serving.receipt import receipt_policy

    return policy_sha256(receipt_policy(doc))


# --- the kernel's decode steps ------------------------------------------------------------------------------------

def candidate_recipe(paired: dict[str, Any]) -> str:
    """The paired A/B's candidate recipe (B), whose TPOT is the decode step: the second recipe of its recorded
    plan."""
    recipes = list(paired["provenance"]["config"]["recipes"])
    if len(recipes) != 2:
        raise ValueError(f"a paired A/B names two recipes, this one {recipes}")
    return recipes[1]


def decode_steps_for(kernel: dict[str, Any], paired: dict[str, Any]) -> list[Any]:
    """One decode step per decision row of the kernel screen that is a concurrency of the paired A/B: the median
    over the candidate recipe's ok runs at that concurrency of TPOT p50 (``kernels.receipt.tpot_decode_steps``)."""
    from ..decide.policy import KernelPolicy
    from ..kernels.receipt import tpot_decode_steps

    policy = KernelPolicy.model_validate(kernel["policy"])
    rows = [r for r in kernel["result"]["rows"] if policy.decides_on(r)]
    label = f"paired A/B receipt {paired['content_sha256'][:16]}"
    return tpot_decode_steps(paired, candidate_recipe(paired), rows, label)


def steps_dump(steps: list[Any]) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json") for s in steps]


def kernel_steps_agree(kernel: dict[str, Any], steps: list[Any]) -> bool:
    return kernel.get("decode_step") is None and (kernel.get("decode_steps") or []) == steps_dump(steps)


def decide_with_steps(kernel: dict[str, Any], steps: list[Any], *, measured: str) -> dict[str, Any]:
    """The kernel receipt decided again (as ``kernel decide`` does, under its own policy) with one decode step per
    row count; it names the receipt it was decided from (``measured``: where that one lies, and its hash)."""
    from ..env.capture import provenance
    from ..kernels.receipt import build_document
    from ..hashing import HASH_FIELD, content_hash
    from ..receipts.models_v3 import CudaKernelScreeningReceiptV3

    model = CudaKernelScreeningReceiptV3.model_validate(kernel)
    decided_from = {"receipt": measured, "content_sha256": kernel["content_sha256"]}
    prov = provenance(config={"decided_from": decided_from, "measured_config": kernel["provenance"]["config"],
                              "decode_step": steps_dump(steps), "policy": "the measured receipt's"},
                      hardware_info=kernel["hardware"], software=kernel["software"], run_id=kernel["app_id"],
                      model=kernel["provenance"].get("model"))
    doc = build_document(model.result, model.policy, provenance=prov,
                         model_source=kernel["model_shape_source"]["source"], decode_step=list(steps),
                         decided_from=decided_from)
    doc[HASH_FIELD] = content_hash(doc)
    return doc


# --- custom_kernel ------------------------------------------------------------------------------------------------

def kernel_gpu_section(k: dict[str, Any]) -> dict[str, Any]:
    """One GPU type's section of ``custom_kernel`` from its (decided) kernel receipt."""
    cand = k["candidate"]["key"]
    rows = []
    for m in k["measurements"]:
        row: dict[str, Any] = {"rows": m["rows"], "custom_ms": m[f"{cand}_ms"]}
        for key, seed_name in SEED_BASELINES:
            if m.get(f"{key}_ms") is not None and key != cand:
                row[f"{seed_name}_ms"] = m[f"{key}_ms"]
                row[f"speedup_vs_{seed_name}"] = m[f"speedup_vs_{key}"]
        rows.append(row)
    return {
        "gpu": k["hardware"]["gpu"], "compute_capability": k["hardware"]["compute_capability"], "app_id": k["app_id"],
        "measurements": rows, "evidence_class": k["evidence_class"], "candidate": cand,
        "implementation": k["candidate"]["implementation"], "timing_mode": k["measurements_timing_mode"],
        "correctness": k["candidate"]["correctness"], "decision": k["decision"], "decision_code": k["decision_code"],
        "reason": k["reason"], "amdahl": k["amdahl"],
    }


def custom_kernel_block(kernels: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The seed's ``custom_kernel`` block over every GPU type's kernel receipt: one GPU's decision and reason as they
    are; several GPUs' the same decision once, or each GPU's named."""
    if not kernels:
        return None
    sections = {g: kernel_gpu_section(k) for g, k in sorted(kernels.items())}
    operators = {k["model_shape_source"]["operator"] for k in kernels.values()}
    if len(operators) != 1:
        raise ValueError(f"the kernel receipts screen different operators: {sorted(operators)}")

    def one_or_each(field: str, sep: str) -> str:
        values = {s[field] for s in sections.values()}
        if len(values) == 1:
            return values.pop()
        return sep.join(f"{g}: {s[field]}" for g, s in sections.items())

    decisions = {s["decision"] for s in sections.values()}
    codes = {s["decision_code"] for s in sections.values()}
    decision = decisions.pop() if len(decisions) == 1 else "decided per GPU type: " + "; ".join(
        f"{g}: {s['decision']}" for g, s in sections.items())
    reason = next(iter(sections.values()))["reason"] if len(sections) == 1 else " | ".join(
        f"{g}: {s['reason']}" for g, s in sections.items())
    return {"operator": operators.pop(), "correctness": one_or_each("correctness", "; "), **sections,
            "decision": decision, "reason": reason, "decision_code": codes.pop() if len(codes) == 1 else None}


# --- public_workload_reproduction -----------------------------------------------------------------------------------

def _test_server(doc: dict[str, Any]) -> bool:
    from ..serving.receipt import serving_evidence_class

    return serving_evidence_class(e.get("engine") for e in doc.get("engines", [])) == "functional-check"


def comparison_boundary(published: dict[str, Any] | None, arms: list[dict[str, Any]], workload: str,
                        test_server: bool) -> str:
    """What the published example can and cannot say about this A/B's numbers, by what it discloses."""
    if not published:
        return (f"the workload {workload} has no published example, so nothing outside this A/B is compared; the "
                "decision rests on the two recipes measured here, side by side")
    ref = published["output_tokens_per_second"]
    ratios = ", ".join(f"{a['recipe']} {a['output_tokens_per_second'] / ref * 100:.1f} percent" for a in arms)
    text = f"output throughput against the published example's {ref:g} tok/s: {ratios}; "
    if test_server:
        text += "the engine was InferCrane's test server, so these ratios say nothing about vLLM or any GPU; "
    if published["hardware_and_runtime_disclosed"]:
        text += ("the example discloses its hardware and runtime, so the ratios compare like with like only as far "
                 "as this run's hardware and runtime match them")
    else:
        text += ("the public example omits hardware and runtime versions, so these directional ratios are not an "
                 "apples-to-apples product ranking")
    return text + "; the decision rests on the two recipes measured here, side by side"


def public_block(pub: dict[str, Any]) -> dict[str, Any]:
    """The seed's ``public_workload_reproduction`` from the public-workload A/B: both arms (medians over runs), the
    workload's published example, the A/B's decision and the comparison boundary."""
    pa = pub["paired_aiperf"]
    w = pa["workload"]
    if len(w["concurrency"]) != 1:
        raise ValueError(f"the public-workload A/B runs concurrencies {w['concurrency']}; a reproduction of a "
                         "published example is one concurrency point")
    c = w["concurrency"][0]
    workload = pub["provenance"]["config"]["workload"]
    arms = [{"recipe": m["recipe"], "driver": pa["primary_driver"], "app_id": pa["app_id"],
             **{k: m[k] for k in ("output_tokens_per_second", "request_throughput", "ttft_p95_ms", "tpot_p95_ms",
                                  "latency_p95_ms")},
             "failures": m["failures"], "runs": m["runs"]}
            for m in pa["measurements"] if m["concurrency"] == c]
    published = workload.get("published_example")
    return {
        "workload": {"requests": w["requests_per_point"][str(c)], "concurrency": c,
                     "input_tokens": w["input_tokens"], "output_tokens": w["output_tokens"],
                     "streaming": w["streaming"]},
        "published_example": published, "arms": arms, "decision": pa["decision"],
        "comparison_boundary": comparison_boundary(published, arms, workload["name"], _test_server(pub)),
        "driver_agreement": [], "decision_code": pa["decision_code"], "reason": pa["reason"],
    }


# --- the rest ---------------------------------------------------------------------------------------------------------

def _serving_docs(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """Every serving receipt of the evidence, the top-level ones first."""
    top = [d for d in (_top(evidence, "paired"), _top(evidence, "public")) if d is not None]
    rest = [d for s in ("paired", "public") for _, d in sorted((evidence.get(s) or {}).items())
            if not any(d is t for t in top)]
    return top + rest


def _model_block(evidence: dict[str, Any]) -> dict[str, Any]:
    serving = _serving_docs(evidence)
    if serving:
        return dict(serving[0]["model"])
    k = next(v for _, v in sorted(evidence["kernel"].items()))
    m = k["provenance"].get("model") or {}
    c = m.get("config_fields") or {}
    shape = k["model_shape_source"]
    return {"id": shape["id"], "revision": shape.get("revision") or "unknown", "hidden_size": shape["hidden_size"],
            "layers": shape.get("num_hidden_layers") or c.get("num_hidden_layers"),
            "rms_norm_epsilon": shape["rms_norm_eps"], "weights": "none", "tokenizer": "none"}


def _ledger(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc in _serving_docs(evidence):
        for entry in doc.get("runtime_compatibility", []):
            if entry not in out:
                out.append(entry)
    return out


def _policy(evidence: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The serving policy both A/Bs were decided under (their workload notes aside), and its hash."""
    serving = _serving_docs(evidence)
    if not serving:
        return {}, None
    doc = serving[0]
    return ({k: v for k, v in doc.get("policy", {}).items() if k != "workload_notes"}, doc.get("policy_sha256"))


def _functional_parts(parts: list[dict[str, Any]]) -> list[str]:
    """What a functional PoC's boundary says of its parts (``evidence_parts``), the kernel's and the serving's."""
    functional = {p["section"] for p in parts if p["evidence_class"] == "functional-check"}
    out = []
    if "kernel" in functional:
        out.append("the kernel screen ran without a GPU (correctness against the float32 oracle only, nothing "
                   "timed)")
    if functional & {"paired", "public"}:
        out.append("the serving A/Bs ran against InferCrane's test server (programmed latencies), not vLLM")
    return out


def evidence_parts(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """Each embedded receipt with its own evidence class, by section and GPU key: a kernel screen is a functional
    check when it ran without a GPU, a serving A/B when it ran against InferCrane's test server."""
    from .gpus import receipt_hardware

    out = []
    for section in EVIDENCE_SECTIONS:
        for g, d in sorted((evidence.get(section) or {}).items()):
            gpu = receipt_hardware(d).get("gpu") or "an unrecorded device"
            if section == "kernel":
                functional = d["evidence_class"] == "cpu-functional-check"
                basis = ("kernel screen without a GPU: correctness against the float32 oracle only, nothing timed"
                         if functional else f"kernel screen timed on {gpu}")
            else:
                functional = _test_server(d)
                basis = (f"{section} A/B against InferCrane's test server (programmed latencies), not vLLM"
                         if functional else f"{section} A/B of vLLM on {gpu}")
            out.append({"section": section, "gpu": g, "basis": basis,
                        "evidence_class": "functional-check" if functional else "real-gpu-measurement"})
    return out


def weakest_class(parts: list[dict[str, Any]]) -> str:
    """A PoC receipt's evidence class: functional-check when any part is one, else real-gpu-measurement."""
    return "functional-check" if any(p["evidence_class"] == "functional-check" for p in parts) else \
        "real-gpu-measurement"


def _named(parts: list[dict[str, Any]]) -> str:
    return ", ".join(f"{p['section']} {p['gpu']} ({p['basis']})" for p in parts)


def _quality_gate(evidence: dict[str, Any]) -> dict[str, Any] | None:
    """The paired A/B's semantic-quality gate, as its receipt states it (None: written before the gate)."""
    paired = _top(evidence, "paired")
    return paired.get("quality_gate") if paired is not None else None


def _replayed_trace(doc: dict[str, Any]) -> bool:
    """Whether a serving receipt's A/B replayed a request trace (its workload records the trace)."""
    return bool(((doc.get("paired_aiperf") or {}).get("workload") or {}).get("trace"))


def qualification_boundary(evidence: dict[str, Any]) -> str:
    from ..serving.receipt import QUALITY_BOUNDARY, SYNTHETIC_BOUNDARY

    serving = _serving_docs(evidence)
    dummy = any(d["model"].get("weights") == "dummy" for d in serving)
    gate = _quality_gate(evidence)
    top = {s: d for s in ("paired", "public") if (d := _top(evidence, s)) is not None}
    if any(_replayed_trace(d) for d in top.values()):  # a trace's boundary is its A/B's own: say each section's
        text = "; ".join(f"{s} A/B: {d['qualification_boundary']}" for s, d in top.items())
    elif gate is not None and gate["ran"]:
        text = QUALITY_BOUNDARY.format(verdict=f"paired A/B: gate {gate['verdict']}")
    else:
        text = SYNTHETIC_BOUNDARY.format(weights=", dummy weights" if dummy else "") if serving else KERNEL_ONLY
    if any(k["evidence_class"] == "real-gpu-microbenchmark" for k in evidence.get("kernel", {}).values()):
        text += ("; the kernel's end-to-end figures are Amdahl estimates from its share of the decode step the "
                 "paired A/B measured, not a serving measurement of the kernel")
    each = evidence_parts(evidence)
    functional = [p for p in each if p["evidence_class"] == "functional-check"]
    measured = [p for p in each if p["evidence_class"] == "real-gpu-measurement"]
    if functional and measured:  # timed parts beside functional ones: the whole takes the weakest class, each named
        text = ("MIXED PoC, labelled functional-check by its weakest parts: functional check only, claiming nothing "
                f"about speed: {_named(functional)}; measured on a GPU: {_named(measured)}; " + text)
    elif functional:
        text = ("FUNCTIONAL PoC: " + "; ".join(_functional_parts(each)) + ": it exercises every step and claims "
                "nothing about speed; " + text)
    return text


def derive_sections(evidence: dict[str, Any]) -> dict[str, Any]:
    """Every field of ``DERIVED_FIELDS`` from the evidence (a field the evidence cannot fill is None)."""
    paired, public = _top(evidence, "paired"), _top(evidence, "public")
    policy, policy_sha = _policy(evidence)
    parts = evidence_parts(evidence)
    drivers: dict[str, str] = {}
    for doc in _serving_docs(evidence):
        for name, version in doc.get("drivers", {}).items():
            drivers.setdefault(name, version)
    return {
        "evidence_class": weakest_class(parts),
        "evidence_parts": parts,
        "model": _model_block(evidence),
        "custom_kernel": custom_kernel_block(evidence.get("kernel") or {}),
        "paired_aiperf": paired["paired_aiperf"] if paired is not None else None,
        "bench": None,
        "public_workload_reproduction": public_block(public) if public is not None else None,
        "runtime_compatibility": _ledger(evidence),
        "qualification_boundary": qualification_boundary(evidence),
        "drivers": drivers,
        "policy": policy,
        "policy_sha256": policy_sha,
        "quality_gate": _quality_gate(evidence),
        "cost": cost_across_gpus(evidence),
    }


def cost_across_gpus(evidence: dict[str, Any]) -> dict[str, Any] | None:
    """The serving sections' cost blocks by GPU type (each embedded receipt's own, ``decide.cost.cost_section``), and
    per section, recipe and concurrency the GPU types ranked by dollars per million output tokens; None when no
    serving receipt has a cost block (written before cost)."""
    by: dict[str, dict[str, Any]] = {}
    for section in ("paired", "public"):
        for gpu, doc in sorted((evidence.get(section) or {}).items()):
            if doc.get("cost") is not None:
                by.setdefault(section, {})[gpu] = doc["cost"]
    if not by:
        return None
    ranked = []
    for section, blocks in by.items():
        keys = sorted({(r["recipe"], r["concurrency"]) for b in blocks.values() for r in b["per_recipe"]})
        for recipe, c in keys:
            rows = sorted(((gpu, r["output_usd_per_mtok"]) for gpu, b in blocks.items() for r in b["per_recipe"]
                           if (r["recipe"], r["concurrency"]) == (recipe, c) and r["output_usd_per_mtok"] is not None),
                          key=lambda t: t[1])
            ranked.append({"section": section, "recipe": recipe, "concurrency": c,
                           "output_usd_per_mtok_by_gpu": [{"gpu": g, "usd": v} for g, v in rows]})
    return {"by_gpu": by, "ranked": ranked,
            "method": "each GPU type's own receipt priced at its type's price (decide.cost); ranked cheapest first "
                      "by dollars per million output tokens at the median output throughput"}


def evidence_gpu(doc: dict[str, Any]) -> str:
    return gpu_key_of_receipt(doc)


def assemble(evidence: dict[str, Any], *, provenance: dict[str, Any], complete: bool,
             incomplete_reason: str | None, merged_from: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A PoC receipt document (``infercrane.optimization-poc-receipt/v2``) over ``evidence``; the caller hashes,
    validates and writes it (``receipts.validate.write_receipt``)."""
    from ..receipts.models_v2 import POC_V2

    if not any(evidence.get(s) for s in EVIDENCE_SECTIONS):
        raise ValueError("a PoC receipt needs at least one section's receipt")
    derived = copy.deepcopy(derive_sections(evidence))  # the sections share nothing with the evidence they quote
    return {
        "schema_version": POC_V2,
        "recorded_at": provenance["recorded_at"],
        "evidence_class": derived["evidence_class"],
        "evidence_parts": derived["evidence_parts"],
        "model": derived["model"],
        "software": provenance["software"],
        "custom_kernel": derived["custom_kernel"],
        "paired_aiperf": derived["paired_aiperf"],
        "bench": None,
        "public_workload_reproduction": derived["public_workload_reproduction"],
        **({"quality_gate": derived["quality_gate"]} if derived["quality_gate"] is not None else {}),
        **({"cost": derived["cost"]} if derived["cost"] is not None else {}),
        "runtime_compatibility": derived["runtime_compatibility"],
        "qualification_boundary": derived["qualification_boundary"],
        "complete": complete,
        "incomplete_reason": None if complete else (incomplete_reason or "not every section has run"),
        "drivers": derived["drivers"],
        "engines": [],
        "runs": [],
        "policy": derived["policy"],
        "policy_sha256": derived["policy_sha256"],
        "merged_from": merged_from or [],
        "provenance": provenance,
        "evidence": evidence,
    }


# --- re-derivation rules (receipts.registry.LAB_RULES) ------------------------------------------------------

def _one_section_per_device(ev: dict[str, Any]) -> list[Problem]:
    """Sections of one GPU type under several keys (``h200``, ``h200__2``) are of different devices, each recorded."""
    from .gpus import receipt_device, type_of_key

    out: list[Problem] = []
    for section in EVIDENCE_SECTIONS:
        by_type: dict[str, list[str]] = {}
        for g in ev[section]:
            by_type.setdefault(type_of_key(g), []).append(g)
        for t, keys in by_type.items():
            if len(keys) < 2:
                continue
            held = {g: receipt_device(ev[section][g]) for g in keys}
            unknown = [g for g, d in held.items() if d is None]
            if unknown:
                out += [(f"evidence.{section}.{g}", f"records no device (hardware.gpu_uuid), but {len(keys)} "
                                                    f"sections of {t} are held: which GPU ran it is unknown")
                        for g in unknown]
            elif len(set(held.values())) < len(keys):
                out.append((f"evidence.{section}", f"its {t} sections {', '.join(keys)} were measured on "
                                                   f"{len(set(held.values()))} device(s): one section per GPU"))
    return out


def _provenance_against_sections(r: Any, ev: dict[str, Any]) -> list[Problem]:
    """A PoC receipt's own provenance against the receipts it embeds: it was recorded after each of them (within
    ``receipts.crosscheck.CLOCK_SKEW_S``); ``infercrane poc`` measures every section on the machine it runs on, so
    a PoC whose hardware names a GPU names each section's, and one that names none (a functional PoC) holds no real
    GPU measurement as a whole; ``receipt merge`` measures nothing, so its hardware names no GPU; and a ``poc``
    configuration's hash (``provenance.config.config_sha256``) is its configuration's."""
    from ..env.capture import NO_GPU
    from ..hashing import config_hash
    from ..receipts.crosscheck import not_after, stamp
    from .gpus import receipt_hardware

    prov, out = r.provenance, []
    command, hw = prov.config.get("command"), prov.hardware
    for section in EVIDENCE_SECTIONS:
        for g, sub in ev[section].items():
            p = f"evidence.{section}.{g}"
            t = stamp(sub.get("recorded_at"))
            if t is not None:
                out += not_after(f"{p}.recorded_at", t, prov.recorded_at, "recorded_at",
                                 "a PoC receipt is written after the receipts it embeds")
            if command != "poc" or hw.gpu == NO_GPU:
                continue
            theirs = receipt_hardware(sub)
            for field in ("gpu", "compute_capability"):
                if theirs.get(field) != getattr(hw, field):
                    out.append((f"provenance.hardware.{field}", f"is {getattr(hw, field)!r} but {p} was measured on "
                                                                f"{theirs.get(field)!r}: infercrane poc measures every "
                                                                "section on the machine it runs on"))
    if command == "poc" and hw.gpu == NO_GPU and r.evidence_class == "real-gpu-measurement":
        out.append(("provenance.hardware.gpu", "names no GPU, but the PoC's evidence is a real-gpu-measurement: "
                                               "infercrane poc measures its sections on the machine it runs on"))
    if command == "receipt merge" and hw.gpu != NO_GPU:
        out.append(("provenance.hardware.gpu", f"is {hw.gpu!r}, but receipt merge measures nothing (it names no GPU); "
                                               "each section names the GPU it was measured on"))
    inner, stated = prov.config.get("config"), prov.config.get("config_sha256")
    if command == "poc" and isinstance(inner, dict) and stated is not None and config_hash(inner) != stated:
        out.append(("provenance.config.config_sha256", f"is {stated} but provenance.config.config hashes to "
                                                       f"{config_hash(inner)}: the PoC's configuration was changed "
                                                       "after it was recorded"))
    return out


def _engines_of_other_sections(ev: dict[str, Any]) -> list[Problem]:
    """An engine a PoC sitting started for one A/B's recipe and shared with another of the same launch is recorded
    in both A/Bs' receipts under the first recipe's name, which only the first records: there, its ``recipe_sha256``
    is that recipe's hash."""
    recipes = {name: r.get("sha256") for s in ("paired", "public") for d in ev[s].values()
               for name, r in _recorded_recipes(d).items()}
    out: list[Problem] = []
    for s in ("paired", "public"):
        for g, d in ev[s].items():
            own = _recorded_recipes(d)
            for i, e in enumerate(d.get("engines", [])):
                want = recipes.get(e["recipe"])
                if e["recipe"] not in own and want is not None and e["recipe_sha256"] != want:
                    out.append((f"evidence.{s}.{g}.engines[{i}].recipe_sha256",
                                f"is {e['recipe_sha256']} but recipe {e['recipe']!r} of the PoC's other A/B hashes to "
                                f"{want}"))
    return out


def _recorded_recipes(doc: dict[str, Any]) -> dict[str, Any]:
    config = (doc.get("provenance") or {}).get("config") or {}
    return config.get("measured_config", config).get("recipes") or {}


def rederived_problems(r: Any) -> list[Problem]:
    """A receipt of ``infercrane poc`` / ``receipt merge``: every embedded receipt validates on its own (fully: its
    hash, its types, and its own conclusions derived again), each sits under the GPU type it was measured on, the
    PoC's own provenance agrees with them (``_provenance_against_sections``), an engine shared by two A/Bs carries
    its recipe's hash (``_engines_of_other_sections``), they
    share one model and one policy per lab, each GPU's kernel decision used the decode steps of that GPU's paired
    A/B, and every section of the PoC derives again from them (``derive_sections``): the PoC's rules
    (``receipts.registry.LAB_RULES``)."""
    from ..receipts.models_v2 import POC_V2
    from ..receipts.models_v3 import SCREENING_V3
    from ..receipts.validate import check_document, derived_differences, differs, model_id
    from .gpus import type_of_key

    ev = r.evidence.model_dump(mode="json")
    out: list[Problem] = []
    for section in EVIDENCE_SECTIONS:
        want = SCREENING_V3 if section == "kernel" else POC_V2
        for g, sub in ev[section].items():
            p = f"evidence.{section}.{g}"
            if sub.get("schema_version") != want:
                out.append((f"{p}.schema_version", f"is {sub.get('schema_version')!r}; a {section} section's receipt "
                                                   f"is {want}"))
                continue
            if section != "kernel" and (sub.get("evidence") is not None
                                        or (sub.get("provenance") or {}).get("config", {}).get("command") != "serve ab"):
                out.append((p, f"a {section} section's receipt is one serve ab receipt (not a PoC receipt)"))
                continue
            model, problems = check_document(sub)
            out += [(f"{p}.{q}" if not q.startswith("<") else f"{p}{q}", m) for q, m in problems]
            if model is None or problems:
                continue
            if gpu_key_of_receipt(sub) != type_of_key(g):
                out.append((p, f"is filed under GPU type {type_of_key(g)!r} but was measured on "
                               f"{gpu_key_of_receipt(sub)!r}"))
            if section != "kernel" and not sub.get("complete"):
                out.append((f"{p}.complete", "a section's serving receipt is complete: an A/B that stopped part-way "
                                             "decides nothing"))
    out += _one_section_per_device(ev)
    if out:  # nothing is derived from evidence that does not stand on its own
        return out
    out += _provenance_against_sections(r, ev) + _engines_of_other_sections(ev)
    if ev.get("serving_gpu") is not None and not any(ev["serving_gpu"] in ev[s] for s in ("paired", "public")):
        out.append(("evidence.serving_gpu", f"is {ev['serving_gpu']!r}, a GPU type with no serving section"))
    docs = [(f"evidence.{s}.{g}", d) for s in EVIDENCE_SECTIONS for g, d in ev[s].items()]
    ids = {(model_id(d)) for _, d in docs}
    if len(ids) > 1:
        out.append(("evidence", f"its receipts are of different models (id, revision): {sorted(ids, key=str)}"))
    for lab, sections in (("kernel", ("kernel",)), ("serving", ("paired", "public"))):
        held = {policy_identity(d) for s in sections for d in ev[s].values()}
        if len(held) > 1:
            out.append(("evidence", f"its {lab} receipts were decided under different {lab} policies"))
    for g, kernel in ev["kernel"].items():
        paired = ev["paired"].get(g)
        if paired is None:
            continue
        try:
            steps = steps_dump(decode_steps_for(kernel, paired))
        except (KeyError, TypeError, ValueError) as e:
            out.append((f"evidence.kernel.{g}.decode_steps", f"cannot be derived from the paired A/B: {e}"))
            continue
        if kernel.get("decode_step") is not None:
            out.append((f"evidence.kernel.{g}.decode_step", "is one step for every row, but the paired A/B on this "
                                                            "GPU gives one per row count (decode_steps)"))
        out += differs(f"evidence.kernel.{g}.decode_steps", kernel.get("decode_steps") or [], steps,
                        f"the paired A/B's candidate TPOT p50 per concurrency (rows = concurrency) on {g}")
    if r.complete:
        missing = [s for s in EVIDENCE_SECTIONS if not ev[s]]
        if missing:
            out.append(("complete", f"is true but the evidence holds no {', '.join(missing)} section"))
    try:
        derived = derive_sections(ev)
    except (KeyError, TypeError, ValueError, IndexError, StopIteration) as e:
        return out + [("evidence", f"the PoC's sections cannot be derived from it: {type(e).__name__}: {e}")]
    # a receipt written before its parts were recorded makes no claim about them, and is compared without them
    fields = DERIVED_FIELDS if r.evidence_parts is not None else tuple(f for f in DERIVED_FIELDS
                                                                      if f != "evidence_parts")
    return out + derived_differences(r, r.model_dump(mode="json"), derived, fields,
                                      "deriving it again from the evidence")

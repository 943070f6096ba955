"""``receipt merge``: PoC receipts (``infercrane poc``) and kernel receipts (v3) made on different machines or GPU
types, joined into one PoC receipt with ``custom_kernel.<gpu>`` per GPU type.

Every input is validated fully first. Refused, each in one line naming both files: a receipt of a legacy format (v1,
a v2 kernel receipt: the line says first that its conclusions were not derived again), a receipt of another kind (a
``serve ab`` / ``serve bench`` receipt), the same receipt twice (one content hash), receipts of different models,
model revisions or operators, of different kernel or serving policies (the policy dict, its workload notes aside:
what ``policy_sha256`` hashes), and two receipts holding the same section for the same GPU (two receipts of one GPU
type are two GPUs only when each records its device, ``hardware.gpu_uuid``, and the devices differ). The merged
receipt's evidence is the inputs' evidence side by side, keyed by the GPU each receipt was measured on
(``infercrane.poc.gpus``: the type's key, and ``<type>__<n>`` for the n-th device of a type); a kernel whose GPU type
has a paired A/B in the merge is decided again with that A/B's decode steps (as ``infercrane poc`` does), and the
merged receipt records every input (path, schema version, content hash) in ``merged_from``. It validates as
every PoC receipt does: each section derived again from the embedded evidence, its evidence class the weakest of its
parts' and each part's own kept in ``evidence_parts`` (``poc.derive.evidence_parts``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError

SECTIONS = ("kernel", "paired", "public")


def _model_of(doc: dict[str, Any]) -> tuple[str | None, str | None]:
    m = doc.get("model_shape_source") or doc.get("model") or {}
    rev = m.get("revision")
    return m.get("id"), None if rev in (None, "unknown") else rev


_UNKNOWN = "unknown device: "  # the identity of a device a receipt does not record: its file


def _section_key(devices: dict[str, list[str]], section: str, gpu_type: str, doc: dict[str, Any], path: Path,
                 origin: dict[tuple[str, str], Path]) -> str:
    """The key a section measured on ``gpu_type`` is filed under: the type's for its first device, ``<type>__<n>`` for
    the n-th other device of that type (``poc.gpus.instance_key``); InputError for a section already held for that
    device, or for two receipts of one type of which one does not say which device it ran on."""
    from .gpus import distinct_devices, instance_key, receipt_device

    device = receipt_device(doc)
    known = device is not None
    ident = device if known else f"{_UNKNOWN}{path}"  # one receipt's sections share its device, known or not
    seen = devices.setdefault(gpu_type, [])
    if ident not in seen:
        if not all(distinct_devices(device, None if d.startswith(_UNKNOWN) else d) for d in seen):
            first = next(p for (_, g), p in origin.items() if g == gpu_type)
            raise InputError(f"{path} and {first} both hold a {section} section measured on {gpu_type}, and one of "
                             "them does not say which device it ran on (hardware.gpu_uuid); a merged receipt holds "
                             "one per GPU", hint="leave one of them out, or measure again with this InferCrane, "
                                                 "which records the device")
        seen.append(ident)
    key = instance_key(gpu_type, seen.index(ident) + 1)
    if (section, key) in origin:
        raise InputError(f"{path} and {origin[(section, key)]} both hold a {section} section measured on {gpu_type}"
                         + (f" (device {device})" if known else "") + "; a merged receipt holds one per GPU",
                         hint="leave one of them out; kernel agree A B compares two screens of one device")
    return key


def merge(paths: list[Path]) -> dict[str, Any]:
    """The merged PoC receipt document (not yet hashed or written); InputError for anything refused."""
    from ..env.capture import hardware, new_run_id, provenance
    from .derive import assemble, decide_with_steps, decode_steps_for, kernel_steps_agree, policy_identity
    from .gpus import gpu_key_of_receipt
    from ..receipts.models_v2 import POC_V2
    from ..receipts.models_v3 import SCREENING_V3
    from ..receipts.registry import legacy_note
    from ..receipts.validate import load_receipt

    evidence: dict[str, Any] = {s: {} for s in SECTIONS} | {"serving_gpu": None}
    origin: dict[tuple[str, str], Path] = {}
    devices: dict[str, list[str]] = {}  # GPU type -> its devices in the order met (instance n = index + 1)
    first_of: dict[str, tuple[Path, Any]] = {}  # what the first receipt of each kind said, for the refusals
    inputs, incomplete, model_prov = [], [], None
    seen: dict[str, Path] = {}  # content sha256 -> the file it was first read from
    for path in paths:
        doc = load_receipt(path).document
        version = doc["schema_version"]
        if version == SCREENING_V3:
            entries = [("kernel", gpu_key_of_receipt(doc), doc)]
        elif version == POC_V2 and doc.get("evidence") is not None:
            entries = [(s, gpu_key_of_receipt(d), d) for s in SECTIONS for d in doc["evidence"][s].values()]
            if not doc["complete"]:
                incomplete.append(f"{path} ({doc.get('incomplete_reason')})")
            model_prov = model_prov or doc["provenance"].get("model")
            evidence["serving_gpu"] = evidence["serving_gpu"] or doc["evidence"].get("serving_gpu")
        elif legacy_note(version) is not None:  # first, what the receipt is: its conclusions were not derived again
            raise InputError(f"{path}: {legacy_note(version)}; receipt merge joins PoC receipts (infercrane poc, "
                             f"receipt merge) and kernel receipts ({SCREENING_V3}), whose conclusions are derived "
                             "again", hint="measure again with this InferCrane (kernel screen, poc)")
        else:
            what = " of serve ab / serve bench" if version == POC_V2 else ""
            raise InputError(f"{path}: is {version}{what}; receipt merge joins PoC receipts (infercrane poc, receipt "
                             f"merge) and kernel receipts ({SCREENING_V3})",
                             hint="give the PoC receipt that embeds it, or its kernel screen's receipt")
        sha = doc["content_sha256"]
        if sha in seen:
            same = "the same file" if Path(seen[sha]).resolve() == Path(path).resolve() else "the same receipt"
            raise InputError(f"{seen[sha]} and {path}: are {same} (content sha256 {sha[:12]}…); a merge joins "
                             "receipts of different runs", hint="give each receipt once")
        seen[sha] = path
        model = _model_of(doc)
        if "model" in first_of and first_of["model"][1] != model:
            p0, m0 = first_of["model"]
            raise InputError(f"{path}: is of model {model[0]} revision {model[1]}, {p0} of {m0[0]} revision {m0[1]}; "
                             "a merged receipt is of one model at one revision", hint="merge receipts of one model")
        first_of.setdefault("model", (path, model))
        for _, _, d in (e for e in entries if e[0] == "kernel"):
            op = d["model_shape_source"]["operator"]
            if "operator" in first_of and first_of["operator"][1] != op:
                p0, op0 = first_of["operator"]
                raise InputError(f"{path}: screens {op!r}, {p0} screens {op0!r}; a merged receipt is of one operator",
                                 hint="merge the receipts of one op")
            first_of.setdefault("operator", (path, op))
        for section, t, d in entries:
            g = _section_key(devices, section, t, d, path, origin)
            lab = "kernel" if section == "kernel" else "serving"
            key = policy_identity(d)
            if lab in first_of and first_of[lab][1] != key:
                p0 = first_of[lab][0]
                raise InputError(f"{path}: its {section} section on {g} was decided under another {lab} policy than "
                                 f"{p0}'s (policy sha256 {key[:12]}… vs {first_of[lab][1][:12]}…)",
                                 hint=f"decide both again under one {lab} policy (kernel decide / serve decide) first")
            first_of.setdefault(lab, (path, key))
            origin[(section, g)] = path
            evidence[section][g] = d
        inputs.append({"receipt": str(path), "schema_version": version, "content_sha256": doc["content_sha256"]})
    if len(paths) < 2:  # after reading: a bad file is named as such first
        raise InputError("receipt merge joins two or more receipts; give at least two files")
    if evidence["serving_gpu"] not in {g for s in ("paired", "public") for g in evidence[s]}:
        evidence["serving_gpu"] = next((g for s in ("paired", "public") for g in sorted(evidence[s])), None)
    for g, k in list(evidence["kernel"].items()):
        paired = evidence["paired"].get(g)
        if paired is not None:
            steps = decode_steps_for(k, paired)
            if not kernel_steps_agree(k, steps):
                evidence["kernel"][g] = decide_with_steps(k, steps, measured=f"{origin[('kernel', g)]}: kernel {g}")
    missing = [s for s in SECTIONS if not evidence[s]]
    reasons = ([f"merged from incomplete receipts: {'; '.join(incomplete)}"] if incomplete else []) + \
              ([f"no {', '.join(missing)} section in any input"] if missing else [])
    prov = provenance(config={"command": "receipt merge", "inputs": inputs}, hardware_info=hardware(probe_gpu=False),
                      run_id=new_run_id(), model=model_prov)
    return assemble(evidence, provenance=prov, complete=not reasons, incomplete_reason="; ".join(reasons) or None,
                    merged_from=inputs)

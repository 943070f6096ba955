"""Candidate kernels inside a vLLM engine: what a recipe's ``kernels:`` adds to the engine, the proof that the
candidate ran, and the gates a kernel arm passes before it is timed.

A recipe names kernels by vLLM IR op (``kernels: {fused_add_rms_norm: triton}``; ``user`` with the recipe's
``candidate: path.py:function``). For such a recipe InferCrane adds to the engine (``engine_additions``):

* ``--ir-op-priority {"<op>": ["infercrane_<impl>"]}`` — vLLM appends its platform defaults (compiled: ``native``,
  i.e. Inductor's own code; eager: ``vllm_c`` then ``native``), which take over wherever the provider declines;
* ``INFERCRANE_VLLM_KERNELS`` (the selection) and ``INFERCRANE_KERNEL_STATS`` (a folder beside the engine log,
  where each vLLM process records what the provider did: ``infercrane/vllm_plugin/stats.py``);
* ``VLLM_CACHE_ROOT`` keyed on the sources the provider runs (``~/.cache/infercrane/vllm-<sha256[:16]>``): vLLM's
  compile cache hashes only the file that holds a registered function, so an edited kernel in another file would
  otherwise reuse a stale compiled graph;
* where InferCrane is not installed into the engine's Python, ``PYTHONPATH`` gains a folder with an entry-point
  record for the plugin (``vllm.general_plugins``) and the folder InferCrane is imported from (recorded, as all
  program environment is).

**Proof that it ran** (``prove``, after the engine is ready; the run fails without it): the engine log's
``Final IR op priority`` line puts the provider first for the op; a vLLM process registered it; it was called
(Python-level calls: the profiling run, CUDA-graph warm-up and capture, batches run without a graph; replays of a
captured graph run the kernel without Python and are not counted, ``calls_captured`` says how many captures hold it);
under torch.compile, vLLM's lowering pass gave the op's nodes to it (its ``Selected implementations`` lines, which
the plugin keeps beside the records: ``lowered``);
and **the in-engine gate**: every shape's first call outside capture was checked against vLLM's native
implementation, and passed. ``recheck`` reads the record again after each visit (new shapes are checked as they come).

**The token gate** (``token_gate``): the same fixed prompts, greedy, on the reference arm's engine and the kernel
arm's (identical dummy weights: vLLM seeds them), token for token; the first divergence is stated, and the kernel arm
is not timed unless they are identical.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from infercrane.datafiles import cache_dir
from infercrane.errors import InputError, RunFailed
from infercrane.vllm_plugin.stats import RAISED
from infercrane.vllm_plugin.selection import (ENV_KERNELS, ENV_STATS, INFERCRANE_ROOT, KernelChoice, decode, encode,
                                              kernel_sources_sha256, provider_name)

PLUGIN_ENTRY = "infercrane.vllm_plugin:register"
PRIORITY_LINE = re.compile(r"Final IR op priority[^\n]*")
GATE_PROMPTS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog because",
    "In a distant future, engineers measured every kernel twice and",
    "def fused_add_rms_norm(x, residual, weight, eps):",
    "Once upon a time there was a benchmark that",
)
GATE_MAX_TOKENS = 32


def choices_of(recipe: Any) -> list[KernelChoice]:
    """The recipe's kernels as the plugin's choices, each with the hash of the sources its provider runs."""
    out = []
    for op, impl in recipe.kernels.items():
        candidate = recipe.candidate if impl == "user" else None
        try:
            sha = kernel_sources_sha256(op, impl, candidate)
        except ValueError as exc:
            raise InputError(f"recipe {recipe.name!r}: {exc}") from None
        out.append(KernelChoice(op, impl, candidate=candidate, source_sha256=sha))
    return out


def priority_arg(kernels: dict[str, str]) -> list[str]:
    """The engine flag that puts each kernel's provider first for its op (a recipe's ``kernels`` mapping)."""
    return ["--ir-op-priority", json.dumps({op: [provider_name(impl)] for op, impl in kernels.items()},
                                           sort_keys=True)]


def _plugin_installed() -> bool:
    try:
        eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    except Exception:  # a broken metadata tree: write the record instead
        return False
    return any(ep.value == PLUGIN_ENTRY for ep in eps)


def plugin_path(folder: Path) -> Path:
    """A folder holding an entry-point record for the plugin (``importlib.metadata`` finds it on ``sys.path``)."""
    info = folder / "infercrane_vllm_plugin-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: infercrane-vllm-plugin\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\ninfercrane = {PLUGIN_ENTRY}\n")
    return folder


def engine_additions(recipe: Any, stats_dir: Path) -> tuple[list[str], dict[str, str]]:
    """(engine arguments, environment) a recipe's ``kernels`` adds; ([], {}) for a recipe without kernels."""
    if not recipe.kernels:
        return [], {}
    choices = choices_of(recipe)
    key = hashlib.sha256("".join(c.source_sha256 for c in choices).encode()).hexdigest()[:16]
    env = {ENV_KERNELS: encode(choices), ENV_STATS: str(stats_dir),
           "VLLM_CACHE_ROOT": str(cache_dir(f"vllm-{key}"))}
    if not _plugin_installed():
        entry = plugin_path(stats_dir.with_name(stats_dir.name + "-plugin"))
        inherited = os.environ.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(entry), str(INFERCRANE_ROOT), inherited) if p)
    return priority_arg(recipe.kernels), env


# --------------------------------------------------------------------------------------------- preflight

PROBE = """
import json
try:
    from vllm.ir.op import IrOp
    import vllm.ir.ops  # noqa: F401
    print(json.dumps({"ir_ops": sorted(IrOp.registry)}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
"""


def check_kernels(recipe: Any, *, probe_output: str | None = None) -> None:
    """Preflight of a recipe's kernels, before any GPU time: the engine is vLLM, its IR has each op, each of
    InferCrane's kernels can run here, a user candidate's file exists. ``probe_output``: the engine Python's answer
    to ``PROBE`` (tests); asked once per process otherwise."""
    if not recipe.kernels:
        return
    if recipe.engine != "vllm":
        raise InputError(f"recipe {recipe.name!r} names kernels, which run inside vLLM only (engine: {recipe.engine})",
                         hint="remove kernels:, or use engine: vllm")
    answer = json.loads(probe_output if probe_output is not None else _probe())
    if "error" in answer:
        raise InputError(f"recipe {recipe.name!r} names kernels, and this vLLM has no IR op registry "
                         f"({answer['error']})", hint="kernels: needs vLLM >= 0.22 (vllm.ir)")
    missing = [op for op in recipe.kernels if op not in answer["ir_ops"]]
    if missing:
        raise InputError(f"recipe {recipe.name!r}: this vLLM has no IR op {', '.join(missing)} "
                         f"(it has: {', '.join(answer['ir_ops']) or 'none'})",
                         hint="name an op the installed vLLM defines, or use the vLLM InferCrane was tested with")
    from infercrane.kernels import registry
    from infercrane.vllm_plugin.selection import VLLM_OPS

    for op, impl in recipe.kernels.items():
        if impl == "user":
            from infercrane.kernels.user_candidate import check_candidate_file, parse_candidate_ref

            check_candidate_file(parse_candidate_ref(recipe.candidate or ""))
            continue
        ok, why = registry.get(VLLM_OPS[op], impl).probe()
        if not ok:
            raise InputError(f"recipe {recipe.name!r}: InferCrane's {impl} kernel for {op} cannot run here: {why}")


_PROBED: dict[str, str] = {}


def _probe() -> str:
    import subprocess

    if sys.executable not in _PROBED:
        done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        _PROBED[sys.executable] = lines[-1] if lines else json.dumps(
            {"error": f"the probe printed nothing (exit {done.returncode}): {done.stderr.strip()[-300:]}"})
    return _PROBED[sys.executable]


# --------------------------------------------------------------------------------------------- proof


def _priority_of(log_text: str, op: str) -> list[str] | None:
    """The op's final priority list from the engine log's last ``Final IR op priority`` line, or None."""
    lines = PRIORITY_LINE.findall(log_text)
    if not lines:
        return None
    m = re.search(rf"\b{re.escape(op)}=\[([^\]]*)\]", lines[-1])
    return None if m is None else [p.strip().strip("'\"") for p in m.group(1).split(",") if p.strip()]


SELECTED = re.compile(r"Selected implementations: (.*)")


def lowered_counts(lines: list[str], op: str) -> dict[str, int] | None:
    """Provider -> IR nodes of ``op`` that vLLM's lowering pass gave it, summed over its ``Selected implementations``
    lines (``fused_add_rms_norm=infercrane_triton*56,native``); None when there is no such line."""
    found = [m.group(1) for ln in lines if (m := SELECTED.search(ln))]
    if not found:
        return None
    counts: dict[str, int] = {}
    for text in found:
        for part in text.split(", "):
            name, _, impls = part.partition("=")
            if name.strip() != op:
                continue
            for item in impls.split(","):
                prov, _, n = item.strip().partition("*")
                if prov:
                    counts[prov] = counts.get(prov, 0) + (int(n) if n.isdigit() else 1)
    return counts


def proof(choice: KernelChoice, log_text: str, records: list[dict[str, Any]],
          lowering_lines: list[str] | None = None) -> dict[str, Any]:
    """What the engine shows of one provider: its priority, the processes that registered it, its calls and the
    in-engine gate's checks; ``ran`` and ``gate_passed`` say whether it ran and passed, ``failed_stage`` which stage
    did not (``priority``, ``registration``, ``calls``, ``gate``), None when none."""
    mine = [r for r in records if r.get("provider") == choice.provider and r.get("vllm_op") == choice.vllm_op]
    unreadable = [r["unreadable"] for r in records if "unreadable" in r]
    priority = _priority_of(log_text, choice.vllm_op)
    checks = [c for r in mine for c in r.get("checks", [])]
    doc = {
        "vllm_op": choice.vllm_op, "impl": choice.impl, "provider": choice.provider,
        "candidate": choice.candidate, "source_sha256": choice.source_sha256,
        "engine_sources_match": all(r.get("detail", {}).get("sources_sha256") in (None, choice.source_sha256)
                                    for r in mine),
        "priority": priority, "registered_in_pids": sorted(r["pid"] for r in mine if r.get("detail", {}).get("registered")),
        "calls": sum(r.get("calls", 0) for r in mine), "calls_captured": sum(r.get("calls_captured", 0) for r in mine),
        "calls_by_shape": _merge(r.get("calls_by_shape", {}) for r in mine),
        "declined": _merge(r.get("declined", {}) for r in mine),
        "checks": [{k: c.get(k) for k in ("shape", "passed", "max_abs_err", "max_rel_err", "against", "native_us",
                                            "kernel_us", "slowdown", "too_slow")} for c in checks],
        "errors": [e for r in mine for e in r.get("errors", [])] + [f"unreadable record {u}" for u in unreadable],
        "lowered": lowered_counts(lowering_lines or [], choice.vllm_op),
    }
    stage = None
    if not priority or priority[0] != choice.provider:
        stage = "priority"
    elif not doc["registered_in_pids"] or not doc["engine_sources_match"]:
        stage = "registration"
    elif any(e.startswith(RAISED) for e in doc["errors"]):
        stage = "raised"
    elif doc["calls"] == 0:
        stage = "calls"
    elif doc["lowered"] is not None and doc["lowered"].get(choice.provider, 0) == 0:
        stage = "lowering"
    elif not checks or not all(c["passed"] for c in checks):
        stage = "gate"
    doc.update(ran=stage not in ("priority", "registration", "calls", "lowering"), gate_passed=stage is None and bool(checks),
               failed_stage=stage)
    return doc


def _merge(dicts: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + int(v)
    return out


def why_failed(doc: dict[str, Any]) -> str:
    stage = doc["failed_stage"]
    what = f"kernel {doc['provider']} for {doc['vllm_op']}"
    if stage == "priority":
        return (f"{what} did not run: the engine log's final IR op priority for {doc['vllm_op']} is "
                f"{doc['priority']}, not led by {doc['provider']}")
    if stage == "registration" and not doc["engine_sources_match"]:
        return (f"{what}: the engine registered other sources than InferCrane hashed (another InferCrane on the "
                "engine's path?)")
    if stage == "registration":
        return f"{what} did not run: no vLLM process registered it ({'; '.join(doc['errors']) or 'no record'})"
    if stage == "raised":
        return f"{what} {next(e for e in doc['errors'] if e.startswith(RAISED))} inside the engine"
    if stage == "calls":
        return f"{what} did not run: registered and first in priority, but never called"
    if stage == "lowering":
        return (f"{what} did not run in the compiled graph: vLLM's lowering pass gave {doc['vllm_op']}'s nodes to "
                f"{doc['lowered']}")
    bad = [c for c in doc["checks"] if not c["passed"]]
    if not doc["checks"]:
        return f"{what} failed the in-engine gate: no call was checked against vLLM's native implementation"
    slow = [c for c in bad if c.get("too_slow")]
    if slow:
        worst = max(slow, key=lambda c: c["slowdown"])
        return (f"{what} failed the in-engine gate: {worst['slowdown']:.0f} times slower than vLLM's native "
                f"implementation at {worst['shape']} ({worst['kernel_us']:.1f} us against {worst['native_us']:.1f} us)")
    return (f"{what} failed the in-engine gate at {', '.join(c['shape'] for c in bad)} against vLLM's native "
            f"implementation (max abs error {max(c['max_abs_err'] for c in bad):.4g})")


def prove(engine: Any) -> list[dict[str, Any]]:
    """The proof for every kernel of ``engine``'s recipe (recorded on ``engine.record.kernels``); RunFailed naming
    the failed stage when a kernel did not run or failed the in-engine gate."""
    docs = read_proofs(engine)
    failed = [d for d in docs if d["failed_stage"] is not None]
    if failed:
        raise RunFailed(f"engine {engine.label!r}: " + "; ".join(why_failed(d) for d in failed),
                        hint=f"read the engine log {engine.log_path} and the records in {engine.kernel_stats_dir}")
    return docs


def read_proofs(engine: Any) -> list[dict[str, Any]]:
    """``proof`` of every kernel of ``engine``'s recipe from its log and records as they are now, recorded on
    ``engine.record.kernels`` (also for an engine that died: what its providers recorded before)."""
    from infercrane.vllm_plugin.stats import read_stats

    text = Path(engine.log_path).read_text(errors="replace") if Path(engine.log_path).exists() else ""
    folder = engine.kernel_stats_dir
    records = read_stats(folder) if folder.is_dir() else []
    lowering = [ln for f in sorted(folder.glob("lowering-*.log")) for ln in f.read_text(errors="replace").splitlines()] \
        if folder.is_dir() else []
    # the selection the engine was started with (its sources' hashes as they were then), not the files as they are now
    docs = [proof(c, text, records, lowering) for c in decode(engine.env_added[ENV_KERNELS])]
    engine.record.kernels = docs
    return docs


# --------------------------------------------------------------------------------------------- token gate


def greedy_tokens(engine: Any) -> list[list[Any]]:
    """Each gate prompt's greedy continuation on ``engine``: token ids where the server returns them (vLLM's
    ``return_token_ids``), else the text's whitespace-separated words."""
    out = []
    for prompt in GATE_PROMPTS:
        body = {"model": engine.served_model, "prompt": prompt, "max_tokens": GATE_MAX_TOKENS, "temperature": 0.0,
                "ignore_eos": True, "seed": 0, "return_token_ids": True}
        payload = engine.post("/v1/completions", body, timeout_s=120.0, what="the token gate's greedy request")
        choice = json.loads(payload)["choices"][0]
        ids = choice.get("token_ids")
        out.append(list(ids) if ids is not None else choice.get("text", "").split())
    return out


def first_divergence(reference: list[list[Any]], got: list[list[Any]]) -> str | None:
    """Where two arms' greedy outputs first differ (prompt, token, both values), or None when identical."""
    for i, (a, b) in enumerate(zip(reference, got)):
        for j in range(max(len(a), len(b))):
            x = a[j] if j < len(a) else "(end)"
            y = b[j] if j < len(b) else "(end)"
            if x != y:
                return f"prompt {i} ({GATE_PROMPTS[i][:40]!r}), token {j}: {x!r} against {y!r}"
    return None


def token_gate(reference_arm: str, reference: list[list[Any]], got: list[list[Any]]) -> dict[str, Any]:
    div = first_divergence(reference, got)
    return {"reference": reference_arm, "prompts": len(GATE_PROMPTS), "max_tokens": GATE_MAX_TOKENS,
            "greedy": True, "identical": div is None, "first_divergence": div,
            "compared": "token ids" if reference and reference[0] and isinstance(reference[0][0], int) else "words"}


class KernelGates:
    """The gates of a plan whose arms name kernels: the reference arm's (the first arm without kernels) greedy
    outputs are taken once, from its first engine; each kernel arm's engine gives its own before its first visit and
    is compared with them before it is timed, and its proof is read again after every visit. A failure raises
    RunFailed: the plan stops, the runs measured so far stand. With ``blocking`` off (real weights: the
    semantic-quality gate decides), a token-gate divergence is recorded and the arm is timed: a correct kernel rounds
    differently and may part from the incumbent at a near-tie of real logits."""

    def __init__(self, arms: dict[str, Any], first_arm: str, coresident: bool, *, blocking: bool = True) -> None:
        self.blocking = blocking
        self.kernel_arms = [a for a, r in arms.items() if r.kernels]
        plain = [a for a, r in arms.items() if not r.kernels]
        if not plain:
            raise InputError("every arm names kernels: the token gate needs a reference arm without them",
                             hint="make the incumbent (no kernels:) one of the arms")
        self.reference = plain[0]
        if first_arm in self.kernel_arms and not coresident:
            raise InputError(f"arm {first_arm!r} names kernels and would be timed before the reference arm "
                             f"{self.reference!r} had given the token gate its outputs",
                             hint="put the incumbent first (arm A)")
        self.reference_tokens: list[list[Any]] | None = None

    def before_visit(self, arm: str, engine: Any, engines: dict[str, Any] | None = None) -> None:
        if self.reference_tokens is None:  # the reference's engine: this one, or a co-resident one up beside it
            ref = {**(engines or {}), arm: engine}.get(self.reference)
            if ref is not None:
                self.reference_tokens = greedy_tokens(ref)
        if arm in self.kernel_arms and engine.record.token_gate is None:
            if self.reference_tokens is None:
                raise RunFailed(f"arm {arm!r} names kernels and would be timed before the reference arm "
                                f"{self.reference!r} had given the token gate its outputs (its engine is not up)",
                                hint="put the incumbent first (arm A)")
            gate = token_gate(self.reference, self.reference_tokens, greedy_tokens(engine))
            engine.record.token_gate = gate
            if not gate["identical"] and self.blocking:
                raise RunFailed(f"engine {engine.label!r}: token gate failed against arm {self.reference!r}: greedy "
                                f"outputs diverge at {gate['first_divergence']}; the arm is not timed",
                                hint="the kernel changes what the model generates: check it against the op's oracle "
                                     "(infercrane kernel screen) and vLLM's native implementation")

    def after_visit(self, arm: str, engine: Any) -> None:
        if arm in self.kernel_arms and getattr(engine, "kernel_stats_dir", None) is not None:
            prove(engine)

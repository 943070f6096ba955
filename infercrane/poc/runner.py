"""Running a PoC: preflight of every section, then the kernel screen, the paired A/B and the public-workload A/B, in
that order, each written as its own receipt as it finishes, and one PoC receipt over them.

Layout of a run (``--out runs/RUN_ID/poc.json``, the default)::

    runs/RUN_ID/poc.json                 the PoC receipt (complete: false until every section has finished)
    runs/RUN_ID/poc/kernel.json          the kernel screen's v3 receipt, as measured
    runs/RUN_ID/poc/paired.json          the paired A/B's serve-ab receipt (written after every run)
    runs/RUN_ID/poc/public.json          the public-workload A/B's serve-ab receipt
    runs/RUN_ID/poc/<section>-artifacts/ engine logs and driver exports

Every input of every section (config, model, GPU, policies, recipes, workloads, engines, drivers, tokenizers, output
paths, the memory the kernel rows need) is checked before the first section starts. ``--resume`` reuses a section
whose receipt exists, validates, is complete and was made from the same section configuration (its hash, recorded in
the section receipt's provenance); any other section runs again (an old receipt in its place is kept beside it as
``<section>.superseded-N.json``). A failure or an interrupt in a section leaves every finished section's receipt as it
was and a PoC receipt over them marked ``complete: false`` with the reason.

The kernel screen runs first, before any decode step is known; once the paired A/B has finished, its receipt is
decided again (``derive.decide_with_steps``) with one decode step per row count from the paired A/B's candidate recipe.
"""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import SECTIONS, PocConfig, load_config, resolve_ref


@dataclass
class PocPlan:
    """A PoC whose every input has been checked (``prepare``), ready to ``run``."""

    config: PocConfig
    config_path: Path
    config_sha256: str
    out: Path
    sections_dir: Path
    run_id: str
    kernel: Any
    kernel_sha256: str
    serving: dict[str, Any]
    model_provenance: dict[str, Any]
    sign_key: Path | None = None
    reusable: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def resume_arg(self) -> Path:
        """What ``--resume`` takes to continue this PoC: its run folder, or its receipt where that is not the folder's
        ``poc.json``."""
        return self.out.parent if self.out.name == "poc.json" else self.out

    def section_path(self, section: str) -> Path:
        return self.sections_dir / f"{section}.json"


# --- preflight ------------------------------------------------------------------------------------------------------

def _out_and_run_id(out: Path | None, resume: Path | None) -> tuple[Path, str, bool]:
    from ..env.capture import new_run_id, run_id_from_env
    from ..errors import InputError
    from ..receipts.io import read_json

    if resume is not None:
        resume = Path(resume)
        target = resume / "poc.json" if resume.is_dir() else resume
        if out is not None and Path(out).resolve() != target.resolve():
            raise InputError(f"--out {out} and --resume {resume} name different PoC receipts; give one")
        if not (target.exists() or target.with_suffix("").is_dir()):
            raise InputError(f"--resume {resume}: no PoC run there (no {target.name} and no {target.with_suffix('').name}/ "
                             "folder)", hint="give the run folder a PoC wrote (runs/RUN_ID) or its PoC receipt")
        run_id = None
        for candidate in [target, *(target.with_suffix("") / f"{s}.json" for s in SECTIONS)]:
            try:
                run_id = read_json(candidate)["provenance"]["run_id"]
                break
            except (InputError, KeyError, TypeError):
                continue
        return target, run_id or run_id_from_env() or new_run_id(), True
    run_id = run_id_from_env() or new_run_id()
    target = Path(out) if out is not None else Path("runs") / run_id / "poc.json"
    if target.suffix != ".json":
        raise InputError(f"--out {target}: give a .json file path (the sections go into the folder of its name, "
                         f"{target.with_suffix('')}/)")
    held = [s for s in SECTIONS if (target.with_suffix("") / f"{s}.json").exists()]
    if held:
        raise InputError(f"--out {target}: {target.with_suffix('')}/ already holds section receipts "
                         f"({', '.join(held)})", hint=f"continue that PoC with --resume {target}, or give another --out")
    return target, run_id, False


def _ask_engines_ahead(cfg: PocConfig, path: Path) -> None:
    """Start asking the serving engines of the config's recipes for their flags (``serving.recipes.ask_help_ahead``)
    while the GPU and the kernel section are checked; a recipe that does not load is left to its own check."""
    from ..errors import InfercraneError
    from ..serving.recipes import ask_help_ahead, load_recipe

    for name in [*cfg.paired.recipes, *cfg.public.recipes]:
        try:
            ask_help_ahead(load_recipe(resolve_ref(name, path)).engine)
        except InfercraneError:
            continue


def _check_gpu(cfg: PocConfig, path: Path) -> None:
    from ..errors import UnavailableError
    from .gpus import gpu_key

    if cfg.functional:
        return
    try:
        import torch
        visible = torch.cuda.is_available()
    except ImportError:
        visible = False
    if not visible:
        raise UnavailableError(f"{path}: gpu: {cfg.gpu}: this PoC needs a CUDA GPU and none is visible",
                               hint="run it on a GPU machine, or run the functional PoC here: infercrane poc functional")
    if cfg.gpu != "any":
        name = torch.cuda.get_device_name(torch.cuda.current_device())
        if gpu_key(name) != cfg.gpu:
            raise UnavailableError(f"{path}: gpu: {cfg.gpu}: this machine's GPU is {name} ({gpu_key(name)})",
                                   hint=f"run it on a {cfg.gpu}, or set gpu: any")


def _input_error_from(e: Exception, where: str) -> Exception:
    from pydantic import ValidationError

    from ..errors import InputError

    if isinstance(e, ValidationError):
        lines = [f"{where}: {'.'.join(map(str, x['loc'])) or '(top level)'}: {x['msg']}" for x in e.errors()]
        return InputError("\n".join(lines))
    return e


def _kernel_prepared(cfg: PocConfig, path: Path, sections_dir: Path, con: Any) -> tuple[Any, str]:
    from pydantic import ValidationError

    from ..kernels.screen import prepare_screen
    from ..decide.policy import load_policy
    from ..errors import InputError, about
    from ..kernels.config import ScreenConfig
    from ..hashing import config_hash

    k = cfg.kernel
    policy_ref = resolve_ref(k.policy, path) if k.policy else None
    with about(f"{path}: kernel.policy"):
        policy = load_policy("kernel", policy_ref)
    missing = [b for b in policy.counted_baselines if b not in k.baselines]
    if missing:
        raise InputError(f"{path}: kernel.baselines: the kernel policy counts {', '.join(missing)}, which the screen "
                         "would not run", hint="add it to kernel.baselines (it is recorded as skipped where it cannot "
                                               "run), or drop it from counted_baselines in a kernel.policy file")
    try:
        screen = ScreenConfig(op=k.op, device="cpu" if cfg.functional else "cuda", model=cfg.model,
                              rows=tuple(k.rows) if k.rows else None, impls=tuple(k.candidates + k.baselines),
                              policy=Path(policy_ref) if policy_ref else None, out=sections_dir / "kernel.json",
                              **k.knobs())
    except ValidationError as e:
        raise _input_error_from(e, f"{path}: kernel") from None
    with about(f"{path}: kernel"):
        prepared = prepare_screen(screen, out=sections_dir / "kernel.json", con=con)
    sha = config_hash({"section": "kernel", "screen": screen.model_dump(mode="json", exclude={"out", "sign_key"}),
                       "rows": list(prepared.spec.rows), "policy": policy.model_dump(mode="json")})
    return prepared, sha


def _stand_in(model_id: str) -> str:
    from ..models.standin import read_stand_in_marker, write_stand_in

    path = Path("runs") / "stand-ins" / model_id.replace("/", "--")
    if read_stand_in_marker(path) is None:
        write_stand_in(model_id, path, overwrite=path.exists())
    return str(path.resolve())


def stand_in_of(recipe: Any) -> bool:
    """Whether a recipe serves an offline stand-in (``infercrane.models.standin``)."""
    from ..models.standin import read_stand_in_marker

    return read_stand_in_marker(recipe.resolved_model()) is not None


def _serving_plans(cfg: PocConfig, path: Path, sections_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from ..decide.policy import load_policy
    from ..errors import InputError, about
    from ..models.catalog import load_model_config
    from ..serving.drivers import get_driver
    from ..serving.receipt import model_provenance
    from ..serving.recipes import check_recipe, load_recipe
    from ..serving.workload import check_tokenizer, load_workload, resolve_tokenizer
    from ..serving.ab import ABPlan

    s = cfg.serving
    with about(f"{path}: serving.policy"):
        policy = load_policy("serving", resolve_ref(s.policy, path) if s.policy else None)
    with about(f"{path}: model"):
        load_model_config(cfg.model)
    for d in s.drivers:
        with about(f"{path}: serving.drivers"):
            get_driver(d).require_available()
    loaded: dict[str, tuple[list[Any], Any]] = {}
    for section in ("paired", "public"):  # names and files first: nothing is written before they all load
        sec = getattr(cfg, section)
        recs = []
        for i, name in enumerate(sec.recipes):
            with about(f"{path}: {section}.recipes[{i}] {name!r}"):
                recs.append(load_recipe(resolve_ref(name, path)))
                check_recipe(recs[-1])  # engine installed, flags accepted: before a stand-in is written
        if recs[0].name == recs[1].name:
            raise InputError(f"{path}: {section}.recipes: both recipes are named {recs[0].name!r}",
                             hint="give the candidate recipe a different name")
        with about(f"{path}: {section}.workload {sec.workload!r}"):
            workload = load_workload(resolve_ref(sec.workload, path))
            if sec.workload_overrides():
                workload = workload.with_overrides(**sec.workload_overrides())
        if section == "public" and len(workload.concurrency) != 1:
            raise InputError(f"{path}: public.workload {sec.workload!r}: runs concurrencies {workload.concurrency}; "
                             "a public-workload reproduction is one concurrency point, as its published example is",
                             hint="set public.concurrency: [N]")
        loaded[section] = (recs, workload)
    if s.tokenizer is not None:
        with about(f"{path}: serving.tokenizer"):
            check_tokenizer(s.tokenizer)
    stand_in = _stand_in(cfg.model) if s.stand_in else None
    from ..models.real import is_packaged, served_folder

    # a model whose real weights ship in a package: every vLLM recipe serves its converted folder (made once)
    real = served_folder(cfg.model) if stand_in is None and is_packaged(cfg.model) and any(
        r.engine == "vllm" for recs, _ in loaded.values() for r in recs) else None
    plans: dict[str, Any] = {}
    for section, (loaded_recs, workload) in loaded.items():
        recs = []
        for i, r in enumerate(loaded_recs):
            where = f"{path}: {section}.recipes[{i}] {getattr(cfg, section).recipes[i]!r}"
            if stand_in is None and r.engine == "testserver" and r.model == cfg.model:
                # The test server serves no weights: for a catalog model it runs on that model's offline stand-in
                # (its config for the receipt, its tokenizer for the drivers).
                r = r.with_overrides(model=_stand_in(cfg.model))
            elif stand_in is not None:
                r = r.with_overrides(model=stand_in)
            elif real is not None and r.engine == "vllm":
                r = r.with_overrides(model=real)
            elif not r.model_is_local() and r.model != cfg.model:
                raise InputError(f"{where}: serves {r.model!r}, not the PoC's model {cfg.model!r}",
                                 hint=f"use a recipe of {cfg.model}, or set serving.stand_in: true to serve a "
                                      f"stand-in of {cfg.model} with every recipe")
            with about(where):
                check_recipe(r)
                resolve_tokenizer(r, s.tokenizer)
            recs.append(r)
        # a stand-in is named by the model it stands in for, not by where it lies: a PoC resumed from another folder
        # is the same PoC
        canon = [r.canonical() | ({"model": f"stand-in of {cfg.model}"} if r.model_is_local() and stand_in_of(r)
                                  else {"model": cfg.model} if real is not None and r.model == real else {})
                 for r in recs]
        sha = ab_section_sha(section, canon, workload, list(s.drivers), policy, s.startup_timeout_s, s.coresident)
        options = {"poc_section": {"name": section, "sha256": sha, "config": cfg.name},
                   "drivers": list(s.drivers), "stand_in": s.stand_in, "startup_timeout_s": s.startup_timeout_s,
                   "order": None, "coresident": s.coresident, **s.recorded()}
        from ..serving.ab import design_of

        _, cannot = design_of(workload, policy)
        if cannot is not None:  # a section that can only end INCONCLUSIVE is refused before anything runs
            raise InputError(f"{path}: {section}.workload {workload.name!r}: {cannot}")
        plans[section] = ABPlan(section=section, recipes=recs, workload=workload, drivers=list(s.drivers),
                                policy=policy, startup_timeout_s=s.startup_timeout_s,
                                out=sections_dir / f"{section}.json", section_sha256=sha, options=options,
                                tokenizer=s.tokenizer, access=s.access(), quality_gate=s.quality_gate)
    return plans, model_provenance(plans["paired"].recipes[0])


def ab_section_sha(section: str, recipes: list[dict[str, Any]], workload: Any, drivers: list[str], policy: Any,
                   startup_timeout_s: float, coresident: bool) -> str:
    """An A/B section's identity: what a resumed PoC must find unchanged to reuse its receipt (recipes in canonical
    form, the workload's identity, drivers, policy, start-up limit, engine layout)."""
    from ..decide.policy import hashed_fields
    from ..hashing import config_hash

    return config_hash({"section": section, "recipes": recipes, "workload": workload.identity(), "drivers": drivers,
                        "policy": hashed_fields(policy), "startup_timeout_s": startup_timeout_s,
                        "coresident": coresident})


def _section_sha_of(doc: dict[str, Any], section: str) -> str | None:
    config = (doc.get("provenance") or {}).get("config") or {}
    holder = config if section == "kernel" else (config.get("options") or {})
    return (holder.get("poc_section") or {}).get("sha256")


def _reusable(plan: PocPlan, say: Any) -> None:
    """Which sections a resumed PoC takes as they are: receipt present, valid, complete, same section config."""
    from ..errors import InfercraneError
    from ..receipts.validate import load_receipt

    for section in SECTIONS:
        path = plan.section_path(section)
        if not path.exists():
            continue
        want = plan.kernel_sha256 if section == "kernel" else plan.serving[section].section_sha256
        try:
            doc = load_receipt(path).document
        except InfercraneError as e:
            say(f"{section}: {path} does not validate ({e.message.splitlines()[0]}): runs again")
            continue
        if section != "kernel" and not doc.get("complete"):
            say(f"{section}: {path} is incomplete ({doc.get('incomplete_reason')}): runs again")
        elif section == "kernel" and (doc.get("result") or {}).get("interrupted"):
            say(f"{section}: {path} was stopped part-way ({doc['result']['interrupted']}): runs again")
        elif _section_sha_of(doc, section) != want:
            say(f"{section}: {path} was made from another {section} configuration: runs again")
        else:
            plan.reusable[section] = doc
            say(f"{section}: reusing {path} (valid, complete, same configuration)")


def prepare(config_ref: str | Path, *, out: Path | None, resume: Path | None, sign_key: Path | None,
            con: Any, say: Any) -> PocPlan:
    """Check every input of every section before anything runs (module docstring); starts nothing."""
    from ..options import check_output_file
    from ..receipts.signing import check_sign_key
    from ..hashing import config_hash

    cfg, path = load_config(config_ref)
    target, run_id, resuming = _out_and_run_id(out, resume)
    check_output_file(target, "--out")
    check_sign_key(sign_key)
    sections_dir = target.with_suffix("")
    _ask_engines_ahead(cfg, path)
    _check_gpu(cfg, path)
    kernel, kernel_sha = _kernel_prepared(cfg, path, sections_dir, con)
    serving, model_prov = _serving_plans(cfg, path, sections_dir)
    plan = PocPlan(config=cfg, config_path=path, config_sha256=config_hash(cfg.model_dump(mode="json")), out=target,
                   sections_dir=sections_dir, run_id=run_id, kernel=kernel, kernel_sha256=kernel_sha,
                   serving=serving, model_provenance=model_prov, sign_key=sign_key)
    policy = kernel.policy
    rows = [r for r in kernel.spec.rows if policy.decides_on(r)]
    conc = serving["paired"].workload.concurrency
    stepped = [r for r in rows if r in conc]
    plan.notes.append(f"decode step per row count: TPOT p50 of {serving['paired'].recipes[1].name} at c = "
                      f"{', '.join(map(str, stepped)) or '(none)'} for rows {', '.join(map(str, stepped)) or '(none)'}"
                      + (f"; rows {', '.join(map(str, [r for r in rows if r not in conc]))} have no matching "
                         "concurrency, so no end-to-end ceiling there" if len(stepped) < len(rows) else ""))
    if resuming:
        _reusable(plan, say)
    return plan


# --- running --------------------------------------------------------------------------------------------------------

def _set_aside(path: Path) -> Path | None:
    """Move an old section receipt (and its artifacts) out of the way of a new run; nothing measured is deleted."""
    if not path.exists():
        return None
    n = 1
    while path.with_name(f"{path.stem}.superseded-{n}.json").exists():
        n += 1
    kept = path.with_name(f"{path.stem}.superseded-{n}.json")
    path.rename(kept)
    art = path.with_name(f"{path.stem}-artifacts")
    if art.exists():
        art.rename(path.with_name(f"{path.stem}-artifacts.superseded-{n}"))
    return kept


def evidence_of(plan: PocPlan, docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The PoC receipt's evidence from the sections finished so far: each under its GPU type; the kernel decided
    again with the paired A/B's decode steps once that has run on the same GPU type."""
    from .derive import decide_with_steps, decode_steps_for, kernel_steps_agree
    from .gpus import gpu_key_of_receipt

    ev: dict[str, Any] = {"kernel": {}, "paired": {}, "public": {}, "serving_gpu": None}
    for section in ("paired", "public"):
        if section in docs:
            g = gpu_key_of_receipt(docs[section])
            ev[section][g] = docs[section]
            ev["serving_gpu"] = ev["serving_gpu"] or g
    if "kernel" in docs:
        k = docs["kernel"]
        g = gpu_key_of_receipt(k)
        if g in ev["paired"]:
            steps = decode_steps_for(k, ev["paired"][g])
            if not kernel_steps_agree(k, steps):
                k = decide_with_steps(k, steps, measured=str(plan.section_path("kernel")))
        ev["kernel"][g] = k
    return ev


def write_poc(plan: PocPlan, docs: dict[str, dict[str, Any]], *, complete: bool, reason: str | None,
              sitting: dict[str, Any] | None = None) -> Any:
    from ..receipts.signing import sign_written
    from ..env.capture import hardware, provenance
    from ..receipts.validate import write_receipt
    from .derive import assemble

    prov = provenance(config={"command": "poc", "config_file": str(plan.config_path),
                              "config": plan.config.model_dump(mode="json"), "config_sha256": plan.config_sha256,
                              "sections": {"kernel": plan.kernel_sha256,
                                           **{s: p.section_sha256 for s, p in plan.serving.items()}},
                              "section_receipts": {s: str(plan.section_path(s)) for s in SECTIONS},
                              **({"sitting": sitting} if sitting else {})},
                      hardware_info=hardware(probe_gpu=not plan.config.functional), run_id=plan.run_id,
                      model=plan.model_provenance)
    doc = assemble(evidence_of(plan, docs), provenance=prov, complete=complete, incomplete_reason=reason)
    written = write_receipt(doc, plan.out)
    sign_written(written.path, plan.sign_key)
    return written


def _decision_line(section: str, doc: dict[str, Any]) -> str:
    if section == "kernel":
        return f"{doc['decision']} ({doc['evidence_class']})"
    pa = doc.get("paired_aiperf") or {}
    return f"{pa.get('decision')}"


def run(plan: PocPlan, *, con: Any, say: Any) -> Any:
    """Run every section not reused, in order; returns the written PoC receipt (module docstring)."""
    from ..serving.ab import EnginePool, run_ab

    t0 = time.monotonic()
    docs: dict[str, dict[str, Any]] = {}
    from ..serving.progress import progress_of

    # engines are started once per sitting: a launch two sections share stays up between them (serving.ab)
    to_run = [plan.serving[s] for s in SECTIONS if s != "kernel" and s not in plan.reusable]
    pool = EnginePool([p.recipes for p in to_run]) if to_run and all(
        p.options.get("coresident") for p in to_run) else None
    began = time.time()
    plan.sections_dir.mkdir(parents=True, exist_ok=True)  # the run folder the start line named, from the start
    try:
        _run_sections(plan, con=con, say=say, pool=pool, t0=t0, docs=docs, run_ab=run_ab, progress_of=progress_of)
    finally:
        if pool is not None:
            pool.stop_all()
    sitting = sitting_of(docs, pool, start=began, end=time.time())
    if sitting.get("engine_up_s"):
        idle = sorted(sitting.get("unmeasured_up") or [], key=lambda u: -u["s"])[:3]
        say(f"sitting: {sitting['wall_s']:.0f} s; engines up {sitting['engine_up_s']:.0f} s, "
            f"{sitting['measured_s']:.0f} s of it measured ({sitting['measured_share_of_engine_up'] * 100:.1f} %)"
            + (("; the longest unmeasured with an engine up: "
                + ", ".join(f"{u['s']:.0f} s from {u['from_s']:.0f} s" for u in idle)) if idle else ""))
    return write_poc(plan, docs, complete=True, reason=None, sitting=sitting)


def sitting_of(docs: dict[str, dict[str, Any]], pool: Any, *, start: float, end: float) -> dict[str, Any]:
    """The sitting's time accounting (``serving.receipt.sitting_time``) over the sections run in it: the engines the
    pool started (a sitting without a pool has no engine-up figure: its engines' records are the sections'), every
    ok window of every serving section, and each section's own wall time."""
    from ..serving.receipt import sitting_time

    runs = [r for s in SECTIONS if s != "kernel" for r in (docs.get(s) or {}).get("runs") or []]
    out = sitting_time([e.record for e in pool.started] if pool is not None else [], runs, start=start, end=end)
    if pool is None:
        out |= {"engine_up_s": None, "measured_share_of_engine_up": None,
                "note": "engines started per section (not co-resident): engine-up time is in each section's receipt"}
    out["sections_wall_s"] = {s: (docs[s].get("paired_aiperf") or {}).get("time_accounting", {}).get("wall_s")
                              if s != "kernel" else docs[s].get("result", {}).get("wall_s")
                              for s in SECTIONS if s in docs}
    return out


def _next_ahead(plan: PocPlan, pool: Any, section: str, later: list[str], say: Any) -> Any:
    """What ``run_ab`` calls near the end of ``section``'s last block: the next A/B's first AIPerf block started
    ahead on its pool engine (``EnginePool.prestart_first``), so that its start-up overlaps this section."""
    nxt = plan.serving[later[0]]

    def start() -> None:
        if pool.prestart_first(nxt):
            say(f"{later[0]}: its first AIPerf block started ahead, held until {section} has ended")
    return start


def _run_sections(plan: PocPlan, *, con: Any, say: Any, pool: Any, t0: float, docs: dict[str, dict[str, Any]],
                  run_ab: Any, progress_of: Any) -> Any:
    from ..kernels.screen import run_prepared_screen
    from ..errors import InfercraneError
    from ..serving.ab import artifacts_dir

    for section in SECTIONS:
        start = time.monotonic()
        if section in plan.reusable:
            docs[section] = plan.reusable[section]
            say(f"{section}: reused [{time.monotonic() - t0:.1f} s elapsed]: {_decision_line(section, docs[section])}")
            continue
        say(f"{section}: start [{start - t0:.1f} s elapsed]")
        kept = _set_aside(plan.section_path(section))
        if kept is not None:
            say(f"{section}: the old receipt is kept as {kept}")
        try:
            if section == "kernel":
                receipt = run_prepared_screen(plan.kernel, run_id=plan.run_id, con=con,
                                              extra_config={"poc_section": {"name": "kernel",
                                                                            "sha256": plan.kernel_sha256,
                                                                            "config": plan.config.name}})
                stopped = (receipt.document.get("result") or {}).get("interrupted")
                if stopped:  # the screen kept what finished in a partial receipt; the PoC stops here all the same
                    from ..proc import Terminated

                    say(f"kernel: the screen's partial receipt is kept as {receipt.path}; it is screened again on "
                        "--resume")
                    raise Terminated() if "SIGTERM" in str(stopped) else KeyboardInterrupt()
            else:
                if pool is not None and not pool.live:  # every engine of the sitting at once, warmed as it comes up
                    ahead = [plan.serving[s] for s in SECTIONS if s != "kernel" and s not in plan.reusable]
                    first = plan.serving[section]
                    pool.start_ahead([(p.recipes, p.workload) for p in ahead], out_dir=artifacts_dir(first),
                                     startup_timeout_s=first.startup_timeout_s, say=say, first=first)
                later = [s for s in SECTIONS[SECTIONS.index(section) + 1:] if s != "kernel" and s not in plan.reusable]
                receipt = run_ab(plan.serving[section], run_id=plan.run_id, con=con, say=say, pool=pool,
                                 then=_next_ahead(plan, pool, section, later, say) if pool is not None and later
                                 else None)
        except (InfercraneError, KeyboardInterrupt, SystemExit) as exc:
            why = exc.message.splitlines()[0] if isinstance(exc, InfercraneError) else \
                f"interrupted ({type(exc).__name__})"
            say(f"{section}: STOPPED after {time.monotonic() - start:.1f} s: {why}")
            if docs:
                done = ", ".join(docs)
                r = write_poc(plan, docs, complete=False,
                              reason=f"section {section} stopped: {why}; finished: {done}; continue with "
                                     f"infercrane poc {shlex.quote(str(plan.config_path))} --resume "
                                     f"{shlex.quote(str(plan.resume_arg()))}")
                say(f"partial PoC receipt (complete: false; sections {done} kept): {r.path}")
            else:
                say(f"no section finished, so there is no PoC receipt yet (one needs a finished section); the run "
                    f"folder {plan.out.parent} is kept for --resume {plan.resume_arg()}")
            raise
        docs[section] = receipt.document
        say(f"{section}: done in {time.monotonic() - start:.1f} s [{time.monotonic() - t0:.1f} s elapsed]: "
            f"{_decision_line(section, receipt.document)}; receipt {receipt.path}")
        left = [s for s in SECTIONS if s not in docs]
        write_poc(plan, docs, complete=False, reason=progress_of(f"{', '.join(left)} still to run") if left else
                  "every section has run; the sitting's time accounting is still to come")

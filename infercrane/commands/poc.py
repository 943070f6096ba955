"""``infercrane poc CONFIG``: the kernel screen, the paired A/B and the public-workload A/B of one config, joined in
one optimization-poc receipt (``infercrane.poc``)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

from cyclopts import Parameter

from ..options import ExecutorOptions
from ..options import command_line


def default_config() -> tuple[str, str]:
    """The config ``infercrane poc`` runs without one: the seed reproduction where this machine can run it (a CUDA
    GPU, vLLM and AIPerf), otherwise the functional PoC; and why."""
    from ..env.capture import dist_version

    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    missing = [name for name, present in (("CUDA GPU", gpu), ("vLLM", dist_version("vllm") != "absent"),
                                          ("AIPerf", dist_version("aiperf") != "absent")) if not present]
    if not missing:
        return "seed-reproduction", "a CUDA GPU, vLLM and AIPerf are here"
    return "functional", f"no {', no '.join(missing)} here"


def poc(config: str | None = None, /, *, out: Path | None = None, resume: Path | None = None,
        sign_key: Path | None = None,
        where: Annotated[ExecutorOptions, Parameter(name="*")] = ExecutorOptions()) -> int:
    """Run a PoC: the kernel screen, the paired A/B and the public-workload A/B a config names, each written as its
    own receipt as it finishes (runs/RUN_ID/poc/<section>.json), and one optimization-poc receipt over them
    (runs/RUN_ID/poc.json) whose every section `infercrane receipt validate` derives again from those receipts.

    Every input of every section is checked before anything runs. Without a CUDA GPU only a functional PoC runs
    (kernel correctness on the CPU, serving A/Bs against the test server), labelled so in the output and the receipt.

    Parameters
    ----------
    config
        A shipped config (seed-reproduction, functional) or a PoC config YAML file. Default: with --resume, the one
        the PoC was run with; otherwise seed-reproduction on a machine with a CUDA GPU, vLLM and AIPerf, and
        functional elsewhere.
    out
        The PoC receipt (default runs/RUN_ID/poc.json); the sections' receipts go into the folder of its name.
    resume
        Continue a PoC: its run folder (runs/RUN_ID) or its receipt. Sections whose receipt exists, validates, is
        complete and was made from the same section configuration are reused; the others run.
    sign_key
        Sign the PoC receipt each time it is written (an ed25519 private key from `infercrane receipt keygen`).

    With --gpus (or the config's gpus:) and an executor, the whole PoC runs once per GPU type where the executor
    places it, and the PoC receipts that come back are merged per measured GPU type (`kernel screen --gpus` does the
    same for a screen; see the README).
    """
    from ..poc.config import shipped_configs
    from ..poc.runner import prepare, run
    from ..report.console import console

    con = console()
    t0 = time.monotonic()

    def say(line: str) -> None:
        con.print(f"[poc] {line}", markup=False, highlight=False)

    chosen = None
    if config is None and resume is not None:
        config = _config_of_run(resume)
        if config is not None:
            chosen = f"no config given: resuming with the one the PoC was run with, {config}"
    if config is None:
        config, why = default_config()
        chosen = f"no config given: running {config} ({why}); shipped configs: {', '.join(shipped_configs())}"
    fanned = _poc_fanned_out(config, where, out=out, resume=resume, sign_key=sign_key, con=con)
    if fanned is not None:
        return fanned
    plan = prepare(config, out=out, resume=resume, sign_key=sign_key, con=con, say=say)
    if chosen:
        say(chosen)
    say(f"every input checked in {time.monotonic() - t0:.1f} s")
    cfg = plan.config
    engines = sorted({r.engine for p in plan.serving.values() for r in p.recipes})
    label = (f"FUNCTIONAL PoC: kernel correctness on the CPU only, nothing timed; serving on {', '.join(engines)}; "
             "no speed claims" if cfg.functional else f"GPU PoC (gpu: {cfg.gpu}); serving on {', '.join(engines)}")
    say(f"{cfg.name} ({plan.config_path}, sha256 {plan.config_sha256[:12]}): {cfg.model}; {label} → {plan.out}")
    k = cfg.kernel
    say(f"kernel: {k.op} candidates {', '.join(k.candidates)} vs {', '.join(k.baselines)} at rows "
        f"{', '.join(map(str, plan.kernel.spec.rows))}: {plan.kernel.plan()}")
    for section in ("paired", "public"):
        p = plan.serving[section]
        w = p.workload
        say(f"{section}: {p.recipes[0].name} vs {p.recipes[1].name} on {w.name} (c = "
            f"{', '.join(map(str, w.concurrency))}, {w.runs_per_arm} runs/arm, {w.arm_order}); drivers "
            f"{', '.join(p.drivers)}")
    for note in plan.notes:
        say(f"note: {note}")
    from ..errors import InfercraneError, InputError

    try:
        receipt = run(plan, con=con, say=say)
    except InputError:
        raise
    except (InfercraneError, KeyboardInterrupt):  # a run failure or a stop: what finished is kept for --resume
        say(f"continue with: {command_line('poc', config, '--resume', plan.resume_arg())}")
        raise
    _print_summary(con, receipt.document)
    say(f"done in {time.monotonic() - t0:.1f} s; receipt {receipt.path} "
        f"({command_line('receipt', 'show', receipt.path)})")
    say(_write_report(Path(receipt.path)))
    return 0


def _write_report(receipt: Path) -> str:
    """The PoC's report beside its receipt (``poc.json`` -> ``poc.report/index.html``); the receipt stands whatever
    happens here, and the line says where the page is or why there is none."""
    from ..report import INSTALL_HINT, default_out, missing_dependency, write_report

    if (missing := missing_dependency()) is not None:
        return f"report: not written ({missing} is missing: {INSTALL_HINT})"

    out = default_out([receipt])
    try:
        page = write_report([receipt], out)
    except Exception as exc:  # the receipt is written; a drawing failure must not hide it
        return (f"report: not written ({type(exc).__name__}: {exc}); the receipt stands: "
                f"{command_line('report', receipt, '--out', out)}")
    return f"report: {page}"


def _poc_fanned_out(config: str, where: ExecutorOptions, *, out: Path | None, resume: Path | None,
                    sign_key: Path | None, con: Any) -> int | None:
    """The PoC once per GPU type through an executor (``executors.fanout``), when --gpus or the config's gpus: ask
    for it; None when the PoC runs here. The config travels by content (a shipped one by name)."""
    from ..datafiles import POC_CONFIG, read_bytes
    from ..env.capture import new_run_id, run_id_from_env
    from ..errors import InputError
    from ..executors.fanout import run_fanned_out
    from ..poc.config import load_config

    cfg, path = load_config(config)
    gpus = where.gpus or (tuple(cfg.gpus) if cfg.gpus else None)
    if gpus is None and not where.fans_out():
        return None
    if gpus is None:
        raise InputError(f"--executor {where.executor}: give the GPU types to run the PoC on with --gpus (or the "
                         "config's gpus:)")
    if resume is not None:
        raise InputError("--resume continues a PoC run here; a PoC run per GPU type is not resumed",
                         hint="resume each GPU's PoC where it ran, or run the fan-out again")
    shipped = Path(config).is_file()
    return run_fanned_out(where, gpus, argv=["poc", path.name if shipped else config],
                          files={path.name: read_bytes(path, POC_CONFIG)} if shipped else {},
                          needs_gpu=not cfg.functional,
                          out=out or Path("runs") / (run_id_from_env() or new_run_id()) / "poc.json",
                          what=f"poc {cfg.name}", sign_key=sign_key, con=con)


def _config_of_run(resume: Path) -> str | None:
    """The config file a PoC run recorded in its receipt (``provenance.config.config_file``), if it still exists."""
    from ..errors import InputError
    from ..receipts.io import read_json

    target = Path(resume) / "poc.json" if Path(resume).is_dir() else Path(resume)
    try:
        recorded = read_json(target)["provenance"]["config"]["config_file"]
    except (InputError, KeyError, TypeError):
        return None
    return recorded if Path(recorded).is_file() else None


def _print_summary(con: Any, doc: dict[str, Any]) -> None:
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(f"PoC: {doc['model']['id']} ({doc['evidence_class']})"), title_justify="left")
    for c in ("section", "decision", "reason"):
        t.add_column(c)
    ck = doc.get("custom_kernel") or {}
    for g in [k for k in ck if k not in ("operator", "correctness", "decision", "reason", "decision_code")]:
        t.add_row(Text(f"custom_kernel.{g}"), Text(str(ck[g]["decision"])), Text(_short(ck[g]["reason"])))
    pa = doc.get("paired_aiperf")
    if pa:
        t.add_row(Text("paired_aiperf"), Text(pa["decision"]), Text(_short(pa["reason"])))
    pw = doc.get("public_workload_reproduction")
    if pw:
        t.add_row(Text("public_workload_reproduction"), Text(str(pw["decision"])), Text(_short(pw["comparison_boundary"])))
    con.print(t)
    for g in [k for k in ck if k not in ("operator", "correctness", "decision", "reason", "decision_code")]:
        for a in ck[g].get("amdahl") or []:
            con.print(Text(f"  {g} rows={a['rows']}: step {a['decode_step_ms']:.3g} ms, op share "
                           f"{a['op_share'] * 100:.2f}%, ceiling {a['best_possible_gain_percent']:.2f}%, expected "
                           f"{a['expected_gain_percent']:.2f}%"))
    con.print(Text.assemble(("boundary: ", "bold"), doc["qualification_boundary"]))


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"

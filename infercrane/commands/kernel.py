"""``infercrane kernel …``: screen candidates for fused residual-add + RMSNorm, list implementations."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from cyclopts import Parameter

from ..kernels.config import ScreenConfig


def list_impls() -> int:
    """List the implementations of fused residual-add + RMSNorm and whether each can run here (and why not)."""
    from rich.table import Table

    from ..kernels.registry import implementations
    from ..kernels.ops.fused_add_rmsnorm.spec import OP_NAME
    from ..receipts.render import console

    t = Table(title="fused_add_rmsnorm implementations", title_justify="left")
    for c in ("key", "kind", "in place", "available", "reason / source"):
        t.add_column(c)
    for impl in implementations(OP_NAME):
        ok, why = impl.available()
        t.add_row(impl.key, impl.kind, str(impl.in_place), "yes" if ok else "no", why if not ok else impl.source)
    console().print(t)
    return 0


def decode_step_from_receipt(path: Path, recipe: str, concurrency: int) -> tuple[float, str]:
    """Decode step time (ms) from a serving receipt: the median over runs of TPOT p50 (v2) or the p95 (v1 seed)."""
    import statistics

    from ..errors import InputError
    from ..receipts.validate import load_receipt

    r = load_receipt(path)
    doc = r.document
    runs = [x for x in doc.get("runs", []) if x["recipe"] == recipe and x["concurrency"] == concurrency
            and x["status"] == "ok" and x.get("tpot_p50_ms")]
    if runs:
        value = statistics.median(x["tpot_p50_ms"] for x in runs)
        return value, (f"serving receipt {path}: median over {len(runs)} runs of tpot_p50_ms, recipe {recipe!r}, "
                       f"concurrency {concurrency}")
    pa = doc.get("paired_aiperf") or {}
    for m in pa.get("measurements", []):
        if m["recipe"] == recipe and m["concurrency"] == concurrency:
            return m["tpot_p95_ms"], (f"serving receipt {path}: tpot_p95_ms of recipe {recipe!r} at concurrency "
                                      f"{concurrency} (p95: an optimistic step time, so a pessimistic share)")
    raise InputError(f"{path}: no TPOT for recipe {recipe!r} at concurrency {concurrency}",
                     hint="pick --serving-recipe / --serving-concurrency present in that receipt")


def screen(*, config: Annotated[ScreenConfig, Parameter(name="*")] = ScreenConfig()) -> int:
    """Screen fused residual-add + RMSNorm candidates: correctness against the float32 oracle on every shape, timing
    in launch / graph / cold modes against eager PyTorch, torch.compile and vLLM's kernel, an end-to-end ceiling, and
    an accept / retain / reject decision with its reason — written as a receipt.

    On a machine without a CUDA GPU this is a functional screen: correctness only, clearly labelled, no speed claims.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..decide.policy import load_policy
    from ..env.capture import hardware, new_run_id, provenance
    from ..errors import InputError
    from ..kernels.harness.runner import screen as run_screen
    from ..kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec
    from ..kernels.receipt import build_document
    from ..models.catalog import load_model_config
    from ..receipts.render import console
    from ..receipts.validate import write_receipt

    con = console()
    _interpret_triton_without_gpu(config.device, con)
    policy = load_policy("kernel", config.policy)
    mc = load_model_config(config.model)
    try:
        spec = FusedAddRMSNormSpec.from_model_config(mc.config, rows=config.all_rows(), dtype=config.dtype,
                                                     model_id=mc.model_id, model_revision=mc.revision)
    except ValueError as e:
        raise InputError(f"model {config.model}: {e}") from None
    step_ms, step_source = config.decode_step_ms, ("user: --decode-step-ms" if config.decode_step_ms else None)
    if config.serving_receipt is not None:
        step_ms, step_source = decode_step_from_receipt(config.serving_receipt, config.serving_recipe,
                                                        config.serving_concurrency)
    run_id = os.environ.get("INFERCRANE_RUN_ID") or new_run_id()
    out = config.out or Path("runs") / run_id / "kernel-screen.json"
    con.print(f"[bold]kernel screen[/bold] {spec.model_id} hidden={spec.hidden_size} eps={spec.eps:g} {spec.dtype} "
              f"rows={list(spec.rows)} modes={list(config.modes)} → {out}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con, transient=False) as bar:
        task = bar.add_task("starting", total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what[:60])

        candidate = None
        if config.candidate:
            from ..kernels.user_candidate import parse_candidate_ref

            candidate = parse_candidate_ref(config.candidate, in_place_override=config.candidate_in_place)
        result = run_screen(spec, list(config.impls) if config.impls else None, modes=list(config.modes),
                            rows=list(spec.rows), trials=config.trials, candidate=candidate, progress=progress,
                            samples_per_trial=config.samples, checks=config.checks, seed=config.seed,
                            device=config.device, timeout_s=config.timeout_s, policy=policy)
    if result.run_kind == "functional":
        con.print(f"[bold yellow]FUNCTIONAL RUN[/bold yellow] — {result.run_kind_reason}. Correctness only; "
                  "no timing, no speed claims.")
        _compile_cuda_without_gpu(result, spec, con)
    prov = provenance(config=config.model_dump(mode="json") | {"rows_resolved": list(spec.rows)},
                      hardware_info=hardware(probe_gpu=result.run_kind == "timed"), run_id=run_id,
                      model={"id": spec.model_id or config.model, "revision": spec.model_revision,
                             "source": mc.source, "config_fields": spec.config_fields,
                             "weights": "none", "tokenizer": "none"})
    doc, _ = build_document(result, spec, policy, provenance=prov, model_source=mc.source,
                            decode_step_ms=step_ms, decode_step_source=step_source)
    receipt = write_receipt(doc, out)
    # Keep the raw screen result beside the receipt: everything the harness measured, in its own shape.
    (out.parent / "screen-result.json").write_text(result.model_dump_json(indent=1))
    _print_summary(con, receipt.document)
    con.print(f"receipt: {receipt.path}  (infercrane receipt show {receipt.path})")
    return 0


def decide(screen_result: Path, /, *, measured_receipt: Path, decode_step_ms: float | None = None,
           serving_receipt: Path | None = None, serving_recipe: str = "compiled", serving_concurrency: int = 1,
           policy: Path | None = None, out: Path) -> int:
    """Decide again on a finished screen, without re-measuring: with a decode step time from a serving receipt (or
    --decode-step-ms) and/or another policy. The new receipt keeps the measuring machine's hardware and software and
    the original run id; its provenance records this command.

    Parameters
    ----------
    screen_result
        The screen-result.json a `kernel screen` wrote beside its receipt (the raw evidence).
    measured_receipt
        The receipt of that screen (validated; its hardware, software and run id are carried over).
    decode_step_ms
        Decode step wall time for the Amdahl ceiling.
    serving_receipt
        Read the decode step time from this serving receipt instead.
    serving_recipe
        Recipe whose TPOT is the decode step time.
    serving_concurrency
        Concurrency whose TPOT is the decode step time.
    policy
        A kernel policy file overriding the packaged thresholds.
    out
        Where to write the new receipt.
    """
    from ..decide.policy import load_policy
    from ..env.capture import provenance
    from ..errors import InputError
    from ..kernels.harness.runner import ScreenResult
    from ..kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec
    from ..kernels.receipt import build_document
    from ..receipts.render import console
    from ..receipts.validate import load_receipt, write_receipt

    old = load_receipt(measured_receipt).document
    try:
        result = ScreenResult.model_validate_json(Path(screen_result).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{screen_result}: not a screen result: {str(e).splitlines()[0]}") from None
    if old["app_id"] != old["provenance"]["run_id"]:
        raise InputError(f"{measured_receipt}: app_id and provenance.run_id differ")
    step_ms, step_source = decode_step_ms, ("user: --decode-step-ms" if decode_step_ms else None)
    if serving_receipt is not None:
        step_ms, step_source = decode_step_from_receipt(serving_receipt, serving_recipe, serving_concurrency)
    s = result.spec
    spec = FusedAddRMSNormSpec(hidden_size=s.hidden_size, eps=s.eps, dtype=s.dtype, rows=tuple(result.rows),
                               num_layers=s.num_layers, model_id=s.model_id, model_revision=s.model_revision,
                               config_fields=s.config_fields)
    if spec.model_id != old["model_shape_source"]["id"] or list(spec.rows) != sorted({m for m in result.rows}, key=result.rows.index):
        raise InputError(f"{screen_result} does not belong to {measured_receipt} (model or rows differ)")
    pol = load_policy("kernel", policy)
    prov = provenance(config={"decided_from": {"screen_result": str(screen_result), "receipt": str(measured_receipt),
                                               "receipt_sha256": old["content_sha256"]},
                              "measured_config": old["provenance"]["config"], "decode_step_ms": step_ms,
                              "decode_step_source": step_source, "policy": str(policy) if policy else "packaged"},
                      hardware_info=old["hardware"], software=old["software"], run_id=old["app_id"],
                      model=old["provenance"].get("model"))
    measured_cfg = {old["candidate"]["key"]: old["candidate"]["launch_config"]}
    doc, _ = build_document(result, spec, pol, provenance=prov, model_source=old["model_shape_source"]["source"],
                            decode_step_ms=step_ms, decode_step_source=step_source, launch_configs=measured_cfg)
    receipt = write_receipt(doc, out)
    con = console()
    _print_summary(con, receipt.document)
    con.print(f"receipt: {receipt.path}")
    return 0


def _compile_cuda_without_gpu(result: Any, spec: Any, con: Any) -> None:
    """Without a GPU the CUDA candidate cannot run, but NVRTC can still compile it to PTX for sm_90 at every screened
    row count's configuration: a note on the implementation says whether it did (it is not a correctness check)."""
    impl = next((i for i in result.implementations if i.key == "cuda" and i.status == "skipped"), None)
    if impl is None:
        return
    from ..errors import InfercraneError
    from ..kernels.ops.fused_add_rmsnorm.cuda_kernel import compile_ptx

    try:
        for rows in spec.rows:
            compile_ptx(spec.hidden_size, "compute_90", rows=rows)
    except InfercraneError as e:
        note = f"not compiled without a GPU either: {e.message.splitlines()[0]}"
    else:
        note = (f"compiled to PTX for compute_90 by NVRTC at hidden {spec.hidden_size} for every screened row count "
                "(not run: no GPU)")
    impl.notes.append(note)
    con.print(f"  cuda: {note}")


def _interpret_triton_without_gpu(device: str, con: Any) -> None:
    """Without a GPU, Triton kernels run under Triton's interpreter (numpy on the CPU) so they are still checked
    against the oracle; workers inherit the setting."""
    if os.environ.get("TRITON_INTERPRET"):
        return
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
        con.print("no CUDA GPU: Triton kernels run under Triton's interpreter (TRITON_INTERPRET=1)")


def _print_summary(con: Any, doc: dict[str, Any]) -> None:
    from rich.table import Table
    from rich.text import Text

    skipped = [i for i in doc["implementations"] if i["status"] != "ok"]
    for i in skipped:
        con.print(f"  {i['key']}: {i['status']}: {i['reason']}")
    bad = [c for c in doc["correctness"] if not c["passed"]]
    for c in bad:
        con.print(f"  [red]INCORRECT[/red] {c['implementation']} rows={c['rows']}: "
                  f"{c.get('error') or ''} mismatched={c['mismatched']} max_abs_err={c.get('max_abs_err')} "
                  f"first bad {c.get('first_bad_tensor')}{c.get('first_bad_index')}")
    if doc["measurements"]:
        mode = doc["measurements_timing_mode"]
        keys = [k for k in ("eager", "torch_compile", "vllm_vendor", "triton", "cuda", "user")
                if any(f"{k}_ms" in m for m in doc["measurements"])]
        cand = doc["candidate"]["key"]
        t = Table(title=f"µs per call, {mode} mode (median) — candidate: {cand}", title_justify="left")
        t.add_column("rows", justify="right")
        for k in keys:
            t.add_column(k, justify="right")
        for k in keys:
            if k != cand:
                t.add_column(f"×{k}", justify="right")
        verdicts = {(c["baseline"], c["rows"]): c["verdict"] for c in doc["comparisons"]
                    if c["candidate"] == cand and c["mode"] == mode}
        for m in doc["measurements"]:
            cells = [str(m["rows"])] + [f"{m[f'{k}_ms'] * 1000:.3f}" if f"{k}_ms" in m else "—" for k in keys]
            for k in keys:
                if k != cand:
                    s = m.get(f"speedup_vs_{k}")
                    cells.append(f"{s:.3f} {verdicts.get((k, m['rows']), '')[:4]}" if s else "—")
            t.add_row(*cells)
        con.print(t)
    for a in doc.get("amdahl", []):
        con.print(f"  Amdahl rows={a['rows']}: op share {a['op_share'] * 100:.2f}% of a {a['decode_step_ms']:.3g} ms "
                  f"step ({a['decode_step_source']}); ceiling {a['best_possible_gain_percent']:.2f}%, expected "
                  f"{a['expected_gain_percent']:.2f}%")
    con.print(Text.assemble(("decision: ", "bold"), (doc["decision"], "bold green")))
    con.print(Text.assemble(("reason: ", "bold"), doc["reason"]))
    for o in doc["other_candidates"]:
        con.print(Text.assemble((f"{o['implementation']}: ", "bold"), o["decision"], " — ", o["reason"]))

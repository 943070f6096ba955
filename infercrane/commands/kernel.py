"""``infercrane kernel …``: screen an op's candidate kernels (``--op``), list its implementations, decide again."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from cyclopts import Parameter
from cyclopts.validators import Number

from ..kernels.config import OpOptions, ScreenConfig
from ..kernels.screen import (dump_steps, decode_step_from_receipt, implementation_plan, per_row_steps,
                              prepare_screen, run_prepared_screen)
from ..options import command_line, plain
from ..receipts.signing import check_sign_key, sign_written


def list_impls(*, config: Annotated[OpOptions, Parameter(name="*")] = OpOptions()) -> int:
    """List the implementations of an op (--op) and what `infercrane kernel screen` would do with each on this
    machine (with the same --device): time it on the GPU, check it on the CPU (Triton kernels under Triton's
    interpreter), or skip it, and why. Also the op's default and bandwidth row counts."""
    from rich.table import Table

    from ..kernels import registry
    from ..report.console import console

    con = console()
    device, device_reason, plan = implementation_plan(config.op, config.device)
    t = Table(title=f"{config.op} implementations: what a screen here would do", title_justify="left")
    for c in ("key", "kind", "in place", "a screen here", "source"):
        t.add_column(c)
    for impl, what in plan:
        t.add_row(plain(impl.key), impl.kind, str(impl.in_place), plain(what), plain(impl.source))
    con.print(t)
    run = "timed" if device == "cuda" else "functional (correctness only, no timing)"
    con.print(f"a screen here (--device {config.device}): {run}: {plain(device_reason)}")
    if device == "cuda" and os.environ.get("TRITON_INTERPRET"):
        con.print("note: TRITON_INTERPRET is set: Triton kernels would run under the interpreter, not as GPU kernels")
    con.print(f"rows: default {','.join(map(str, registry.default_rows(config.op)))}; --bandwidth-rows adds "
              f"{','.join(map(str, registry.bandwidth_rows(config.op)))}")
    con.print("a user candidate (--candidate path/to/file.py:function) is screened as 'user', after these")
    return 0


def screen(*, config: Annotated[ScreenConfig, Parameter(name="*")] = ScreenConfig()) -> int:
    """Screen an op's candidate kernels (--op, default fused residual-add + RMSNorm; see `infercrane kernel list`):
    correctness against the op's float32 oracle on every shape, timing in launch / graph / cold modes against its
    baselines (eager PyTorch, torch.compile, vLLM's kernel where there is one), an end-to-end ceiling, and an
    accept / retain / reject decision with its reason — written as a receipt.

    On a machine without a CUDA GPU this is a functional screen: correctness only, clearly labelled, no speed claims.
    Every input (options, files, the output path, the memory the row counts need) is checked before anything runs.
    """
    from ..env.capture import new_run_id, run_id_from_env
    from ..report.console import console

    con = console()
    run_id = run_id_from_env() or new_run_id()
    out = config.out or Path("runs") / run_id / "kernel-screen.json"
    if config.fans_out():
        return _screen_fanned_out(config, out=out, con=con)
    prepared = prepare_screen(config, out=out, con=con)
    receipt = run_prepared_screen(prepared, run_id=run_id, con=con)
    _print_summary(con, receipt.document)
    interrupted = (receipt.document.get("result") or {}).get("interrupted")
    if interrupted:  # stopped by Ctrl-C / SIGTERM: what finished is in the (partial) receipt
        return _interrupted_exit(str(interrupted), receipt.path)
    con.print(f"receipt: {plain(receipt.path)}  ({plain(command_line('receipt', 'show', receipt.path))})")
    from ..report.gate import fail_on_exit

    return fail_on_exit(receipt.path, config.fail_on, con)


def _interrupted_exit(interrupted: str, path: Any) -> int:
    """Say where a stopped screen's partial receipt is (one line, on stderr, where the CLI reports interruptions) and
    give the exit code of the interruption, as if it had not been caught: 143 for SIGTERM (the runner's reason names
    the signal, ``proc.Terminated``), 130 for Ctrl-C."""
    import sys

    from ..report.console import safe

    print(f"interrupted: {safe(_first_line(interrupted))}; partial receipt: {safe(str(path))}", file=sys.stderr)
    return 143 if "SIGTERM" in interrupted else 130


def _screen_fanned_out(config: ScreenConfig, *, out: Path, con: Any) -> int:
    """``kernel screen --gpus …`` / ``--executor ray|modal``: one screen per GPU type where the executor runs it, the
    receipts kept and merged (``executors.fanout``). Exit 0 when every job finished and the result was written."""
    from ..errors import InputError
    from ..executors.fanout import run_fanned_out
    from ..executors.jobs import job_argv

    if not config.gpus:
        raise InputError(f"--executor {config.executor}: give the GPU types to screen on with --gpus (e.g. "
                         "--gpus H100!,L40S)")
    if Path(config.model).exists():
        raise InputError(f"--model {config.model}: a local model file or folder does not travel with the jobs of "
                         "--gpus / --executor", hint="give a catalog model id (infercrane model list)")
    argv, files = job_argv(("kernel", "screen"), config, exclude=("sign_key", "fail_on"))
    rc = run_fanned_out(config, config.gpus, argv=argv, files=files, needs_gpu=config.device != "cpu", out=out,
                        what=f"kernel screen {config.op}", sign_key=config.sign_key, con=con)
    if rc != 0 or not out.exists():
        return rc
    from ..report.gate import fail_on_exit

    return fail_on_exit(out, config.fail_on, con)  # the merged receipt: each GPU's section


def decide(receipt: Path, /, *,
           decode_step_ms: Annotated[float | None, Parameter(validator=Number(gt=0))] = None,
           serving_receipt: Path | None = None, serving_recipe: str | None = None,
           serving_concurrency: Annotated[int | None, Parameter(validator=Number(gte=1))] = None,
           per_row: bool = False,
           policy: Path | None = None, out: Path, sign_key: Path | None = None) -> int:
    """Decide again on a finished screen, without re-measuring: load its receipt, compare and decide again with a
    decode step time from a serving receipt (or --decode-step-ms) and/or another policy. The new receipt carries the
    same result, the measuring machine's hardware and software, the original run id, and names the receipt it was
    decided from (path and content hash); its provenance records this command.

    Parameters
    ----------
    receipt
        A kernel screen's receipt (infercrane.cuda-kernel-screening-receipt/v3: it carries the screen's result).
    decode_step_ms
        Decode step wall time for the Amdahl ceiling (default: the receipt's own, if it has one).
    serving_receipt
        Read the decode step time from this serving receipt instead.
    serving_recipe
        Recipe whose TPOT is the decode step time (with --serving-receipt; default compiled).
    serving_concurrency
        Concurrency whose TPOT is the decode step time (with --serving-receipt; default 1).
    per_row
        With --serving-receipt: one decode step per decision row instead of one for all, each the TPOT at the
        concurrency equal to the row count (a decode batch of c sequences is c rows); rows the serving receipt did
        not run get no end-to-end ceiling.
    policy
        A kernel policy file overriding the packaged thresholds.
    out
        Where to write the new receipt.
    sign_key
        Sign the new receipt as it is written (an ed25519 private key from `infercrane receipt keygen`).
    """
    from ..decide.policy import load_policy
    from ..env.capture import provenance
    from ..errors import InputError, about
    from ..kernels.harness.compare import with_comparisons
    from ..kernels.receipt import build_document
    from ..receipts.models_v3 import SCREENING_V3, DecodeStep
    from ..report.console import console
    from ..receipts.validate import load_receipt, write_receipt
    from ..options import check_output_file

    # the options first, then the evidence they apply to
    check_output_file(out, "--out", not_over=receipt)
    check_sign_key(sign_key)
    for name, value in (("--serving-recipe", serving_recipe), ("--serving-concurrency", serving_concurrency)):
        if value is not None and serving_receipt is None:
            raise InputError(f"{name} is read only with --serving-receipt; give the serving receipt too, or drop it")
    if serving_receipt is not None and decode_step_ms is not None:
        raise InputError("--decode-step-ms and --serving-receipt both set the decode step time; give one")
    if per_row and serving_receipt is None:
        raise InputError("--per-row reads one decode step per row count from a serving receipt; give "
                         "--serving-receipt too, or drop --per-row")
    if per_row and serving_concurrency is not None:
        raise InputError("--per-row takes each row's step at the concurrency equal to the row count; drop "
                         "--serving-concurrency")
    with about("--policy"):
        pol = load_policy("kernel", policy)
    new_step: Any = None
    if decode_step_ms is not None:
        new_step = DecodeStep(ms=decode_step_ms, source="user: --decode-step-ms")
    elif serving_receipt is not None and not per_row:
        ms, source = decode_step_from_receipt(serving_receipt, serving_recipe or "compiled", serving_concurrency or 1)
        new_step = DecodeStep(ms=ms, source=source)
    with about("receipt"):
        old = load_receipt(receipt)
    if old.document["schema_version"] != SCREENING_V3:
        raise InputError(f"{receipt} is {old.document['schema_version']}: kernel decide reads {SCREENING_V3} "
                         "receipts, which carry the screen's result", hint="screen again with this InferCrane")
    model = old.model
    if per_row:
        new_step = per_row_steps(serving_receipt, serving_recipe or "compiled",
                                 [r for r in model.result.rows if pol.decides_on(r)])
    decode_step = new_step or model.decode_steps or model.decode_step
    result = with_comparisons(model.result, pol) if model.result.run_kind == "timed" else model.result
    doc = old.document
    prov = provenance(config={"decided_from": {"receipt": str(receipt), "content_sha256": doc["content_sha256"]},
                              "measured_config": doc["provenance"]["config"],
                              "decode_step": dump_steps(decode_step),
                              "policy": str(policy) if policy else "packaged"},
                      hardware_info=doc["hardware"], software=doc["software"], run_id=doc["app_id"],
                      model=doc["provenance"].get("model"))
    new = build_document(result, pol, provenance=prov, model_source=doc["model_shape_source"]["source"],
                         decode_step=decode_step,
                         decided_from={"receipt": str(receipt), "content_sha256": doc["content_sha256"]})
    written = write_receipt(new, out)
    con = console()
    sign_written(written.path, sign_key, con)
    _print_summary(con, written.document)
    con.print(f"receipt: {plain(written.path)}")
    return 0


def _first_line(text: Any) -> str:
    """The first line of a long text (a reason with a worker's traceback), made safe for a terminal (control
    characters shown as '?'): the receipt keeps the whole of it."""
    from ..report.console import safe

    lines = str(text or "").strip().splitlines() or [""]
    return safe(lines[0]) + (" (… more in the receipt)" if len(lines) > 1 else "")


def _impl_line(i: dict[str, Any]) -> str:
    """The correctness cell of one implementation (a result's record): the rows it was correct at and its timing
    cells (how many, how many flagged) or, when it did not run to the end, the first line of why — the skip reason,
    or the failure kind and error (for an incorrect kernel the error names its first failing check)."""
    checked = [c["rows"] for c in i.get("correctness", []) if c.get("passed")]
    correct = f"correct at rows {', '.join(map(str, checked))}" if checked else ""
    if i["status"] == "skipped":
        return _first_line(i.get("skip_reason") or i.get("error") or "skipped")
    if i["status"] != "ok":
        from ..receipts.screen_result import FAILURE_WORDS

        error = str(i.get("error") or "").strip()
        kind = i.get("failure")
        word = FAILURE_WORDS.get(str(kind), str(kind)) if kind else None
        if word and not error.startswith(word):
            error = error[len(str(kind)) + 1:].strip() if error.startswith(f"{kind}:") else error
            error = f"{word}: {error}"
        why = _first_line(error)
        return f"{correct}; then {why}" if correct else why or "failed"
    line = correct or "ok"
    timings = i.get("timings", [])
    if timings:
        flagged = sum(1 for c in timings if c.get("flags"))
        line += f"; {len(timings)} cells timed, {flagged} flagged (all modes)"
    return line


_VERDICT_STYLES = {"FASTER": "green", "SLOWER": "red", "SAME": "", "AMBIGUOUS": "yellow", "INSUFFICIENT": "yellow",
                   "FLAGGED": "yellow"}


def _baseline_verdicts(doc: dict[str, Any], key: str) -> list[Any]:
    """One ``Text`` line per baseline: candidate ``key``'s verdicts against it at the decision rows, in the receipt's
    decision timing mode, grouped by verdict ("vs torch_compile: FASTER at 1, 512; SAME at 8, 32, 128").

    The decision rows are those of the candidate's decision family as the receipt marks it (a comparison's
    ``family``: the policy's mode, a counted baseline, a decision row); the verdict shown is the family verdict, the
    one the decision read (Holm-adjusted), with the comparison's own verdict in brackets where the two differ. A
    baseline the policy does not count is shown with its own verdicts at those rows, marked "not counted"."""
    from rich.text import Text

    result = doc["result"]
    mode = doc.get("measurements_timing_mode")
    mine = [c for c in result.get("comparisons", []) if c.get("candidate") == key and c.get("mode") == mode]
    rows = {c["rows"] for c in mine if c.get("family")}
    baselines = [i["key"] for i in result["implementations"] if i.get("kind") == "baseline"]
    lines = []
    for b in baselines:
        groups: dict[str, list[int]] = {}
        counted = False
        for c in sorted((c for c in mine if c.get("reference") == b and c["rows"] in rows), key=lambda c: c["rows"]):
            own = str(c["verdict"])
            family = c.get("family")
            counted = counted or family is not None
            verdict = str(family["verdict"]) if family else own
            groups.setdefault(verdict if verdict == own else f"{verdict} (own {own})", []).append(c["rows"])
        if not groups:
            continue
        line = Text(f"vs {_first_line(b)}" + ("" if counted else " (not counted)") + ": ")
        for n, (verdict, at) in enumerate(groups.items()):
            line.append("; " if n else "")
            line.append(verdict, style=_VERDICT_STYLES.get(verdict.split(" ")[0], ""))
            line.append(f" at {', '.join(map(str, at))}")
        lines.append(line)
    return lines


def _verdict_text(doc: dict[str, Any], i: dict[str, Any]) -> Any:
    """The verdict cell of one implementation. A candidate: its decision code and decision (the receipt's candidate
    from ``decision_code`` / ``decision``, the others from ``other_candidates``), then its verdicts against each
    baseline (``_baseline_verdicts``). A baseline: "baseline", and — only because the receipt says so, in its Amdahl
    ceilings, which are taken against the fastest counted baseline at each decision row — the rows where it is
    that baseline."""
    from rich.text import Text

    from ..report.console import DECISION_STYLES

    key = i["key"]
    if i.get("kind") != "candidate":
        text = Text("baseline")
        ceilings = [a for a in doc.get("amdahl", []) if a.get("baseline") == key]
        rows = [str(a["rows"]) for a in ceilings if a.get("rows")]
        if ceilings:
            text.append(" — the fastest counted baseline" + (f" at rows {', '.join(rows)}" if rows else "") +
                        " (the Amdahl ceilings')")
        return text
    if doc.get("candidate", {}).get("key") == key:
        code, decision = doc.get("decision_code"), doc.get("decision")
    else:
        other = next((o for o in doc.get("other_candidates", []) if o.get("implementation") == key), {})
        code, decision = other.get("decision_code"), other.get("decision")
    text = Text()
    if code:
        text.append(_first_line(code), style=DECISION_STYLES.get(str(code), "bold"))
        text.append(": ")
    text.append(_first_line(decision) if decision else "no decision in the receipt")
    for line in _baseline_verdicts(doc, key):
        text.append("\n")
        text.append_text(line)
    return text


def _print_summary(con: Any, doc: dict[str, Any]) -> None:
    """The closing summary: the per-call medians, one table of every implementation with its status, correctness
    and verdict, the Amdahl ceilings, and last the decision and its reason. Every piece of text from a receipt
    (keys, reasons, errors, decisions) is printed as plain text (``Text``, control characters shown as '?'), never
    as rich markup.

    The verdicts live in the implementations table, one row per implementation, and the µs table carries times
    only. Giving every candidate its own ×baseline columns instead would make ``candidates × baselines`` extra
    columns (six more for a screen of three baselines and two candidates), which do not fit 100 columns whole; and
    those columns were ratios of medians with the comparison's own verdict at every row, while the decision reads
    the trial-level comparisons at the decision rows after the family adjustment — which is what the table shows.
    The µs table (``report.console.kernel_time_tables``, also in ``receipt show``) is built from the result's timing
    cells, so every timed implementation has its column even when the receipt's candidate was not timed; a flagged
    cell (a cell that cannot carry a verdict) is marked. Where launch mode was timed, the host's time per call stands
    in a column beside each implementation's launch time, so a user sees before going into eager vLLM what a call
    costs the host. The other candidates' decisions are in their rows; their whole reasons stay in the receipt
    (``infercrane receipt show``). Before the decision, one line per candidate says what its decision comparisons
    rest on (``report.kernel.timing_basis``): clean timing, an interval widened by the timers' disagreement, or no
    verdict (flagged)."""
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    from ..report.console import DECISION_STYLES, kernel_time_tables

    result = doc["result"]
    mode = doc.get("measurements_timing_mode")
    for part in kernel_time_tables(doc):
        con.print(part)

    cand = doc.get("candidate", {}).get("key")
    title = "implementations" + (f" — the receipt's candidate: {_first_line(cand)}" if cand else "")
    table = Table(title=Text(title), title_justify="left", show_lines=True,
                  caption=Text(f"verdicts at the decision rows in {mode} mode, after the family (Holm) adjustment"
                               if mode else "no speed verdicts: nothing was timed"),
                  caption_justify="left")
    table.add_column("key", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("correctness", overflow="fold", ratio=2)
    table.add_column("verdict", overflow="fold", ratio=3)
    for i in result["implementations"]:
        status = str(i["status"])
        table.add_row(Text(_first_line(i["key"])), Text(_first_line(i.get("kind"))),
                      Text(_first_line(status), style={"ok": "green", "failed": "red"}.get(status, "yellow")),
                      Text(_impl_line(i)), _verdict_text(doc, i))
    # wider than the console (a measurement stops at its width): fill it, correctness and verdict folded 2 : 3;
    # else rich would shrink them to the same width
    table.expand = Measurement.get(con, con.options, table).maximum >= con.width
    con.print(table)
    for a in doc.get("amdahl", []):
        con.print(Text(f"  Amdahl rows={a['rows']}: op share {a['op_share'] * 100:.2f}% of a "
                       f"{a['decode_step_ms']:.3g} ms step ({_first_line(a['decode_step_source'])}); ceiling "
                       f"{a['best_possible_gain_percent']:.2f}%, expected {a['expected_gain_percent']:.2f}%"))
    from ..report.kernel import timing_basis

    for i in result["implementations"]:  # one line per candidate: what its decision's comparisons rest on
        basis = timing_basis(doc, i["key"]) if i.get("kind") == "candidate" else None
        if basis:
            con.print(Text(basis))
    con.print(Text.assemble(("decision: ", "bold"),
                            (_first_line(doc["decision"]), DECISION_STYLES.get(str(doc.get("decision_code")), "bold"))))
    con.print(Text.assemble(("reason: ", "bold"), _first_line(doc["reason"])))


def agree(a: Path, b: Path, /, *, json_out: Path | None = None) -> int:
    """Do two screens of one op agree within their runs' spread? Cell by cell (implementation, rows, timing mode):
    each screen's per-trial medians, their ranges, and B/A; the cells agree when the two ranges of trial medians
    overlap. For screens made apart (two executors, two GPUs of one type, two days), whose trials are not paired.
    A cell a screen flagged is compared on the primary timer and counted apart. Exit 0 when every compared cell
    that neither screen flagged agrees (there is at least one) and the decisions match, 1 otherwise; 2 for input
    refused, the same receipt twice among it. Two receipts of one measurement (one decided again with kernel
    decide) are compared with a first line saying that their cells agree by construction.

    Parameters
    ----------
    a
        A kernel screen's receipt (v3).
    b
        Another screen's receipt of the same op at the same shapes (v3).
    json_out
        Also write the comparison, cell by cell, as JSON.
    """
    from rich.table import Table

    from ..errors import InputError
    from ..kernels.agreement import compare_screens, same_measurement, same_receipt
    from ..receipts.io import write_atomic
    from ..receipts.models_v3 import SCREENING_V3
    from ..report.console import console
    from ..receipts.validate import load_receipt

    from ..options import check_output_file

    docs = [load_receipt(path).document for path in (a, b)]  # a file that is not a valid receipt, named, first
    if json_out is not None:
        check_output_file(json_out, "--json-out")
    for path, doc in zip((a, b), docs):
        if doc["schema_version"] != SCREENING_V3:
            raise InputError(f"{path}: is {doc['schema_version']}; kernel agree compares kernel screen receipts "
                             f"({SCREENING_V3})")
    if (why := same_receipt(*docs)) is not None:
        raise InputError(f"{a} and {b}: are {why}: a screen agrees with itself in every cell",
                         hint="compare two screens made apart")
    try:
        result = compare_screens(*docs)
    except ValueError as exc:
        raise InputError(f"{a} and {b}: {exc}") from None
    con = console()
    if (why := same_measurement(*docs)) is not None:
        con.print(plain(f"warning: {a} and {b} hold {why}: every cell agrees by construction; only the decisions "
                        "are compared"), style="bold", soft_wrap=True)
    t = Table(title=f"{result.op}: A {a} ({result.a_gpu}) vs B {b} ({result.b_gpu})", title_justify="left")
    for col in ("impl", "rows", "mode", "A trial medians (µs)", "B trial medians (µs)", "B/A", "agree"):
        t.add_column(col)
    def rng(v: list[float]) -> str:
        return f"{min(v):.3g}–{max(v):.3g} ({len(v)})" if v else "—"

    for c in result.cells:
        verdict = {True: "yes", False: "NO", None: "not compared"}[c.agree]
        if c.flagged_by is not None:
            verdict += f" (flagged by {c.flagged_by})"
        t.add_row(c.impl, str(c.rows), c.mode, rng(c.a_trial_medians_us), rng(c.b_trial_medians_us),
                  f"{c.ratio_b_over_a:.3f}" if c.ratio_b_over_a else "—", verdict)
    con.print(t)
    same = result.a_decision == result.b_decision
    n, bad = len(result.compared), len(result.disagreeing)
    con.print(plain(f"method: {result.method}"))
    con.print(plain(f"{result.summary()}; decisions: A {result.a_decision}, B {result.b_decision} "
                    f"({'the same' if same else 'DIFFERENT'})"))
    if json_out is not None:
        write_atomic(json_out, result.model_dump(mode="json"))
    return 0 if same and bad == 0 and n > 0 else 1

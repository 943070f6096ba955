"""``infercrane serve …``: paired A/B of two vLLM recipes, one-recipe benchmarks, the shipped recipes."""
from __future__ import annotations

import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Any

from cyclopts import Parameter

from ..serving.config import ServeConfig
from ..options import check_output_file, command_line, plain
from ..receipts.signing import check_sign_key, sign_written


def recipes() -> int:
    """List the shipped recipes and workload presets."""
    from ..serving.recipes import load_recipe, shipped_recipes
    from ..serving.workload import load_workload, workload_presets

    for name in shipped_recipes():
        r = load_recipe(name)
        print(f"recipe   {name:18s} engine={r.engine} model={r.model} args={shlex.join(r.engine_args) or '(none)'}")
    for name in workload_presets():
        w = load_workload(name)
        print(f"workload {name:18s} {w.input_tokens}->{w.output_tokens} tokens, c={w.concurrency}, "
              f"{w.runs_per_arm} runs/arm, order {w.arm_order}")
    return 0


def ab(recipe_a: str, recipe_b: str, /, *, config: Annotated[ServeConfig, Parameter(name="*")] = ServeConfig()) -> int:
    """Paired A/B: launch recipe A and recipe B (each on its own engine), drive them over the workload's concurrency
    sweep with repeated runs, compare with confidence intervals and rank tests, decide — and write a receipt.

    Parameters
    ----------
    recipe_a
        Baseline recipe: a shipped name (eager, compiled, balanced, throughput; testserver, testserver-fast on a CPU)
        or a YAML file.
    recipe_b
        Candidate recipe.
    """
    return _serve([recipe_a, recipe_b], config, kind="ab")


def bench(recipe: str, /, *, config: Annotated[ServeConfig, Parameter(name="*")] = ServeConfig()) -> int:
    """Benchmark one recipe on a workload (default public-1000), with every driver asked for on the same engine, and
    set the result against the workload's published example — written as a receipt.

    Parameters
    ----------
    recipe
        A shipped recipe name or a YAML file.
    """
    if config.find_max_rate:
        return _max_rate(recipe, config)
    return _serve([recipe], config, kind="bench")


def decide(receipt: Path, /, *, out: Path, policy: Path | None = None, sign_key: Path | None = None) -> int:
    """Decide again on a finished serving receipt, without re-measuring: its statistics, decision and (for serve
    bench) the drivers' agreement, recomputed from its raw runs under the packaged or another policy. The new receipt
    keeps the measuring machine's hardware and software, the original run id, every run and every engine record; its
    provenance records this command and the receipt it came from.

    Parameters
    ----------
    receipt
        A complete receipt written by serve ab or serve bench.
    out
        Where to write the new receipt.
    policy
        A serving policy file overriding the packaged one (e.g. another equivalence margin).
    sign_key
        Sign the new receipt as it is written (an ed25519 private key from `infercrane receipt keygen`).
    """
    from ..decide.policy import load_policy
    from ..env.capture import provenance
    from ..errors import about
    from ..report.console import console
    from ..receipts.validate import load_receipt, write_receipt
    from ..serving.receipt import build_document, plan_result_from_receipt, provenance_model_from_block, serving_kind

    check_output_file(out, "--out", not_over=receipt)
    check_sign_key(sign_key)
    with about("--policy"):
        pol = load_policy("serving", policy)
    old = load_receipt(receipt).document
    serving_kind(old, receipt)  # a kernel or PoC receipt: what it is, and which command decides it
    if not old.get("complete"):
        from ..errors import InputError
        from ..serving.progress import serving_progress_state

        raise InputError(f"{receipt}: the receipt is incomplete, {serving_progress_state(old)}: its plan did not "
                         "finish, so there is nothing to decide on", hint="run the plan again")
    result, kind = plan_result_from_receipt(old)
    model = old["provenance"].get("model") or provenance_model_from_block(old["model"])
    old_config = old["provenance"]["config"]
    prov = provenance(config={"decided_from": {"receipt": str(receipt), "receipt_sha256": old["content_sha256"],
                                               "which_was_decided_from": old_config.get("decided_from")},
                              "command": f"serve {kind}",
                              "measured_config": old_config.get("measured_config", old_config),
                              "policy": str(policy) if policy else "packaged"},
                      hardware_info=old["provenance"]["hardware"], software=old["software"],
                      run_id=old["provenance"]["run_id"], model=model)
    doc = build_document(result, kind=kind, policy=pol, provenance=prov,
                         engines=old["engines"], runs=old["runs"])  # as recorded: nothing was launched or run here
    written = write_receipt(doc, out)
    con = console()
    sign_written(written.path, sign_key, con)
    _print_summary(con, written.document)
    con.print(f"receipt: {plain(written.path)}  (decided again from {plain(receipt)})")
    return 0


def _price_table(config: Any) -> dict[str, Any]:
    """``--gpu-prices`` (or the shipped table) with each ``--gpu-price`` over it (``decide.cost.price_table``)."""
    from ..decide.cost import load_prices, price_table
    from ..errors import about

    with about("--gpu-prices"):
        table = load_prices(config.gpu_prices)
    return price_table(table, config.gpu_price or ())


def _serve(names: list[str], config: ServeConfig, *, kind: str) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from ..decide.policy import load_policy
    from ..env.capture import new_run_id, run_id_from_env
    from ..errors import InputError, about
    from ..models.catalog import load_model_config
    from ..report.console import console
    from ..serving.receipt import model_provenance
    from ..serving.recipes import load_recipe
    from ..serving.workload import check_tokenizer, plan_runs, resolve_tokenizer

    con = console()
    # every input before any engine starts
    from ..serving.ratesearch import DEFAULT_MAX_PROBES

    if config.find_max_rate or config.rate_range is not None or config.max_probes != DEFAULT_MAX_PROBES:
        raise InputError("--find-max-rate (with --rate-range, --max-probes) is a mode of serve bench alone",
                         hint="run `infercrane serve bench RECIPE --find-max-rate`" if kind == "ab"
                         else "give --find-max-rate too")
    with about("--policy"):
        policy = load_policy("serving", config.policy)
    prices = _price_table(config)
    config, workload = _workload(config, kind)
    if config.model is not None:
        with about("--model"):
            load_model_config(config.model)
    if config.url is not None and len(config.url) != len(names):
        raise InputError(f"--url: serve {kind} takes {len(names)} URL{'s' if len(names) > 1 else ''}, one per recipe "
                         f"in order ({', '.join(names)}); got {len(config.url)}",
                         hint="give --url once per recipe" + (", A's server first" if len(names) > 1 else ""))
    if config.url is not None and len(config.url) == 2:
        from ..serving.engine import same_server

        if (why := same_server(*config.url)) is not None:
            raise InputError(f"--url {config.url[0]} {config.url[1]}: A ({names[0]}) and B ({names[1]}) would be one "
                             f"server measured twice ({why}); serve ab compares two servers, one per recipe",
                             hint="give each recipe's own server")
    run_id = run_id_from_env() or new_run_id()
    out = config.out or Path("runs") / run_id / f"serve-{kind}.json"
    check_output_file(out, "--out")
    _check_not_being_written(out)
    check_sign_key(config.sign_key)
    recs = [load_recipe(n) for n in names]
    if len({r.name for r in recs}) != len(recs):
        raise InputError(f"the two recipes share the name {recs[0].name!r}", hint="give B a different name")
    model = config.model
    notes: list[str] = []
    if config.stand_in:
        model = _stand_in_for(recs[0].model)
    elif model is None and config.url is None and _testserver_on_catalog_model(recs):
        # The test server has no weights: what a catalog model means for it is that model's offline stand-in (its
        # config for the receipt, its tokenizer for the drivers).
        model = _stand_in_for(recs[0].model)
        notes.append(f"the test server serves no weights: {', '.join(r.name for r in recs)} run on the offline "
                     f"stand-in of {recs[0].model} ({model})")
    from ..models.real import is_packaged, served_folder

    wanted = model or recs[0].model
    if config.url is None and not config.stand_in and is_packaged(wanted) and any(r.engine == "vllm" for r in recs):
        # a model whose real weights ship in a package: its converted folder (made once, reused after)
        model = served_folder(wanted, progress=lambda line: con.print(f"model: {plain(line)}"))
    if model is not None:
        recs = [r.with_overrides(model=model) for r in recs]
    model_prov = model_provenance(recs[0])
    with about("--tokenizer"):
        if config.tokenizer is not None:
            check_tokenizer(config.tokenizer)
        for r in recs:  # the drivers' tokenizer, before any server is asked anything
            resolve_tokenizer(r.resolved(), config.tokenizer)
    access = config.access()
    if config.url is None and config.headers:
        raise InputError(f"--header {', '.join(access.header_names())}: headers go to servers given with --url (a "
                         "gateway in front of a server wants them); the engines InferCrane launches are asked "
                         "directly", hint="give --url for a server that wants them, or drop --header")
    if config.url is None and config.api_key is not None and not any(_sets_api_key(r) for r in recs):
        raise InputError("--api-key: the key goes to servers given with --url, or to a launched engine whose recipe "
                         f"sets --api-key; no recipe of {', '.join(r.name for r in recs)} does",
                         hint="give --url for a server that wants the key, or drop --api-key")
    engines: dict[str, Any] | None = None
    if config.url is not None:
        engines = _connect_servers(recs, config.url, access)
    plan = plan_runs([r.name for r in recs], workload, "sequential" if kind == "bench" else None)
    design = None
    if kind == "ab":  # what this design can decide, before any engine starts; one that cannot decide is refused
        from ..serving.ab import design_of

        design, cannot = design_of(workload, policy)
        if cannot is not None:
            raise InputError(f"--workload {workload.name}: {cannot}", hint=design)
    total = len(plan) * len(config.drivers)
    con.print(f"[bold]serve {kind}[/bold] {plain(' vs '.join(r.name for r in recs))} on {plain(recs[0].model)}; "
              f"workload {plain(workload.name)} c={workload.concurrency} {workload.runs_per_arm} runs/arm, order "
              f"{'sequential' if kind == 'bench' else workload.arm_order}; drivers {list(config.drivers)} → "
              f"{plain(out)}")
    if design is not None:
        con.print(f"  {plain(design)}")
    for note in [*notes, *workload.notes()]:
        con.print(f"  note: {plain(note)}")
    if access or config.tokenizer:
        con.print(f"  requests carry: {plain(access.describe())}"
                  + (f"; tokenizer {plain(config.tokenizer)}" if config.tokenizer else ""))
    for eng in (engines or {}).values():
        rec = eng.record
        con.print(f"  server {plain(eng.label)}: {plain(eng.base_url)} (not launched by InferCrane), serves "
                  f"{plain(', '.join(rec.served_models))}, version {plain(rec.version or 'unknown')}; prefix-cache "
                  f"reset {'offered: reset before every run' if rec.prefix_cache_reset_offered else 'not offered: runs share the server cache'}")
        if getattr(eng, "note", None):
            con.print(f"  note: {plain(eng.note)}")

    from ..serving.ab import ABPlan, run_ab

    ab = ABPlan(section=f"serve {kind}", recipes=recs, workload=workload, drivers=list(config.drivers), policy=policy,
                startup_timeout_s=config.startup_timeout_s, out=out, section_sha256="",
                options=config.model_dump(mode="json") | {"gpu_price_table": prices}, kind=kind,
                order="sequential" if kind == "bench" else None,
                sign_key=config.sign_key, model_provenance=model_prov, tokenizer=config.tokenizer, access=access,
                quality_gate=config.quality_gate)
    # The bar appears once preflight has passed, so a recipe or driver error is printed on its own.
    bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn(), console=con)
    task = bar.add_task(_next_label(plan, 0, len(config.drivers)), total=total)
    started = time.monotonic()

    def on_run(m: Any, done: int, total: int) -> None:
        bar.update(task, completed=done, description=_next_label(plan, done, len(config.drivers)))
        bar.console.print(f"  {plain(m.arm)} run {m.run_index} c={m.concurrency} ({m.driver}): "
                          f"{m.output_tok_s:.1f} tok/s, TTFT p95 {m.ttft_p95_ms or 0:.1f} ms, TPOT p95 "
                          f"{m.tpot_p95_ms or 0:.2f} ms, {m.failures} failed ({time.monotonic() - started:.0f} s)")

    def say(line: str) -> None:
        bar.stop()
        con.print(f"[bold red]{plain(line)}[/bold red]" if line.startswith(("stopped", "analysis failed"))
                  else plain(line))

    engine_lines = _EngineLines(con)
    engine_log = logging.getLogger("infercrane.serving.engine")
    engine_log.addHandler(engine_lines)
    level = engine_log.level
    engine_log.setLevel(logging.INFO)
    try:
        receipt = run_ab(ab, run_id=run_id, con=con, say=say, engines=engines, on_run=on_run, on_start=bar.start,
                         on_progress=lambda line: bar.console.print(
                             f"  {line} ({time.monotonic() - started:.0f} s)", markup=False, highlight=False))
    finally:
        bar.stop()
        engine_log.removeHandler(engine_lines)
        engine_log.setLevel(level)
    _print_summary(con, receipt.document)
    con.print(f"receipt: {plain(receipt.path)}  ({plain(command_line('receipt', 'show', receipt.path))})")
    from ..report.gate import fail_on_exit

    return fail_on_exit(receipt.path, config.fail_on, con)


class _EngineLines(logging.Handler):
    """Prints the engine module's log lines (each engine's command, shell-quoted, and its program-changing
    environment; its readiness) on the command's console."""

    def __init__(self, con: Any) -> None:
        super().__init__(logging.INFO)
        self.con = con

    def emit(self, record: logging.LogRecord) -> None:
        self.con.print(f"  {plain(record.getMessage())}", soft_wrap=True)


def _testserver_on_catalog_model(recs: list[Any]) -> bool:
    """Every recipe is a test-server recipe naming a catalog model (not a local folder): the shipped ones do."""
    from ..models.catalog import list_models

    return all(r.engine == "testserver" and not r.model_is_local() and r.model in list_models() for r in recs)


def _sets_api_key(recipe: Any) -> bool:
    """Whether the recipe's engine checks an API key (vLLM's ``--api-key`` among its engine arguments)."""
    return any(a == "--api-key" or a.startswith("--api-key=") for a in recipe.engine_args)


def _max_rate(name: str, config: ServeConfig) -> int:
    """``serve bench --find-max-rate``: the highest request rate meeting the policy's SLOs (serving/ratesearch.py),
    written as a rate-search record after every probe."""
    from ..decide.policy import load_policy
    from ..env.capture import new_run_id, provenance, run_id_from_env
    from ..errors import InputError, about
    from ..report.console import console
    from ..serving.config import redact_argv
    from ..serving.ratesearch import DEFAULT_RATE_RANGE, RateSearch, run_search, summary
    from ..serving.recipes import load_recipe

    con = console()
    with about("--policy"):
        policy = load_policy("serving", config.policy)
    if not policy.slos:
        raise InputError("--find-max-rate searches the highest rate that meets the policy's SLOs, and the policy names "
                         "none", hint="give --policy serving-slo, or a policy file with slos")
    if config.url is not None or len(config.drivers) != 1 or config.drivers[0] != "aiperf":
        raise InputError("--find-max-rate drives one engine it launches, with AIPerf alone",
                         hint="drop --url and --drivers")
    low, high = config.rate_range or DEFAULT_RATE_RANGE
    with about("--rate-range"):
        if config.rate_range is not None and len(config.rate_range) != 2:
            raise InputError(f"--rate-range takes two rates, low and high; got {len(config.rate_range)}")
        search = RateSearch(low=low, high=high, max_probes=config.max_probes)
    config, workload = _workload(config, "bench")
    if workload.trace is not None:
        raise InputError(f"--workload {workload.name} replays a trace on its own schedule; a rate search sets the rate",
                         hint="give a workload without a trace")
    recipe = load_recipe(name)
    if config.model is not None:
        recipe = recipe.with_overrides(model=config.model)
    run_id = run_id_from_env() or new_run_id()
    out = config.out or Path("runs") / run_id / "serve-max-rate.json"
    check_output_file(out, "--out")
    con.print(f"[bold]serve bench --find-max-rate[/bold] {plain(recipe.name)}: rates {low:g}-{high:g} requests/s, "
              f"at most {search.max_probes} probes of {search.windows} windows, SLOs "
              + "; ".join(s.label for s in policy.slos) + f" → {plain(out)}")
    prov = provenance(config={"command": "serve bench --find-max-rate", "options": config.model_dump(mode="json"),
                              "recipe": recipe.model_dump(mode="json"), "workload": workload.model_dump(mode="json")},
                      run_id=run_id, model=None, command_line=redact_argv(sys.argv))
    probes = run_search(recipe, workload, search, policy.slos, out=out, provenance=prov,
                        startup_timeout_s=config.startup_timeout_s, say=lambda line: con.print(f"  {plain(line)}"),
                        tokenizer=config.tokenizer, access=config.access())
    con.print(f"[bold]{plain(summary(probes, search)['said'])}[/bold]")
    con.print(f"record: {plain(out)}")
    return 0


def _workload(config: ServeConfig, kind: str) -> tuple[ServeConfig, Any]:
    """The config naming the workload the command runs (``workload_for``) and that workload, with the command's
    overrides."""
    from ..errors import InputError, about
    from ..serving.workload import load_workload

    config = config.model_copy(update={"workload": config.workload_for(kind)})  # the receipt records the one run
    with about("--workload"):
        workload = load_workload(config.workload)
    if config.arrival_pattern is not None and config.request_rate is None and workload.request_rate is None:
        raise InputError(f"--arrival-pattern {config.arrival_pattern} spaces requests at a request rate, and workload "
                         f"{workload.name} has none", hint="give --request-rate R (requests per second) too")
    if config.workload_overrides():
        workload = workload.with_overrides(**config.workload_overrides())
    return config, workload


def _connect_servers(recs: list[Any], urls: tuple[str, ...], access: Any = None) -> dict[str, Any]:
    """arm -> ExternalEngine for each --url, probed with ``access`` (the API key and headers every request carries);
    an InputError of one line when one is not a usable server."""
    from ..serving.engine import ExternalEngine

    return {r.name: ExternalEngine(url, recipe=r, label=r.name, access=access).connect()
            for r, url in zip(recs, urls, strict=True)}


def _check_not_being_written(out: Path) -> None:
    """Refuse an --out that a live InferCrane on this host is still writing (its progress names it)."""
    from ..errors import InputError
    from ..receipts.io import read_json
    from ..serving.progress import parse_progress, serving_progress_state

    if not out.exists():
        return
    try:
        doc = read_json(out)
    except InputError:  # not a receipt being written (a directory or another file: --out's own check says so)
        return
    if not isinstance(doc, dict):
        return
    state = serving_progress_state(doc) if parse_progress(doc.get("incomplete_reason")) else ""
    if state.startswith("in progress (pid"):
        raise InputError(f"--out {out}: another InferCrane is writing it now, {state}",
                         hint="give another --out, or wait for that run to finish")


def _next_label(plan: list, done_runs: int, n_drivers: int) -> str:
    i = done_runs // n_drivers
    if i >= len(plan):
        return "done"
    p = plan[i]
    return f"{p.arm} run {p.run_index + 1} c={p.concurrency}"


def _stand_in_for(model_id: str) -> str:
    from ..models.standin import read_stand_in_marker, write_stand_in

    path = Path("runs") / "stand-ins" / model_id.replace("/", "--")
    if read_stand_in_marker(path) is None:
        write_stand_in(model_id, path, overwrite=path.exists())
    return str(path.resolve())




def _print_summary(con: Any, doc: dict[str, Any]) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..serving.receipt import statistic_metric

    if not doc.get("complete"):
        from ..serving.progress import serving_progress_state

        con.print(Text(f"incomplete: {serving_progress_state(doc)}", style="bold red"))

    pa = doc.get("paired_aiperf")
    if pa:
        t = Table(title=Text(f"medians over runs ({pa['primary_driver']})"), title_justify="left")
        for c in ("recipe", "c", "output tok/s", "TTFT p95 ms", "TPOT p95 ms", "latency p95 ms", "runs", "failures"):
            t.add_column(c, justify="right")
        for m in pa["measurements"]:
            t.add_row(plain(m["recipe"]), str(m["concurrency"]), f"{m['output_tokens_per_second']:.1f}",
                      f"{m['ttft_p95_ms']:.2f}", f"{m['tpot_p95_ms']:.3f}", f"{m['latency_p95_ms']:.1f}",
                      str(m["runs"]), str(m["failures"]))
        con.print(t)
        fam = pa.get("family")
        if fam:
            f = Table(title=Text(f"the decision's family: {fam['family']} ({fam['m_tests']} tests, Holm at "
                                 f"{fam['alpha']:g}; intervals at {fam['interval_level'] * 100:.4g} %)"),
                      title_justify="left")
            for c in ("metric", "role", "pairs", "B/A", "interval", "p", "Holm p", "verdict"):
                f.add_column(c)
            for t in fam["tests"]:
                ratio = "-" if t["ratio_b_over_a"] is None else f"{t['ratio_b_over_a']:.4f}"
                ci = "-" if t["ci_low"] is None else f"[{t['ci_low']:.4f}, {t['ci_high']:.4f}]"
                f.add_row(plain(t["metric"]), t["role"], str(t["n_pairs"]), ratio, plain(ci),
                          "-" if t["p_value"] is None else f"{t['p_value']:.3g}",
                          "-" if t["p_holm"] is None else f"{t['p_holm']:.3g}", plain(t["verdict"]))
            con.print(f)
        title = ("B / A per concurrency over window pairs (described, not in the decision's family)" if fam
                 else "B / A with CI and rank test")
        s = Table(title=title, title_justify="left")  # cells below: numbers and our names
        for c in ("c", "metric", "B/A", "CI", "p", "verdict"):
            s.add_column(c)
        for x in pa["statistics"]:
            p_cell = f"{x['p_value']:.3g}" if fam else f"{x['p_value']:.3g} (min {x['min_achievable_p']:.2g})"
            s.add_row(str(x["concurrency"]), plain(statistic_metric(x)), f"{x['ratio_b_over_a']:.4f}",
                      plain(f"[{x['ci_low']:.4f}, {x['ci_high']:.4f}]"), p_cell, plain(x["verdict"] or "-"))
        con.print(s)
        d = pa.get("design")
        if d:
            measured = "" if d["measured_window_cv"] is None else \
                f", the windows showed {d['measured_window_cv'] * 100:.2g} %"
            con.print(Text(f"design: {d['n_pairs']} window pairs; at the assumed {d['window_cv'] * 100:g} % window CV"
                           f"{measured} it detects {d['detectable_change_percent']:.2g} % with 80 % power"))
        con.print(Text.assemble(("decision: ", "bold"), (pa["decision"], "bold green")))
    bench = doc.get("bench")
    if bench:
        from ..serving.receipt import agreement_line

        t = Table(title=Text(f"{bench['recipe']}: medians over runs"), title_justify="left")
        for c in ("c", "driver", "output tok/s", "req/s", "TTFT p95 ms", "TPOT p95 ms", "latency p95 ms", "runs",
                  "failures"):
            t.add_column(c, justify="right")
        for m in bench["measurements"]:
            t.add_row(str(m["concurrency"]), plain(m["driver"]), f"{m['output_tokens_per_second']:.1f}",
                      f"{m['request_throughput']:.2f}", f"{m['ttft_p95_ms']:.1f}", f"{m['tpot_p95_ms']:.3f}",
                      f"{m['latency_p95_ms']:.1f}", str(m["runs"]), str(m["failures"]))
        con.print(t)
        for a in bench["driver_agreement"]:
            con.print(Text(f"  agreement: {agreement_line(a)}"))
    pw = doc.get("public_workload_reproduction")
    if pw:
        con.print(Text(f"  published example: {pw['comparison_boundary']}"))
    for m in (pa or bench or {}).get("measurements", []):
        if m.get("goodput_req_s") is not None:
            con.print(Text(f"  goodput {m['recipe']} c={m['concurrency']}: {m['goodput_req_s']:.3g} requests/s within "
                           f"every SLO (median; {m['slo_met_runs']} of {m['runs']} runs met every SLO)"))
    cost = doc.get("cost")
    if cost:
        if cost.get("price") is None:
            con.print(Text(f"  cost: {cost['note']}"))
        else:
            pr = cost["price"]
            con.print(Text(f"  cost at {cost['gpu_type']} ${pr['usd_per_gpu_hour']:g}/GPU-hour ({pr['provider']}, read "
                           f"{pr['read_on']}):"))
            for row in cost["per_recipe"]:
                inp = "" if row["input_usd_per_mtok"] is None else f", ${row['input_usd_per_mtok']:.4g} per M input"
                con.print(Text(f"    {row['recipe']} c={row['concurrency']}: ${row['output_usd_per_mtok']:.4g} per M "
                               f"output tokens{inp} ({row['gpus']} GPU{'s' if row['gpus'] > 1 else ''})"))

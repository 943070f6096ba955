"""``infercrane kernel apply``: a candidate kernel inside vLLM, A/B'd end to end against the incumbent, in each
serving mode, with the kernel lab's prediction beside the measurement.

For each mode (``MODES``): arm A is the shipped recipe (``compiled``: the incumbent is Inductor's own code for the
op; ``eager``: vLLM's CUDA kernel), arm B the same recipe with ``kernels: {<op>: <impl>}`` (``serving/kernels.py``:
the kernel inside the engine, its proof, the in-engine gate and the token gate before B is timed). The arms run
co-resident on one GPU where memory allows. Each A/B is a ``serve ab`` receipt (``<out>/<mode>.json``) carrying
``kernel_in_serving``: the prediction (``decide/prediction.py``) from a kernel screen of the candidate against that
mode's incumbent, in the timing mode that runs the op as that engine does, at the row counts the workload decodes
and prefills (``<out>/kernel.json``, or ``--kernel-receipt``), set against the measured B/A ratio and its interval;
``receipt validate`` derives it again.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from cyclopts import Parameter

from ..serving.config import ApplyConfig
from ..options import check_output_folder, plain


class ServingMode(NamedTuple):
    """How one serving mode is A/B'd: arm A's shipped recipe, the kernel lab's baseline that stands for its incumbent,
    and the kernel lab's timing mode that runs the op as that engine does (compiled vLLM replays its decode steps as
    CUDA graphs: ``graph``; eager vLLM launches every call from Python, so its host cost counts: ``launch``)."""
    recipe: str
    incumbent: str
    timing: str


MODES: dict[str, ServingMode] = {"compiled": ServingMode("compiled", "torch_compile", "graph"),
                                 "eager": ServingMode("eager", "vllm_vendor", "launch")}


def kernel_recipe(base: Any, vllm_op: str, impl: str, candidate: str | None) -> Any:
    """``base`` with the kernel inside, named ``<base>-<impl>``."""
    from ..serving.recipes import Recipe

    data = base.model_dump(mode="json", exclude={"sha256"})
    data.update(name=f"{base.name}-{impl}", kernels={vllm_op: impl}, candidate=candidate,
                description=f"{base.name} with {impl} as vLLM's {vllm_op} provider")
    return Recipe.model_validate(data).resolved()


def screen_rows(workload: Any) -> tuple[int, ...]:
    """Rows the workload runs the op at: each concurrency's decode batch, one prompt, every prompt at once."""
    n = workload.input_tokens
    return tuple(sorted({*workload.concurrency, n, *(c * n for c in workload.concurrency)}))


def screen_modes(modes: Sequence[str]) -> tuple[str, ...]:
    """Timing modes the screen takes for these serving modes: each one's own (what its prediction reads), then the one
    the kernel policy decides the screen on (a screen without it measures and decides nothing, and is refused)."""
    from ..decide.policy import load_policy

    return tuple(dict.fromkeys([*(MODES[m].timing for m in modes), load_policy("kernel").timing_mode]))


def apply(*, config: Annotated[ApplyConfig, Parameter(name="*")] = ApplyConfig()) -> int:
    """Put a candidate kernel inside vLLM and A/B it end to end against the incumbent in each serving mode
    (compiled and eager), gated (the kernel ran; its outputs match vLLM's native implementation in the engine;
    greedy tokens match the incumbent's), with the kernel lab's prediction beside the measured B/A ratio."""
    from ..kernels.screen import prepare_screen, run_prepared_screen
    from ..commands.serve import _stand_in_for
    from ..decide.policy import load_policy
    from ..decide.prediction import kernel_in_serving, used_comparisons
    from ..env.capture import new_run_id, run_id_from_env
    from ..errors import InputError, about
    from ..kernels import registry
    from ..kernels.config import ScreenConfig
    from ..models.catalog import load_model_config
    from ..serving.ab import ABPlan, run_ab
    from ..receipts.io import read_json
    from ..report.console import console
    from ..serving.recipes import check_recipe, load_recipe
    from ..serving.workload import load_workload, resolve_tokenizer
    from ..vllm_plugin.selection import VLLM_OPS

    con = console()
    run_id = run_id_from_env() or new_run_id()
    out = config.out or Path("runs") / run_id / "apply"
    check_output_folder(out, "--out")
    held = [m for m in config.modes if (out / f"{m}.json").exists()]
    if held:
        raise InputError(f"--out {out}: already holds the {', '.join(held)} receipt"
                         f"{'s' if len(held) > 1 else ''} of an earlier apply; nothing measured is overwritten",
                         hint="give another --out; to finish an apply that stopped, run the modes it lacks with "
                              f"--modes … --kernel-receipt {out / 'kernel.json'} and another --out")
    lab_op = VLLM_OPS[config.op]
    kernel_doc: dict[str, Any] | None = None
    if config.kernel_receipt is not None:
        with about("--kernel-receipt"):
            kernel_doc = read_json(config.kernel_receipt)
        if (kernel_doc.get("result") or {}).get("spec", {}).get("op") != lab_op:
            raise InputError(f"--kernel-receipt {config.kernel_receipt}: not a kernel screen of {lab_op}",
                             hint="give a v3 receipt of infercrane kernel screen --op " + lab_op)
        lacking = [m for m in config.modes
                   if not used_comparisons(kernel_doc, config.impl, MODES[m].incumbent, MODES[m].timing)]
        if lacking:
            want = "; ".join(f"{m} vLLM: {config.impl} against {MODES[m].incumbent} in {MODES[m].timing} mode"
                             for m in lacking)
            raise InputError(f"--kernel-receipt {config.kernel_receipt}: no comparison to predict {want}",
                             hint="screen them (kernel screen --impls … --modes …), or leave out --kernel-receipt "
                                  "and kernel apply screens what it needs")
    with about("--policy"):
        policy = load_policy("serving", config.policy)
    with about("--workload"):
        workload = load_workload(config.workload)
    if config.runs is not None:
        workload = workload.with_overrides(runs_per_arm=config.runs)
    from ..serving.ab import design_of

    design, cannot = design_of(workload, policy)
    if cannot is not None:
        raise InputError(f"--workload {workload.name}: {cannot}", hint=design)
    pairs = {}
    for mode in config.modes:
        base = load_recipe(MODES[mode].recipe)
        pairs[mode] = [base, kernel_recipe(base, config.op, config.impl, config.candidate)]
    model_id = config.model or pairs[config.modes[0]][0].model
    with about("--model"):
        spec = registry.make_spec(lab_op, load_model_config(model_id).config)
    for recs in pairs.values():
        for r in recs:
            with about(f"recipe {r.name!r}"):
                check_recipe(r)  # engine installed, flags accepted, the IR op present: before anything is written
    kernel_path = config.kernel_receipt
    from ..models.real import is_packaged, served_folder

    model = _stand_in_for(model_id) if config.stand_in else config.model
    if not config.stand_in and is_packaged(model_id):  # real weights shipped in a package: its converted folder
        model = served_folder(model_id, progress=lambda line: con.print(f"model: {plain(line)}"))
    if model is not None:
        pairs = {m: [r.with_overrides(model=model) for r in recs] for m, recs in pairs.items()}
    for recs in pairs.values():
        for r in recs:
            resolve_tokenizer(r)
    out.mkdir(parents=True, exist_ok=True)
    con.print(f"[bold]kernel apply[/bold] {plain(config.impl)} as vLLM's {plain(config.op)} in "
              f"{', '.join(config.modes)} vLLM; workload {plain(workload.name)} c={workload.concurrency} "
              f"{workload.runs_per_arm} runs/arm → {plain(out)}")
    if kernel_path is None:
        impls = (config.impl, *dict.fromkeys(MODES[m].incumbent for m in config.modes))
        timings = screen_modes(config.modes)
        screen = ScreenConfig(op=lab_op, device="cuda", model=model_id, rows=screen_rows(workload), impls=impls,
                              candidate=config.candidate, modes=timings, trials=config.trials,
                              out=out / "kernel.json")
        with about("the kernel screen"):
            prepared = prepare_screen(screen, out=out / "kernel.json", con=con)
        kernel_path = run_prepared_screen(prepared, run_id=run_id, con=con).path
        kernel_doc = read_json(kernel_path)
    for mode, recs in pairs.items():
        how = MODES[mode]

        def decorate(doc: dict[str, Any], how: ServingMode = how) -> dict[str, Any]:
            return {**doc, "kernel_in_serving": kernel_in_serving(
                kernel_doc, doc, candidate=config.impl, incumbent=how.incumbent,
                calls_per_step=spec.calls_per_decode_step, input_tokens=workload.input_tokens,
                kernel_source=str(kernel_path), mode=how.timing)}

        options = {"kernel_apply": {"op": config.op, "impl": config.impl, "mode": mode, "kernel_receipt":
                                    str(kernel_path)},
                   "drivers": ["aiperf"], "stand_in": config.stand_in, "startup_timeout_s": config.startup_timeout_s,
                   "order": None, "coresident": True}
        plan = ABPlan(section=f"apply {mode}", recipes=recs, workload=workload, drivers=["aiperf"], policy=policy,
                      startup_timeout_s=config.startup_timeout_s, out=out / f"{mode}.json", section_sha256="",
                      options=options, decorate=decorate, quality_gate=config.quality_gate)
        receipt = run_ab(plan, run_id=run_id, con=con, say=lambda line: con.print(plain(line)))
        block = receipt.document["kernel_in_serving"]["prediction"]
        con.print(f"{mode}: {plain(receipt.document['paired_aiperf']['decision'])}")
        for row in block["concurrencies"]:
            con.print(f"  {concurrency_line(row)}")
        con.print(f"receipt: {plain(receipt.path)}")
    return 0


def concurrency_line(row: dict[str, Any]) -> str:
    """One concurrency of a kernel_in_serving prediction, as the console says it: the kernel lab's verdict and per-call
    times the prediction read (why the engine should move), the predicted and measured B/A, and the verdict."""
    from ..decide.prediction import qualifier

    m = row.get("measured") or {}
    said = qualifier(row, long=True)
    pred = "none" if row["predicted_ratio"] is None else f"{row['predicted_ratio']:.5f}"
    am = row.get("amdahl") or {}
    lab = (f"kernel lab {row['kernel_verdict']} ({am['candidate_t_us']:.2f} vs {am['baseline_t_us']:.2f} us a call "
           f"in {am['timing_mode']} mode), " if row.get("kernel_verdict") and am.get("candidate_t_us") else "")
    return (f"c={row['concurrency']}: {lab}predicted B/A {pred}, measured {m.get('ratio_b_over_a', float('nan')):.4f} "
            f"({m.get('ci_low', float('nan')):.4f}–{m.get('ci_high', float('nan')):.4f}): {row['verdict']}"
            + (f" ({said})" if said else ""))

"""The kernel lab's use case, a screen: check every input (``prepare_screen``), run it where it runs and write its
receipt (``run_prepared_screen``), and what a screen here would do with each implementation
(``implementation_plan``). ``infercrane kernel screen`` and ``kernel list``, the PoC's kernel section and
``kernel apply`` all call these; ``commands/kernel.py`` parses and prints.

Without a GPU a screen is functional: Triton kernels run under Triton's interpreter, and a handwritten CUDA candidate
that cannot run is compiled to PTX with NVRTC where NVRTC can (a note, not a correctness check).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..options import plain
from ..receipts.signing import check_sign_key, sign_written
from .config import ScreenConfig


@dataclass(frozen=True)
class PreparedScreen:
    """A screen whose every input has been checked (``prepare_screen``), ready to run (``run_prepared_screen``)."""

    config: ScreenConfig
    out: Path
    policy: Any
    model: Any
    spec: Any
    candidate: Any
    decode_step: Any
    device: str

    def plan(self) -> str:
        """What this screen will do where it runs, in one line (``runner.plan_summary``): a functional one says
        nothing is timed, and what it checks."""
        from .harness.runner import plan_summary

        c = self.config
        return plan_summary(self.device, modes=list(c.modes), trials=c.trials, samples_per_trial=c.samples,
                            checks=c.checks)


def prepare_screen(config: ScreenConfig, *, out: Path, con: Any) -> PreparedScreen:
    """Check every input of a screen before any worker starts: the policy, the model and the shapes it gives, the
    decode step's source, a user candidate's file, the output path, the signing key, and the memory the row counts
    need where the screen runs. Raises InputError naming the option; starts nothing."""
    from ..decide.policy import load_policy
    from ..errors import InputError, about
    from . import registry
    from ..models.catalog import load_model_config
    from ..receipts.models_v3 import DecodeStep
    from ..options import check_output_file

    with about("--policy"):
        policy = load_policy("kernel", config.policy)
    with about("--model"):
        mc = load_model_config(config.model)
    try:
        spec = registry.make_spec(config.op, mc.config, rows=config.all_rows(), dtype=config.dtype,
                                  model_id=mc.model_id, model_revision=mc.revision)
    except ValueError as e:
        raise InputError(f"--model {config.model}: {e}") from None
    step_ms, step_source = config.decode_step_ms, ("user: --decode-step-ms" if config.decode_step_ms else None)
    if config.serving_receipt is not None:
        step_ms, step_source = decode_step_from_receipt(config.serving_receipt, config.serving_recipe,
                                                        config.serving_concurrency)
    candidate = None
    if config.candidate:
        from .user_candidate import check_candidate_file, parse_candidate_ref

        with about("--candidate"):
            candidate = parse_candidate_ref(config.candidate, in_place_override=config.candidate_in_place)
            check_candidate_file(candidate)
    check_output_file(out, "--out")
    check_sign_key(config.sign_key)
    device, _ = _run_device(config.device)
    if device != "cpu" and policy.timing_mode not in config.modes:
        # the decision reads that mode's timings: a screen without them would measure, then decide nothing
        raise InputError(f"--modes {','.join(config.modes)}: the kernel policy decides on {policy.timing_mode!r} "
                         "timings, which these modes do not take",
                         hint=f"add {policy.timing_mode} to --modes, or give --policy a file with timing_mode: one of "
                              f"{', '.join(config.modes)}")
    _check_memory(spec, device, con)
    return PreparedScreen(config=config, out=Path(out), policy=policy, model=mc, spec=spec, candidate=candidate,
                          decode_step=DecodeStep(ms=step_ms, source=step_source) if step_ms else None, device=device)


def run_prepared_screen(prepared: PreparedScreen, *, run_id: str, con: Any,
                        extra_config: dict[str, Any] | None = None) -> Any:
    """Run a prepared screen and write (and sign, with --sign-key) its v3 receipt; returns the written receipt.
    ``extra_config`` is recorded in the receipt's ``provenance.config`` beside the screen's options. A screen stopped
    by Ctrl-C or SIGTERM (``result.interrupted``) is written all the same, as a partial receipt of what finished:
    its decision reads what is there (too few trials: no verdict, inconclusive); the caller says so."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..env.capture import hardware, provenance
    from ..models.catalog import config_fingerprint
    from .harness.runner import screen as run_screen
    from .receipt import build_document
    from ..receipts.validate import write_receipt

    config, spec, out = prepared.config, prepared.spec, prepared.out
    _interpret_triton_without_gpu(config.device, con)
    con.print(f"[bold]kernel screen[/bold] {plain(config.op)} {plain(spec.model_id)} hidden={spec.hidden_size} "
              f"eps={spec.eps:g} {spec.dtype} rows={list(spec.rows)}: {prepared.plan()} → {plain(out)}")
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=con, transient=False) as bar:
        task = bar.add_task("starting", total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what[:60])

        result = run_screen(spec, list(config.impls) if config.impls else None, modes=list(config.modes),
                            rows=list(spec.rows), trials=config.trials, candidate=prepared.candidate,
                            progress=progress, samples_per_trial=config.samples, checks=config.checks,
                            seed=config.seed, device=config.device, timeout_s=config.timeout_s,
                            policy=prepared.policy)
    if result.run_kind == "functional":
        con.print(f"[bold yellow]FUNCTIONAL RUN[/bold yellow] — {plain(result.run_kind_reason)}. Correctness only; "
                  "no timing, no speed claims.")
        _compile_cuda_without_gpu(result, spec, con, config.op)
    mc = prepared.model
    prov = provenance(config=config.model_dump(mode="json") | {"rows_resolved": list(spec.rows)}
                      | (extra_config or {}),
                      hardware_info=hardware(probe_gpu=result.run_kind == "timed"), run_id=run_id,
                      model={"id": spec.model_id or config.model, "revision": spec.model_revision,
                             "source": mc.source, "config_fields": spec.config_fields,
                             "config_sha256": config_fingerprint(mc.config), "weights": "none", "tokenizer": "none"})
    receipt = write_receipt(build_document(result, prepared.policy, provenance=prov, model_source=mc.source,
                                           decode_step=prepared.decode_step), out)
    sign_written(receipt.path, config.sign_key, con)
    return receipt


def _check_memory(spec: Any, device: str, con: Any) -> None:
    """Refuse row counts whose tensors cannot fit where the screen allocates them (``harness/memory.py``)."""
    from ..errors import InputError
    from .harness.memory import check_memory, gib

    for check in check_memory(spec, spec.rows, "cuda" if device == "cuda" else "cpu"):
        for note in check.notes:
            con.print(f"note: {plain(note)}")
        if check.fits is False:
            need = check.need
            where = "GPU memory" if need.where == "gpu" else "host memory"
            raise InputError(f"--rows {need.rows}: the screen would hold about {gib(need.total_bytes)} of {where} at "
                             f"{need.rows} rows (hidden {spec.hidden_size}, {spec.dtype}; one call alone moves "
                             f"{gib(spec.bytes_moved(need.rows))}), but {check.available.source} is "
                             f"{gib(check.available.bytes or 0)}; screen fewer rows")


def decode_step_from_receipt(path: Path, recipe: str, concurrency: int) -> tuple[float, str]:
    """Decode step time (ms) from a serving receipt: the median over runs of TPOT p50 (v2) or the p95 (v1 seed)."""
    import statistics

    from ..errors import InputError, about
    from ..receipts.validate import load_receipt

    with about("--serving-receipt"):
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
    have = sorted({(x["recipe"], x["concurrency"]) for x in doc.get("runs", []) if x.get("tpot_p50_ms")}
                  | {(m["recipe"], m["concurrency"]) for m in pa.get("measurements", [])})
    raise InputError(f"--serving-recipe {recipe} / --serving-concurrency {concurrency}: {path} has no TPOT for them",
                     hint="it has: " + (", ".join(f"{r} at {c}" for r, c in have) or "none"))


def per_row_steps(path: Path, recipe: str, rows: list[int]) -> list[Any]:
    """One decode step per row count from a serving receipt (``kernels.receipt.tpot_decode_steps``): the TPOT of
    ``recipe`` at the concurrency equal to each row count. InputError when no row count is one of its concurrencies."""
    from ..errors import InputError, about
    from .receipt import tpot_decode_steps
    from ..receipts.validate import load_receipt

    with about("--serving-receipt"):
        doc = load_receipt(path).document
    steps = tpot_decode_steps(doc, recipe, rows, f"serving receipt {path}")
    if not steps:
        have = sorted({(x["recipe"], x["concurrency"]) for x in doc.get("runs", []) if x.get("tpot_p50_ms")})
        raise InputError(f"--per-row: {path} has no TPOT of recipe {recipe!r} at a concurrency equal to a decision "
                         f"row count ({', '.join(map(str, rows))})",
                         hint="it has: " + (", ".join(f"{r} at {c}" for r, c in have) or "none"))
    return steps


def dump_steps(step: Any) -> Any:
    """A decode step (or a list of per-row steps) as recorded in provenance."""
    if step is None:
        return None
    if isinstance(step, list):
        return [s.model_dump(mode="json") for s in step]
    return step.model_dump(mode="json")


def _run_device(device: str) -> tuple[str, str]:
    """Where a screen with --device ``device`` runs: the harness's own rule (``runner.resolve_device``)."""
    from .harness.runner import resolve_device

    return resolve_device(device, flag="--device")


def _triton_interpreter_needed(device: str) -> bool:
    """The screen's rule: without a GPU (or with --device cpu), Triton kernels run under Triton's interpreter, unless
    TRITON_INTERPRET is set already."""
    if os.environ.get("TRITON_INTERPRET"):
        return False
    return _run_device(device)[0] == "cpu"


def _interpret_triton_without_gpu(device: str, con: Any) -> None:
    """Without a GPU, Triton kernels run under Triton's interpreter (numpy on the CPU) so they are still checked
    against the oracle; workers inherit the setting."""
    if _triton_interpreter_needed(device):
        os.environ["TRITON_INTERPRET"] = "1"
        con.print("no CUDA GPU: Triton kernels run under Triton's interpreter (TRITON_INTERPRET=1)")


def _ptx_compiler(op: str, key: str) -> Any:
    """The op's NVRTC-to-PTX compiler for its handwritten CUDA candidate (``cuda_kernel.compile_ptx``), or None."""
    if key != "cuda":
        return None
    import importlib

    from . import registry

    package = registry.OPS[op].rsplit(".", 1)[0]
    try:
        module = importlib.import_module(f"{package}.cuda_kernel")
    except ImportError:
        return None
    return getattr(module, "compile_ptx", None)


def _ptx_fallback(op: str, key: str) -> tuple[Any, str]:
    """What a screen without a GPU does with implementation ``key`` of ``op``, which it cannot run: ``(compile_ptx,
    "")`` when the op has an NVRTC-to-PTX compiler for it and NVRTC can compile here; ``(None, why not)`` when it
    has one that cannot work here; ``(None, "")`` when it has none. Availability is ``nvrtc.ptx_compile_available``:
    ``kernel list`` predicts with this, ``kernel screen`` acts on it."""
    compile_ptx = _ptx_compiler(op, key)
    if compile_ptx is None:
        return None, ""
    from .ops.nvrtc import ptx_compile_available

    ok, why_not = ptx_compile_available()
    return (compile_ptx, "") if ok else (None, why_not)


def _compile_cuda_without_gpu(result: Any, spec: Any, con: Any, op: str) -> None:
    """Without a GPU the CUDA candidate cannot run, but NVRTC can still compile it to PTX for sm_90 at every screened
    row count's configuration: a note on the implementation says whether it did (it is not a correctness check)."""
    impl = next((i for i in result.implementations if i.key == "cuda" and i.status == "skipped"), None)
    compile_ptx, why_not = _ptx_fallback(op, "cuda")
    if impl is None or (compile_ptx is None and not why_not):
        return
    from ..errors import InfercraneError

    note = f"not compiled without a GPU either: {why_not}"
    if compile_ptx is not None:
        try:
            for rows in spec.rows:
                compile_ptx(spec.hidden_size, "compute_90", rows=rows)
        except InfercraneError as e:  # a compile error: NVRTC is there, the source or its configuration is wrong
            note = f"not compiled without a GPU either: {e.message.splitlines()[0]}"
        else:
            note = (f"compiled to PTX for compute_90 by NVRTC at hidden {spec.hidden_size} for every screened row "
                    "count (not run: no GPU)")
    impl.notes.append(note)
    con.print(f"  cuda: {plain(note)}")


@contextmanager
def _env_set(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def implementation_plan(op: str, device: str) -> tuple[str, str, list[tuple[Any, str]]]:
    """What a screen of ``op`` with ``--device device`` would do here with each implementation: (where it runs, why,
    [(implementation, what: timed on the GPU, checked on the CPU, or skipped and why)]), by the checks the screen
    itself reads (its probes, Triton's interpreter without a GPU, ``_ptx_fallback``)."""
    from . import registry

    where, reason = _run_device(device)
    interpret = _triton_interpreter_needed(device)
    plan = []
    for impl in registry.implementations(op):
        base_ok, _ = impl.probe()
        with _env_set("TRITON_INTERPRET", "1") if interpret else _nothing():
            ok, why = impl.probe()
            if ok and where == "cpu":
                ok, why = impl.probe_cpu()
        if not ok:
            what = f"skipped: {why}"
            if where == "cpu":  # what the screen does instead
                compile_ptx, why_not = _ptx_fallback(op, impl.key)
                if compile_ptx is not None:
                    what += " (the screen compiles it to PTX with NVRTC instead)"
                elif why_not:
                    what += f" (nor compiled to PTX without a GPU: {why_not})"
        elif where == "cuda":
            what = "timed on the GPU (after its correctness checks)"
        elif interpret and not base_ok:
            what = "checked on the CPU under Triton's interpreter (correctness only)"
        else:
            what = "checked on the CPU (correctness only)"
        plan.append((impl, what))
    return where, reason, plan

"""One serving A/B section of a PoC: the serving lab's plan, run once, written as a ``serve ab`` receipt.

What ``infercrane serve ab A B`` does, through the serving lab's public functions (``run_plan``, ``build_document``,
``plan_config``, ``model_provenance``): the receipt is written after every run (``complete: false`` until the plan
has finished) and once more at the end, so a stop part-way keeps every run measured so far. Its recorded
configuration is the one ``serve decide`` and ``receipt validate`` rebuild the plan from, plus the PoC section's
name and hash (``options.poc_section``), by which a resumed PoC knows the receipt is still the one its config asks for.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class ABPlan:
    """A checked A/B section, ready to run."""

    section: str
    recipes: list[Any]
    workload: Any
    drivers: list[str]
    policy: Any
    startup_timeout_s: float
    out: Path
    section_sha256: str
    options: dict[str, Any]
    # applied to the finished receipt's document before it is written (kernel apply: its kernel_in_serving block)
    decorate: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def run_ab(plan: ABPlan, *, run_id: str, con: Any, say: Callable[[str], None]) -> Any:
    """Run the A/B and write its receipt to ``plan.out``; returns the written receipt. ``say`` prints one progress
    line per finished run. On a failure or an interrupt the receipt keeps every run so far (``complete: false``) and
    the error propagates."""
    from ..env.capture import provenance
    from ..errors import InfercraneError
    from ..receipts.validate import write_receipt
    from ..serving.progress import progress_reason
    from ..serving.receipt import build_document, model_provenance, plan_config
    from ..serving.workload import PlanResult, plan_runs, run_plan

    recs, workload = plan.recipes, plan.workload
    model_prov = model_provenance(recs[0])
    config = plan_config("ab", recs, workload, plan.options)
    runs = plan_runs([r.name for r in recs], workload)
    total = len(runs) * len(plan.drivers)

    def receipt_now(result: PlanResult, incomplete: str | None = None) -> Any:
        prov = provenance(config=config, run_id=run_id, model=model_prov)
        doc = build_document(result, kind="ab", policy=plan.policy, provenance=prov, incomplete_reason=incomplete)
        if plan.decorate is not None and incomplete is None and result.complete:
            doc = plan.decorate(doc)
        return write_receipt(doc, plan.out)

    partial = PlanResult(workload=workload, recipes={r.name: r for r in recs}, drivers=list(plan.drivers),
                         order=workload.arm_order, plan=runs)
    started = time.monotonic()

    def on_run(m: Any) -> None:
        done = len(partial.runs)
        say(f"{plan.section}: {m.arm} run {m.run_index} c={m.concurrency} ({m.driver}): {m.output_tok_s:.1f} tok/s, "
            f"TTFT p95 {m.ttft_p95_ms or 0:.1f} ms, TPOT p95 {m.tpot_p95_ms or 0:.2f} ms, {m.failures} failed "
            f"[{done}/{total}, {time.monotonic() - started:.0f} s]")
        receipt_now(partial, progress_reason(done, total))

    try:
        result = run_plan(recs, workload, out_dir=plan.out.parent / f"{plan.out.stem}-artifacts",
                          drivers=list(plan.drivers), startup_timeout_s=plan.startup_timeout_s, on_run=on_run,
                          on_progress=lambda line: say(f"{plan.section}: {line} [{time.monotonic() - started:.0f} s]"),
                          into=partial, coresident=bool(plan.options.get("coresident")))
    except (InfercraneError, KeyboardInterrupt, SystemExit) as exc:
        got = getattr(exc, "partial", None) or partial
        why = exc.message.splitlines()[0] if isinstance(exc, InfercraneError) else f"interrupted ({type(exc).__name__})"
        if got.engines or got.runs:
            receipt_now(got, f"stopped part-way: {why}")
        raise
    return receipt_now(result)

"""The serving lab's A/B runner: one plan (``run_plan``) run once and written as a ``serve ab`` receipt, and the
engines that A/Bs of one sitting share.

``run_ab`` is what ``infercrane poc`` (each serving section) and ``infercrane kernel apply`` (each mode) call: the
receipt is written after every window (``complete: false`` until the plan has finished) and once more at the end, so a
stop part-way keeps every run measured so far. Its recorded configuration is the one ``serve decide`` and ``receipt
validate`` rebuild the plan from, plus the caller's options (a PoC section's name and hash, ``options.poc_section``,
by which a resumed PoC knows the receipt is still the one its config asks for).

``EnginePool``: engines started once per sitting and kept up across A/Bs. Two recipes whose launches are the same
(``launch_key``: engine, model, arguments with the engine's stated defaults left out, environment, kernels) share one
engine; a pool engine is stopped once no later A/B of the sitting needs it (``release``), and every start's wall time
is in its engine record.
"""
from __future__ import annotations

import functools
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .quality import QUALITY_GATE_DEFAULT


@dataclass(frozen=True)
class ABPlan:
    """A checked A/B (or, ``kind="bench"``, one recipe's benchmark), ready to run. ``options``: what the receipt
    records as the command's options (``plan_config``; secrets redacted); ``order``: the arm order if not the
    workload's; ``tokenizer``: the drivers' tokenizer instead of each recipe model's (``--tokenizer``); ``access``: the
    API key and headers every request to the engines carries (``engine.ServerAccess``; never recorded)."""

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
    kind: str = "ab"
    order: str | None = None
    sign_key: Path | None = None
    model_provenance: dict[str, Any] | None = None
    tokenizer: str | None = None
    access: Any = None
    # the semantic-quality gate: on, off, or auto (on where the model's weights are real and a vLLM engine serves
    # them; serving.quality.plan_gate)
    quality_gate: str = QUALITY_GATE_DEFAULT


def recorded_inputs(plan: ABPlan) -> dict[str, Any]:
    """What the receipt records beside the command's options so that its derived blocks re-derive from it alone:
    the GPU price table the cost is read at (the caller's, ``options.gpu_price_table``, else the shipped one) and a
    trace workload's content hash."""
    from ..decide.cost import price_table

    out: dict[str, Any] = {}
    if "gpu_price_table" not in plan.options:
        out["gpu_price_table"] = price_table()
    replay = plan.workload.replay()
    if replay is not None:
        out["trace_sha256"] = replay.sha256
    return out


def artifacts_dir(plan: ABPlan) -> Path:
    """Where an A/B's engines, drivers and blocks write (beside its receipt)."""
    return plan.out.parent / f"{plan.out.stem}-artifacts"


def run_ab(plan: ABPlan, *, run_id: str, con: Any, say: Callable[[str], None],
           pool: EnginePool | None = None, engines: dict[str, Any] | None = None,
           on_run: Callable[[Any, int, int], None] | None = None, on_start: Callable[[], None] | None = None,
           on_progress: Callable[[str], None] | None = None, then: Callable[[], None] | None = None) -> Any:
    """Run the plan and write its receipt to ``plan.out``; returns the written receipt: the one A/B runner that
    ``serve ab``, ``serve bench``, ``poc`` and ``kernel apply`` call.

    The receipt is written (and signed, with ``plan.sign_key``) after every window and at the end. ``say`` prints one
    progress line per window unless ``on_run(metrics, done, total)`` is given, which then does; ``on_progress`` gets
    the plan's other progress lines (default: ``say``). On a failure or an interrupt the receipt keeps every window so
    far (``complete: false``) and the error propagates; when the final analysis itself fails, every window is kept
    in a receipt marked incomplete with that reason. Engines: from ``engines`` (servers given with ``--url``, never
    started or stopped here), from ``pool`` (started there if not up yet, kept up after the A/B), or started and
    stopped by ``run_plan``. ``then``: called once near the end of the plan's last block (``run_plan``), where a
    sitting starts its next A/B's first AIPerf block ahead (``EnginePool.prestart_first``); a block the pool started
    ahead for this plan is handed to ``run_plan``."""
    from ..env.capture import provenance
    from ..errors import InfercraneError
    from ..receipts.validate import write_receipt
    from ..serving.progress import progress_reason
    from ..serving.config import redact_argv
    from ..serving.quality import QualityAsker, gate_design, plan_gate
    from ..serving.receipt import build_document, model_provenance, plan_config
    from ..serving.workload import PlanResult, plan_runs, run_plan

    recs, workload = plan.recipes, plan.workload
    model_prov = plan.model_provenance or model_provenance(recs[0])
    gate = plan_gate(plan.quality_gate, recs, model_prov, plan.policy) if plan.kind == "ab" else None
    config = plan_config(plan.kind, recs, workload, {**plan.options, **({"quality_gate": gate} if gate else {}),
                                                     **recorded_inputs(plan)})
    order = plan.order or workload.arm_order
    runs = plan_runs([r.name for r in recs], workload, order)
    total = len(runs) * len(plan.drivers)
    external = dict(engines or {})

    def receipt_now(result: PlanResult, incomplete: str | None = None) -> Any:
        for eng in reversed(list(external.values())):  # --url servers are engines of the plan too, once each
            if not any(rec is eng.record for rec in result.engines):
                result.engines.insert(0, eng.record)
        prov = provenance(config=config, run_id=run_id, model=model_prov, command_line=redact_argv(sys.argv))
        doc = build_document(result, kind=plan.kind, policy=plan.policy, provenance=prov,
                             incomplete_reason=incomplete)
        if plan.decorate is not None and incomplete is None and result.complete:
            doc = plan.decorate(doc)
        written = write_receipt(doc, plan.out)
        if plan.sign_key is not None:
            from ..receipts.signing import sign

            sign(written.path, plan.sign_key)
        return written

    partial = PlanResult(workload=workload, recipes={r.name: r for r in recs}, drivers=list(plan.drivers),
                         order=order, plan=runs)
    started = time.monotonic()
    progress = on_progress or (lambda line: say(f"{plan.section}: {line} [{time.monotonic() - started:.0f} s]"))
    if gate is not None:
        progress(f"quality gate {'on' if gate['run'] else 'off'}: {gate['why']}"
                 + (f"; {gate_design(plan.policy.quality)}" if gate["run"] else ""))

    def one_run(m: Any) -> None:
        done = len(partial.runs)
        if on_run is not None:
            on_run(m, done, total)
        else:
            say(f"{plan.section}: {m.arm} run {m.run_index} c={m.concurrency} ({m.driver}): {m.output_tok_s:.1f} "
                f"tok/s, TTFT p95 {m.ttft_p95_ms or 0:.1f} ms, TPOT p95 {m.tpot_p95_ms or 0:.2f} ms, {m.failures} "
                f"failed [{done}/{total}, {time.monotonic() - started:.0f} s]")
        receipt_now(partial, progress_reason(done, total))

    art = artifacts_dir(plan)
    ahead = pool.take_ahead(plan) if pool is not None else None
    try:
        if pool is not None:
            external = {**pool.engines_for(recs, out_dir=art, startup_timeout_s=plan.startup_timeout_s, into=partial,
                                           say=say, access=plan.access), **external}
        result = run_plan(recs, workload, out_dir=art, drivers=list(plan.drivers), order=plan.order,
                          startup_timeout_s=plan.startup_timeout_s, on_run=one_run, on_progress=progress,
                          into=partial, coresident=bool(plan.options.get("coresident")), on_start=on_start,
                          engines=external or None, ahead=ahead, then=then, tokenizer=plan.tokenizer,
                          access=plan.access, slos=plan.policy.slos,
                          quality=QualityAsker(plan.policy.quality, progress) if gate and gate["run"] else None)
    except (InfercraneError, KeyboardInterrupt, SystemExit) as exc:
        if ahead is not None:
            ahead.kill()  # ended with the plan, if the plan had not taken it yet
        got = getattr(exc, "partial", None) or partial
        why = exc.message.splitlines()[0] if isinstance(exc, InfercraneError) else f"interrupted ({type(exc).__name__})"
        if got.engines or got.runs:  # something ran: keep it; a preflight failure has nothing to keep
            r = receipt_now(got, f"stopped part-way: {why}")
            say(f"stopped part-way: {why}; partial receipt (complete: false): {r.path}")
        raise
    try:
        return receipt_now(result)
    except Exception as exc:  # every window is measured and on disk: keep them in a receipt marked incomplete
        r = receipt_now(result, f"the final analysis failed: {type(exc).__name__}: {exc}")
        say(f"analysis failed: {exc}; the runs are in {r.path} (complete: false)")
        raise


class EnginePool:
    """Engines shared by the A/Bs of one sitting (module docstring). ``memory_share``: each engine's
    ``--gpu-memory-utilization`` (vLLM engines), set by the most engines up at once; ``plan``: the recipe lists of
    the A/Bs to come, in order, so that an engine no later A/B needs is stopped before new ones start."""

    def __init__(self, plan: list[list[Any]], *, memory_share: float | None = None) -> None:
        from .workload import engine_memory_share

        self.plan = [[launch_key(r) for r in recs] for recs in plan]
        self.memory_share = memory_share or engine_memory_share(max((len(set(k)) for k in self.plan), default=1))
        self.shares: dict[str, float] = {}  # launch key -> the share planned for it beside the others (start_ahead)
        self.live: dict[str, Any] = {}  # launch key -> engine
        self.served: dict[str, list[str]] = {}  # launch key -> the recipes it served, in order
        self.started: list[Any] = []  # every engine started here, in order (the sitting's time accounting)
        self.ahead: dict[Path, Any] = {}  # an A/B's receipt path -> its first AIPerf block, started ahead

    def engines_for(self, recipes: list[Any], *, out_dir: Path, startup_timeout_s: float, into: Any,
                    say: Callable[[str], None], access: Any = None) -> dict[str, Any]:
        """arm -> engine for one A/B: engines no A/B from this one on needs are stopped first, then those missing are
        started one after the other (vLLM sizes its KV cache from the memory it sees taken at start-up), each
        carrying ``access`` (the A/B's API key and headers) on every request."""
        keys = [launch_key(r) for r in recipes]
        while self.plan and self.plan[0] != keys:
            self.plan.pop(0)  # an A/B that was reused or skipped
        later = {k for step in self.plan for k in step}
        for key in [k for k in self.live if k not in later]:
            say(f"engine {self.live[key].label}: stopped (no later A/B of this sitting uses it)")
            self.live.pop(key).stop()
        out: dict[str, Any] = {}
        for recipe, key in zip(recipes, keys):
            engine = self.live.get(key)
            if engine is None:
                others = [self.live[k].label for k in self.live]
                engine = self._engine(recipe, out_dir=out_dir, startup_timeout_s=startup_timeout_s, others=others,
                                      access=access, share=self.shares.get(key))
                self.live[key] = engine
                engine.start()
                say(f"engine {engine.label}: up in {engine.record.ready_after_s or 0:.1f} s"
                    + (f" beside {', '.join(others)}" if others else ""))
            else:
                say(f"engine {engine.label}: already up, serves {recipe.name} too (the same launch: "
                    f"{shlex_args(recipe)})")
            self.served.setdefault(key, []).append(recipe.name)
            out[recipe.name] = engine
        if self.plan:
            self.plan.pop(0)
        return out

    def _engine(self, recipe: Any, *, out_dir: Path, startup_timeout_s: float, others: list[str],
                kv_cache_bytes: int | None = None, access: Any = None, share: float | None = None) -> Any:
        """A pool engine for ``recipe`` (not launched yet), with ``share`` of GPU memory (default: this pool's memory
        share), recorded as the sitting's."""
        from .engine import Engine

        engine = Engine(recipe, log_dir=out_dir / "engines", label=f"pool-{recipe.name}",
                        startup_timeout_s=startup_timeout_s,
                        gpu_memory_utilization=(share or self.memory_share) if recipe.engine == "vllm" else None,
                        coresident_with=others, kv_cache_bytes=kv_cache_bytes, access=access)
        engine.record.started_by_sitting = True
        self.started.append(engine)
        return engine

    def start_ahead(self, plans: list[tuple[list[Any], Any]], *, out_dir: Path, startup_timeout_s: float,
                    say: Callable[[str], None], first: ABPlan | None = None) -> None:
        """Start every engine the sitting's A/Bs need at the same time, each warmed for every workload it will serve
        (``warmed_for``; its record keeps the first one's warm-up) as soon as it is up, the workloads of one engine
        together (``warm_together``), rather than one after the other when each A/B comes. ``plans``: (recipes,
        workload) per A/B, in order. vLLM sizes its KV cache from the memory it sees taken while it profiles, and
        engines starting together would count each other's allocations, so each gets a fixed cache and a memory share
        of its own (``sitting_memory``: the cache holds 1.5 times the largest batch of the workloads that engine
        serves); where that cannot be worked out (no model config) or the engines do not fit the GPU together,
        nothing is started here and the A/Bs start their engines one after the other as before. An engine that
        fails to start here is stopped and started again alone when its A/B comes, with the share planned for it;
        the failure is said, not hidden. ``first``: the sitting's first A/B, whose first AIPerf block is started
        ahead (``prestart_first``) as soon as the engine serving it is up and warmed for its workload, so that its
        start-up overlaps the other engines' start-ups and warm-ups. The engines carry ``first``'s ``access`` (a
        sitting's A/Bs share one: a PoC's ``serving`` section)."""
        import threading

        from .warmup import warm_engine

        serves: dict[str, tuple[Any, list[Any]]] = {}  # launch key -> (recipe, every workload it serves, in order)
        for recipes, workload in plans:
            for r in recipes:
                served = serves.setdefault(launch_key(r), (r, []))[1]
                if workload.name not in [w.name for w in served]:
                    served.append(workload)
        todo = {k: v for k, v in serves.items() if k not in self.live}
        if len(todo) < 2:
            return
        memory = sitting_memory(serves, gpu_memory_total())
        if isinstance(memory, str):
            say(f"engines: started one after the other ({memory})")
            return
        self.shares = {key: m.share for key, m in memory.items() if m.share is not None}
        engines = {key: self._engine(recipe, out_dir=out_dir, startup_timeout_s=startup_timeout_s,
                                     others=[f"pool-{r.name}" for k, (r, _) in serves.items() if k != key],
                                     kv_cache_bytes=memory[key].kv_cache_bytes, share=memory[key].share,
                                     access=first.access if first is not None else None)
                   for key, (recipe, _) in todo.items()}
        failed: dict[str, BaseException] = {}
        t0 = time.monotonic()

        def up(key: str) -> None:
            engine = engines[key]
            try:
                engine.wait_ready()
                warmed = warm_together(engine, serves[key][1], warm_engine)
                engine.record.warmup = engine.record.warmup or warmed[0]  # the first one's record kept
                engine.warmed_for = {**engine.warmed_for, **{w["workload"]: w for w in warmed}}
            except BaseException as exc:  # noqa: BLE001 - said below, and the engine is started again alone
                failed[key] = exc

        delays = launch_delays({key: recipe for key, (recipe, _) in todo.items()})
        later = [engines[k].label for k, d in delays.items() if d]
        say(f"engines: starting {len(engines)} at once: "
            + ", ".join(f"{engines[k].label} ({memory[k].describe()})" for k in engines)
            + (f"; {', '.join(later)} {max(delays.values()):.0f} s after the others (no compilation nor graph "
               "capture: up sooner)" if later else ""))
        threads = []
        for delay in sorted(set(delays.values())):
            if delay:
                time.sleep(max(0.0, t0 + delay - time.monotonic()))
            for key in [k for k, d in delays.items() if d == delay]:
                try:  # launched from this thread: an engine dies with the thread that started it (the parent-death
                    engines[key].launch()  # signal), so only the waits are threads
                except Exception as exc:  # noqa: BLE001 - said below; Ctrl-C and SIGTERM go on up
                    failed[key] = exc
                    continue
                threads.append(threading.Thread(target=up, args=(key,), name=f"infercrane-start-{engines[key].label}",
                                                daemon=True))
                threads[-1].start()
        pending = first

        def first_ahead(when: str) -> None:
            nonlocal pending
            try:
                started = pending is not None and self.prestart_first(pending, engines=engines, failed=failed)
            except Exception as exc:  # noqa: BLE001 - a pre-start is an optimisation: its block starts in its turn
                say(f"{pending.section}: its first AIPerf block could not be started ahead ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''})")
                pending = None
                return
            if started:
                say(f"{pending.section}: its first AIPerf block started ahead{when}")
                pending = None

        while alive := [t for t in threads if t.is_alive()]:
            alive[0].join(timeout=0.25)
            first_ahead(", held until the engines are up")
        first_ahead("")
        for key, engine in engines.items():
            if key in failed:
                say(f"engine {engine.label}: did not start beside the others "
                    f"({str(failed[key]).splitlines()[0] if str(failed[key]) else type(failed[key]).__name__}); "
                    "it is started again alone when its A/B comes")
                engine.stop()
                continue
            self.live[key] = engine
            say(f"engine {engine.label}: up in {engine.record.ready_after_s or 0:.1f} s, warmed for "
                f"{', '.join(engine.warmed_for)}")
        say(f"engines: {len(self.live)} up {time.monotonic() - t0:.1f} s after the start")

    def prestart_first(self, plan: ABPlan, *, engines: dict[str, Any] | None = None,
                       failed: dict[str, Any] | None = None) -> bool:
        """Start ``plan``'s first AIPerf block now, held at its gate (``AiperfDriver.prestart``), on the pool engine
        that will serve it, so that its start-up overlaps the A/B that runs now; ``run_ab`` hands it to the plan, which
        uses it if it is that block (``run_plan``'s ``ahead``). Only for AIPerf time windows with the driver's prompts,
        an engine up and warmed already, and an AIPerf that can be held; False when nothing was started. ``engines``
        (launch key -> engine; default: the pool's live ones) and ``failed`` (keys of engines that did not start):
        while ``start_ahead`` brings them up."""
        from .drivers import get_driver
        from .workload import aiperf_block, engine_warmup, plan_runs, resolve_tokenizer

        workload = plan.workload
        if plan.out in self.ahead or list(plan.drivers) != ["aiperf"] or workload.prompts == "shared":
            return False
        runs = plan_runs([r.name for r in plan.recipes], workload, plan.order or workload.arm_order)
        first = [p for p in runs if p.segment == runs[0].segment]
        recipe = next(r for r in plan.recipes if r.name == first[0].arm)
        key = launch_key(recipe)
        engine = (self.live if engines is None else engines).get(key)
        if (engine is None or key in (failed or {}) or engine_warmup(engine, workload) is None
                or not engine.alive()):
            return False
        driver = get_driver("aiperf")
        if not driver.supports_prestart():
            return False
        resolved = recipe if recipe.sha256 else recipe.resolved()
        grid = aiperf_block(workload, resolved, resolve_tokenizer(resolved, plan.tokenizer), engine, first,
                            artifacts_dir(plan) / first[0].arm / f"visit{first[0].segment:02d}", {})
        self.ahead[plan.out] = driver.prestart(grid)
        return True

    def take_ahead(self, plan: ABPlan) -> Any:
        """The first block started ahead for ``plan`` (``prestart_first``), handed over once; None if none."""
        return self.ahead.pop(plan.out, None)

    def stop_all(self) -> None:
        for pre in self.ahead.values():  # a block started ahead whose A/B never came: nothing of it may linger
            pre.kill()
        self.ahead.clear()
        stop_together(list(self.live.values()))
        self.live.clear()


def _at_once(calls: list[Callable[[], Any]], name: str) -> list[Any]:
    """Run ``calls`` at the same time, one thread each (threads named ``infercrane-NAME``); their results in order.
    The first failure (in ``calls``' order) is raised once every call has ended."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, len(calls)), thread_name_prefix=f"infercrane-{name}") as pool:
        futures = [pool.submit(call) for call in calls]
    return [f.result() for f in futures]


def warm_together(engine: Any, workloads: list[Any],
                  warm: Callable[[Any, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """Warm ``engine`` for every workload in ``workloads`` at the same time (``warm``: ``warmup.warm_engine``); their
    records in ``workloads``' order, each naming its workload. Nothing is measured while an engine warms, so its
    workloads need not wait for one another: on the H200 the seed PoC's engines were up 97.2-125.3 s after their
    start but all warmed only at 158.7 s, the compiled engine warming the paired workload and then the public one
    (docs/benchmarks/2026-12-03-h200-poc-one-sitting-third-try/poc.log). Each record's rounds (``round_s``) were
    timed beside the other workloads' requests, so they read slower than alone: they size a first AIPerf block's
    prompts with ``workload.WARMUP_RATE_MARGIN`` to spare. The first failure is raised once every warm-up has ended."""
    records = _at_once([functools.partial(warm, engine, w) for w in workloads], "warm")
    return [r | {"workload": w.name} for r, w in zip(records, workloads)]


def stop_together(engines: list[Any]) -> None:
    """Stop ``engines`` at the same time (each waits out its own shut-down, up to ``proc.stop_process_group``'s
    grace), so that the sitting's end waits for the slowest, not for their sum; the first failure is raised once
    every engine has been stopped or has failed to stop."""
    _at_once([engine.stop for engine in engines], "stop")


# Engines started together for a sitting (``EnginePool.start_ahead``): one that skips compilation and CUDA graph
# capture (``--enforce-eager``) is launched this long after the others, so that they come up about together and
# the first one up does not wait, unmeasured, for the rest. On the H200 with Qwen3-0.6B all launched at once, the
# eager engine was up 25-27 s before the compiled ones (docs/benchmarks/2026-12-03-h200-poc-one-sitting-second-try/
# and -third-try/, poc.log).
EAGER_LAUNCH_DELAY_S = 25.0


def launch_delays(recipes: dict[str, Any]) -> dict[str, float]:
    """Per launch key, seconds after the first launches to launch that engine (``EAGER_LAUNCH_DELAY_S``): eager vLLM
    engines wait when some engine compiles; otherwise every engine starts at once."""
    eager = {k for k, r in recipes.items()
             if getattr(r, "engine", None) == "vllm" and "--enforce-eager" in (getattr(r, "engine_args", None) or [])}
    if not eager or len(eager) == len(recipes):
        return {k: 0.0 for k in recipes}
    return {k: EAGER_LAUNCH_DELAY_S if k in eager else 0.0 for k in recipes}


KV_HEADROOM = 1.5  # a fixed KV cache holds 1.5 times the tokens an engine's largest batch has in flight
# What an engine takes beyond its weights and its KV cache (the profile run's activations, CUDA graphs, the CUDA
# context). On an H100 at a 0.45 share, Qwen3-0.6B's engines reported 1.12 GiB of weights and 33.36 GiB (8192-token
# batches) or 32.47 GiB (16384) of KV cache, so 1.2-2.1 GiB went to the rest inside vLLM's budget, plus the CUDA
# context outside it (docs/benchmarks/2026-12-06-h100-poc-one-sitting/, the engines' logs): about twice that.
ENGINE_RUNTIME_BYTES = 4 * 2**30
KV_BLOCK_TOKENS = 16  # vLLM's default KV block: a fixed cache is rounded up to whole blocks


@dataclass(frozen=True)
class EngineMemory:
    """What one engine of a sitting is given: a fixed KV cache (vLLM ``--kv-cache-memory-bytes``; None for engines
    that take none) and its share of GPU memory (``--gpu-memory-utilization``; None where it has none)."""

    kv_cache_bytes: int | None
    share: float | None

    def describe(self) -> str:
        if self.kv_cache_bytes is None:
            return "no fixed KV cache"
        return f"KV cache {self.kv_cache_bytes / 2**30:.1f} GiB, {self.share:g} of GPU memory"


def _model_config(recipe: Any) -> dict[str, Any] | None:
    import json

    from ..datafiles import MODEL_CONFIG, read_bytes
    from ..errors import InputError

    try:
        cfg = json.loads(read_bytes(Path(recipe.resolved_model()) / "config.json", MODEL_CONFIG))
    except (InputError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def _kv_per_token(cfg: dict[str, Any]) -> int | None:
    """Bytes of KV cache per token: 2 (K and V) x layers x KV heads x head size x bytes per element."""
    try:
        layers, heads = int(cfg["num_hidden_layers"]), int(cfg.get("num_key_value_heads") or
                                                            cfg["num_attention_heads"])
        head = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return 2 * layers * heads * head * _elem_bytes(cfg)


def _elem_bytes(cfg: dict[str, Any]) -> int:
    return 4 if str(cfg.get("torch_dtype", "bfloat16")) in ("float32", "float") else 2


def _max_model_len(recipe: Any, cfg: dict[str, Any]) -> int | None:
    """The longest sequence the engine will admit: the recipe's ``--max-model-len``, else the model's
    ``max_position_embeddings``. vLLM refuses to start with a KV cache that cannot hold one such sequence."""
    args = list(getattr(recipe, "engine_args", None) or [])
    for i, arg in enumerate(args):
        flag, eq, inline = arg.partition("=")
        if flag not in ("--max-model-len", "--max_model_len"):  # vLLM takes either spelling
            continue
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
        if value is not None:  # vLLM's human-readable form: 1k = 1000, 1K = 1024 (m, M, g, G alike)
            scale = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}.get(value[-1:], 1)
            try:
                return int(float(value[:-1] if scale > 1 else value) * scale)
            except ValueError:
                return None
    try:
        return int(cfg["max_position_embeddings"])
    except (KeyError, TypeError, ValueError):
        return None


def kv_cache_bytes_for(recipe: Any, workloads: list[Any]) -> int | None:
    """A fixed KV cache for ``recipe``'s model that holds ``KV_HEADROOM`` times the tokens in flight at the largest
    batch of ``workloads`` (highest concurrency x (prompt + output tokens)), and at least one sequence of the
    engine's longest length (``_max_model_len``, plus two blocks: vLLM keeps one block back), from the model's
    ``config.json``; None without one."""
    cfg = _model_config(recipe)
    per_token = _kv_per_token(cfg) if cfg is not None else None
    if per_token is None:
        return None
    tokens = max(max(w.concurrency) * (w.input_tokens + w.output_tokens) for w in workloads)
    longest = _max_model_len(recipe, cfg) or 0
    return max(int(KV_HEADROOM * tokens * per_token), (longest + 2 * KV_BLOCK_TOKENS) * per_token if longest else 0)


def weight_bytes_for(recipe: Any) -> int:
    """The model's weights in bytes: its safetensors files where the folder has them, else a dense decoder's
    parameters counted from ``config.json`` (embeddings, unless tied, the output layer; per layer the attention
    projections and a gated MLP) at the config's element size; 0 when neither can be read (the engine's share then
    rests on ``ENGINE_RUNTIME_BYTES`` alone, and vLLM refuses what does not fit)."""
    folder = Path(recipe.resolved_model())
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if files:
        return sum(f.stat().st_size for f in files)
    cfg = _model_config(recipe)
    try:
        hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head = int(cfg.get("head_dim") or hidden // heads)
        inter, vocab = int(cfg["intermediate_size"]), int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return 0
    attention = hidden * head * (2 * heads + 2 * kv_heads)  # q and o, k and v
    params = vocab * hidden * (1 if cfg.get("tie_word_embeddings", False) else 2) + layers * (attention + 3 * hidden * inter)
    return params * _elem_bytes(cfg)


def gpu_memory_total() -> int | None:
    """GPU 0's memory in bytes as NVML reports it; None when NVML cannot tell (no GPU, no driver, no pynvml)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def sitting_memory(serves: dict[str, tuple[Any, list[Any]]], total: int | None) -> dict[str, EngineMemory] | str:
    """Each engine's memory when a sitting's engines run together (``serves``: launch key -> (recipe, the workloads
    it serves)): a vLLM engine's fixed KV cache is ``kv_cache_bytes_for`` its own workloads, and its share of GPU
    memory holds that cache, its weights (``weight_bytes_for``) and ``ENGINE_RUNTIME_BYTES``, rounded up to a
    hundredth (vLLM only checks at start that that much is free: a fixed cache is not sized from it). They fit
    when the shares add up to at most ``CORESIDENT_MEMORY`` (what vLLM gives one engine alone). With ``total``
    unknown (NVML cannot tell), each gets an even share and nothing is checked: vLLM refuses what does not fit, and
    that engine is started again alone. Returns why not, as a phrase, when a cache cannot be sized (no model config)
    or the engines do not fit."""
    import math

    from .workload import CORESIDENT_MEMORY, engine_memory_share

    out: dict[str, EngineMemory] = {}
    for key, (recipe, workloads) in serves.items():
        if recipe.engine != "vllm":
            out[key] = EngineMemory(None, None)
            continue
        kv = kv_cache_bytes_for(recipe, workloads)
        if kv is None:
            return f"no model config to size a fixed KV cache for {recipe.name}"
        share = (math.ceil((kv + weight_bytes_for(recipe) + ENGINE_RUNTIME_BYTES) / total * 100) / 100
                 if total else engine_memory_share(len(serves)))
        out[key] = EngineMemory(kv, share)
    used = sum(m.share for m in out.values() if m.share is not None)
    if total and used > CORESIDENT_MEMORY + 1e-9:
        return (f"their fixed KV caches, weights and runtime need {used:.2f} of this GPU's "
                f"{total / 2**30:.0f} GiB together, more than {CORESIDENT_MEMORY:g}: "
                + ", ".join(f"{serves[k][0].name} {m.share:g}" for k, m in out.items() if m.share is not None))
    return out


def launch_key(recipe: Any) -> str:
    """What makes two recipes one engine launch: the engine, the resolved model, the arguments with the engine
    kind's stated defaults left out (``engine_kinds.EngineKind.default_args``), the environment and the kernels;
    not the recipe's name or description."""
    import json

    from .engine_kinds import get_engine_kind

    r = recipe if recipe.sha256 else recipe.resolved()
    args = get_engine_kind(r.engine).without_defaults(list(r.engine_args))
    return json.dumps({"engine": r.engine, "model": r.resolved_model(), "args": args, "env": dict(sorted(r.env.items())),
                       "kernels": dict(sorted((r.kernels or {}).items()))}, sort_keys=True)


def shlex_args(recipe: Any) -> str:
    import shlex

    return shlex.join(recipe.engine_args) or "no arguments"


def design_of(workload: Any, policy: Any, order: str | None = None) -> tuple[str, str | None]:
    """What a two-arm A/B of ``workload`` can decide under ``policy``, before anything runs: (the plan's first line,
    the reason it can only end INCONCLUSIVE and what would fix it, or None). Window pairs: one per run and
    concurrency (``receipt.window_pairs``); the figures come from ``stats.paired.design_for`` at the policy's prior
    window CV."""
    from ..stats.paired import design_for

    order = order or workload.arm_order
    if order == "sequential":
        return ("design: sequential (all of A, then all of B): no window pairs, each arm's runs compared apart; drift "
                "between the arms reads as a difference"), None
    c = len(workload.concurrency)
    n = workload.runs_per_arm * c
    head = (f"design: {n} window pairs ({workload.runs_per_arm} runs x {c} concurrenc{'ies' if c > 1 else 'y'}, "
            f"{'A | B B | A blocks' if order == 'sandwich' else 'A B A B ...'}), one family of "
            f"{policy.family_size} tests (primary and guards pooled over the sweep, Holm at {policy.alpha:g})")
    if n < policy.min_pairs:
        runs = -(-policy.min_pairs // c)
        return head, (f"{n} window pairs, fewer than the policy's min_pairs = {policy.min_pairs}: this design can only "
                      f"end INCONCLUSIVE; give at least {runs} runs per arm (--runs {runs}), more concurrencies, or a "
                      "policy with a lower min_pairs")
    d = design_for(n, cv=policy.prior_window_cv, m_tests=policy.family_size, alpha=policy.alpha,
                   margin=policy.equivalence_margin)
    equiv = ("reachable" if d.equivalence_reachable else
             f"out of reach (needs about {d.pairs_for_equivalence} pairs)" if d.pairs_for_equivalence else
             "out of reach")
    return (f"{head}: at a {policy.prior_window_cv * 100:g} % window CV it detects a change of "
            f"{d.detectable_change * 100:.2g} % with {d.power_target * 100:g} % power; EQUIVALENT within "
            f"±{policy.equivalence_margin * 100:g} % is {equiv}; {d.min_p_note}"), None

"""From a serving plan's raw runs to statistics, a decision and an ``infercrane.optimization-poc-receipt/v2``.

``serve ab`` fills the seed's ``paired_aiperf`` block (medians over the primary driver's runs, the seed's derived
fields, and per concurrency and metric the B/A ratio with its CI, rank test and equivalence verdict); ``serve bench``
fills ``bench`` (every concurrency and driver, and the drivers' agreement) and, for a one-concurrency workload, the
seed's ``public_workload_reproduction``. Both keep every run's raw numbers under ``runs`` and every engine lifetime
under ``engines``. A plan that stopped part-way gives a receipt with ``complete: false`` and no decision.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..decide.derived import latency_p95_reduction_percent, throughput_speedup, ttft_p95_reduction_percent
from ..decide.metrics import serving_metric
from ..decide.policy import ServingPolicy, policy_sha256
from ..decide.serving import ServingArm, ServingDecision, compare_metric, decide_serving, interval_method, verdict_rule
from ..receipts.models_v2 import POC_V2
from ..stats.compare import Band, b_over_a_ci, classify_band
from .metrics import RunMetrics
from .workload import PlanResult

Problem = tuple[str, str]

# RunMetrics field -> receipt field (the seed's names).
RUN_FIELDS = {
    "output_tok_s": "output_tokens_per_second", "request_s": "request_throughput",
    **{f"{m}_{p}_ms": f"{'latency' if m == 'e2e' else m}_{p}_ms" for m in ("ttft", "tpot", "e2e") for p in ("p50", "p95", "p99")},
}
# RunMetrics fields a run record carries only where they were measured: the input throughput (runs recorded since cost),
# goodput and the SLO detail (a policy naming SLOs), the arrival check (a trace workload).
LATER_RUN_FIELDS = ("input_tok_s", "goodput_req_s", "slo", "arrival")
SEED_FIELDS = ("output_tokens_per_second", "ttft_p95_ms", "tpot_p95_ms", "latency_p95_ms")
STAT_METRICS = ("output_tok_s", "ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms")
ARM_PHRASES = {"compiled": "compiled vLLM", "eager": "eager vLLM", "throughput": "throughput mode",
               "balanced": "balanced mode"}
SYNTHETIC_BOUNDARY = ("synthetic performance evidence only (random prompts{weights}); production trace replay, "
                      "semantic quality, cost, and release gates remain required")
# An A/B whose semantic-quality gate ran: quality is checked, on InferCrane's generated items only.
# A trace workload's A/B: its arrivals and lengths are a production trace's, its prompt text InferCrane's own.
TRACE_BOUNDARY = ("performance under a replayed request trace ({trace}: its arrivals and lengths, prompt text synthetic"
                  "{weights}); {quality}; cost at the prices recorded in the receipt; a release needs the gate's rules")
QUALITY_BOUNDARY = ("synthetic performance evidence (random prompts); semantic quality gated on InferCrane's generated "
                    "items ({verdict}); production trace replay, cost, and release gates remain required")


def boundary(w: Any, dummy: bool, gate: str | None = None) -> str:
    """A serving receipt's qualification boundary: synthetic prompts, or a replayed trace; the quality gate's verdict
    where it ran."""
    if w.trace is None:
        return (QUALITY_BOUNDARY.format(verdict=gate) if gate is not None
                else SYNTHETIC_BOUNDARY.format(weights=", dummy weights" if dummy else ""))
    quality = (f"semantic quality gated on InferCrane's generated items ({gate})" if gate is not None
               else "semantic quality not checked" + (" (dummy weights)" if dummy else ""))
    return TRACE_BOUNDARY.format(trace=w.trace, weights=", dummy weights" if dummy else "", quality=quality)


def serving_evidence_class(engine_kinds: Any) -> str:
    """A serving receipt's evidence class from the kinds of the engines it drove: a functional check when one was
    InferCrane's test server (programmed latencies, not vLLM), else a GPU measurement."""
    return "functional-check" if "testserver" in set(engine_kinds) else "real-gpu-measurement"


def run_record(m: RunMetrics) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "recipe": m.arm, "run_index": m.run_index, "concurrency": m.concurrency, "driver": m.driver,
        "status": "ok" if m.ok and m.requests_completed else "failed",
        "error": None if m.ok and m.requests_completed else (
            f"{m.failures} failed requests, {m.output_length_mismatches or 0} output-length mismatches"),
        "notes": list(m.notes),
        "started_at": m.started_at or datetime.now(timezone.utc).isoformat(),
        "duration_s": m.duration_s, "requests_completed": m.requests_completed, "failures": m.failures,
        "length_mismatches": m.output_length_mismatches or 0, "token_count_source": m.token_count_source,
        "raw_export": m.raw_export_path,
    }
    for src, dst in RUN_FIELDS.items():
        rec[dst] = getattr(m, src)
    for name in LATER_RUN_FIELDS:  # recorded where measured (SLOs named, a trace replayed): older runs lack them
        value = getattr(m, name)
        if value is not None:
            rec[name] = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return rec


def _before_notes(rec: dict[str, Any]) -> dict[str, Any]:
    """``run_record``'s dict as receipts wrote it before runs had ``notes``: a failed run's notes at the end of its
    ``error``, '; '-separated; an ok run's dropped."""
    old = {k: v for k, v in rec.items() if k != "notes"}
    if old["error"] is not None and rec["notes"]:
        old["error"] = "; ".join([old["error"], *rec["notes"]])
    return old


def engine_record(e: Any) -> dict[str, Any]:
    """The receipt's engine record (``receipts.models_v2.EngineRecord``) of an engine's lifetime
    (``serving.engine.EngineLifetime``)."""
    launched = getattr(e, "launched_by_infercrane", True)
    if launched:
        exit_status = (f"returncode {e.returncode}" if e.returncode is not None else None) if not e.stop_signals \
            else f"returncode {e.returncode}; stopped with {', '.join(e.stop_signals)}"
    else:  # a --url server: InferCrane neither started nor stopped it
        offered = getattr(e, "prefix_cache_reset_offered", None)
        exit_status = ("not stopped: not launched by InferCrane; prefix cache "
                       + (f"reset before every driver invocation ({e.prefix_cache_resets} "
                           f"reset{'s' if e.prefix_cache_resets != 1 else ''})" if offered
                          else "not reset (the server offers no POST /reset_prefix_cache): runs share its cache"))
    url = getattr(e, "url", None) or f"http://{e.host}:{e.port}"
    return {"recipe": e.recipe_name, "recipe_sha256": e.recipe_sha256, "engine": e.engine, "version": e.version,
            "command_line": e.command or [f"(not launched by InferCrane: the server at {url})"],
            "env": e.env_added, "pid": e.pid,
            "log_path": e.log_path or "(none: the server was not launched by InferCrane)",
            "startup_s": e.ready_after_s, "exit_status": exit_status,
            "launched_by_infercrane": launched, **({"started_by_sitting": True} if getattr(
                e, "started_by_sitting", False) else {}),
            "served_models": list(getattr(e, "served_models", [])),
            **({"served_model": e.served_model} if getattr(e, "served_model", None) else {}),
            "program_env": dict(getattr(e, "program_env", {})),
            "gpu_memory_utilization": getattr(e, "gpu_memory_utilization", None),
            "coresident_with": list(getattr(e, "coresident_with", [])),
            "kernels": list(getattr(e, "kernels", [])), "token_gate": getattr(e, "token_gate", None),
            **({"quality_answers": e.quality_answers} if getattr(e, "quality_answers", None) else {}),
            "warmup": getattr(e, "warmup", None), "jit_during_serving": list(getattr(e, "jit_during_serving", []))}


def _ok_runs(result: PlanResult, arm: str, concurrency: int, driver: str) -> list[RunMetrics]:
    return [m for m in result.runs if m.arm == arm and m.concurrency == concurrency and m.driver == driver
            and m.ok and m.requests_completed]


def _median(values: list[float]) -> float:
    return statistics.median(values)


def measurement(result: PlanResult, arm: str, c: int, driver: str) -> dict[str, Any] | None:
    runs = _ok_runs(result, arm, c, driver)
    if not runs:
        return None
    recs = [run_record(m) for m in runs]
    out = {"recipe": arm, "concurrency": c}
    for f in SEED_FIELDS:
        out[f] = _median([r[f] for r in recs])
    out["request_throughput"] = _median([r["request_throughput"] for r in recs])
    if all(m.input_tok_s is not None for m in runs):
        out["input_tokens_per_second"] = _median([m.input_tok_s for m in runs])
    if all(m.slo is not None for m in runs):
        out["goodput_req_s"] = _median([m.goodput_req_s for m in runs])
        out["slo_met_runs"] = sum(m.slo.all_met for m in runs)
    out["runs"] = len(runs)
    out["failures"] = sum(m.failures for m in runs)
    return out


def unmeasured(result: PlanResult, arms: list[str], driver: str) -> str | None:
    """Why no concurrency holds a valid run (``RunMetrics.ok``: no failed request, every output the length asked) of
    every arm and ``driver``, naming each arm and concurrency without one and what its runs were; None when one does."""
    w = result.workload
    if any(all(_ok_runs(result, arm, c, driver) for arm in arms) for c in w.concurrency):
        return None
    parts = []
    for c in w.concurrency:
        for arm in arms:
            runs = [m for m in result.runs if m.arm == arm and m.concurrency == c and m.driver == driver]
            if _ok_runs(result, arm, c, driver):
                continue
            if not runs:
                parts.append(f"{arm} at c={c}: no run")
                continue
            sent = sum(m.requests_sent for m in runs)
            off = sum(m.output_length_mismatches or 0 for m in runs)
            parts.append(f"{arm} at c={c}: none of its {len(runs)} runs is valid ({sum(m.failures for m in runs)} of "
                         f"{sent} requests failed, {off} outputs were not the {w.output_tokens} tokens asked)")
    return f"no concurrency has a valid {driver} run of every arm, so there is nothing to compare: " + "; ".join(parts)


def decision_metrics(policy: ServingPolicy | None) -> tuple[str, ...]:
    """The metrics an A/B's analysis collects: ``STAT_METRICS``, then any other the policy decides on (a p99, goodput)."""
    named = (policy.primary_metric, *policy.guard_metrics) if policy is not None else ()
    return tuple(dict.fromkeys((*STAT_METRICS, *named)))


def serving_arm(result: PlanResult, arm: str, c: int, driver: str,
                policy: ServingPolicy | None = None) -> ServingArm:
    runs = _ok_runs(result, arm, c, driver)
    return ServingArm(recipe=arm, phrase=ARM_PHRASES.get(arm, f"recipe {arm}"),
                      runs={k: [_corrected(m, k, policy) for m in runs] for k in decision_metrics(policy)})


def _corrected(m: RunMetrics, metric: str, policy: ServingPolicy | None) -> float | None:
    """A run's value of ``metric`` as the decision reads it: with the policy's correction for the metric
    (``ServingPolicy.continuity_for``: goodput's ``goodput_continuity``) that many requests added to the window's
    count (``(good + k) / window``), else as recorded."""
    value = getattr(m, metric)
    k = policy.continuity_for(metric) if policy is not None else None
    return value if k is None or value is None else value + k / m.duration_s


def statistic_metric(s: Mapping[str, Any]) -> str:
    """A statistics[] entry's metric as a table names it: with the continuity correction its values carry, if any
    ('goodput_req_s, (good + 0.5) / window'), so that no corrected number reads as recorded."""
    k = s.get("continuity_requests")
    return str(s.get("metric")) if not k else f"{s.get('metric')}, (good + {k:g}) / window"


def _present(**fields: Any) -> dict[str, Any]:
    """The fields that hold a value: a receipt names what a run recorded, and leaves out what it did not."""
    return {k: v for k, v in fields.items() if v is not None}


def time_accounting(result: PlanResult, engines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How much of the plan's wall time the measurement windows were (None for a plan whose wall time is unknown).

    ``measured_share``: every ok window over the plan's wall time. ``engine_up_s``: the wall time less the start-ups of
    the engines this plan launched (their records' ``startup_s``; engines start one after the other; not those a PoC
    sitting's pool started before the plan, ``started_by_sitting``), i.e. the time
    engines were up and could have been measured; ``measured_share_of_engine_up`` is what the windows took of it.
    With AIPerf blocks (``plan_blocks``), where the rest went: AIPerf's start-ups, warm-ups, the gaps between windows
    and its tails (exports, shut-down), each added up over the blocks."""
    if not result.wall_s:
        return None
    measured = sum(m.duration_s for m in result.runs if m.ok and m.requests_completed)
    out: dict[str, Any] = {"wall_s": result.wall_s, "measured_s": measured,
                           "measured_share": measured / result.wall_s}
    if not result.blocks:  # a plan of one driver invocation per point, or a receipt from before blocks
        return out
    starts = sum(e.get("startup_s") or 0.0 for e in engines
                 if e.get("launched_by_infercrane", True) and not e.get("started_by_sitting"))
    up = result.wall_s - starts
    if up > 0:
        out |= {"engine_startups_s": round(starts, 3), "engine_up_s": round(up, 3),
                "measured_share_of_engine_up": measured / up}
    if result.blocks:
        for key in ("startup_s", "warmup_s", "gaps_s", "tail_s"):
            out[f"blocks_{key}"] = round(sum(b.get(key) or 0.0 for b in result.blocks), 3)
        out["blocks_max_gap_s"] = max((b.get("max_gap_s") or 0.0) for b in result.blocks)
        out["blocks"] = len(result.blocks)
    return out


def _epoch(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso).timestamp() if iso else None


def _union(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``spans`` (a span that ends before it begins covers nothing)."""
    return sum(b - a for a, b in _merged(spans))


def sitting_time(engines: list[Any], runs: list[dict[str, Any]], *, start: float, end: float) -> dict[str, Any]:
    """Where a sitting's wall time went (``start``..``end``, epoch seconds): ``engine_up_s`` is the time at least one
    engine was up and ready (from its start plus ``ready_after_s`` to its ``stopped_at``, or the end), however many;
    ``engines_starting_s`` the time at least one engine was starting; ``measured_s`` the time inside at least one ok
    measurement window (a run's ``started_at`` plus ``duration_s``); the shares are of engine-up time and of the
    wall. ``engines``: the records (``started_at``, ``ready_after_s``, ``stopped_at``) of every engine the sitting
    started; ``runs``: receipt runs."""
    clip = lambda a, b: (max(a, start), min(b, end))  # noqa: E731
    up, starting = [], []
    for e in engines:
        s0 = _epoch(getattr(e, "started_at", None))
        if s0 is None:
            continue
        stop = _epoch(getattr(e, "stopped_at", None)) or end
        ready = s0 + e.ready_after_s if getattr(e, "ready_after_s", None) is not None else stop
        starting.append(clip(s0, min(ready, stop)))
        if ready < stop:
            up.append(clip(ready, stop))
    windows = []
    for r in runs:
        if r.get("started_at") and r.get("status", "ok") == "ok" and r.get("requests_completed"):
            t = _epoch(r["started_at"])
            windows.append(clip(t, t + r["duration_s"]))
    wall = end - start
    engine_up, measured = _union(up), _union(windows)
    idle = [{"from_s": round(a - start, 3), "to_s": round(b - start, 3), "s": round(b - a, 3)}
            for a, b in _minus(_merged(up), _merged(windows)) if b - a >= UNMEASURED_MIN_S]
    return {"wall_s": round(wall, 3), "engine_up_s": round(engine_up, 3),
            "engines_starting_s": round(_union(starting), 3),
            "measured_s": round(measured, 3),
            "measured_share_of_engine_up": measured / engine_up if engine_up > 0 else None,
            "measured_share_of_wall": measured / wall if wall > 0 else None, "engines": len(up),
            "unmeasured_up": idle,
            "method": "unions of intervals on the wall clock: engine up = from ready (started_at + ready_after_s) "
                      "to stopped_at for any engine; measured = inside any ok window (started_at + duration_s); "
                      f"unmeasured_up = every stretch of at least {UNMEASURED_MIN_S:g} s with an engine up and no "
                      "window, in seconds from the sitting's start"}


UNMEASURED_MIN_S = 1.0  # a sitting's engine-up stretches without a window shorter than this are not listed


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` as disjoint intervals in order (empty ones dropped)."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus(spans: list[tuple[float, float]], holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of disjoint ``spans`` outside disjoint ``holes``."""
    out = []
    for a, b in spans:
        for h0, h1 in holes:
            if h1 <= a or h0 >= b:
                continue
            if h0 > a:
                out.append((a, h0))
            a = max(a, h1)
        if a < b:
            out.append((a, b))
    return out


DRIFT_METRIC = "output_tok_s"


def arm_drift(result: PlanResult, arm: str, driver: str) -> list[dict[str, Any]]:
    """Per concurrency: the arm's first run against its last (in the order they ran), set against the spread of its
    other runs; flagged when the change exceeds that spread (the engine was not yet steady, or drifted)."""
    out = []
    for c in result.workload.concurrency:
        runs = _ok_runs(result, arm, c, driver)
        if len(runs) < 2:
            continue
        first, last, others = runs[0], runs[-1], runs[1:-1]
        a, b = getattr(first, DRIFT_METRIC), getattr(last, DRIFT_METRIC)
        values = [getattr(m, DRIFT_METRIC) for m in others]
        spread = (max(values) - min(values)) / _median(values) * 100 if len(values) >= 2 else None
        change = (b / a - 1) * 100
        out.append({"recipe": arm, "concurrency": c, "metric": DRIFT_METRIC, "driver": driver,
                    "first_run_index": first.run_index, "last_run_index": last.run_index, "first": a, "last": b,
                    "change_percent": change, "other_runs_spread_percent": spread,
                    "flagged": spread is not None and abs(change) > spread})
    return out


def _combine(decisions: dict[int, ServingDecision], a: str, b: str, workload: str) -> tuple[str, str, str]:
    codes = {d.decision for d in decisions.values()}
    pa, pb = ARM_PHRASES.get(a, f"recipe {a}"), ARM_PHRASES.get(b, f"recipe {b}")
    per_c = " | ".join(f"c={c}: {d.decision}: {d.reason}" for c, d in decisions.items())
    if codes == {"accept"}:
        return "accept", f"accept {pb} over {pa} for {workload}", per_c
    if "reject" in codes:
        where = ", ".join(f"c={c}" for c, d in decisions.items() if d.decision == "reject")
        first = next(d for d in decisions.values() if d.decision == "reject")
        return "reject", f"{first.decision_text} (at {where})", per_c
    return "inconclusive", f"no decision on {pb} over {pa} for {workload}: " + "; ".join(
        f"c={c}: {d.decision}" for c, d in decisions.items()), per_c


def window_pairs(result: PlanResult, a: str, b: str, driver: str, metrics: tuple[str, ...] = STAT_METRICS,
                 policy: ServingPolicy | None = None) -> dict[str, list[tuple[int, float, float]]]:
    """metric -> the window pairs ``(concurrency, A's value, B's value)``: A's run r at c with B's run r at c, both ok.
    In the sandwich (A1 | B B | A2, ABBA by blocks) run r of A1 pairs with the first half of B's block and A2's with
    the second, so linear drift cancels over the pairs. A pair enters where both values are positive, as the
    ``policy`` reads them (``_corrected``: goodput as ``(good + k) / window``, so a window with no request within the
    SLOs enters too)."""
    out: dict[str, list[tuple[int, float, float]]] = {m: [] for m in metrics}
    for c in result.workload.concurrency:
        runs_a = {m.run_index: m for m in _ok_runs(result, a, c, driver)}
        runs_b = {m.run_index: m for m in _ok_runs(result, b, c, driver)}
        for r in sorted(set(runs_a) & set(runs_b)):
            for metric in metrics:
                va, vb = _corrected(runs_a[r], metric, policy), _corrected(runs_b[r], metric, policy)
                if va and vb:
                    out[metric].append((c, float(va), float(vb)))
    return out


def _paired_analysis(result: PlanResult, a: str, b: str, driver: str, policy: ServingPolicy) -> tuple:
    """A paired design's statistics (per concurrency, descriptive), its decision family, its design's power and the
    (code, text, reason) of its decision (``decide_serving_paired``)."""
    import math

    from ..decide.serving import decide_serving_paired
    from ..stats.paired import design_for

    pairs = window_pairs(result, a, b, driver, decision_metrics(policy), policy)
    pa, pb = ARM_PHRASES.get(a, f"recipe {a}"), ARM_PHRASES.get(b, f"recipe {b}")
    d = decide_serving_paired(pairs, policy, phrases=(pa, pb), workload="this workload")
    stats = []
    for r in d.per_concurrency:
        if r.ratio is None:
            continue
        triples = [t for t in pairs[r.metric] if t[0] == r.concurrency]
        stats.append({
            "concurrency": r.concurrency, "metric": r.metric, "higher_is_better": serving_metric(r.metric).higher_is_better,
            "a_values": [t[1] for t in triples], "b_values": [t[2] for t in triples],
            "a_median": _median([t[1] for t in triples]), "b_median": _median([t[2] for t in triples]),
            "ratio_b_over_a": r.ratio.ratio, "ci_low": r.ratio.ci_lo, "ci_high": r.ratio.ci_hi,
            "confidence": r.ratio.confidence, "p_value": r.ratio.p_value, "min_achievable_p": 0.0,
            "equivalence_margin": policy.equivalence_margin, "verdict": None, "interval_method": r.ratio.method,
            "test_method": r.ratio.test_method, "verdict_rule": r.role, "n_pairs": r.n_pairs,
            "in_decision_family": False, **_present(continuity_requests=policy.continuity_for(r.metric))})
    tests = []
    for m in (d.primary, *d.guards):
        rr = m.ratio
        tests.append({"metric": m.metric, "role": m.role, "higher_is_better": m.higher_is_better,
                      "estimand": m.estimand, "n_pairs": max(m.n_pairs, 1), "concurrencies": m.concurrencies or
                      list(result.workload.concurrency), "ratio_b_over_a": rr.ratio if rr else None,
                      "ci_low": rr.ci_lo if rr else None, "ci_high": rr.ci_hi if rr else None,
                      "interval_level": rr.confidence if rr else None, "change_percent": m.change_percent,
                      "p_value": rr.p_value if rr else None, "p_holm": m.p_holm, "verdict": m.verdict.value,
                      "interval_method": rr.method if rr else None, "test_method": rr.test_method if rr else None,
                      "note": m.note})
    family = {"family": d.family, "control": d.family_control, "m_tests": d.m_tests, "alpha": d.alpha,
              "interval_level": d.interval_level, "verdict_rule": d.verdict_rule, "tests": tests}
    n = d.primary.n_pairs
    design = None
    if n >= 2:
        dz = design_for(n, cv=policy.prior_window_cv, m_tests=policy.family_size, alpha=policy.alpha,
                        margin=policy.equivalence_margin)
        sd = d.primary.ratio.sd_log if d.primary.ratio else None
        design = {"n_pairs": n, "window_cv": policy.prior_window_cv,
                  "measured_window_cv": sd / math.sqrt(2) if sd is not None else None, "m_tests": dz.m_tests,
                  "detectable_change_percent": dz.detectable_change * 100, "power_at_3_percent": dz.power_at_effect,
                  "equivalence_probability": dz.equivalence_probability,
                  "pairs_for_equivalence": dz.pairs_for_equivalence, "min_achievable_p": dz.min_achievable_p,
                  "min_p_note": dz.min_p_note, "method": dz.method}
    return stats, family, design, (d.decision, d.decision_text, d.reason)


def _answers_of(engines: list[dict[str, Any]], arm: str) -> dict[str, Any] | None:
    """The first answers to the quality gate's items that an engine of ``arm`` gave (an engine started again gives
    them again; the first set is the one the gate read)."""
    return next((e["quality_answers"] for e in engines if e["recipe"] == arm and e.get("quality_answers")), None)


def quality_section(engines: list[dict[str, Any]], a: str, b: str, policy: ServingPolicy,
                    options: dict[str, Any]) -> dict[str, Any] | None:
    """The receipt's ``quality_gate``: arm B's answers against arm A's (``decide.quality.quality_gate``), each answer
    scored again from its text against the item regenerated from the recorded seed and count
    (``serving.quality``); or why the gate did not run. None for a receipt whose plan did not say whether it would
    (written before the gate)."""
    from ..decide.quality import Answer, quality_gate
    from ..errors import InputError
    from .quality import generate_items, items_record, score

    planned = options.get("quality_gate")
    if planned is None:
        return None
    if not planned["run"]:
        return {"ran": False, "why_not": planned["why"]}
    q = policy.quality
    if q is None:
        raise InputError("the plan ran the quality gate but the receipt's policy has no quality block")
    got = {arm: _answers_of(engines, arm) for arm in (a, b)}
    lacking = [arm for arm, ans in got.items() if ans is None]
    if lacking:
        return {"ran": False, "why_not": f"planned, but no answers from {' and '.join(lacking)}'s engine: the "
                                         "plan stopped before that arm's first visit"}
    items = generate_items(q.seed, q.items_per_task)
    stated = items_record(q, items)
    for arm, ans in got.items():
        if ans["items"] != stated:
            diff = sorted(k for k in stated if ans["items"].get(k) != stated[k])
            raise InputError(f"arm {arm}'s answers are to other items than the policy's ({', '.join(diff)} differ)")
    by_id = {it.id: it for it in items}

    def answers(arm: str) -> list[Answer]:
        out = []
        for rec in got[arm]["answers"]:
            item = by_id.get(rec["item"])
            if item is None:
                raise InputError(f"arm {arm} answered an item that is not generated: {rec['item']!r}")
            out.append(Answer(rec["item"], score(item, rec["text"]), tuple(rec["tokens"]), tuple(rec["logprobs"]),
                              tuple(rec["texts"]), tuple(rec["top"])))
        return out

    gate = quality_gate({it.id: it.task for it in items}, answers(a), answers(b), q)
    return {"ran": True, "reference": a, "candidate": b, "items": stated, **gate}


def model_provenance(recipe: Any) -> dict[str, Any]:
    """Provenance's model block for a recipe's model: the real id and revision, the config fields the serving numbers
    depend on, the fingerprint of its whole config (``config_sha256``: what ties the id to the config served), and
    whether weights and tokenizer are the real ones (a stand-in: dummy weights, stand-in tokenizer). A folder made by
    ``infercrane model prepare`` is verified (every file against its marker) and adds its licence and the package its
    weights were converted from (``models.real.provenance_fields``)."""
    from ..models.catalog import config_fingerprint, load_model_config
    from ..models.real import provenance_fields, read_marker
    from ..models.standin import read_stand_in_marker

    local = recipe.model_is_local()
    mc = load_model_config(recipe.resolved_model() if local else recipe.model)
    marker = read_stand_in_marker(recipe.resolved_model()) if local else None
    used = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "rms_norm_eps", "vocab_size", "max_position_embeddings", "torch_dtype")
    block = {"id": mc.model_id, "revision": mc.revision, "source": mc.source,
             "config_fields": {k: mc.config[k] for k in used if k in mc.config},
             "config_sha256": config_fingerprint(mc.config),
             "weights": "dummy" if marker else "real", "tokenizer": "stand-in" if marker else "real"}
    if local and read_marker(recipe.resolved_model()) is not None:
        block |= provenance_fields(recipe.resolved_model())
    return block


def model_block(model: dict[str, Any]) -> dict[str, Any]:
    """The seed's model block, from the provenance model block."""
    c = model["config_fields"]
    return {"id": model["id"], "revision": model["revision"] or "unknown", "hidden_size": c["hidden_size"],
            "layers": c["num_hidden_layers"], "rms_norm_epsilon": c["rms_norm_eps"],
            "weights": model["weights"], "tokenizer": model["tokenizer"]}


def provenance_model_from_block(m: dict[str, Any]) -> dict[str, Any]:
    """Provenance's model block from a receipt's own model block (receipts written before provenance.model)."""
    return {"id": m["id"], "revision": None if m["revision"] == "unknown" else m["revision"],
            "source": "the receipt's model block",
            "config_fields": {"hidden_size": m["hidden_size"], "num_hidden_layers": m["layers"],
                              "rms_norm_eps": m["rms_norm_epsilon"]},
            "weights": m["weights"], "tokenizer": m["tokenizer"]}


def _findings(result: PlanResult, stand_in: bool) -> list[dict[str, Any]]:
    """The compatibility ledger: every workaround this run applied, as ``applied`` (a recipe's entry is what the
    recipe guards against, not something this run saw)."""
    seen, out = set(), []
    for r in result.recipes.values():
        for w in r.workarounds:
            key = (w.finding, w.workaround)
            if key not in seen:
                seen.add(key)
                out.append({"finding": w.finding, "workaround": w.workaround, "upstream_issue": w.upstream_issue,
                            "status": "applied", "evidence": None})
    if stand_in and "aiperf" in result.drivers:
        from ..models.standin import AIPERF_OFFLINE_TOKENIZER_FINDING as f

        out.append({"finding": f["finding"], "workaround": f["workaround"], "upstream_issue": None,
                    "status": "applied", "evidence": None})
    return out


def build_document(result: PlanResult, *, kind: str, policy: ServingPolicy, provenance: dict[str, Any],
                   incomplete_reason: str | None = None, engines: list[dict[str, Any]] | None = None,
                   runs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``kind``: ``ab`` (two arms, paired_aiperf) or ``bench`` (one arm: bench, public_workload_reproduction).
    ``engines`` and ``runs``: the engine and run records as a receipt holds them (re-deciding a receipt: the raw
    evidence as it was written, in its own layout), instead of ``result``'s."""
    arms = list(result.recipes)
    w = result.workload
    primary = result.drivers[0]
    model = model_block(provenance["model"] or model_provenance(result.recipes[arms[0]]))
    complete = result.complete and incomplete_reason is None
    dummy = model["weights"] == "dummy"
    doc: dict[str, Any] = {
        "schema_version": POC_V2,
        "recorded_at": provenance["recorded_at"],
        "model": model,
        "software": provenance["software"],
        "runtime_compatibility": _findings(result, dummy),
        "qualification_boundary": boundary(w, dummy),
        "complete": complete,
        "incomplete_reason": None if complete else (incomplete_reason or "the plan stopped part-way"),
        **_present(plan_wall_s=result.wall_s if complete else None),
        "drivers": {d: _driver_version(result, d) for d in result.drivers},
        "engines": engines if engines is not None else [engine_record(e) for e in result.engines],
        "runs": runs if runs is not None else [run_record(m) for m in result.runs],
        **({"plan_blocks": [dict(b) for b in result.blocks]} if result.blocks else {}),
        "policy": policy.model_dump(mode="json") | {"workload_notes": result.notes},
        "policy_sha256": policy_sha256(policy),
        "provenance": provenance,
    }
    if not complete:
        return doc
    workload_block = {
        "input_tokens": w.input_tokens, "output_tokens": w.output_tokens, "streaming": w.streaming,
        "profile_runs": w.runs_per_arm, "concurrency": list(w.concurrency),
        "requests_per_point": {str(c): w.requests_at(c) for c in w.concurrency} if w.trace is None else {},
        "warmup_requests": w.warmup_at(w.concurrency[0]), "ignore_eos": w.ignore_eos, "order": result.order,
        "preset": w.name, "notes": w.notes(),
        **_present(window_s=w.window_s, warmup_s=w.warmup_s),
        **({"prompts": w.prompts} if w.prompts == "shared" else {}),
        **({"trace": trace_block(w, provenance)} if w.trace is not None else {}),
    }
    why = unmeasured(result, arms, primary)
    if why is not None:
        from ..errors import RunFailed

        raise RunFailed(why, hint="outputs other than the length asked with ignore_eos mean the engine does not honour "
                                  "ignore_eos / min_tokens; failed requests are in the driver logs")
    if kind == "ab":
        a, b = arms
        measurements = [m for c in w.concurrency for arm in (a, b) if (m := measurement(result, arm, c, primary))]
        by = {(m["recipe"], m["concurrency"]): m for m in measurements}
        comparisons, stats, decisions = [], [], {}
        paired = _paired_analysis(result, a, b, primary, policy) if result.analysis == "pairs" else None
        for c in w.concurrency:
            ma, mb = by.get((a, c)), by.get((b, c))
            if not (ma and mb):
                continue
            comparisons.append({
                "recipe_a": a, "recipe_b": b, "concurrency": c,
                "throughput_speedup": throughput_speedup(ma["output_tokens_per_second"], mb["output_tokens_per_second"]),
                "ttft_p95_reduction_percent": ttft_p95_reduction_percent(ma["ttft_p95_ms"], mb["ttft_p95_ms"]),
                "latency_p95_reduction_percent": latency_p95_reduction_percent(ma["latency_p95_ms"], mb["latency_p95_ms"]),
            })
            if paired is not None:
                continue
            arm_a, arm_b = serving_arm(result, a, c, primary, policy), serving_arm(result, b, c, primary, policy)
            for metric in STAT_METRICS:
                mc = compare_metric(metric, arm_a, arm_b, policy, concurrency=c)
                if mc.ci_lo is None or mc.p_value is None:
                    continue
                stats.append({
                    "concurrency": c, "metric": metric, "higher_is_better": mc.higher_is_better,
                    "a_values": arm_a.runs[metric], "b_values": arm_b.runs[metric], "a_median": mc.a_median,
                    "b_median": mc.b_median, "ratio_b_over_a": mc.ratio_b_over_a, "ci_low": mc.ci_lo,
                    "ci_high": mc.ci_hi, "confidence": mc.confidence, "p_value": mc.p_value,
                    "min_achievable_p": mc.min_achievable_p, "equivalence_margin": policy.equivalence_margin,
                    "verdict": mc.verdict.value, "interval_method": interval_method(policy),
                    "test_method": f"Mann-Whitney U, two-sided, {mc.rank_test_method}",
                    "verdict_rule": verdict_rule(policy),
                    **({"bootstrap_seed": mc.bootstrap_seed} if policy.per_statistic_seed else {}),
                })
            decisions[c] = decide_serving(arm_a, arm_b, policy, workload=f"this workload at concurrency {c}",
                                          concurrency=c)
        if paired is not None:
            stats, family, design, (code, text, reason) = paired
        else:
            code, text, reason = _combine(decisions, a, b, "this workload")
        options = (provenance.get("config") or {}).get("options") or {}
        gate = quality_section(doc["engines"], a, b, policy, options)
        if gate is not None:
            from ..decide.quality import UNDECIDED, apply_to_decision

            doc["quality_gate"] = gate
            if gate["ran"]:
                code, text, reason = apply_to_decision(code, text, reason, gate)
                doc["qualification_boundary"] = boundary(w, dummy, gate=f"gate {gate['verdict']}")
            elif options["quality_gate"]["run"]:
                # planned and not run: speed alone cannot accept
                code, text, reason = apply_to_decision(code, text, reason,
                                                       {"verdict": UNDECIDED, "reason": gate["why_not"]})
        doc["paired_aiperf"] = {
            "gpu": provenance["hardware"]["gpu"], "app_id": provenance["run_id"], "primary_driver": primary,
            "workload": workload_block, "failures": sum(m["failures"] for m in measurements),
            "measurements": measurements, "comparisons": comparisons, "statistics": stats,
            "decision": text, "decision_code": code, "reason": reason,
            "drift": [d for arm in (a, b) for d in arm_drift(result, arm, primary)],
            **_present(time_accounting=time_accounting(result, doc["engines"])),
            **({"family": family, "design": design} if paired is not None else {}),
        }
        if result.analysis == "pairs":
            doc["analysis"] = "pairs"
    else:
        arm = arms[0]
        measurements = [m | {"driver": d} for c in w.concurrency for d in result.drivers
                        if (m := measurement(result, arm, c, d))]
        agreement = driver_agreement(result, arm, policy)
        doc["bench"] = {
            "gpu": provenance["hardware"]["gpu"], "app_id": provenance["run_id"], "recipe": arm,
            "workload": workload_block, "failures": sum(m["failures"] for m in measurements),
            "measurements": measurements, "driver_agreement": agreement,
            "drift": [d for drv in result.drivers for d in arm_drift(result, arm, drv)],
            **_present(time_accounting=time_accounting(result, doc["engines"])),
        }
        if len(w.concurrency) == 1:
            doc["public_workload_reproduction"] = _public_reproduction(result, arm, provenance, agreement)
    prices = ((provenance.get("config") or {}).get("options") or {}).get("gpu_price_table")
    if prices is not None:  # the table the run was given, recorded with it: the cost re-derives from the receipt alone
        from ..decide.cost import cost_section, engine_gpus

        primary_measurements = [m for m in measurements if m.get("driver", primary) == primary]
        doc["cost"] = cost_section(primary_measurements, provenance["hardware"]["gpu"], prices,
                                   {arm: engine_gpus(r.engine_args) for arm, r in result.recipes.items()})
    return doc


AGREEMENT_METRICS = ("output_tokens_per_second", "request_throughput", "ttft_p95_ms", "tpot_p95_ms", "latency_p95_ms")
# Fields an agreement entry gained when it became a comparison with an interval; a receipt written before holds none.
AGREEMENT_INTERVAL_FIELDS = ("ratio", "ci_low", "ci_high", "confidence", "runs", "reference_runs", "interval_method",
                             "verdict", "verdict_rule")
BAND_AGREEMENT = {Band.INSIDE: "AGREE", Band.ABOVE: "DISAGREE", Band.BELOW: "DISAGREE", Band.STRADDLES: "UNDECIDED"}


def agreement_interval_method(policy: ServingPolicy) -> str:
    return (f"percentile bootstrap of median(driver) / median(reference driver), each driver's runs resampled "
            f"independently (the run is the replicate), {policy.bootstrap_resamples} resamples, "
            f"seed {policy.bootstrap_seed}")


def agreement_verdict_rule(policy: ServingPolicy) -> str:
    t = policy.driver_agreement_percent
    return (f"AGREE: the whole {policy.confidence * 100:g} % interval inside 1 ± {t:g} percent (TOST-style "
            f"equivalence); DISAGREE: the whole interval outside it on one side; UNDECIDED: the interval overlaps an "
            f"edge; INSUFFICIENT: fewer than {policy.min_runs_per_arm} runs of a driver; each concurrency and metric "
            "is its own comparison, no family-wise adjustment across them")


def driver_agreement(result: PlanResult, arm: str, policy: ServingPolicy) -> list[dict[str, Any]]:
    """Every other driver against the first, per concurrency and metric: medians over ok runs, the difference in
    percent, each driver's run spread ((max - min) / median), and the ratio's bootstrap interval read against the band
    ±``driver_agreement_percent``: "agree within 2 percent" is a verdict with its evidence, not a point estimate."""
    reference, *others = result.drivers
    target = policy.driver_agreement_percent
    out = []
    for c in result.workload.concurrency:
        ref = [run_record(m) for m in _ok_runs(result, arm, c, reference)]
        for d in others:
            mine = [run_record(m) for m in _ok_runs(result, arm, c, d)]
            if not (ref and mine):
                continue
            for f in AGREEMENT_METRICS:
                a, b = [r[f] for r in ref], [r[f] for r in mine]
                ma, mb = _median(a), _median(b)
                diff = (mb / ma - 1) * 100
                sa, sb = (max(a) - min(a)) / ma * 100, (max(b) - min(b)) / mb * 100
                entry = {
                    "concurrency": c, "metric": f, "reference_driver": reference, "driver": d,
                    "reference_median": ma, "median": mb, "difference_percent": diff,
                    "reference_spread_percent": sa, "spread_percent": sb, "target_percent": target,
                    "within_target": abs(diff) <= target, "within_run_spread": abs(diff) <= max(sa, sb),
                    "ratio": mb / ma, "ci_low": None, "ci_high": None, "confidence": policy.confidence,
                    "runs": len(b), "reference_runs": len(a), "interval_method": agreement_interval_method(policy),
                    "verdict": "INSUFFICIENT", "verdict_rule": agreement_verdict_rule(policy),
                }
                if min(len(a), len(b)) >= 2:
                    ci = b_over_a_ci(a, b, confidence=policy.confidence, n_resamples=policy.bootstrap_resamples,
                                     seed=policy.bootstrap_seed)
                    entry["ci_low"], entry["ci_high"] = ci.ci_lo, ci.ci_hi
                    if min(len(a), len(b)) >= policy.min_runs_per_arm:
                        entry["verdict"] = BAND_AGREEMENT[classify_band(ci.ci_lo, ci.ci_hi, margin=target / 100)]
                out.append(entry)
    return out


def agreement_line(a: dict[str, Any]) -> str:
    """One agreement entry as a sentence with its numbers."""
    head = (f"c={a['concurrency']} {a['metric']}: {a['driver']} {a['median']:.4g} vs {a['reference_driver']} "
            f"{a['reference_median']:.4g} ({a['difference_percent']:+.2f} percent")
    if a.get("verdict") is None:  # a receipt written before agreement carried an interval
        verdict = "within" if a["within_target"] else "beyond"
        spread = "inside" if a["within_run_spread"] else "outside"
        return (f"{head}; {verdict} the {a['target_percent']:g} percent target; {spread} the run spread of "
                f"{a['spread_percent']:.1f} / {a['reference_spread_percent']:.1f} percent)")
    runs = f"{a['runs']} v {a['reference_runs']} runs"
    if a["ci_low"] is None:
        return f"{head}; {runs}, no interval): INSUFFICIENT to judge agreement within {a['target_percent']:g} percent"
    interval = f"{a['confidence'] * 100:g} percent CI of the ratio {a['ci_low']:.4f}-{a['ci_high']:.4f}, {runs}"
    said = {"AGREE": f"AGREE within {a['target_percent']:g} percent",
            "DISAGREE": f"DISAGREE beyond {a['target_percent']:g} percent",
            "UNDECIDED": f"UNDECIDED: the interval crosses the {a['target_percent']:g} percent edge",
            "INSUFFICIENT": "INSUFFICIENT runs to judge agreement"}[a["verdict"]]
    return f"{head}; {interval}): {said}"


def _public_reproduction(result: PlanResult, arm: str, provenance: dict[str, Any],
                         agreement: list[dict[str, Any]]) -> dict[str, Any]:
    """The seed's ``public_workload_reproduction`` block for a one-concurrency workload: each driver's medians set
    against the workload's published example, with its comparison boundary."""
    w = result.workload
    c = w.concurrency[0]
    public_arms = []
    for d in result.drivers:
        m = measurement(result, arm, c, d)
        if m:
            public_arms.append({"recipe": arm, "driver": d, "app_id": provenance["run_id"],
                                **{k: m[k] for k in ("output_tokens_per_second", "request_throughput",
                                                     "ttft_p95_ms", "tpot_p95_ms", "latency_p95_ms")},
                                "failures": m["failures"], "runs": m["runs"]})
    published = w.published_example.model_dump() if w.published_example else None
    ours = public_arms[0]["output_tokens_per_second"] if public_arms else None
    boundary = "no published number to compare with"
    if published and ours:
        pct = ours / published["output_tokens_per_second"] * 100
        boundary = (f"{arm} reached {pct:.1f} percent of the published example's output throughput; "
                    + ("the example discloses hardware and runtime, so the ratio compares like with like only "
                       "as far as those match" if published["hardware_and_runtime_disclosed"] else
                       "the public example omits hardware and runtime versions, so this directional ratio is not "
                       "an apples-to-apples product ranking"))
    return {
        "workload": {"requests": w.requests_at(c), "concurrency": c, "input_tokens": w.input_tokens,
                     "output_tokens": w.output_tokens, "streaming": w.streaming},
        "published_example": published, "arms": public_arms, "decision": None,
        "comparison_boundary": boundary, "driver_agreement": [agreement_line(a) for a in agreement],
    }


def _driver_version(result: PlanResult, driver: str) -> str:
    return next((m.driver_version for m in result.runs if m.driver == driver), "not run")


def trace_block(w: Any, provenance: dict[str, Any]) -> dict[str, Any]:
    """A trace workload's identity in the receipt: the trace named, its content hash as the run recorded it, and how
    it was replayed."""
    options = (provenance.get("config") or {}).get("options") or {}
    return {"name": w.trace, "sha256": options.get("trace_sha256"), "speedup": w.trace_speedup,
            "block_size": w.trace_block_size, "driver_mode": "aiperf mooncake_trace, fixed_schedule"}


def plan_config(kind: str, recipes: list[Any], workload: Any, options: dict[str, Any]) -> dict[str, Any]:
    """What a serving receipt records of its plan (``provenance.config``): enough to rebuild the plan and decide again
    (``plan_result_from_receipt``)."""
    return {"command": f"serve {kind}", "options": options,
            "recipes": {r.name: r.model_dump(mode="json") for r in recipes},
            "workload": workload.model_dump(mode="json")}


SERVING_COMMANDS = ("serve ab", "serve bench")  # the commands whose receipts serve decide decides again


def serving_kind(doc: dict[str, Any], source: Any = "the receipt") -> str:
    """``ab`` or ``bench``: which command wrote a serving receipt that ``serve decide`` can decide again. Another
    receipt is an InputError that says what it is and which command decides it (a kernel screen: ``kernel decide``;
    a PoC: the serving receipts it wrote beside it)."""
    from ..errors import InputError
    from ..options import command_line
    from ..receipts.registry import family
    from ..receipts.models_v3 import SCREENING_V3

    schema = str(doc.get("schema_version"))
    prov = doc.get("provenance")
    config = prov.get("config") if isinstance(prov, dict) else None
    command = str(config.get("command", "")) if isinstance(config, dict) else ""
    if command in SERVING_COMMANDS:
        return command.split()[1]
    wanted = "serve decide decides the serving receipts of serve ab and serve bench"
    if family(schema) == family(SCREENING_V3):
        again = (f"decide a kernel screen again with `{command_line('kernel', 'decide', source, '--out', 'NEW.json')}`"
                 if schema == SCREENING_V3 else "kernel decide reads v3 kernel receipts: screen again with "
                                                "`infercrane kernel screen`")
        raise InputError(f"{source}: a kernel screening receipt ({schema}), not a serving receipt; {wanted}",
                         hint=again)
    if command in ("poc", "receipt merge"):
        raise InputError(f"{source}: a PoC receipt (written by {command}), not a serving receipt; {wanted}",
                         hint="decide its serving sections again from the receipts the PoC wrote in its run folder "
                              "(poc/paired.json, poc/public.json)")
    raise InputError(f"{source}: a receipt of {schema} with no serve ab / serve bench command recorded (a read-only "
                     f"format, or another command's), so not a serving receipt; {wanted}")


def recorded_plan(doc: dict[str, Any]) -> tuple[str, dict[str, Any], Any, str, list[Any]]:
    """The plan a ``serve ab`` / ``serve bench`` receipt recorded (``provenance.config``, or the measured run's
    ``measured_config`` of a receipt decided again): its kind (``ab`` or ``bench``), recipes by name, workload, arm
    order and planned runs (``workload.plan_runs``). Raises InputError for a receipt of another command, and
    KeyError / ValidationError for a configuration that cannot be read."""
    from .recipes import Recipe
    from .workload import Workload, plan_runs

    kind = serving_kind(doc)
    config = doc["provenance"]["config"]
    config = config.get("measured_config", config)  # a receipt decided again keeps the measured run's config
    workload = Workload.model_validate(config["workload"])
    recipes = {name: Recipe.model_validate(r) for name, r in config["recipes"].items()}
    order = "sequential" if kind == "bench" else (config["options"].get("order") or workload.arm_order)
    return kind, recipes, workload, order, plan_runs(list(recipes), workload, order)


def plan_result_from_receipt(doc: dict[str, Any]) -> tuple[PlanResult, str]:
    """The finished plan behind a complete serving receipt, rebuilt from its recorded config and raw runs, and the
    receipt's kind (``ab`` or ``bench``): what ``serve decide`` re-analyses without re-measuring.

    Raises InputError when the receipt is incomplete, was not written by ``serve ab``/``serve bench``, or when a
    rebuilt run would not reproduce its recorded run exactly."""
    from ..errors import InputError

    kind, recipes, workload, order, plan = recorded_plan(doc)
    if not doc.get("complete"):
        raise InputError(f"the receipt is incomplete ({doc.get('incomplete_reason')}): its plan did not finish, "
                         "so there is nothing to decide on", hint="run the plan again")
    drivers = list(doc["drivers"])
    runs = []
    for i, rec in enumerate(doc["runs"]):
        before_notes = "notes" not in rec  # an older receipt: a failed run's notes end its error
        error = rec.get("error") or ""
        notes = (error.split("; ", 1)[1].split("; ") if "; " in error else []) if before_notes else rec["notes"]
        durations = rec["duration_s"] or 0.0
        metrics = RunMetrics(
            arm=rec["recipe"], recipe_sha256=recipes[rec["recipe"]].sha256 or "", run_index=rec["run_index"],
            concurrency=rec["concurrency"], driver=rec["driver"], driver_version=doc["drivers"][rec["driver"]],
            token_count_source=rec.get("token_count_source") or "server", streaming=workload.streaming,
            expected_output_tokens=workload.output_tokens, raw_export_path=rec.get("raw_export") or "",
            started_at=rec["started_at"], requests_sent=rec["requests_completed"] + rec["failures"],
            requests_completed=rec["requests_completed"], failures=rec["failures"],
            output_length_mismatches=rec["length_mismatches"] if workload.ignore_eos else None,
            output_tokens_total=round((rec["output_tokens_per_second"] or 0.0) * durations),
            duration_s=durations, notes=notes, **{name: rec.get(name) for name in LATER_RUN_FIELDS},
            **{src: rec[dst] for src, dst in RUN_FIELDS.items() if src not in ("output_tok_s", "request_s")},
            output_tok_s=rec["output_tokens_per_second"] or 0.0, request_s=rec["request_throughput"] or 0.0)
        again = _before_notes(run_record(metrics)) if before_notes else run_record(metrics)
        rec = {k: v for k, v in rec.items() if not (k in LATER_RUN_FIELDS and v is None)}  # written by the model
        if again != rec | {"started_at": again["started_at"]} or \
                datetime.fromisoformat(again["started_at"]) != datetime.fromisoformat(rec["started_at"]):
            diff = sorted(k for k in rec if again.get(k) != rec[k])
            raise InputError(f"runs[{i}] cannot be rebuilt exactly from the receipt (fields {diff} differ)")
        runs.append(metrics)
    result = PlanResult(workload=workload, recipes=recipes, drivers=drivers, order=order,
                        plan=plan, runs=runs, wall_s=doc.get("plan_wall_s"),
                        blocks=[dict(b) for b in doc.get("plan_blocks") or []],
                        analysis=doc.get("analysis") or "runs",
                        notes=list(doc.get("policy", {}).get("workload_notes", [])), complete=True)
    return result, kind


# What re-deciding a receipt recomputes: everything but the raw evidence (runs, engines) and the provenance.
DERIVED_FIELDS = ("model", "runtime_compatibility", "qualification_boundary", "paired_aiperf", "bench",
                  "public_workload_reproduction", "kernel_in_serving", "quality_gate", "cost")


def receipt_policy(doc: dict[str, Any]) -> ServingPolicy:
    """The serving policy a receipt was decided under, from the policy it embeds (its workload notes aside).

    A receipt written before ``driver_agreement_percent`` was a policy field states it as its agreement entries'
    ``target_percent``; an A/B receipt of that time has none, and the packaged value stands in (an A/B never uses it).
    """
    from ..decide.policy import load_policy
    from ..errors import InputError

    raw = {k: v for k, v in doc.get("policy", {}).items() if k != "workload_notes"}
    if "driver_agreement_percent" not in raw:
        targets = {a["target_percent"] for a in (doc.get("bench") or {}).get("driver_agreement", [])}
        if len(targets) > 1:
            raise InputError(f"the agreement entries name several targets {sorted(targets)} and the policy none")
        raw["driver_agreement_percent"] = targets.pop() if targets else load_policy("serving").driver_agreement_percent
    return ServingPolicy.model_validate(raw)


def rederive(doc: dict[str, Any]) -> dict[str, Any]:
    """The derived fields of a complete ``serve ab`` / ``serve bench`` receipt, decided again from its own raw runs,
    recorded configuration and embedded policy (``DERIVED_FIELDS``; a field the kind does not fill is None)."""
    result, kind = plan_result_from_receipt(doc)
    prov = dict(doc["provenance"])
    prov["model"] = prov.get("model") or provenance_model_from_block(doc["model"])
    again = build_document(result, kind=kind, policy=receipt_policy(doc), provenance=prov, engines=doc["engines"])
    block = doc.get("kernel_in_serving")
    if block is not None:
        from infercrane.decide.prediction import derive_prediction

        again["kernel_in_serving"] = {"inputs": block["inputs"], "prediction": derive_prediction(block["inputs"], again)}
    return {k: again.get(k) for k in DERIVED_FIELDS}


# --- re-derivation rules (receipts.registry.LAB_RULES) ------------------------------------------------------

def _in_stated_shape(derived: dict[str, Any], stated: dict[str, Any]) -> dict[str, Any]:
    """The derived fields in the shape of a receipt written before statistics named their methods or driver
    agreement carried an interval: a record that holds none of those later fields is compared without them (it makes
    no claim they would back), and the public block's agreement lines are derived from the records as they stand."""
    from ..receipts.validate import STATISTIC_LABELS

    d = dict(derived)
    if stated.get("policy_sha256") is None:  # written before drift was recorded
        for key in ("paired_aiperf", "bench"):
            if d.get(key) and stated.get(key) and not stated[key].get("drift"):
                d[key] = {**d[key], "drift": []}
    for key, fields, marker in (("paired_aiperf", STATISTIC_LABELS, "interval_method"),
                                ("bench", AGREEMENT_INTERVAL_FIELDS, "verdict")):
        inner = "statistics" if key == "paired_aiperf" else "driver_agreement"
        mine, theirs = d.get(key), stated.get(key)
        if not (mine and theirs) or len(mine.get(inner, [])) != len(theirs.get(inner, [])):
            continue
        records = [({**m, **{f: None for f in fields}} if t.get(marker) is None else m)
                   for m, t in zip(mine[inner], theirs[inner])]
        d[key] = {**mine, inner: records}
        if key == "bench" and d.get("public_workload_reproduction"):
            d["public_workload_reproduction"] = {**d["public_workload_reproduction"],
                                                 "driver_agreement": [agreement_line(a) for a in records]}
    return d


def _token_count_sources(doc: dict[str, Any]) -> list[Problem]:
    """Each run's token-count source is the one its driver used: the recorded workload's for AIPerf, the server's
    usage for ``vllm bench serve`` (it has no other)."""
    config = doc["provenance"]["config"]
    workload = config.get("measured_config", config).get("workload") or {}
    asked = workload.get("token_count_source", "server")
    out: list[Problem] = []
    for i, run in enumerate(doc["runs"]):
        want = asked if run["driver"] == "aiperf" else "server"
        if run.get("token_count_source") != want:
            out.append((f"runs[{i}].token_count_source", f"is {run.get('token_count_source')!r} but the {run['driver']} "
                                                         f"run of this workload counted tokens from {want!r}"))
    return out


def _run_key(run: dict[str, Any]) -> tuple[str, int, int, str]:
    return run["recipe"], run["run_index"], run["concurrency"], run["driver"]


def _key_text(key: tuple[str, int, int, str]) -> str:
    return f"recipe {key[0]!r} run {key[1]} at c={key[2]} by {key[3]}"


def _runs_against_plan(doc: dict[str, Any], plan: list[Any]) -> list[Problem]:
    """Each run recorded once (its key: recipe, run index, concurrency, driver) with a raw export of its own, each a
    run of the plan rebuilt from the configuration with every driver, and a complete receipt holding all of them."""
    planned = [(p.arm, p.run_index, p.concurrency, d) for p in plan for d in doc["drivers"]]
    wanted = set(planned)
    out: list[Problem] = []
    keys: dict[tuple[str, int, int, str], int] = {}
    exports: dict[str, int] = {}
    for i, run in enumerate(doc["runs"]):
        key, export = _run_key(run), run.get("raw_export")
        if key in keys:
            out.append((f"runs[{i}]", f"repeats runs[{keys[key]}] ({_key_text(key)}): a run is recorded once"))
        elif key not in wanted:
            out.append((f"runs[{i}]", f"{_key_text(key)} is no run of the plan rebuilt from provenance.config "
                                      f"({len(planned)} runs: its recipes, runs_per_arm, concurrencies and drivers)"))
        keys.setdefault(key, i)
        if export and export in exports:
            out.append((f"runs[{i}].raw_export", f"is runs[{exports[export]}]'s raw export too ({export}): each run "
                                                 "exports its own"))
        elif export:
            exports[export] = i
    missing = [k for k in planned if k not in keys]
    if doc.get("complete") and missing:
        shown = "; ".join(_key_text(k) for k in missing[:3]) + (f"; and {len(missing) - 3} more" if len(missing) > 3
                                                                 else "")
        out.append(("runs", f"hold no record of {len(missing)} of the plan's {len(planned)} runs ({shown}): a complete "
                            "receipt records every run of the plan its configuration gives"))
    return out


def _runs_in_window(doc: dict[str, Any]) -> list[Problem]:
    """Every run ends before the receipt was recorded, and the runs lie within the plan's wall time (``plan_wall_s``,
    first engine start to last engine stop), both within ``receipts.crosscheck.CLOCK_SKEW_S``."""
    from ..receipts.crosscheck import CLOCK_SKEW_S, stamp

    recorded = stamp(doc.get("recorded_at"))
    spans = []
    for i, run in enumerate(doc["runs"]):
        start = stamp(run.get("started_at"))
        if start is None:
            continue
        end = start.timestamp() + (run.get("duration_s") or 0.0)
        spans.append((start.timestamp(), end))
        if recorded is not None and end - recorded.timestamp() > CLOCK_SKEW_S:
            out_of = end - recorded.timestamp()
            return [(f"runs[{i}].duration_s", f"is {run.get('duration_s')} s: the run would end {out_of:.0f} s after "
                                              f"the receipt was recorded (recorded_at {recorded.isoformat()})")]
    wall = doc.get("plan_wall_s")
    if wall and spans:
        span = max(b for _, b in spans) - min(a for a, _ in spans)
        if span - wall > CLOCK_SKEW_S:
            return [("plan_wall_s", f"is {wall} s but the runs span {span:.1f} s (first started_at to last "
                                    "started_at + duration_s): every run lies inside the plan's wall time")]
    return []


def _engines_against_recipes(doc: dict[str, Any], recipes: dict[str, Any], plan: list[Any]) -> list[Problem]:
    """Each engine record is one the plan started for its runs: of a recipe of the configuration, with that recipe's
    hash, launched with that recipe's command line (``engine.launched_as``: the labels of two swapped arms are
    caught), and no recipe served by more engines than the plan starts for it (``workload.engine_starts``: one per
    visit; one in all for an engine up for every visit: co-resident, a PoC sitting's, a ``--url`` server). An engine a
    PoC sitting started for another recipe of the same launch (``started_by_sitting``) serves the recipes its command
    line launches."""
    from .engine import launched_as
    from .workload import engine_starts

    starts = engine_starts(plan)
    seen: dict[str, int] = {}
    out: list[Problem] = []
    for i, e in enumerate(doc["engines"]):
        p, name, launched = f"engines[{i}]", e["recipe"], e.get("launched_by_infercrane", True)

        def launches(recipe: Any) -> bool:
            return launched_as(e["command_line"], recipe, gpu_memory_utilization=e.get("gpu_memory_utilization"))

        recipe = recipes.get(name)
        if recipe is not None:
            if e["recipe_sha256"] != recipe.sha256:
                out.append((f"{p}.recipe_sha256", f"is {e['recipe_sha256']} but recipe {name!r} of provenance.config "
                                                  f"hashes to {recipe.sha256}"))
            if launched and not launches(recipe):
                out.append((f"{p}.command_line", f"does not launch recipe {name!r} of provenance.config (engine "
                                                 f"{recipe.engine}, model {recipe.model}, engine_args "
                                                 f"{recipe.engine_args}): the engine ran another recipe than its "
                                                 "label says"))
            served = [name]
        else:
            served = [a for a, rec in recipes.items() if launched and e.get("started_by_sitting") and launches(rec)]
            if not served:
                out.append((f"{p}.recipe", f"is {name!r}, no recipe of provenance.config ({', '.join(recipes)}), and "
                                           "its command line launches none of them: no run of this receipt was "
                                           "measured on it"))
        # an engine up for every visit of its recipe (co-resident, a sitting's, a --url server) is its only one
        persistent = e.get("started_by_sitting") or e.get("coresident_with") or not launched
        for arm in served:
            seen[arm] = seen.get(arm, 0) + 1
            most = 1 if persistent else starts.get(arm, 0)
            if seen[arm] > most:
                out.append((p, f"is engine {seen[arm]} of recipe {arm!r}, but the plan has it served by {most} "
                               f"engine(s) ({starts.get(arm, 0)} visit(s), "
                               f"{'one engine up for all' if persistent else 'one engine each'}): no run of this "
                               "receipt was measured on it"))
    return out


def _model_against_recipes(doc: dict[str, Any], recipes: dict[str, Any]) -> list[Problem]:
    """The model a serving receipt names is its recipes': a recipe that serves a hub id serves that catalog model at
    the revision InferCrane read its config from (``models.catalog``; ``model_provenance``); an incomplete receipt's
    seed ``model`` block is its provenance's (a complete one's is derived again)."""
    from ..models.catalog import find

    m = doc["provenance"].get("model")
    if m is None:
        return []
    out: list[Problem] = []
    for name, recipe in recipes.items():
        if recipe.model_is_local():
            continue
        entry = find(recipe.model)
        if recipe.model != m["id"]:
            out.append(("provenance.model.id", f"is {m['id']!r} but recipe {name!r} serves {recipe.model!r}"))
        elif entry is not None and m.get("revision") != entry.revision:
            out.append(("provenance.model.revision", f"is {m.get('revision')!r} but recipe {name!r} serves "
                                                     f"{recipe.model} from the catalog, revision {entry.revision}"))
    if not doc.get("complete") and doc.get("model") != model_block(m):
        out.append(("model", f"is {doc.get('model')!r} but provenance.model gives {model_block(m)!r}"))
    return out


def record_problems(doc: dict[str, Any]) -> list[Problem]:
    """What a ``serve ab`` / ``serve bench`` receipt's raw evidence holds, whether or not its plan finished, against
    the plan its configuration gives (``recorded_plan``): its runs (``_runs_against_plan``, ``_runs_in_window``), its
    engines (``_engines_against_recipes``) and its model (``_model_against_recipes``)."""
    from pydantic import ValidationError

    from ..errors import InputError

    if str(doc["provenance"]["config"].get("command")) not in SERVING_COMMANDS:
        return []  # not a serving plan's receipt (a complete one is told so by the re-derivation)
    try:
        _, recipes, _, _, plan = recorded_plan(doc)
    except (InputError, KeyError, TypeError, ValueError, ValidationError) as e:
        if doc.get("complete"):  # said by the re-derivation, which needs the plan too
            return []
        why = e.message if isinstance(e, InputError) else f"{type(e).__name__}: {e}"
        return [("provenance.config", f"the plan cannot be rebuilt from it: {why}")]
    return (_runs_against_plan(doc, plan) + _runs_in_window(doc) + _engines_against_recipes(doc, recipes, plan)
            + _model_against_recipes(doc, recipes))


def rederived_problems(r: Any) -> list[Problem]:
    """The serving lab's rules (``receipts.registry.LAB_RULES``): the raw evidence against the plan its configuration
    gives (``record_problems``, complete or not), and every conclusion of a complete ``serve ab`` /
    ``serve bench`` receipt decided again from its raw runs, its recorded configuration and the policy it embeds;
    each disagreement names its field path and both values."""
    from pydantic import ValidationError

    from ..errors import InputError
    from ..receipts.validate import derived_differences

    doc = r.model_dump(mode="json")
    out = record_problems(doc)
    if not doc.get("complete"):
        return out
    out += _token_count_sources(doc)
    try:
        derived = rederive(doc)
    except InputError as e:
        return [("provenance.config", f"the receipt's conclusions cannot be derived again from it: {e.message}")]
    except (KeyError, TypeError, ValueError, ValidationError) as e:
        return [("provenance.config", f"the receipt's conclusions cannot be derived again from it: "
                                      f"{type(e).__name__}: {e}")]
    return out + derived_differences(r, doc, derived, DERIVED_FIELDS,
                                      "deciding again from the runs under the receipt's policy",
                                      shape=lambda again: _in_stated_shape(again, doc))

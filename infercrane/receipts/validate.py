"""Validation beyond types: every derived number must agree with what it is derived from.

A speedup with its times, a percentage with its inputs, a median with its raw samples, failures with their counts, a
decision with its reason and evidence, the content hash with the content. What a lab concluded is derived again by
that lab's own rules, found through ``registry.LAB_RULES``: a v3 kernel receipt from the result it carries
(``kernels/receipt.py``), a serving receipt from its runs (``serving/receipt.py``), a PoC receipt from the receipts it
embeds (``poc/derive.py``); this module holds the checks every receipt gets and the comparison those rules share
(``derived_differences``, ``differs``). Each problem names the field path and both values. "Agree" means within the
rounding of the printed numbers: the tolerance is half a unit in the last printed digit of the derived value plus the
effect of the inputs' own rounding, propagated through the formula.

The legacy versions (``registry.LEGACY``: v1 receipts, v2 kernel receipts) carry no result to derive a conclusion
from: for them this module checks the arithmetic only (speedups against times, medians against raw samples,
quartiles around medians, failures against counts) and the hash. A decision, verdict, interval or quartile edited
consistently passes those checks, so a legacy ``Receipt`` says it is one (``legacy``) and the commands say so first.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from ..decide.derived import reduction_percent, throughput_speedup
from ..errors import InputError, ReceiptInvalid
from . import models_v1 as v1
from . import models_v2 as v2
from . import models_v3 as v3
from ..hashing import HASH_FIELD, content_hash
from .crosscheck import crosscheck
from .io import non_finite_paths, read_json
from .registry import HASHED, lab_rules, legacy_note, model_for

Problem = tuple[str, str]


@dataclass(frozen=True)
class Receipt:
    """A receipt that passed every check."""

    path: Path | None
    document: dict[str, Any]
    model: BaseModel

    @property
    def schema_version(self) -> str:
        return self.document["schema_version"]

    @property
    def legacy_note(self) -> str | None:
        """The one line saying this receipt is of a legacy version whose conclusions were not derived again
        (``registry.legacy_note``); None for a current version."""
        return legacy_note(self.schema_version)


# A printed number is taken to carry at least 4 significant digits: ``0.0060`` parses to ``0.006``, and its
# printed precision alone would excuse an 8 % error.
MIN_SIGNIFICANT_REL = 5e-4


def _half_ulp(x: float) -> float:
    """Half a unit in the last printed digit of ``x``, capped at 4 significant digits' worth."""
    exponent = Decimal(repr(float(x))).as_tuple().exponent
    printed = 0.5 * 10.0 ** exponent if isinstance(exponent, int) and exponent < 0 else 0.5
    return min(printed, MIN_SIGNIFICANT_REL * abs(x)) if x else printed


def check_derived(path: str, stated: float, formula: str, fn: Callable[..., float], *inputs: float) -> list[Problem]:
    """One problem if ``stated`` disagrees with ``fn(*inputs)`` beyond the rounding of the printed numbers."""
    computed = fn(*inputs)
    tol = _half_ulp(stated) + 1e-12
    for i, x in enumerate(inputs):
        bumped = list(inputs)
        bumped[i] = x + _half_ulp(x)
        tol += abs(fn(*bumped) - computed)
    if abs(stated - computed) <= tol:
        return []
    shown = ", ".join(f"{x!r}" for x in inputs)
    return [(path, f"is {stated!r} but {formula} of ({shown}) = {computed:.6g} (tolerance ±{tol:.2g})")]


def _ratio(a: float, b: float) -> float:
    return a / b


# --- v1 -------------------------------------------------------------------------------------------------------

def _rules_screening_v1(r: v1.CudaKernelScreeningReceiptV1) -> list[Problem]:
    out: list[Problem] = []
    for i, m in enumerate(r.measurements):
        p = f"measurements[{i}]"
        out += check_derived(f"{p}.speedup_vs_triton", m.speedup_vs_triton, "triton_ms / cuda_ms", _ratio, m.triton_ms, m.cuda_ms)
        out += check_derived(f"{p}.speedup_vs_vllm_vendor", m.speedup_vs_vllm_vendor, "vllm_vendor_ms / cuda_ms",
                             _ratio, m.vllm_vendor_ms, m.cuda_ms)
    out += _unique_rows("measurements", [m.rows for m in r.measurements])
    return out


def _unique_rows(path: str, rows: list[int]) -> list[Problem]:
    dup = sorted({x for x in rows if rows.count(x) > 1})
    return [(path, f"rows {dup} appear more than once")] if dup else []


def _paired_rules(path: str, measurements: list, comparisons: list[tuple[str, str, Any]]) -> list[Problem]:
    """Check the seed's derived serving fields (speedup, p95 reductions) against the per-recipe measurements."""
    out: list[Problem] = []
    by_key = {(m.recipe, m.concurrency): m for m in measurements}
    for i, (a_name, b_name, c) in enumerate(comparisons):
        p = f"{path}[{i}]"
        a, b = by_key.get((a_name, c.concurrency)), by_key.get((b_name, c.concurrency))
        if a is None or b is None:
            missing = a_name if a is None else b_name
            out.append((f"{p}.concurrency", f"no measurement for recipe {missing!r} at concurrency {c.concurrency}"))
            continue
        out += check_derived(f"{p}.throughput_speedup", c.throughput_speedup,
                             f"{b_name}.output_tokens_per_second / {a_name}.output_tokens_per_second",
                             throughput_speedup, a.output_tokens_per_second, b.output_tokens_per_second)
        out += check_derived(f"{p}.ttft_p95_reduction_percent", c.ttft_p95_reduction_percent,
                             f"({a_name} - {b_name}) / {a_name} * 100 of ttft_p95_ms",
                             reduction_percent, a.ttft_p95_ms, b.ttft_p95_ms)
        out += check_derived(f"{p}.latency_p95_reduction_percent", c.latency_p95_reduction_percent,
                             f"({a_name} - {b_name}) / {a_name} * 100 of latency_p95_ms",
                             reduction_percent, a.latency_p95_ms, b.latency_p95_ms)
    return out


def _rules_poc_v1(r: v1.OptimizationPocReceiptV1) -> list[Problem]:
    out: list[Problem] = []
    for name, gpu in r.custom_kernel.gpus.items():
        for i, m in enumerate(gpu.measurements):
            out += check_derived(f"custom_kernel.{name}.measurements[{i}].speedup_vs_vllm", m.speedup_vs_vllm,
                                 "vllm_ms / custom_ms", _ratio, m.vllm_ms, m.custom_ms)
        out += _unique_rows(f"custom_kernel.{name}.measurements", [m.rows for m in gpu.measurements])
    pa = r.paired_aiperf
    out += _paired_rules("paired_aiperf.compiled_vs_eager", pa.measurements,
                         [("eager", "compiled", c) for c in pa.compiled_vs_eager])
    return out


# --- v2 -------------------------------------------------------------------------------------------------------

def _median(values: list[float]) -> float:
    return statistics.median(values)


def _rules_screening_v2(r: v2.CudaKernelScreeningReceiptV2) -> list[Problem]:
    out: list[Problem] = []
    cand = r.candidate.key
    functional = r.evidence_class == "cpu-functional-check"
    if functional:
        if r.timings or r.measurements or r.comparisons or r.measurements_timing_mode is not None:
            out.append(("evidence_class", "a cpu-functional-check carries no timings, measurements or comparisons "
                                          "(no speed claims without a GPU)"))
        if r.decision_code == "accept" or r.decision_code == "retain":
            out.append(("decision_code", f"is {r.decision_code!r} but a cpu-functional-check can only reject or be "
                                         "inconclusive"))
    else:
        if r.measurements_timing_mode is None:
            out.append(("measurements_timing_mode", "a real-gpu-microbenchmark names the timing mode of its measurements"))
        if r.decision_code in ("accept", "retain") and not (r.measurements and r.comparisons):
            out.append(("decision_code", f"is {r.decision_code!r} without measurements and comparisons as evidence"))
    # Timings: summaries agree with raw samples.
    medians: dict[tuple[str, int, str], float] = {}
    for i, t in enumerate(r.timings):
        p = f"timings[{i}]"
        medians[(t.implementation, t.rows, t.mode)] = t.median_us
        if t.n != len(t.samples_us):
            out.append((f"{p}.n", f"is {t.n} but samples_us holds {len(t.samples_us)} samples"))
        out += check_derived(f"{p}.median_us", t.median_us, "median(samples_us)", lambda *s: _median(list(s)), *t.samples_us)
        if not t.q1_us <= t.median_us <= t.q3_us:
            out.append((f"{p}.median_us", f"{t.median_us!r} lies outside [q1_us, q3_us] = [{t.q1_us!r}, {t.q3_us!r}]"))
    # Decision table: candidate-relative speedups, medians from the timings of the named mode.
    for i, m in enumerate(r.measurements):
        p = f"measurements[{i}]"
        cand_ms = getattr(m, f"{cand}_ms")
        if cand_ms is None:
            out.append((f"{p}.{cand}_ms", f"missing: the candidate is {cand!r}, so each row needs its time"))
            continue
        for key in v2.IMPL_KEYS:
            ms, speedup = getattr(m, f"{key}_ms"), getattr(m, f"speedup_vs_{key}")
            if ms is not None and r.measurements_timing_mode is not None:
                t = medians.get((key, m.rows, r.measurements_timing_mode))
                if t is None:
                    out.append((f"{p}.{key}_ms", f"{ms!r} has no {r.measurements_timing_mode} timing record for "
                                                 f"{key} at rows {m.rows}"))
                else:
                    out += check_derived(f"{p}.{key}_ms", ms, "timings.median_us / 1000", lambda u: u / 1000.0, t)
            if speedup is None:
                continue
            if key == cand:
                out.append((f"{p}.speedup_vs_{key}", "a candidate has no speedup against itself"))
            elif ms is None:
                out.append((f"{p}.speedup_vs_{key}", f"is {speedup!r} but {key}_ms is missing"))
            else:
                out += check_derived(f"{p}.speedup_vs_{key}", speedup, f"{key}_ms / {cand}_ms", _ratio, ms, cand_ms)
    out += _unique_rows("measurements", [m.rows for m in r.measurements])
    for i, c in enumerate(r.comparisons):
        p = f"comparisons[{i}]"
        base, mine = medians.get((c.baseline, c.rows, c.mode)), medians.get((c.candidate, c.rows, c.mode))
        if base is None or mine is None:
            out.append((p, f"no timing records for {c.baseline}/{c.candidate} at rows {c.rows} in {c.mode} mode"))
        elif "per-trial" not in c.method and "paired-trial" not in c.method:
            # pooled-sample comparisons (receipts before the trial-level method): the ratio of the pooled medians
            out += check_derived(f"{p}.speedup", c.speedup, "baseline median_us / candidate median_us", _ratio, base, mine)
        if not c.ci_low <= c.speedup <= c.ci_high:
            out.append((f"{p}.speedup", f"{c.speedup!r} lies outside its interval [{c.ci_low!r}, {c.ci_high!r}]"))
    # Correctness: a pass carries numbers, a failure says where or why.
    for i, c in enumerate(r.correctness):
        p = f"correctness[{i}]"
        if c.passed and (c.mismatched or c.error or c.max_abs_err is None or c.max_rel_err is None):
            out.append((f"{p}.passed", "is true but the record has mismatches, an error, or no error magnitudes"))
        if not c.passed and not (c.mismatched or c.error):
            out.append((f"{p}.passed", "is false but the record names neither mismatches nor an error"))
    mine_failed = [c.rows for c in r.correctness if c.implementation == cand and not c.passed]
    if mine_failed and r.decision_code in ("accept", "retain"):
        out.append(("decision_code", f"is {r.decision_code!r} but the candidate failed correctness at rows {mine_failed}"))
    if not any(c.implementation == cand for c in r.correctness) and r.decision_code in ("accept", "retain"):
        out.append(("correctness", f"holds no check of the candidate {cand!r}; only a rejection or no decision "
                                   "(inconclusive) may stand without one"))
    for i, a in enumerate(r.amdahl):
        p = f"amdahl[{i}]"
        out += check_derived(f"{p}.op_share", a.op_share, "calls_per_step * baseline_t_us / 1000 / decode_step_ms",
                             lambda n, t, s: n * t / 1000.0 / s, a.calls_per_step, a.baseline_t_us, a.decode_step_ms)
        out += check_derived(f"{p}.op_speedup", a.op_speedup, "baseline_t_us / candidate_t_us", _ratio,
                             a.baseline_t_us, a.candidate_t_us)
        out += check_derived(f"{p}.best_possible_gain_percent", a.best_possible_gain_percent,
                             "(1 / (1 - op_share) - 1) * 100", lambda f: (1.0 / (1.0 - f) - 1.0) * 100.0, a.op_share)
        out += check_derived(f"{p}.expected_gain_percent", a.expected_gain_percent,
                             "(1 / ((1 - op_share) + op_share / op_speedup) - 1) * 100",
                             lambda f, s: (1.0 / ((1.0 - f) + f / s) - 1.0) * 100.0, a.op_share, a.op_speedup)
    return out


def _statistic_labels(r: v2.OptimizationPocReceiptV2) -> list[Problem]:
    """A statistic that names its interval method and verdict rule names the ones the receipt's own policy gives."""
    from ..decide.serving import interval_method, verdict_rule

    # a paired design's statistics (n_pairs) are re-derived whole with the receipt's rules (serving/receipt.py)
    stated = [(i, s) for i, s in enumerate(r.paired_aiperf.statistics)
              if (s.interval_method or s.verdict_rule) and s.n_pairs is None]
    if not stated:
        return []
    needed = ("bootstrap_resamples", "bootstrap_seed", "equivalence_margin", "confidence")
    missing = [k for k in needed if k not in r.policy]
    if missing:
        return [("policy", f"the statistics name their methods, but the policy holds no {', '.join(missing)}")]
    policy = r.policy
    out: list[Problem] = []
    for i, s in stated:
        p = f"paired_aiperf.statistics[{i}]"
        if s.interval_method != interval_method(policy):
            out.append((f"{p}.interval_method", f"is {s.interval_method!r} but the receipt's policy gives "
                                                f"{interval_method(policy)!r}"))
        if s.verdict_rule != verdict_rule(policy):
            out.append((f"{p}.verdict_rule", f"is {s.verdict_rule!r} but the receipt's policy gives "
                                             f"{verdict_rule(policy)!r}"))
        if s.test_method is None:
            out.append((f"{p}.test_method", "a statistic that names its interval method names its test too"))
    return out


def _rules_poc_v2(r: v2.OptimizationPocReceiptV2) -> list[Problem]:
    out: list[Problem] = []
    if not r.complete and not r.incomplete_reason:
        out.append(("incomplete_reason", "an incomplete receipt says why it is incomplete"))
    if r.paired_aiperf is not None:
        out += _statistic_labels(r)
    if not r.complete and r.evidence is None and r.paired_aiperf is not None \
            and r.paired_aiperf.decision_code in ("accept", "retain"):
        out.append(("paired_aiperf.decision_code", f"is {r.paired_aiperf.decision_code!r} but the receipt is "
                                                   "incomplete: an interrupted run decides nothing"))
    if r.custom_kernel is not None:
        for name, gpu in r.custom_kernel.gpus.items():
            for i, m in enumerate(gpu.measurements):
                for base in ("vllm", "eager", "torch_compile"):
                    ms, speedup = getattr(m, f"{base}_ms"), getattr(m, f"speedup_vs_{base}")
                    if ms is not None and speedup is not None:
                        out += check_derived(f"custom_kernel.{name}.measurements[{i}].speedup_vs_{base}", speedup,
                                             f"{base}_ms / custom_ms", _ratio, ms, m.custom_ms)
    pa = r.paired_aiperf
    if pa is not None:
        out += _paired_rules("paired_aiperf.comparisons", pa.measurements,
                             [(c.recipe_a, c.recipe_b, c) for c in pa.comparisons])
        total = sum(m.failures for m in pa.measurements)
        if pa.failures != total:
            out.append(("paired_aiperf.failures", f"is {pa.failures} but the measurements' failures add up to {total}"))
        for i, m in enumerate(pa.measurements):
            out += _backed_by_runs(f"paired_aiperf.measurements[{i}]", m, pa.primary_driver, r.runs)
        for i, s in enumerate(pa.statistics):
            p = f"paired_aiperf.statistics[{i}]"
            out += check_derived(f"{p}.a_median", s.a_median, "median(a_values)", lambda *v: _median(list(v)), *s.a_values)
            out += check_derived(f"{p}.b_median", s.b_median, "median(b_values)", lambda *v: _median(list(v)), *s.b_values)
            if s.n_pairs is not None:  # paired: the geometric mean of the pairs' B/A, not a ratio of medians
                if len(s.a_values) != s.n_pairs or len(s.b_values) != s.n_pairs:
                    out.append((p, f"{s.n_pairs} pairs but {len(s.a_values)} A and {len(s.b_values)} B values"))
                else:
                    out += check_derived(f"{p}.ratio_b_over_a", s.ratio_b_over_a, "exp(mean log(b_i / a_i))",
                                         lambda *v: _geomean_ratio(v), *s.a_values, *s.b_values)
            else:
                out += check_derived(f"{p}.ratio_b_over_a", s.ratio_b_over_a, "b_median / a_median", _ratio,
                                     s.b_median, s.a_median)
            if not s.ci_low <= s.ratio_b_over_a <= s.ci_high:
                out.append((f"{p}.ratio_b_over_a", f"{s.ratio_b_over_a!r} lies outside [{s.ci_low!r}, {s.ci_high!r}]"))
    if r.bench is not None:
        out += _bench_rules(r.bench, r.runs)
    if r.evidence is not None:
        out += lab_rules("poc")(r)
    else:  # a serving receipt's raw evidence, finished or not, and the conclusions of a finished one
        out += lab_rules("serving")(r)
    return out


def model_id(doc: dict[str, Any]) -> tuple[str, str | None]:
    """(id, revision) of the model a receipt's numbers are of."""
    m = doc.get("model_shape_source") or doc.get("model") or {}
    rev = m.get("revision")
    return (m.get("id"), None if rev in (None, "unknown") else rev)


def _geomean_ratio(values: tuple[float, ...]) -> float:
    """exp(mean log(b_i / a_i)) of ``a_1..a_n, b_1..b_n``."""
    import math

    n = len(values) // 2
    return math.exp(sum(math.log(b / a) for a, b in zip(values[:n], values[n:])) / n)


STATISTIC_LABELS = ("interval_method", "test_method", "verdict_rule")


def _backed_by_runs(p: str, m: Any, driver: str, all_runs: list[Any]) -> list[Problem]:
    """A serving measurement (medians over runs) against the ok runs of its recipe, concurrency and driver."""
    out: list[Problem] = []
    mine = [x for x in all_runs if x.status == "ok" and x.recipe == m.recipe and x.concurrency == m.concurrency
            and x.driver == driver]
    if not mine:
        if all_runs:
            out.append((p, f"no ok {driver} run of recipe {m.recipe!r} at concurrency {m.concurrency} backs it"))
        return out
    if m.runs != len(mine):
        out.append((f"{p}.runs", f"is {m.runs} but {len(mine)} ok runs of {m.recipe!r} at c={m.concurrency} exist"))
    fails = sum(x.failures for x in mine)
    if m.failures != fails:
        out.append((f"{p}.failures", f"is {m.failures} but its runs' failures add up to {fails}"))
    for field in ("output_tokens_per_second", "ttft_p95_ms", "tpot_p95_ms", "latency_p95_ms", "request_throughput"):
        values = [getattr(x, field) for x in mine if getattr(x, field) is not None]
        if values and getattr(m, field, None) is not None:
            out += check_derived(f"{p}.{field}", getattr(m, field), f"median over runs of {field}",
                                 lambda *v: _median(list(v)), *values)
    return out


def _bench_rules(b: Any, runs: list[Any]) -> list[Problem]:
    out: list[Problem] = []
    for i, m in enumerate(b.measurements):
        out += _backed_by_runs(f"bench.measurements[{i}]", m, m.driver, runs)
    total = sum(m.failures for m in b.measurements)
    if b.failures != total:
        out.append(("bench.failures", f"is {b.failures} but the measurements' failures add up to {total}"))
    medians = {(m.concurrency, m.driver): m for m in b.measurements}
    for i, a in enumerate(b.driver_agreement):
        p = f"bench.driver_agreement[{i}]"
        for side, driver, value in (("reference_median", a.reference_driver, a.reference_median),
                                    ("median", a.driver, a.median)):
            m = medians.get((a.concurrency, driver))
            if m is None:
                out.append((f"{p}.{side}", f"no {driver} measurement at concurrency {a.concurrency} backs it"))
            elif getattr(m, a.metric, None) is not None:
                out += check_derived(f"{p}.{side}", value, f"{driver}'s median {a.metric} at c={a.concurrency}",
                                     lambda v: v, getattr(m, a.metric))
        for side, driver, value in (("reference_spread_percent", a.reference_driver, a.reference_spread_percent),
                                    ("spread_percent", a.driver, a.spread_percent)):
            values = [getattr(x, a.metric) for x in runs if x.status == "ok" and x.driver == driver
                      and x.concurrency == a.concurrency and getattr(x, a.metric, None) is not None
                      and x.recipe == b.recipe]
            if values:
                out += check_derived(f"{p}.{side}", value, f"(max - min) / median x 100 of {driver}'s runs",
                                     lambda *v: (max(v) - min(v)) / _median(list(v)) * 100, *values)
        out += check_derived(f"{p}.difference_percent", a.difference_percent,
                             "(median / reference_median - 1) x 100", lambda x, y: (x / y - 1) * 100,
                             a.median, a.reference_median)
        if a.within_target != (abs(a.difference_percent) <= a.target_percent):
            out.append((f"{p}.within_target", f"is {a.within_target} but |{a.difference_percent!r}| vs target "
                                              f"{a.target_percent!r} says otherwise"))
        spread = max(a.spread_percent, a.reference_spread_percent)
        if a.within_run_spread != (abs(a.difference_percent) <= spread):
            out.append((f"{p}.within_run_spread", f"is {a.within_run_spread} but |{a.difference_percent!r}| vs the "
                                                  f"larger run spread {spread!r} says otherwise"))
    return out


# --- v3 -------------------------------------------------------------------------------------------------------

REL_TOL = 1e-9  # a figure re-derived on another machine (other numpy/scipy builds) may differ in the last bits


def first_difference(stated: Any, derived: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first place where two JSON values differ (floats within ``REL_TOL``), as (path, stated, derived)."""
    if isinstance(stated, bool) or isinstance(derived, bool):
        return None if stated is derived else (path, stated, derived)
    if isinstance(stated, (int, float)) and isinstance(derived, (int, float)):
        ok = math.isclose(stated, derived, rel_tol=REL_TOL, abs_tol=1e-12)
        return None if ok else (path, stated, derived)
    if isinstance(stated, dict) and isinstance(derived, dict):
        for k in list(dict.fromkeys([*stated, *derived])):
            if k not in stated or k not in derived:
                return (f"{path}.{k}", stated.get(k, "<absent>"), derived.get(k, "<absent>"))
            d = first_difference(stated[k], derived[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(stated, list) and isinstance(derived, list):
        if len(stated) != len(derived):
            return (f"{path}", f"{len(stated)} items", f"{len(derived)} items")
        for i, (a, b) in enumerate(zip(stated, derived)):
            d = first_difference(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if stated == derived else (path, stated, derived)


def differs(path: str, stated: Any, derived: Any, what: str) -> list[Problem]:
    d = first_difference(stated, derived)
    if d is None:
        return []
    where, a, b = d
    shown = lambda v: (repr(v)[:160] + "…") if len(repr(v)) > 160 else repr(v)  # noqa: E731
    return [(f"{path}{where}", f"is {shown(a)} but {what} gives {shown(b)}")]


def derived_differences(r: BaseModel, doc: dict[str, Any], derived: dict[str, Any], fields: tuple[str, ...],
                         what: str, shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> list[Problem]:
    """Each of ``fields`` as the receipt states it against as ``derived`` gives it, both read through the receipt's
    own types (so that absent and default read alike); ``shape`` adapts the derived document first."""
    try:
        again = type(r).model_validate({**doc, **derived}).model_dump(mode="json")
    except ValidationError as e:
        return [(f"<derived>{p}", m) for p, m in pydantic_problems(e)]
    if shape is not None:
        again = shape(again)
    return [p for field in fields for p in differs(field, doc[field], again[field], what)]


def dump(value: Any) -> Any:
    if isinstance(value, list):
        return [dump(v) for v in value]
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


RULES: dict[type[BaseModel], Callable[[Any], list[Problem]]] = {
    v1.CudaKernelScreeningReceiptV1: _rules_screening_v1,
    v1.OptimizationPocReceiptV1: _rules_poc_v1,
    v2.CudaKernelScreeningReceiptV2: _rules_screening_v2,
    v2.OptimizationPocReceiptV2: _rules_poc_v2,
    v3.CudaKernelScreeningReceiptV3: lambda r: lab_rules("kernel")(r),  # found when a v3 receipt is read
}


def policy_state(doc: dict[str, Any]) -> tuple[str | None, list[Problem]]:
    """Whether a receipt's embedded policy is InferCrane's packaged one ("packaged", or "custom (sha256 …)"; None for a
    receipt without a policy hash), and a problem when the policy does not match the hash the receipt states."""
    from ..decide.policy import KernelPolicy, ServingPolicy, load_policy, policy_sha256

    stated = doc.get("policy_sha256")
    if stated is None or not isinstance(doc.get("policy"), dict):
        return None, []
    kernel = "screening" in str(doc.get("schema_version"))
    raw = {k: v for k, v in doc["policy"].items() if k != "workload_notes"}
    try:
        policy = (KernelPolicy if kernel else ServingPolicy).model_validate(raw)
    except ValidationError as e:
        return None, [(f"policy{p if p.startswith('.') else '.' + p}", m) for p, m in pydantic_problems(e)]
    actual = policy_sha256(policy)
    if actual != stated:
        return None, [("policy_sha256", f"is {stated} but the embedded policy hashes to {actual}: the policy was "
                                        "changed after the receipt was decided")]
    packaged = policy_sha256(load_policy("kernel" if kernel else "serving"))
    return ("packaged policy" if actual == packaged else f"custom policy (sha256 {actual[:12]}…)"), []


def pydantic_problems(err: ValidationError) -> list[Problem]:
    out = []
    for e in err.errors():
        loc = ""
        for part in e["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field (not in this schema version)"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif "input" in e and e["type"] not in ("missing",):
            shown = repr(e["input"])
            msg = f"{msg} (got {shown[:80]})"
        out.append((loc or "<root>", msg))
    return out


def check_document(doc: dict[str, Any]) -> tuple[BaseModel | None, list[Problem]]:
    """Type-check and rule-check a parsed receipt. Returns the model (None if types failed) and the problems."""
    bad = non_finite_paths(doc)
    if bad:
        return None, [(p, "NaN or infinite number (not allowed in a receipt)") for p in bad]
    version = doc.get("schema_version")
    if version is None:
        return None, [("schema_version", "required field is missing")]
    if not isinstance(version, str):
        return None, [("schema_version", f"must be a string, got {version!r}")]
    try:
        model_cls = model_for(version)
    except InputError as e:
        return None, [("schema_version", e.message)]
    problems: list[Problem] = []
    if version in HASHED:
        stated = doc.get(HASH_FIELD)
        actual = content_hash(doc)
        if stated is not None and stated != actual:
            problems.append((HASH_FIELD, f"is {stated} but the content hashes to {actual}: the receipt was changed "
                                         "after it was written"))
    try:
        model = model_cls.model_validate(doc)
    except ValidationError as e:
        return None, problems + pydantic_problems(e)
    if version in HASHED:  # InferCrane's own formats; the seed's (v1) were written before it and by another tool
        problems += crosscheck(doc)
    return model, problems + policy_state(doc)[1] + RULES[model_cls](model)


def load_receipt(path: Path | str) -> Receipt:
    """Read and fully validate one receipt file; raise ReceiptInvalid/InputError naming file, field and reason."""
    path = Path(path)
    doc = read_json(path)
    model, problems = check_document(doc)
    if problems or model is None:
        raise ReceiptInvalid([(str(path), p, m) for p, m in problems])
    return Receipt(path=path, document=doc, model=model)


def write_receipt(document: dict[str, Any], path: Path | str) -> Receipt:
    """Hash (where the version is hashed), validate and atomically write a receipt InferCrane made.

    InferCrane never writes an invalid receipt under the name asked for: if its own checks fail, the document is kept
    beside it as ``<name>.invalid.json`` (nothing measured is lost) and ReceiptInvalid names the problems.
    """
    from .io import write_atomic

    path = Path(path)
    doc = {k: v for k, v in document.items() if k != HASH_FIELD}
    if doc.get("schema_version") in HASHED:
        doc[HASH_FIELD] = content_hash(doc)
    model, problems = check_document(doc)
    if problems or model is None:
        kept = write_atomic(path.with_name(path.stem + ".invalid.json"), doc)
        raise ReceiptInvalid([(str(kept), p, m) for p, m in problems])
    write_atomic(path, doc)
    return Receipt(path=path, document=doc, model=model)

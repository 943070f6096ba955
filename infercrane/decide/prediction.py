"""Prediction against measurement: what the kernel lab expected a kernel to do to serving, beside what the serving
A/B measured with the kernel inside the engine.

Inputs: a kernel receipt (v3; its screen holds trial-level comparisons of the candidate against the incumbent per
row count and timing mode) and a ``serve ab`` receipt whose arm A is the incumbent engine and arm B the same engine
with the candidate inside (``serving/kernels.py``).

At each concurrency ``c`` of the A/B:

* **decode**: a decode step runs the op on ``c`` rows, ``calls_per_step`` times (the op's spec). The step is arm A's
  TPOT p50 (median over its runs). Amdahl (``decide/amdahl.py``) with the candidate's and the incumbent's per-call
  times at ``c`` rows in the kernel lab's timing mode that runs the op as the engine does (``graph`` for compiled
  vLLM, whose decode steps replay CUDA graphs; ``launch`` for eager vLLM, where every call is launched from the host
  and its host cost counts; ``commands/apply.py`` ``MODES``) gives the expected step speedup; a decode-bound
  workload's output throughput scales with it, so the **predicted B/A output-throughput ratio** is that speedup.
* **prefill**: a request's prefill runs the op on its prompt's tokens (``input_tokens`` rows when alone, up to
  ``c x input_tokens`` when the whole batch prefills together); the time it saves per call at those row counts
  (where the screen has them) is reported in microseconds per prefill step, beside the measured p95 TTFT ratio. It
  is not folded into the throughput prediction (a 128 -> 64 workload spends most of its time decoding).
* **only comparisons with a verdict**: a kernel comparison that carries no verdict (FLAGGED: a flag of its timing
  cells voids it under the screen's flag rule, ``kernels/harness/compare.py``; INSUFFICIENT: too few paired trials)
  predicts nothing: its concurrency reads ``NO PREDICTION`` and says why, and a prefill row without a verdict is
  left out. ``used_comparisons`` embeds every comparison of the pair with its verdict; a block records
  ``verdicts_only: true`` (a block written before this rule has none, and is derived again as it was written: from
  every comparison it embeds).
* **verdict**: ``CONSISTENT`` when the predicted ratio lies inside the measured ratio's interval, ``BELOW`` /
  ``ABOVE`` when the whole interval is below / above it (the engine lost / gained more than the op alone explains:
  e.g. the opaque custom op stopped Inductor fusing its neighbours), ``NO PREDICTION`` without a kernel timing at
  ``c`` rows. ``informative`` says whether the interval is narrower than the predicted effect: a CONSISTENT reading
  whose interval is wider than the effect confirms nothing.

The kernel lab's per-call times are of the op alone on fresh inputs; inside the engine the op's inputs come from the
previous layer (warm in L2) and Inductor fuses the native op with its neighbours. The prediction says so.
"""
from __future__ import annotations

import statistics
from typing import Any

from infercrane.decide.amdahl import amdahl_ceiling

PREDICTION_NOTE = ("predicted from the kernel lab's per-call times of the op alone ({mode} mode, fresh inputs, no "
                   "fusion with neighbouring ops), Amdahl on arm A's decode step; measured with the kernel inside "
                   "the engine")


# what a concurrency's reading can say beyond its verdict: (short, for a figure's label; long, for a sentence)
_OUTSIDE = ("prediction outside the interval", "the prediction lies outside the measured interval")
_TOO_WIDE = ("not informative", "the interval is wider than the predicted effect")


def qualifier(row: dict[str, Any], *, long: bool = False) -> str:
    """What one concurrency's reading can say beyond its verdict, no stronger and no weaker: BELOW / ABOVE refute the
    prediction whatever the interval's width; a CONSISTENT reading whose interval is wider than the predicted effect
    (``informative`` false) confirms nothing. Empty where there is nothing to add."""
    if row.get("verdict") in ("BELOW", "ABOVE"):
        return _OUTSIDE[long]
    if row.get("verdict") == "CONSISTENT" and row.get("informative") is False:
        return _TOO_WIDE[long]
    return ""


NO_VERDICT = ("FLAGGED", "INSUFFICIENT")


def has_verdict(comp: dict[str, Any]) -> bool:
    """Whether a kernel comparison carries a verdict a prediction can read (not FLAGGED, not INSUFFICIENT)."""
    return comp.get("verdict") not in NO_VERDICT


def _comparison(kernel_doc: dict[str, Any], candidate: str, incumbent: str, rows: int, mode: str) -> dict | None:
    for c in kernel_doc["result"]["comparisons"]:
        if c["candidate"] == candidate and c["reference"] == incumbent and c["rows"] == rows and c["mode"] == mode:
            return c
    return None


def _times(comp: dict[str, Any]) -> tuple[float, float] | None:
    sp = comp["speedup"]
    cand, ref = sp.get("candidate_t_us"), sp.get("baseline_t_us")
    return None if cand is None or ref is None else (float(cand), float(ref))


def _stat(serving_doc: dict[str, Any], concurrency: int, metric: str) -> dict | None:
    for s in serving_doc["paired_aiperf"]["statistics"]:
        if s["concurrency"] == concurrency and s["metric"] == metric:
            return s
    return None


def predict_against_measurement(kernel_doc: dict[str, Any], serving_doc: dict[str, Any], *, candidate: str,
                                incumbent: str, calls_per_step: int, input_tokens: int, mode: str = "graph",
                                kernel_source: str = "kernel receipt",
                                serving_source: str = "serving receipt", verdicts_only: bool = True
                                ) -> dict[str, Any]:
    """The prediction-against-measurement section (module docstring) for every concurrency of the A/B; only kernel
    comparisons with a verdict are read (``verdicts_only``; False only to derive again a block written before)."""
    runs = serving_doc["runs"]
    comps = serving_doc["paired_aiperf"].get("comparisons") or []
    arm_a = comps[0]["recipe_a"] if comps else runs[0]["recipe"]
    rows_out = []
    for conc in sorted({r["concurrency"] for r in runs}):
        tpots = [r["tpot_p50_ms"] for r in runs if r["recipe"] == arm_a and r["concurrency"] == conc
                 and r["status"] == "ok" and r.get("tpot_p50_ms")]
        row: dict[str, Any] = {"concurrency": conc, "decode_rows": conc}
        comp = _comparison(kernel_doc, candidate, incumbent, conc, mode)
        unread = comp is not None and verdicts_only and not has_verdict(comp)
        measured = _stat(serving_doc, conc, "output_tok_s")
        row["measured"] = None if measured is None else {
            k: measured[k] for k in ("ratio_b_over_a", "ci_low", "ci_high", "confidence", "verdict", "interval_method")}
        times = _times(comp) if comp and not unread else None
        if not tpots or times is None:
            if unread:
                why = (f"the kernel comparison of {candidate} against {incumbent} at {conc} rows ({mode} mode) carries "
                       f"no verdict ({comp['verdict']}), so it predicts nothing")
            elif times is None:
                why = f"no kernel timing of {candidate} against {incumbent} at {conc} rows ({mode} mode)"
            else:
                why = f"arm {arm_a} has no TPOT p50 at c = {conc}"
            row.update(predicted_ratio=None, verdict="NO PREDICTION", informative=False, why=why)
            rows_out.append(row)
            continue
        step_ms = statistics.median(tpots)
        ceiling = amdahl_ceiling(calls_per_step=calls_per_step, candidate_t_us=times[0], baseline_t_us=times[1],
                                 baseline=incumbent, decode_step_ms=step_ms,
                                 decode_step_source=f"{serving_source}: median TPOT p50 of arm {arm_a} at c = {conc}",
                                 rows=conc, timing_mode=mode)
        predicted = 1.0 + ceiling.expected_gain_percent / 100.0
        row.update(amdahl=ceiling.model_dump(mode="json"), predicted_ratio=predicted,
                   kernel_verdict=comp["verdict"])
        if measured is None:
            row.update(verdict="NO MEASUREMENT", informative=False, why=f"no output-throughput comparison at c = {conc}")
        else:
            lo, hi = measured["ci_low"], measured["ci_high"]
            row["verdict"] = "CONSISTENT" if lo <= predicted <= hi else ("BELOW" if hi < predicted else "ABOVE")
            row["informative"] = (hi - lo) / 2.0 < abs(predicted - 1.0)
        prefill = []
        for prows in sorted({input_tokens, conc * input_tokens}):
            pc = _comparison(kernel_doc, candidate, incumbent, prows, mode)
            pt = _times(pc) if pc and (has_verdict(pc) or not verdicts_only) else None
            if pt is not None:
                prefill.append({"rows": prows, "saved_us_per_step": calls_per_step * (pt[1] - pt[0]),
                                "kernel_verdict": pc["verdict"]})
        ttft = _stat(serving_doc, conc, "ttft_p95_ms")
        row["prefill"] = {"steps": prefill, "measured_ttft_p95_ratio": None if ttft is None else ttft["ratio_b_over_a"],
                          "note": "time the op would save per prefill step at these row counts; not in the ratio"}
        rows_out.append(row)
    return {"candidate": candidate, "incumbent": incumbent, "mode": mode, "calls_per_step": calls_per_step,
            "arm_a": arm_a, "kernel_source": kernel_source, "serving_source": serving_source,
            "note": PREDICTION_NOTE.format(mode=mode), "verdict_rule": (
                "CONSISTENT: the predicted B/A output-throughput ratio inside the measured 95 % interval; BELOW / "
                "ABOVE: the whole interval below / above it; informative: the interval's half-width is smaller than "
                "the predicted effect"), "concurrencies": rows_out}


def used_comparisons(kernel_doc: dict[str, Any], candidate: str, incumbent: str, mode: str) -> list[dict[str, Any]]:
    """The kernel receipt's comparisons of the pair in ``mode``, reduced to what a prediction reads, each with its
    verdict (embedded in the receipt, so that validation derives the prediction again without the kernel receipt);
    the prediction reads only those with a verdict (``has_verdict``)."""
    keep = []
    for c in kernel_doc["result"].get("comparisons") or []:  # a screen that compared nothing offers nothing
        if c["candidate"] == candidate and c["reference"] == incumbent and c["mode"] == mode:
            sp = c["speedup"]
            keep.append({"candidate": candidate, "reference": incumbent, "rows": c["rows"], "mode": mode,
                         "verdict": c["verdict"], "speedup": {"candidate_t_us": sp.get("candidate_t_us"),
                                                              "baseline_t_us": sp.get("baseline_t_us")}})
    return keep


def kernel_in_serving(kernel_doc: dict[str, Any], serving_doc: dict[str, Any], *, candidate: str, incumbent: str,
                      calls_per_step: int, input_tokens: int, kernel_source: str, mode: str = "graph"
                      ) -> dict[str, Any]:
    """A serving receipt's ``kernel_in_serving`` block: the inputs (the kernel receipt's used comparisons, its hash)
    and the prediction against this receipt's measurement."""
    inputs = {"candidate": candidate, "incumbent": incumbent, "mode": mode, "calls_per_step": calls_per_step,
              "input_tokens": input_tokens, "kernel_receipt": kernel_source,
              "kernel_receipt_sha256": kernel_doc.get("content_sha256"),
              "kernel_comparisons": used_comparisons(kernel_doc, candidate, incumbent, mode), "verdicts_only": True}
    return {"inputs": inputs, "prediction": derive_prediction(inputs, serving_doc)}


def derive_prediction(inputs: dict[str, Any], serving_doc: dict[str, Any]) -> dict[str, Any]:
    """The prediction from a block's recorded inputs and the serving receipt's own runs and statistics."""
    return predict_against_measurement({"result": {"comparisons": inputs["kernel_comparisons"]}}, serving_doc,
                                       candidate=inputs["candidate"], incumbent=inputs["incumbent"],
                                       calls_per_step=inputs["calls_per_step"], input_tokens=inputs["input_tokens"],
                                       mode=inputs["mode"], kernel_source=inputs["kernel_receipt"],
                                       serving_source="this receipt",
                                       verdicts_only=bool(inputs.get("verdicts_only", False)))

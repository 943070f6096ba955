"""The semantic-quality gate: does the candidate arm answer as well as the incumbent, on the same items?

Both arms' engines answer the same generated items (``serving/quality.py``: arithmetic, copying, counting, simple
facts), greedily, one at a time; each answer is scored against the item's expected answer and carries the
log-probability of every token chosen. The gate reads three criteria, each against a bound of the policy
(``decide/policy.py`` ``QualityPolicy``):

* **task accuracy, non-inferiority**: the candidate's accuracy minus the incumbent's, on the paired items, with
  Newcombe's hybrid score interval (``stats/proportions.py``). NON-INFERIOR when the interval's lower end (of the
  two-sided ``2*confidence - 1`` interval: a one-sided test at ``1 - confidence``) is at or above ``-accuracy_margin``;
  INFERIOR when its upper end is below it; UNDECIDED otherwise.
* **divergences are near ties**: where an item's greedy outputs part (its first differing token), each arm's
  token must be one the other arm nearly chose: among the other's ``top_logprobs`` best, with a log-probability
  within ``max_divergence_gap`` nats of the token the other chose (``gap_reference``: in the incumbent's
  distribution, its token's log-probability minus the candidate's token's; ``gap_candidate`` the other way round).
  PASS when every divergence is a near tie. A correct kernel rounds differently from the incumbent's and flips
  near ties (on SmolLM2-135M at hidden 576, InferCrane's Triton norm in eager vLLM parted from vLLM's own on 23 of
  200 items with every accuracy and log-probability bound kept), so the share of identical outputs is reported, not
  bounded; a token the other arm ranked far below its choice is not a rounding flip. This is the check vLLM's own
  model tests make (``check_logprobs_close``: at the first divergence each token must be in the other's top
  log-probabilities), with the gap bounded too.
* **log-probability difference**: over every token both arms chose at the same place of the same output (up to where
  the outputs first part), the largest ``|log p(candidate) - log p(incumbent)|``; PASS at or below
  ``max_logprob_difference``.

The gate **PASS**es when all three pass, **FAIL**s when any is broken (INFERIOR, or below/above its bound), and is
**UNDECIDED** otherwise (the accuracy interval straddles the margin). The gate's pass is an intersection-union test:
each criterion must pass on its own, so no multiplicity adjustment is needed for the conclusion "pass" (its level is
that of the accuracy test). When even identical answers on every item could not show non-inferiority at the policy's
margin (too few items), the gate says so and the number of items that could.

A failed gate makes a serving decision ``reject`` whatever the speed; an undecided one keeps it from ``accept``
(``apply_to_decision``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from infercrane.errors import InputError
from infercrane.stats.proportions import (NEWCOMBE_METHOD, PairedCounts, items_to_show_margin,
                                          paired_difference_interval)

PASS, FAIL, UNDECIDED = "PASS", "FAIL", "UNDECIDED"
# How many first divergences the section lists (the count covers every one).
SHOWN_DIVERGENCES = 5


@dataclass(frozen=True)
class Answer:
    """One arm's answer to one item: whether it was right, the tokens it chose (ids where given, else text pieces)
    and their log-probabilities; ``texts`` (each chosen token's text) and ``top`` (per place, the engine's best
    tokens' texts -> log-probabilities, the chosen one included) where the engine gave them: a divergence is judged
    from them."""

    item_id: str
    correct: bool
    tokens: tuple[Any, ...]
    logprobs: tuple[float, ...]
    texts: tuple[str, ...] | None = None
    top: tuple[Mapping[str, float], ...] | None = None

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.logprobs):
            raise InputError(f"item {self.item_id}: {len(self.tokens)} tokens but {len(self.logprobs)} log-probabilities")
        for name, seq in (("token texts", self.texts), ("top log-probability maps", self.top)):
            if seq is not None and len(seq) != len(self.tokens):
                raise InputError(f"item {self.item_id}: {len(self.tokens)} tokens but {len(seq)} {name}")
        bad = [x for x in self.logprobs if not (math.isfinite(x) and x <= 1e-6)]
        if bad:
            raise InputError(f"item {self.item_id}: log-probabilities must be finite and <= 0, got {bad[:3]}")


def gate_rule(policy: Any) -> str:
    """The gate's rule in words, with the policy's numbers."""
    return (f"pass: accuracy NON-INFERIOR (lower end of the {2 * policy.confidence - 1:.0%} Newcombe interval of "
            f"candidate - incumbent >= -{policy.accuracy_margin:g}), every divergence a near tie (at an output's "
            f"first differing token, each arm's token among the other's top {policy.top_logprobs} within "
            f"{policy.max_divergence_gap:g} nats of the other's choice), and |log-probability difference| <= "
            f"{policy.max_logprob_difference:g} nats on every token both chose at the same place; fail: any one "
            "broken (INFERIOR: the whole interval below -margin); undecided otherwise; intersection-union, no "
            "adjustment")


def _first_divergence(a: Answer, b: Answer) -> int | None:
    for j in range(max(len(a.tokens), len(b.tokens))):
        x = a.tokens[j] if j < len(a.tokens) else None
        y = b.tokens[j] if j < len(b.tokens) else None
        if x != y:
            return j
    return None


def _gap(chooser: Answer, other: Answer, j: int) -> float | None:
    """In ``chooser``'s distribution at place ``j``: its chosen token's log-probability minus that of the token
    ``other`` chose there; None when ``other``'s token is not among ``chooser``'s top log-probabilities."""
    if chooser.top is None or other.texts is None:
        raise InputError(f"item {chooser.item_id}: the outputs part at token {j} but the answers carry no top "
                         "log-probabilities to judge it (an engine asked with 'logprobs': N gives them)")
    alt = chooser.top[j].get(other.texts[j])
    return None if alt is None else max(0.0, chooser.logprobs[j] - alt)


def _divergence(r: Answer, c: Answer, j: int, bound: float) -> dict[str, Any]:
    """One item's first divergence: the tokens, both gaps, and whether it is a near tie."""
    row: dict[str, Any] = {"item": r.item_id, "token": j,
                           "reference": r.tokens[j] if j < len(r.tokens) else "(end)",
                           "candidate": c.tokens[j] if j < len(c.tokens) else "(end)"}
    if j >= len(r.tokens) or j >= len(c.tokens):  # one output ended where the other went on: no tie to judge
        return row | {"gap_reference": None, "gap_candidate": None, "near_tie": False}
    g_ref, g_cand = _gap(r, c, j), _gap(c, r, j)
    near = g_ref is not None and g_cand is not None and g_ref <= bound and g_cand <= bound
    return row | {"gap_reference": g_ref, "gap_candidate": g_cand, "near_tie": near}


def quality_gate(tasks: dict[str, str], reference: Sequence[Answer], candidate: Sequence[Answer],
                 policy: Any) -> dict[str, Any]:
    """The gate's section: ``tasks`` maps item id -> task, in item order; ``reference`` and ``candidate`` hold one
    answer per item, in that order. Raises InputError when the answers do not cover the same items."""
    ids = list(tasks)
    for arm, answers in (("reference", reference), ("candidate", candidate)):
        got = [a.item_id for a in answers]
        if got != ids:
            raise InputError(f"the {arm} arm's answers are not the items' ({len(got)} answers for {len(ids)} items"
                             + (f"; first mismatch at {next(i for i, (x, y) in enumerate(zip(got, ids)) if x != y)}"
                                if len(got) == len(ids) else "") + ")")
    if not ids:
        raise InputError("the quality gate needs at least one item")
    counts = PairedCounts(
        both=sum(r.correct and c.correct for r, c in zip(reference, candidate)),
        reference_only=sum(r.correct and not c.correct for r, c in zip(reference, candidate)),
        candidate_only=sum(c.correct and not r.correct for r, c in zip(reference, candidate)),
        neither=sum(not r.correct and not c.correct for r, c in zip(reference, candidate)))
    level = 2 * policy.confidence - 1
    lo, hi = paired_difference_interval(counts, level)
    margin = policy.accuracy_margin
    acc_verdict = "NON-INFERIOR" if lo >= -margin else "INFERIOR" if hi < -margin else "UNDECIDED"
    needed = items_to_show_margin(counts.reference_rate, margin, level)
    by_task: dict[str, dict[str, Any]] = {}
    for (item, task), r, c in zip(tasks.items(), reference, candidate):
        row = by_task.setdefault(task, {"items": 0, "reference_correct": 0, "candidate_correct": 0})
        row["items"] += 1
        row["reference_correct"] += int(r.correct)
        row["candidate_correct"] += int(c.correct)

    divergences, identical, worst, worst_at, compared = [], 0, 0.0, None, 0
    bound = policy.max_divergence_gap
    for r, c in zip(reference, candidate):
        j = _first_divergence(r, c)
        upto = min(len(r.tokens), len(c.tokens)) if j is None else j
        if j is None:
            identical += 1
        else:
            divergences.append(_divergence(r, c, j, bound))
        for k in range(upto):
            compared += 1
            d = abs(c.logprobs[k] - r.logprobs[k])
            if d > worst:
                worst, worst_at = d, {"item": r.item_id, "token": k}
    n = counts.n
    share = identical / n
    far = [d for d in divergences if not d["near_tie"]]
    gaps = [g for d in divergences for g in (d["gap_reference"], d["gap_candidate"]) if g is not None]
    agreement_verdict = FAIL if far else PASS
    logprob_verdict = PASS if worst <= policy.max_logprob_difference else FAIL
    broken = []
    if acc_verdict == "INFERIOR":
        broken.append(f"accuracy {counts.candidate_rate:.3f} against {counts.reference_rate:.3f}: the difference's "
                      f"interval [{lo:+.3f}, {hi:+.3f}] lies below -{margin:g}")
    if agreement_verdict == FAIL:
        first = far[0]
        broken.append(f"{len(far)} of {len(divergences)} divergent outputs part at no near tie (first: item "
                      f"{first['item']} token {first['token']}, gaps {_gap_text(first['gap_reference'])} / "
                      f"{_gap_text(first['gap_candidate'])} nats; bound {bound:g} within the top "
                      f"{policy.top_logprobs})")
    if logprob_verdict == FAIL:
        broken.append(f"a log-probability moved by {worst:.3f} nats (> {policy.max_logprob_difference:g}) at item "
                      f"{worst_at['item']} token {worst_at['token']}")
    if broken:
        verdict, reason = FAIL, "; ".join(broken)
    elif acc_verdict == "UNDECIDED":
        verdict = UNDECIDED
        reason = (f"accuracy {counts.candidate_rate:.3f} against {counts.reference_rate:.3f}: the difference's interval "
                  f"[{lo:+.3f}, {hi:+.3f}] reaches past -{margin:g}")
        if needed is None or needed > n:
            reason += (f"; {n} items cannot show non-inferiority at this margin even with every answer unchanged ("
                       + (f"{needed} could)" if needed is not None else "no number of items up to 100000 could)"))
    else:
        verdict = PASS
        reason = (f"accuracy {counts.candidate_rate:.3f} against {counts.reference_rate:.3f} (difference "
                  f"[{lo:+.3f}, {hi:+.3f}], non-inferior at -{margin:g}); {identical} of {n} outputs identical, "
                  f"every divergence a near tie (largest gap {max(gaps, default=0.0):.3g} nats); largest "
                  f"log-probability difference {worst:.3g} nats")
    return {
        "accuracy": {
            "reference": counts.reference_rate, "candidate": counts.candidate_rate,
            "table": {"both": counts.both, "reference_only": counts.reference_only,
                      "candidate_only": counts.candidate_only, "neither": counts.neither},
            "difference": counts.difference, "ci_low": lo, "ci_high": hi, "confidence": level,
            "interval_method": NEWCOMBE_METHOD, "margin": margin, "verdict": acc_verdict,
            "items_to_show_margin": needed, "by_task": by_task,
        },
        "token_agreement": {"identical_items": identical, "share": share, "divergences": len(divergences),
                            "near_ties": len(divergences) - len(far), "largest_gap": max(gaps, default=None),
                            "top_logprobs": policy.top_logprobs, "bound": bound, "verdict": agreement_verdict,
                            "first_divergences": (far + [d for d in divergences if d["near_tie"]])[:SHOWN_DIVERGENCES]},
        "logprob": {"compared_tokens": compared, "max_abs_difference": worst, "at": worst_at,
                    "bound": policy.max_logprob_difference, "verdict": logprob_verdict},
        "verdict": verdict, "reason": reason, "rule": gate_rule(policy),
    }


def _gap_text(gap: float | None) -> str:
    return "outside the top" if gap is None else f"{gap:.3g}"


def apply_to_decision(code: str, text: str, reason: str, gate: dict[str, Any] | None) -> tuple[str, str, str]:
    """A serving decision ``(code, text, reason)`` after the quality gate: a failed gate makes it ``reject``, an
    undecided one turns ``accept`` into ``inconclusive``; a passed gate (or none) leaves it as it is."""
    if gate is None or gate["verdict"] == PASS:
        return code, text, reason
    if gate["verdict"] == FAIL:
        return ("reject", f"reject the candidate: it fails the semantic-quality gate (speed alone: {text})",
                f"quality gate failed: {gate['reason']}; speed: {reason}")
    if code == "accept":
        return ("inconclusive", f"no decision: the semantic-quality gate is undecided (speed alone: {text})",
                f"quality gate undecided: {gate['reason']}; speed: {reason}")
    return code, text, f"{reason}; quality gate undecided: {gate['reason']}"

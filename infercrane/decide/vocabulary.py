"""One vocabulary of verdicts across the labs: each lab's own word for a comparison's outcome, and the one normalized
word it reads as (``docs/exports.md``, "Verdicts"). Exports (``infercrane export``) write both, side by side.

The labs keep their own words, each made by its own rule: the kernel lab's speedup against the SAME band
(FASTER / SLOWER / SAME / AMBIGUOUS, no verdict: INSUFFICIENT / FLAGGED; ``stats.compare.Verdict``), the serving lab's
B/A against the equivalence band (BETTER / WORSE / EQUIVALENT / INCONCLUSIVE; ``stats.compare.EquivalenceVerdict``),
two drivers' agreement (AGREE / DISAGREE / UNDECIDED / INSUFFICIENT; ``serving.receipt.driver_agreement``) and a
kernel's predicted effect on serving against the measured one (CONSISTENT / BELOW / ABOVE / NO PREDICTION /
NO MEASUREMENT; ``decide.prediction``). Normalized, they read:

* ``improved``: the candidate (kernel candidate, recipe B) is better than its reference beyond the margin;
* ``worse``: it is worse beyond the margin;
* ``equivalent``: the interval lies inside the margin (the same; two drivers agree; a prediction the interval holds);
* ``different``: a difference with no better or worse side (two drivers disagree; the measurement lies beside the
  prediction);
* ``inconclusive``: the interval overlaps an edge of the margin (or a rank test does not confirm it);
* ``not-decided``: no verdict was made (too few trials or runs, a flagged timing cell, no prediction or measurement, a
  statistic described but not tested).

Decision codes (``accept`` / ``retain`` / ``reject`` / ``inconclusive``) are one vocabulary already: both labs use
the same ``DecisionCode`` words (the serving lab never retains); ``DECISIONS`` says what each means.

``tests/decide/test_vocabulary.py`` reads every verdict and decision word the labs can emit from the code (the
``Literal`` and ``Enum`` types of the receipt models, the decision models and the prediction) and fails when one is
not mapped here, or when a word here is emitted nowhere.
"""
from __future__ import annotations

from typing import Literal, get_args

Normalized = Literal["improved", "worse", "equivalent", "different", "inconclusive", "not-decided"]
NORMALIZED: tuple[str, ...] = get_args(Normalized)
NO_VERDICT: Normalized = "not-decided"  # what a comparison without a verdict (None) reads as
# The evidence classes of a receipt (a PoC's, a kernel screen's, one GPU's section) that support no speed claim: a
# CPU or test-server run that checks the machinery, not a measurement.
FUNCTIONAL_CLASSES: tuple[str, ...] = ("functional-check", "cpu-functional-check")

# (lab, where the word comes from, the word, its normalized reading, what it means there)
WORDS: tuple[tuple[str, str, str, Normalized, str], ...] = (
    ("kernel", "comparison (stats.compare.Verdict)", "FASTER", "improved",
     "the speedup's interval lies above 1 + same_margin"),
    ("kernel", "comparison (stats.compare.Verdict)", "SLOWER", "worse",
     "the speedup's interval lies below 1 - same_margin"),
    ("kernel", "comparison (stats.compare.Verdict)", "SAME", "equivalent",
     "the speedup's interval lies inside [1 - same_margin, 1 + same_margin]"),
    ("kernel", "comparison (stats.compare.Verdict)", "AMBIGUOUS", "inconclusive",
     "the speedup's interval overlaps an edge of the SAME band"),
    ("kernel", "comparison (stats.compare.Verdict)", "INSUFFICIENT", "not-decided",
     "fewer than 3 paired trials: no interval, no claim"),
    ("kernel", "comparison (stats.compare.Verdict)", "FLAGGED", "not-decided",
     "a flag of either timing cell (timer disagreement, time below the floor, …) voids the verdict"),
    ("serving", "statistic (stats.compare.EquivalenceVerdict)", "BETTER", "improved",
     "B/A's interval lies beyond the equivalence band on the metric's good side (and the test confirms it)"),
    ("serving", "statistic (stats.compare.EquivalenceVerdict)", "WORSE", "worse",
     "B/A's interval lies beyond the band on the metric's bad side (and the test confirms it)"),
    ("serving", "statistic (stats.compare.EquivalenceVerdict)", "EQUIVALENT", "equivalent",
     "B/A's interval lies inside the equivalence band"),
    ("serving", "statistic (stats.compare.EquivalenceVerdict)", "INCONCLUSIVE", "inconclusive",
     "the interval overlaps a band edge, or the test does not confirm BETTER/WORSE"),
    ("serving", "driver agreement (serve bench)", "AGREE", "equivalent",
     "the two drivers' ratio lies inside 1 ± driver_agreement_percent"),
    ("serving", "driver agreement (serve bench)", "DISAGREE", "different",
     "the ratio's interval lies wholly outside that band"),
    ("serving", "driver agreement (serve bench)", "UNDECIDED", "inconclusive",
     "the ratio's interval overlaps an edge of the band"),
    ("serving", "driver agreement (serve bench)", "INSUFFICIENT", "not-decided",
     "fewer runs of a driver than the policy's minimum"),
    ("serving", "semantic-quality gate (decide.quality)", "PASS", "equivalent",
     "the candidate's answers keep every bound against the incumbent's (accuracy, agreement, log-probabilities)"),
    ("serving", "semantic-quality gate (decide.quality)", "FAIL", "worse",
     "a bound is broken: accuracy INFERIOR, too few identical outputs, or a log-probability moved too far"),
    ("serving", "semantic-quality gate (decide.quality)", "UNDECIDED", "inconclusive",
     "the accuracy difference's interval reaches past the non-inferiority margin"),
    ("serving", "quality accuracy (decide.quality)", "NON-INFERIOR", "equivalent",
     "the accuracy difference's interval lies at or above -accuracy_margin"),
    ("serving", "quality accuracy (decide.quality)", "INFERIOR", "worse",
     "the whole accuracy difference's interval lies below -accuracy_margin"),
    ("kernel in serving", "prediction (decide.prediction)", "CONSISTENT", "equivalent",
     "the predicted B/A lies inside the measured interval"),
    ("kernel in serving", "prediction (decide.prediction)", "BELOW", "different",
     "the whole measured interval lies below the prediction"),
    ("kernel in serving", "prediction (decide.prediction)", "ABOVE", "different",
     "the whole measured interval lies above the prediction"),
    ("kernel in serving", "prediction (decide.prediction)", "NO PREDICTION", "not-decided",
     "no kernel comparison with a verdict at these rows"),
    ("kernel in serving", "prediction (decide.prediction)", "NO MEASUREMENT", "not-decided",
     "no output-throughput comparison at this concurrency"),
)

# A word reads the same in every lab that uses it (INSUFFICIENT: kernel comparisons and driver agreement; the test
# checks it).
VERDICTS: dict[str, Normalized] = {word: norm for _lab, _where, word, norm, _meaning in WORDS}

DECISIONS: dict[str, str] = {
    "accept": "adopt the candidate (kernel: integrate into serving; serving: recipe B over A)",
    "retain": "kernel lab only: a correct kernel candidate, faster somewhere, not to integrate yet",
    "reject": "do not adopt: incorrect, slower, or (serving) worse on a metric or equivalent, so no gain",
    "inconclusive": "no decision: the evidence cannot support one (too few runs, flags, interrupted, functional only)",
}


# ``--fail-on`` (kernel screen, serve ab): the decisions that make the command exit 1, so that a CI step stops on
# InferCrane's word. reject: a reject; inconclusive: a reject or an inconclusive (whatever is not accept / retain).
FAIL_ON: dict[str, tuple[str, ...]] = {"reject": ("reject",), "inconclusive": ("reject", "inconclusive")}


def fails_on(decisions: list[str | None], fail_on: str | None) -> list[str]:
    """The decisions among ``decisions`` that ``--fail-on fail_on`` fails (a missing decision reads as
    inconclusive); none without ``fail_on``."""
    if fail_on is None:
        return []
    return [d or "inconclusive" for d in decisions if (d or "inconclusive") in FAIL_ON[fail_on]]


class UnknownVerdict(ValueError):
    """A verdict word this vocabulary does not map (a lab added a word without mapping it here)."""


def normalized(word: str | None) -> Normalized:
    """The normalized reading of a lab's verdict word; ``None`` (a statistic described, not tested) reads
    ``not-decided``. An unknown word raises ``UnknownVerdict`` naming the known ones: it is never guessed."""
    if word is None:
        return NO_VERDICT
    word = getattr(word, "value", word)  # an Enum member (stats.compare.Verdict) reads as its value
    try:
        return VERDICTS[word]
    except KeyError:
        raise UnknownVerdict(f"verdict {word!r} is not in InferCrane's vocabulary (infercrane/decide/vocabulary.py); "
                             f"known: {', '.join(VERDICTS)}") from None

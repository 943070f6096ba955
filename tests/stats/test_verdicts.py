import pytest

from infercrane.stats import Band, EquivalenceVerdict, Verdict, classify_band, equivalence_verdict, timing_verdict

M = 0.02
LOW, HIGH = 1.0 - M, 1.0 + M


@pytest.mark.parametrize(
    "lo, hi, expected",
    [
        (1.05, 1.10, Verdict.FASTER),
        (HIGH, 1.10, Verdict.AMBIGUOUS),  # touches the band edge: not wholly outside
        (1.01, 1.04, Verdict.AMBIGUOUS),  # faster than 1, not demonstrably by more than the margin
        (0.90, 0.95, Verdict.SLOWER),
        (0.90, LOW, Verdict.AMBIGUOUS),
        (LOW, HIGH, Verdict.SAME),  # edges inclusive for SAME
        (0.99, 1.01, Verdict.SAME),
        (0.95, 1.05, Verdict.AMBIGUOUS),  # too wide to say anything
    ],
)
def test_timing_verdict_edges(lo, hi, expected):
    assert timing_verdict(lo, hi, same_margin=M) is expected


def test_zero_margin_calls_any_interval_that_excludes_one():
    assert timing_verdict(1.001, 1.002, same_margin=0.0) is Verdict.FASTER
    assert timing_verdict(1.0, 1.0, same_margin=0.0) is Verdict.SAME


@pytest.mark.parametrize(
    "lo, hi, higher_is_better, expected",
    [
        (0.992, 0.998, True, EquivalenceVerdict.EQUIVALENT),  # -0.5 % within ±1 % reads equivalent, not worse
        (1.02, 1.05, True, EquivalenceVerdict.BETTER),
        (0.95, 0.98, True, EquivalenceVerdict.WORSE),
        (0.985, 1.0, True, EquivalenceVerdict.INCONCLUSIVE),
        (0.95, 0.98, False, EquivalenceVerdict.BETTER),  # latency went down
        (1.02, 1.05, False, EquivalenceVerdict.WORSE),  # latency went up
        (0.992, 0.998, False, EquivalenceVerdict.EQUIVALENT),
        (1.005, 1.02, False, EquivalenceVerdict.INCONCLUSIVE),
    ],
)
def test_equivalence_verdict_is_direction_aware(lo, hi, higher_is_better, expected):
    assert equivalence_verdict(lo, hi, margin=0.01, higher_is_better=higher_is_better) is expected


def test_band_classification_and_bad_input():
    assert classify_band(1.2, 1.3, margin=0.1) is Band.ABOVE
    with pytest.raises(ValueError, match="ci_lo <= ci_hi"):
        classify_band(1.1, 1.0, margin=0.01)
    with pytest.raises(ValueError, match="margin"):
        classify_band(1.0, 1.1, margin=1.5)
    with pytest.raises(ValueError, match="finite"):
        timing_verdict(float("nan"), 1.0, same_margin=0.02)

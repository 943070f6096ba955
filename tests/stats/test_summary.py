import math

import numpy as np
import pytest
from pydantic import ValidationError

from infercrane.stats import Summary, summarize


def test_summary_of_known_values():
    s = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.n, s.median, s.q1, s.q3, s.min, s.max, s.mean) == (5, 3.0, 2.0, 4.0, 1.0, 5.0, 3.0)
    assert s.stdev == pytest.approx(math.sqrt(2.5))  # ddof=1


def test_single_sample_has_no_stdev():
    s = summarize([7.5])
    assert s.n == 1 and s.median == s.min == s.max == 7.5 and s.stdev is None


def test_quartiles_interpolate_linearly():
    s = summarize(np.arange(1.0, 5.0))  # 1 2 3 4
    assert (s.q1, s.median, s.q3) == (1.75, 2.5, 3.25)


@pytest.mark.parametrize(
    "bad, words",
    [([], "empty"), ([1.0, float("nan")], "NaN"), ([float("inf"), 1.0], "index 0"), ([[1.0, 2.0]], "flat")],
)
def test_bad_samples_raise_value_error(bad, words):
    with pytest.raises(ValueError, match=words):
        summarize(bad)


def test_summary_forbids_unknown_fields():
    with pytest.raises(ValidationError):
        Summary(n=1, median=1, q1=1, q3=1, min=1, max=1, mean=1, stdev=None, unit="us")

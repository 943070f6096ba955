import pytest
from pydantic import ValidationError

from infercrane.decide import AmdahlCeiling, amdahl_ceiling
from infercrane.errors import InputError

SOURCE = "user: --decode-step-ms"


def test_share_ceiling_and_expected_gain():
    # Qwen3-0.6B: 28 layers x 2 calls; 1.0 us per call today, 0.8 us with the candidate; 2.8 ms decode step.
    c = amdahl_ceiling(
        calls_per_step=56, candidate_t_us=0.8, baseline_t_us=1.0, baseline="torch_compile",
        decode_step_ms=2.8, decode_step_source=SOURCE,
    )
    f = 56 * 1.0 / 2800.0
    assert c.op_share == pytest.approx(f)
    assert c.op_speedup == pytest.approx(1.25)
    assert c.best_possible_gain_percent == pytest.approx((1 / (1 - f) - 1) * 100)
    assert c.expected_gain_percent == pytest.approx((1 / ((1 - f) + f / 1.25) - 1) * 100)
    assert 0 < c.expected_gain_percent < c.best_possible_gain_percent
    assert c.win_ns_per_call == pytest.approx(200.0)


def test_slower_candidate_has_negative_expected_gain():
    c = amdahl_ceiling(
        calls_per_step=10, candidate_t_us=2.0, baseline_t_us=1.0, baseline="eager",
        decode_step_ms=1.0, decode_step_source=SOURCE,
    )
    assert c.expected_gain_percent < 0 < c.best_possible_gain_percent


def test_step_time_too_small_says_so():
    with pytest.raises(InputError, match="decode step time 0.05 ms .* is too small"):
        amdahl_ceiling(
            calls_per_step=56, candidate_t_us=0.8, baseline_t_us=1.0, baseline="eager",
            decode_step_ms=0.05, decode_step_source=SOURCE,
        )


@pytest.mark.parametrize("field, value", [("calls_per_step", 0), ("candidate_t_us", -1.0), ("decode_step_ms", float("nan"))])
def test_bad_inputs_name_the_field(field, value):
    kwargs = dict(
        calls_per_step=56, candidate_t_us=0.8, baseline_t_us=1.0, baseline="eager",
        decode_step_ms=2.0, decode_step_source=SOURCE,
    )
    kwargs[field] = value
    with pytest.raises(InputError, match=field):
        amdahl_ceiling(**kwargs)


def test_round_trip_and_tampered_result_rejected():
    c = amdahl_ceiling(
        calls_per_step=56, candidate_t_us=0.8, baseline_t_us=1.0, baseline="eager",
        decode_step_ms=2.0, decode_step_source=SOURCE,
    )
    assert AmdahlCeiling.model_validate_json(c.model_dump_json()) == c
    tampered = c.model_dump() | {"expected_gain_percent": 10.0}
    with pytest.raises(ValidationError, match="does not follow from the inputs"):
        AmdahlCeiling.model_validate(tampered)

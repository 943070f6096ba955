import pytest

from infercrane.stats import holm_adjust


def test_holm_adjusted_values_in_input_order():
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> running max 0.06
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_is_the_identity_for_one_test_and_capped_at_one():
    assert holm_adjust([0.03]) == [0.03]
    assert holm_adjust([0.4, 0.5, 0.6]) == [1.0, 1.0, 1.0]
    assert holm_adjust([]) == []


def test_holm_never_lowers_a_p_value_and_keeps_its_order():
    ps = [0.001, 0.2, 0.012, 0.013, 0.5, 0.0001]
    adj = holm_adjust(ps)
    assert all(a >= p for a, p in zip(adj, ps))
    order = sorted(range(len(ps)), key=ps.__getitem__)
    assert [adj[i] for i in order] == sorted(adj)


def test_holm_rejects_fewer_than_unadjusted_tests():
    ps = [0.02, 0.021, 0.022]  # each below 0.05 alone; Holm: 0.06, 0.06, 0.06
    assert sum(p < 0.05 for p in holm_adjust(ps)) == 0


def test_bad_p_value_is_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_adjust([0.1, 1.2])
    with pytest.raises(ValueError):
        holm_adjust([float("nan")])

"""Cost per token (decide/cost.py): the shipped price table's form and sources, the arithmetic against hand-computed
cases, overrides, and GPU types read from recorded device names."""
from __future__ import annotations

import pytest

from infercrane.decide.cost import gpu_type, load_prices, usd_per_mtok, with_overrides
from infercrane.errors import InputError


def test_every_shipped_price_has_a_source_and_a_date():
    table = load_prices()
    assert set(table.gpus) == {"H100", "H200", "L40S", "A100"}
    for name, p in table.gpus.items():
        assert p.usd_per_gpu_hour > 0 and p.source.startswith("https://") and p.read_on.count("-") == 2, name
        if p.derivation and "/ 8" in p.derivation:  # an 8-GPU node's price, divided: the arithmetic holds
            node = float(p.derivation.split("$")[1].split(" ")[0])
            assert p.usd_per_gpu_hour == pytest.approx(node / 8, abs=5e-4), name


@pytest.mark.parametrize("price,tok_s,gpus,expected", [
    (3.6, 1000.0, 1, 1.0),        # $3.60 an hour = $0.001 a second; 1000 tok/s -> $1 per million
    (6.305, 2500.0, 1, 6.305 / 9.0),  # 9 M tokens an hour
    (2.0, 1000.0, 8, 16.0 / 3.6),  # eight GPUs serving 1000 tok/s together
])
def test_dollars_per_million_tokens_by_hand(price, tok_s, gpus, expected):
    assert usd_per_mtok(price, tok_s, gpus) == pytest.approx(expected)


def test_no_throughput_no_cost():
    assert usd_per_mtok(3.0, 0.0) is None and usd_per_mtok(3.0, None) is None  # type: ignore[arg-type]


def test_overrides_replace_a_price_and_say_where_it_came_from():
    table = with_overrides(load_prices(), ["h100=2.49", "B200=5"], today="2026-12-07")
    assert table.gpus["H100"].usd_per_gpu_hour == 2.49 and table.gpus["H100"].provider == "user"
    assert table.gpus["B200"].read_on == "2026-12-07"
    assert table.gpus["H200"] == load_prices().gpus["H200"]
    for bad in ("H100", "H100=", "H100=-1", "H100=0", "=3", "H100=abc"):
        with pytest.raises(InputError, match="--gpu-price"):
            with_overrides(load_prices(), [bad], today="2026-12-07")


@pytest.mark.parametrize("name,expected", [
    ("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 NVL", "H100"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA L4", None), (None, None), ("cpu", None),
])
def test_gpu_types_from_device_names(name, expected):
    assert gpu_type(name) == expected

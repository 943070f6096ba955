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


def test_cost_section_prices_each_recipe_at_its_median_throughputs():
    from infercrane.decide.cost import cost_section, load_prices

    table = load_prices().model_dump(mode="json")
    ms = [{"recipe": "a", "concurrency": 8, "output_tokens_per_second": 1000.0, "input_tokens_per_second": 2000.0},
          {"recipe": "b", "concurrency": 8, "output_tokens_per_second": 2500.0}]
    sec = cost_section(ms, "NVIDIA H200", table, {"a": 1, "b": 2})
    assert sec["gpu_type"] == "H200" and sec["price"]["usd_per_gpu_hour"] == 6.305
    a, b = sec["per_recipe"]
    # 6.305 $/h / (1000 tok/s x 3600 s/h) x 1e6 = 1.751389 $/Mtok; input at 2000 tok/s half that; both 3000 tok/s
    assert a["output_usd_per_mtok"] == pytest.approx(6.305 / 3.6, abs=1e-6)
    assert a["input_usd_per_mtok"] == pytest.approx(6.305 / 7.2, abs=1e-6)
    assert a["total_usd_per_mtok"] == pytest.approx(6.305 / 10.8, abs=1e-6)
    # two GPUs at 2500 tok/s: 2 x 6.305 / 9 = 1.401111; no input count, no input or total cost
    assert b["output_usd_per_mtok"] == pytest.approx(2 * 6.305 / 9.0, abs=1e-6)
    assert b["input_usd_per_mtok"] is None and b["total_usd_per_mtok"] is None


def test_cost_section_without_a_type_or_a_price_says_why_and_prices_nothing():
    from infercrane.decide.cost import cost_section, load_prices

    table = load_prices().model_dump(mode="json")
    ms = [{"recipe": "a", "concurrency": 1, "output_tokens_per_second": 10.0}]
    sec = cost_section(ms, "none", table, {})
    assert sec["price"] is None and sec["per_recipe"] == [] and "no GPU type" in sec["note"]
    table["gpus"].pop("H100")
    sec = cost_section(ms, "NVIDIA H100 80GB HBM3", table, {})
    assert sec["price"] is None and "--gpu-price H100=" in sec["note"]


@pytest.mark.parametrize("args, gpus", [([], 1), (["--tensor-parallel-size", "2"], 2), (["-tp=4"], 4),
                                        (["-tp", "2", "--pipeline-parallel-size", "2"], 4), (["-tp", "x"], 1)])
def test_engine_gpus_reads_the_parallel_sizes(args, gpus):
    from infercrane.decide.cost import engine_gpus

    assert engine_gpus(args) == gpus

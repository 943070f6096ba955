"""The report's cost section (report/serving.py): a serving receipt's one GPU type, a PoC's types, and what is not
priced said as a note."""
from __future__ import annotations

from infercrane.decide.cost import cost_section, load_prices
from infercrane.report.serving import serving_sections

MEASURED = [{"recipe": "a", "concurrency": 8, "output_tokens_per_second": 1000.0, "input_tokens_per_second": 2000.0},
            {"recipe": "b", "concurrency": 8, "output_tokens_per_second": 2000.0}]


def _cost_of(doc):
    (sec,) = [s for s in serving_sections(doc) if s.title == "Cost per token"]
    return sec


def test_a_serving_receipts_cost_is_one_row_per_recipe_and_concurrency():
    prices = load_prices().model_dump(mode="json")
    sec = _cost_of({"cost": cost_section(MEASURED, "NVIDIA H200", prices, {"a": 1, "b": 1})})
    (table,) = sec.tables
    assert [r[:4] for r in table.rows] == [["H200", "a", 8, 1], ["H200", "b", 8, 1]]
    assert table.rows[0][5] == round(6.305 / 3.6, 6) and table.rows[1][6] is None
    assert "CoreWeave" in table.caption and "read 2026-09-20" in table.caption


def test_a_pocs_cost_lists_every_gpu_type_and_says_what_was_not_priced():
    prices = load_prices().model_dump(mode="json")
    doc = {"cost": {"by_gpu": {"paired": {"h100": cost_section(MEASURED, "NVIDIA H100 80GB HBM3", prices, {}),
                                          "cpu": cost_section(MEASURED, "none", prices, {})}},
                    "ranked": [], "method": "m"}}
    sec = _cost_of(doc)
    assert {r[0] for r in sec.tables[0].rows} == {"paired · h100"}
    assert sec.notes == ["paired · cpu: no GPU type is known for the device 'none'"]
    assert serving_sections({}) == []

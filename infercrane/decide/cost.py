"""Cost per token: what a measured throughput costs at a GPU type's price.

Prices are data (``prices.yaml`` beside this file: US dollars per GPU-hour per GPU type, each with its source and the
date it was read); ``--gpu-price TYPE=USD_PER_HOUR`` or a file of that form replaces them (``with_overrides``).

The arithmetic (``usd_per_mtok``): a GPU-hour's price over the tokens the GPUs serve in that hour,
``usd_per_gpu_hour x gpus / (tokens_per_s x 3600) x 1e6`` dollars per million tokens. An engine serves its input and
its output tokens in the same hours, so there is no one way to split a GPU-hour between them: each figure charges the
whole hour to one kind of token (``output``: per million output tokens at the output throughput; ``input``: per
million prompt tokens at the input throughput; ``total``: per million tokens of both), and says so. A GPU type is read
from the device name a receipt records (``gpu_type``: "NVIDIA H200" -> H200, "NVIDIA A100-SXM4-80GB" -> A100).
"""
from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from infercrane.errors import InputError

PRICES_SCHEMA = "infercrane.gpu-prices/v1"
PRICES_FILE = Path(__file__).resolve().parent / "prices.yaml"
METHOD = ("usd_per_gpu_hour x gpus / (tokens_per_s x 3600) x 1e6: the whole GPU-hour charged to the tokens counted "
          "(output, input, or both)")
# GPU types by the device names that name them, first match wins (an H100 NVL or PCIe reads as H100: the price
# table's type; its source says which form factor it priced)
_TYPES = (("H200", r"\bH200\b"), ("H100", r"\bH100\b"), ("L40S", r"\bL40S\b"), ("A100", r"\bA100\b"))


class GpuPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    usd_per_gpu_hour: float = Field(gt=0)
    derivation: str | None = None
    provider: str
    source: str
    transcribed_in: str | None = None
    read_on: str
    also: list[str] = Field(default_factory=list)


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: str = Field(pattern=r"^infercrane\.gpu-prices/v1$")
    currency: str = Field(pattern=r"^USD$")
    unit: str = Field(pattern=r"^per GPU-hour$")
    gpus: dict[str, GpuPrice] = Field(min_length=1)

    def price(self, gpu: str) -> GpuPrice | None:
        return self.gpus.get(gpu)


def load_prices(path: Path | str | None = None) -> PriceTable:
    """The shipped table, or a file of the same form (``--gpu-prices``)."""
    from infercrane.datafiles import POLICY, read_mapping, read_text, validate

    p = Path(path) if path is not None else PRICES_FILE
    return validate(PriceTable, read_mapping(read_text(p, POLICY), what="GPU prices", source=str(p)),
                    what="GPU prices", source=str(p), hint=f"see {PRICES_FILE.name} for the form")


def with_overrides(table: PriceTable, overrides: list[str], *, today: str) -> PriceTable:
    """``table`` with each ``TYPE=USD_PER_HOUR`` of ``overrides`` (``--gpu-price``) in place, its source "given on the
    command line" and read on ``today``."""
    gpus = dict(table.gpus)
    for item in overrides:
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9_.-]*)\s*=\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*", item)
        if m is None or float(m.group(2)) <= 0:
            raise InputError(f"--gpu-price {item}: give TYPE=USD_PER_HOUR with a positive price, e.g. H100=2.49")
        gpus[m.group(1).upper()] = GpuPrice(usd_per_gpu_hour=float(m.group(2)), provider="user",
                                            source="given on the command line (--gpu-price)", read_on=today)
    return table.model_copy(update={"gpus": gpus})


def price_table(table: PriceTable | None = None, overrides: tuple[str, ...] | list[str] = ()) -> dict:
    """The table a run's cost is read at, as its receipt records it: ``table`` (default the shipped one) with each
    ``TYPE=USD`` override over it, read today."""
    from datetime import date

    table = table if table is not None else load_prices()
    return with_overrides(table, list(overrides), today=date.today().isoformat()).model_dump(mode="json")


def gpu_type(device_name: str | None) -> str | None:
    """The price table's GPU type of a recorded device name; None for a device the table has no type for."""
    if not device_name:
        return None
    for name, pattern in _TYPES:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return name
    return None


def usd_per_mtok(usd_per_gpu_hour: float, tokens_per_s: float, gpus: int = 1) -> float | None:
    """Dollars per million tokens at ``tokens_per_s`` on ``gpus`` GPUs of that price (``METHOD``); None without a
    positive throughput (nothing served: no cost per token to state)."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return usd_per_gpu_hour * gpus / (tokens_per_s * 3600.0) * 1e6


def engine_gpus(engine_args: list[str]) -> int:
    """GPUs one engine of a recipe uses: its tensor- and pipeline-parallel sizes multiplied (vLLM's
    ``--tensor-parallel-size`` / ``-tp``, ``--pipeline-parallel-size`` / ``-pp``; 1 where not given)."""
    sizes = {"tp": 1, "pp": 1}
    names = {"--tensor-parallel-size": "tp", "-tp": "tp", "--pipeline-parallel-size": "pp", "-pp": "pp"}
    for i, arg in enumerate(engine_args):
        key, _, value = arg.partition("=")
        if key in names:
            raw = value or (engine_args[i + 1] if i + 1 < len(engine_args) else "")
            try:
                sizes[names[key]] = max(1, int(raw))
            except ValueError:
                pass
    return sizes["tp"] * sizes["pp"]


def cost_section(measurements: list[dict], gpu: str | None, prices: dict | None,
                 gpus_by_recipe: dict[str, int]) -> dict:
    """A receipt's cost block from its measurements (medians per recipe and concurrency, the receipt's own fields):
    the GPU type read from the recorded device name (``gpu_type``), its price from ``prices`` (the table the run was
    given, recorded with it: ``PriceTable.model_dump``), and per recipe and concurrency the dollars per million output
    tokens, input tokens (where the runs counted them) and both, at the median throughputs (``METHOD``); each arm
    priced for the GPUs its engine uses, as if it had them to itself. Without a known type or a price, the block says
    why and prices nothing."""
    kind = gpu_type(gpu)
    entry = ((prices or {}).get("gpus") or {}).get(kind) if kind else None
    out: dict = {"gpu": gpu, "gpu_type": kind, "method": METHOD}
    if entry is None:
        out["price"] = None
        out["note"] = (f"no GPU type is known for the device {gpu!r}" if kind is None
                       else f"the price table has no {kind} price; give one with --gpu-price {kind}=USD_PER_HOUR")
        out["per_recipe"] = []
        return out
    price = GpuPrice.model_validate(entry)
    rows = []
    for m in measurements:
        n = gpus_by_recipe.get(m["recipe"], 1)
        out_tps, in_tps = m.get("output_tokens_per_second"), m.get("input_tokens_per_second")
        both = (out_tps or 0.0) + (in_tps or 0.0) if in_tps is not None else None
        rows.append({"recipe": m["recipe"], "concurrency": m["concurrency"], "gpus": n,
                     "output_usd_per_mtok": _round(usd_per_mtok(price.usd_per_gpu_hour, out_tps or 0.0, n)),
                     "input_usd_per_mtok": _round(usd_per_mtok(price.usd_per_gpu_hour, in_tps or 0.0, n))
                     if in_tps is not None else None,
                     "total_usd_per_mtok": _round(usd_per_mtok(price.usd_per_gpu_hour, both, n))
                     if both is not None else None})
    out["price"] = price.model_dump(mode="json", exclude_none=True)
    out["per_recipe"] = rows
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)

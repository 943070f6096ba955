"""The highest request rate that meets the SLOs: ``serve bench --find-max-rate``.

One engine, started once, is probed at open-loop request rates (Poisson arrivals, the workload's highest concurrency
the cap on requests in flight). A probe is ``windows`` windows at one rate (a ``run_plan`` of one arm on the running
engine, SLOs from the policy); the rate **meets** the SLOs when every one of its windows met every SLO with no failed
request (``decide.slo``: attainment at least the percentile).

The search (``next_rate``): the low end first (a rate that misses there has nothing below it in range), then the high
end (one that meets there is at least that), then bisection in log space between the highest rate that met and the
lowest that missed above it, until their ratio is within ``1 + resolution`` or ``max_probes`` probes have run.

The answer is a **bracket**, [highest rate met, lowest rate missed]: the largest sustainable rate lies between them
if meeting is monotone in the rate. It is not a confidence interval: a probe is a few windows, and a rate near the edge
can meet or miss by chance; a rate that met above one that missed is reported (``monotone: false``) and the bracket
then uses the lowest miss.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

RATE_SEARCH_SCHEMA = "infercrane.rate-search/v1"
DEFAULT_RATE_RANGE = (1.0, 64.0)  # requests per second
DEFAULT_MAX_PROBES = 8
METHOD = ("bracket by bisection in log space: each probe {windows} windows at one open-loop (Poisson) rate; a rate "
          "meets the SLOs when every window met every SLO with no failed request; the bracket is [highest rate met, "
          "lowest rate missed above it], not a confidence interval")


class RateSearch(BaseModel):
    """What ``--find-max-rate`` searches: rates in [low, high] requests per second, at most ``max_probes`` probes of
    ``windows`` windows each, stopping once the bracket's ratio is within ``1 + resolution``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float = Field(gt=0, allow_inf_nan=False)
    high: float = Field(gt=0, allow_inf_nan=False)
    max_probes: int = Field(default=DEFAULT_MAX_PROBES, ge=2, le=30)
    windows: int = Field(default=3, ge=3, le=20, description="windows per probe (runs_per_arm: 3 at least)")
    resolution: float = Field(default=0.05, gt=0, lt=1)

    @model_validator(mode="after")
    def _ordered(self) -> RateSearch:
        if self.high <= self.low:
            raise ValueError(f"the rate range's high end ({self.high:g}) must be above its low end ({self.low:g})")
        return self


class Probe(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: float
    met: bool
    windows: list[dict[str, Any]] = Field(description="per window: run index, request rate achieved, goodput, each "
                                                      "SLO's attainment, all met, failures")


def bracket(probes: Sequence[Probe]) -> dict[str, Any]:
    """[highest rate met below the lowest miss, lowest rate missed] of the probes so far, and whether the outcomes
    were monotone in the rate."""
    missed = sorted(p.rate for p in probes if not p.met)
    met = sorted(p.rate for p in probes if p.met)
    lowest_miss = missed[0] if missed else None
    below = [r for r in met if lowest_miss is None or r < lowest_miss]
    return {"max_rate_met": below[-1] if below else None, "min_rate_missed": lowest_miss,
            "monotone": not (lowest_miss is not None and any(r > lowest_miss for r in met))}


def next_rate(probes: Sequence[Probe], search: RateSearch) -> float | None:
    """The next rate to probe, or None when the search is over (see the module docstring)."""
    if len(probes) >= search.max_probes:
        return None
    rates = {p.rate for p in probes}
    if search.low not in rates:
        return search.low
    b = bracket(probes)
    if b["max_rate_met"] is None:  # the low end missed: nothing in range meets the SLOs
        return None
    if search.high not in rates:
        return search.high
    lo, hi = b["max_rate_met"], b["min_rate_missed"]
    if hi is None or hi / lo <= 1.0 + search.resolution:
        return None
    return math.sqrt(lo * hi)


def summary(probes: Sequence[Probe], search: RateSearch) -> dict[str, Any]:
    """The search's answer: the bracket, in words where it is open at an end."""
    b = bracket(probes)
    if b["max_rate_met"] is None:
        said = f"no rate in range meets the SLOs: {search.low:g} requests/s already missed"
    elif b["min_rate_missed"] is None:
        said = f"every rate probed met the SLOs, up to the range's high end {search.high:g} requests/s: at least that"
    else:
        said = (f"the highest rate meeting the SLOs lies in [{b['max_rate_met']:.4g}, {b['min_rate_missed']:.4g}) "
                "requests/s")
    if not b["monotone"]:
        said += "; a rate met above one that missed (near the edge a probe can go either way)"
    return b | {"probes": len(probes), "said": said, "method": METHOD.format(windows=search.windows)}


def probe_of(rate: float, runs: Sequence[Any]) -> Probe:
    """A probe from its windows' RunMetrics (each with its ``slo``)."""
    windows = [{"run_index": m.run_index, "request_s": m.request_s, "goodput_req_s": m.goodput_req_s,
                "attainment": dict(m.slo.attainment) if m.slo else None, "all_met": bool(m.slo and m.slo.all_met),
                "failures": m.failures} for m in runs]
    return Probe(rate=rate, met=bool(windows) and all(w["all_met"] and not w["failures"] for w in windows),
                 windows=windows)


def find_max_rate(recipe: Any, workload: Any, search: RateSearch, slos: Sequence[Any], *, out_dir: Path,
                  engine: Any, say: Callable[[str], None], on_probe: Callable[[list[Probe]], None] | None = None,
                  tokenizer: str | None = None, access: Any = None) -> list[Probe]:
    """Probe ``engine`` (running ``recipe``) until ``next_rate`` says the search is over; ``on_probe`` is called with
    the probes so far after each (the caller writes its record, so a stop part-way loses no probe)."""
    from .workload import run_plan

    cap = max(workload.concurrency)
    probes: list[Probe] = []
    while (rate := next_rate(probes, search)) is not None:
        w = workload.with_overrides(request_rate=rate, arrival_pattern="poisson", concurrency=[cap],
                                    runs_per_arm=search.windows, arm_order="sequential")
        say(f"probe {len(probes) + 1}: {rate:.4g} requests/s, {search.windows} windows")
        result = run_plan([recipe], w, out_dir=out_dir / f"probe{len(probes):02d}", order="sequential",
                          engines={recipe.name: engine}, slos=slos, tokenizer=tokenizer, access=access)
        probes.append(probe_of(rate, result.runs))
        p = probes[-1]
        say(f"probe {len(probes)}: {rate:.4g} requests/s {'met' if p.met else 'missed'} the SLOs (goodput "
            + ", ".join(f"{w['goodput_req_s']:.3g}" for w in p.windows) + " requests/s)")
        if on_probe is not None:
            on_probe(probes)
    return probes


def search_record(probes: Sequence[Probe], search: RateSearch, *, recipe: str, slos: Sequence[Any], engine: Any,
                  provenance: dict[str, Any], complete: bool) -> dict[str, Any]:
    """The rate-search record (``RATE_SEARCH_SCHEMA``) of the probes so far."""
    return {"schema_version": RATE_SEARCH_SCHEMA, "complete": complete, "recipe": recipe,
            "slos": [s.model_dump(mode="json") for s in slos], "search": search.model_dump(mode="json"),
            "result": summary(probes, search), "probes": [p.model_dump(mode="json") for p in probes],
            "engine": engine.record.model_dump(mode="json") if engine is not None else None,
            "provenance": provenance}


def run_search(recipe: Any, workload: Any, search: RateSearch, slos: Sequence[Any], *, out: Path,
               provenance: dict[str, Any], startup_timeout_s: float, say: Callable[[str], None],
               tokenizer: str | None = None, access: Any = None) -> list[Probe]:
    """Start ``recipe``'s engine, probe it (``find_max_rate``, artifacts beside ``out``) and write the record to
    ``out`` after every probe (atomically) and once more, complete, at the end."""
    import json

    from infercrane.receipts.io import write_atomic_bytes

    from .engine import Engine

    art = out.parent / f"{out.stem}-artifacts"

    def write(probes: Sequence[Probe], engine: Any, complete: bool) -> None:
        doc = search_record(probes, search, recipe=recipe.name, slos=slos, engine=engine, provenance=provenance,
                            complete=complete)
        write_atomic_bytes(out, json.dumps(doc, indent=2, default=str).encode("utf-8"))

    resolved = recipe.resolved()
    with Engine(resolved, log_dir=art / "engines", label=recipe.name, startup_timeout_s=startup_timeout_s,
                access=access) as engine:
        probes = find_max_rate(resolved, workload, search, slos, out_dir=art, engine=engine, say=say,
                               on_probe=lambda ps: write(ps, engine, False), tokenizer=tokenizer, access=access)
        write(probes, engine, True)
    return probes

"""The serving lab's part of a report: an optimization-poc receipt's (v2) ``paired_aiperf`` A/B, its
``kernel_in_serving`` prediction, its ``bench`` (one engine, several drivers) and its
``public_workload_reproduction``, each as figures and tables.

Every figure draws numbers the receipt holds: each run's own number from ``runs[]`` (a PoC receipt keeps its runs in
the serving receipts under ``evidence``), the medians ``measurements`` records, and the ratios, intervals, p-values and
verdicts of ``statistics``, ``driver_agreement``, ``drift`` and ``prediction``. Nothing here is a new statistic: where
a median is computed here (a run list without a recorded median), the caption says so. Each caption names the interval
method and the test method in the receipt's own words, or says that the receipt does not state them (receipts written
before those fields were recorded).

Figures are ``matplotlib.figure.Figure`` objects made without pyplot (no global state); the page sets the dpi and
writes the PNGs. Functional receipts (the test server, ``evidence_class: functional-check``) are drawn the same way:
what they are is said in the report's head, not here.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ..decide.prediction import qualifier
# SEED_FIELDS: the run fields drawn over concurrency; DRIFT_METRIC: drawn when a receipt records no drift check
from ..serving.receipt import DRIFT_METRIC, SEED_FIELDS, statistic_metric
from .model import Figure, Section, Table, new_figure

WIDTH_IN, HEIGHT_IN = 8.0, 4.5          # one panel, or a row of panels
GRID_HEIGHT_IN = 6.0                   # two rows of panels
ARM_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
VERDICT_COLOURS = {
    "BETTER": "#2e7d32", "WORSE": "#c62828", "EQUIVALENT": "#1565c0", "INCONCLUSIVE": "#607d8b",
    "AGREE": "#2e7d32", "DISAGREE": "#c62828", "UNDECIDED": "#f9a825", "INSUFFICIENT": "#607d8b",
    "CONSISTENT": "#2e7d32", "BELOW": "#c62828", "ABOVE": "#1565c0",
}
NO_VERDICT_COLOUR = "#424242"

# A metric as the receipt names it (statistics and drift use the stats names, runs and driver agreement the seed's
# field names) -> (its field in a run record, its label, its unit).
METRICS: dict[str, tuple[str, str, str]] = {
    "output_tok_s": ("output_tokens_per_second", "output throughput", "tok/s"),
    "output_tokens_per_second": ("output_tokens_per_second", "output throughput", "tok/s"),
    "request_throughput": ("request_throughput", "request throughput", "req/s"),
    "request_s": ("request_throughput", "request throughput", "req/s"),
    "ttft_p95_ms": ("ttft_p95_ms", "p95 TTFT", "ms"),
    "tpot_p95_ms": ("tpot_p95_ms", "p95 TPOT", "ms"),
    "e2e_p95_ms": ("latency_p95_ms", "p95 end-to-end latency", "ms"),
    "latency_p95_ms": ("latency_p95_ms", "p95 end-to-end latency", "ms"),
}
NOT_STATED = "not stated in the receipt (written before the field was recorded)"


def _metric(name: str) -> tuple[str, str, str]:
    """(run field, label, unit) of a metric name; an unknown name is drawn under its own name."""
    if name in METRICS:
        return METRICS[name]
    return name, name.replace("_", " "), "ms" if name.endswith("_ms") else ""


def _axis_label(name: str) -> str:
    _, label, unit = _metric(name)
    return f"{label} ({unit})" if unit else label


# A drift[] entry (``serving.receipt.arm_drift``) is in one of three states: flagged, checked and not flagged, or
# not checked at all, because the arm had fewer than 2 runs between its first and its last (no spread to set the
# change against: ``other_runs_spread_percent`` is None, and ``flagged`` False means nothing).
DRIFT_FLAGGED, DRIFT_CLEAN, DRIFT_UNCHECKED = "flagged", "not flagged", "could not run"
DRIFT_STATES = (DRIFT_FLAGGED, DRIFT_CLEAN, DRIFT_UNCHECKED)
DRIFT_RINGS = {DRIFT_FLAGGED: "#c62828", DRIFT_CLEAN: "#9e9e9e", DRIFT_UNCHECKED: "#1565c0"}
DRIFT_LEGEND = {DRIFT_FLAGGED: "drift flagged: first and last run compared",
                DRIFT_CLEAN: "drift checked, not flagged",
                DRIFT_UNCHECKED: "drift check could not run: fewer than 2 other runs"}
UNCHECKED_CELL = "not checked: fewer than 2 other runs"


def drift_state(entry: dict[str, Any]) -> str:
    """What a drift[] entry says: DRIFT_FLAGGED, DRIFT_CLEAN, or DRIFT_UNCHECKED where the receipt holds no spread of
    other runs."""
    if entry.get("other_runs_spread_percent") is None:
        return DRIFT_UNCHECKED
    return DRIFT_FLAGGED if entry.get("flagged") else DRIFT_CLEAN


def drift_summary(drift: list[dict[str, Any]]) -> str:
    """One sentence counting the drift[] entries in each state, naming why a check could not run."""
    counts = {state: sum(1 for d in drift if drift_state(d) == state) for state in DRIFT_STATES}
    text = (f"Drift check per arm and concurrency: {counts[DRIFT_FLAGGED]} flagged, {counts[DRIFT_CLEAN]} checked and "
            f"not flagged, {counts[DRIFT_UNCHECKED]} could not run")
    if counts[DRIFT_UNCHECKED]:
        text += (": the check sets the first-to-last change against the spread of the runs between them, and "
                 "needs at least 2 of those (4 ok runs in the arm at that concurrency)")
    return text + "."


# --- drawing helpers ---------------------------------------------------------------------------------------------

def _new_figure(nrows: int, ncols: int) -> tuple[Any, list[Any]]:
    """A serving figure: ``nrows x ncols`` axes at the width of one panel row, taller for two rows."""
    return new_figure(WIDTH_IN, HEIGHT_IN if nrows == 1 else GRID_HEIGHT_IN, nrows=nrows, ncols=ncols)


def _grid(n: int) -> tuple[int, int]:
    if n <= 1:
        return 1, 1
    if n <= 3:
        return 1, n
    if n == 4:
        return 2, 2
    return 2, (n + 1) // 2


def _hide_unused(axes: list[Any], used: int) -> None:
    for ax in axes[used:]:
        ax.set_visible(False)


def _concurrency_axis(ax: Any, concurrencies: list[int]) -> None:
    """x = concurrency on a log2 axis, a tick at every measured concurrency."""
    from matplotlib.ticker import NullLocator

    cs = sorted(set(concurrencies))
    ax.set_xscale("log", base=2)
    ax.set_xlim(cs[0] / 1.6, cs[-1] * 2.6)  # room on the right for the last point's label
    ax.set_xticks(cs)
    ax.set_xticklabels([str(c) for c in cs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("concurrency (requests in flight, log2 axis)", fontsize=8)


def _offset(c: float, i: int, n: int, width: float = 0.12) -> float:
    """Arm ``i`` of ``n`` set sideways of concurrency ``c`` on a log2 axis (for legibility only)."""
    return c * 2 ** ((i - (n - 1) / 2) * width)


def _ratio_axis(ax: Any, lows: list[float], highs: list[float], margins: list[float]) -> None:
    """A ratio's y axis: always showing 1 and its band; logarithmic when the intervals span more than 4x."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo = min([*lows, *(1 - m for m in margins), 1.0])
    hi = max([*highs, *(1 + m for m in margins), 1.0])
    if lo > 0 and hi / lo > 4:
        ax.set_yscale("log")
        ax.set_ylim(lo / 1.3, hi * 1.3)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        span = hi - lo or 0.01
        ax.set_ylim(lo - 0.1 * span, hi + 0.1 * span)


def _value_axis(ax: Any, values: list[float]) -> None:
    """A metric's y axis: logarithmic when its values span more than 20x (an eager arm beside a compiled one, a
    first run far from the rest), so that every dot stays readable."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


def _band(ax: Any, margins: list[float], xs: list[float]) -> None:
    """The 1 ± margin band, shaded; one band across the axes when every comparison has the same margin."""
    if not margins:
        return
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", zorder=1)
    if len(set(margins)) == 1:
        ax.axhspan(1 - margins[0], 1 + margins[0], color="#90caf9", alpha=0.45, zorder=0, linewidth=0)
    else:
        for x, m in zip(xs, margins):
            ax.fill_between([x / 1.25, x * 1.25], 1 - m, 1 + m, color="#90caf9", alpha=0.45, zorder=0,
                            linewidth=0)


def _whisker(ax: Any, x: float, point: float, lo: float, hi: float, colour: str, marker: str = "o") -> None:
    """One interval as a whisker from ``lo`` to ``hi`` (one ErrorbarContainer each) and its point."""
    ax.errorbar([x], [(lo + hi) / 2], yerr=[[(hi - lo) / 2], [(hi - lo) / 2]], fmt="none", ecolor=colour,
                elinewidth=1.6, capsize=4, zorder=3)
    ax.plot([x], [point], marker=marker, color=colour, markersize=6, linestyle="none", zorder=4)


def _label(ax: Any, x: float, y: float, text: str, colour: str) -> None:
    """A verdict written just right of its point."""
    ax.annotate(text, (x, y), xytext=(6, 0), textcoords="offset points", ha="left", va="center", fontsize=6.5,
                color=colour)


def _legend_handles(entries: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    out = []
    for label, style in entries:
        if style.get("patch"):
            out.append(Patch(facecolor=style["colour"], alpha=style.get("alpha", 1.0), label=label))
        else:
            out.append(Line2D([], [], color=style.get("colour", "black"), marker=style.get("marker", ""),
                              linestyle=style.get("linestyle", "none"), markersize=style.get("markersize", 6),
                              markerfacecolor=style.get("face", style.get("colour", "black")), label=label))
    return out


def _figure_legend(fig: Any, handles: list[Any]) -> None:
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=7, frameon=False)


def _fmt(v: Any, digits: int = 4) -> str:
    return f"{v:.{digits}g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _said(values: list[Any], what: str) -> str:
    """The distinct texts a receipt gives for one method, quoted; or that it states none."""
    stated = list(dict.fromkeys(str(v) for v in values if v))
    if not stated:
        return f"{what}: {NOT_STATED}"
    missing = "" if all(values) else f" (some entries state none: {NOT_STATED})"
    return f"{what}: " + "; ".join(f"“{s}”" for s in stated) + missing


def _counts(counts: dict[str, set[int]]) -> str:
    return ", ".join(f"{k} {'/'.join(map(str, sorted(v)))}" for k, v in counts.items())


# --- what the figures are drawn from -------------------------------------------------------------------------------

@dataclass
class _Arm:
    """One arm as drawn: a recipe (under one driver), its ok runs and the medians the receipt records for it."""

    label: str
    recipe: str
    driver: str | None
    runs: list[dict[str, Any]]
    failed: int = 0
    medians: dict[tuple[int, str], float] = field(default_factory=dict)  # (concurrency, run field) -> median


def _arm(label: str, recipe: str, driver: str | None, runs: list[dict[str, Any]],
         measurements: list[dict[str, Any]]) -> _Arm:
    mine = [r for r in runs if r.get("recipe") == recipe and (driver is None or r.get("driver") == driver)]
    medians = {}
    for m in measurements:
        if m.get("recipe") == recipe and (driver is None or m.get("driver", driver) == driver):
            for f in SEED_FIELDS + ("request_throughput",):
                if isinstance(m.get(f), (int, float)):
                    medians[(m["concurrency"], f)] = m[f]
    return _Arm(label=label, recipe=recipe, driver=driver,
                runs=[r for r in mine if r.get("status", "ok") == "ok"],
                failed=sum(1 for r in mine if r.get("status", "ok") != "ok"), medians=medians)


def _embedded(doc: dict[str, Any], kind: str) -> list[tuple[str, dict[str, Any]]]:
    """A PoC receipt's embedded serving receipts of one kind (``evidence.paired`` / ``evidence.public``), the
    serving GPU's first (``PocEvidence.serving_gpu``)."""
    evidence = doc.get("evidence") or {}
    found = [(gpu, r) for gpu, r in sorted((evidence.get(kind) or {}).items()) if isinstance(r, dict)]
    first = evidence.get("serving_gpu")
    return sorted(found, key=lambda g_r: g_r[0] != first)


def _paired_runs(doc: dict[str, Any], block: dict[str, Any], recipes: set[str]) -> tuple[list[dict[str, Any]], str]:
    """The runs behind a ``paired_aiperf`` block: the receipt's own ``runs[]``, or those of the serving receipt under
    ``evidence.paired`` whose A/B this block is (a PoC receipt keeps its runs there)."""
    own = [r for r in doc.get("runs") or [] if r.get("recipe") in recipes]
    if own:
        return own, "the receipt's runs[]"
    for gpu, r in _embedded(doc, "paired"):
        if (r.get("paired_aiperf") or {}).get("statistics") == block.get("statistics") and r.get("runs"):
            return list(r["runs"]), f"evidence.paired.{gpu}.runs[] (the serve ab receipt this A/B comes from)"
    return [], ""


def _runs_from_statistics(block: dict[str, Any], a: str, b: str) -> list[dict[str, Any]]:
    """Without run records: each run's number as ``statistics`` holds it (a_values / b_values), run order unknown."""
    runs = []
    for s in block.get("statistics") or []:
        run_field = _metric(s["metric"])[0]
        for recipe, values in ((a, s.get("a_values") or []), (b, s.get("b_values") or [])):
            for i, v in enumerate(values):
                runs.append({"recipe": recipe, "concurrency": s["concurrency"], "status": "ok", "_slot": i,
                             "driver": block.get("primary_driver"), run_field: v})
    # One record per (recipe, concurrency, slot), holding every metric.
    merged: dict[tuple[str, int, int], dict[str, Any]] = {}
    for r in runs:
        merged.setdefault((r["recipe"], r["concurrency"], r["_slot"]), {}).update(r)
    return list(merged.values())


# --- figures ------------------------------------------------------------------------------------------------------

def _metrics_figure(name: str, title: str, arms: list[_Arm], concurrencies: list[int], source: str | None,
                    fields: tuple[str, ...] = SEED_FIELDS) -> Figure | None:
    """Each metric over concurrency: every ok run a dot, each arm's median a line (a receipt without per-run
    numbers, v1: the medians alone)."""
    fields = tuple(f for f in fields if any(isinstance(r.get(f), (int, float)) for a in arms for r in a.runs)
                   or any(k[1] == f for a in arms for k in a.medians))
    if not fields or not concurrencies:
        return None
    nrows, ncols = _grid(len(fields))
    fig, axes = _new_figure(nrows, ncols)
    computed = False
    for ax, f in zip(axes, fields):
        for i, arm in enumerate(arms):
            colour = ARM_COLOURS[i % len(ARM_COLOURS)]
            pts = [(r["concurrency"], r[f]) for r in arm.runs if isinstance(r.get(f), (int, float))]
            ax.plot([_offset(c, i, len(arms)) for c, _ in pts], [v for _, v in pts], "o", color=colour,
                    markersize=4, alpha=0.7, linestyle="none")
            line = []
            for c in sorted({c for c, _ in pts} | {c for c, ff in arm.medians if ff == f}):
                if (c, f) in arm.medians:
                    line.append((c, arm.medians[(c, f)]))
                else:
                    computed = True
                    line.append((c, statistics.median(v for cc, v in pts if cc == c)))
            ax.plot([_offset(c, i, len(arms)) for c, _ in line], [v for _, v in line], "-", color=colour,
                    linewidth=1.4, marker="_", markersize=10)
        _concurrency_axis(ax, concurrencies)
        _value_axis(ax, [v for arm in arms for r in arm.runs if isinstance(v := r.get(f), (int, float))]
                    + [v for arm in arms for (_, ff), v in arm.medians.items() if ff == f])
        ax.set_ylabel(_axis_label(f), fontsize=8)
        ax.set_title(_metric(f)[1], fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    _hide_unused(axes, len(fields))
    handles = []
    for i, arm in enumerate(arms):
        colour = ARM_COLOURS[i % len(ARM_COLOURS)]
        handles += _legend_handles([(f"{arm.label}: one run", {"colour": colour, "marker": "o", "markersize": 4})]
                                   * bool(arm.runs)
                                   + [(f"{arm.label}: median", {"colour": colour, "linestyle": "-", "marker": "_",
                                                                "markersize": 10})])
    _figure_legend(fig, handles)
    fig.suptitle(title, fontsize=10)
    runs = {a.label: {sum(1 for r in a.runs if r["concurrency"] == c) for c in concurrencies} for a in arms}
    median_said = ("the arm's median over its ok runs as the receipt's measurements[] record it"
                   + ("; where the receipt records none, the median of the dots, computed here" if computed else ""))
    failed = sum(a.failed for a in arms)
    dots = (f"Each dot is one ok run's own number ({source})" if source else
            "The receipt holds no per-run numbers here, so no run is drawn")
    caption = (f"{dots}; each line joins the arm's medians (a bar at each concurrency): {median_said}. "
               f"x: concurrency on a log2 axis; the arms are set slightly apart sideways for legibility; y: logarithmic "
               f"in a panel whose values span more than 20x. p95 numbers "
               f"are each run's 95th percentile over its requests."
               + (f" Ok runs per arm and concurrency: {_counts(runs)}." if source else "")
               + (f" {failed} failed run(s) are not drawn." if failed else ""))
    return Figure(name=name, title=title, caption=caption, fig=fig)


def _ratio_figure(name: str, title: str, stats: list[dict[str, Any]], a: str, b: str) -> Figure | None:
    """B/A per metric and concurrency: the ratio, its interval as a whisker, the equivalence band, the verdict."""
    stats = [s for s in stats if all(isinstance(s.get(k), (int, float)) for k in ("ratio_b_over_a", "ci_low",
                                                                                   "ci_high"))]
    if not stats:
        return None
    metrics = list(dict.fromkeys(s["metric"] for s in stats))
    nrows, ncols = _grid(len(metrics))
    fig, axes = _new_figure(nrows, ncols)
    concurrencies = sorted({s["concurrency"] for s in stats})
    for ax, metric in zip(axes, metrics):
        mine = sorted((s for s in stats if s["metric"] == metric), key=lambda s: s["concurrency"])
        margins = [s.get("equivalence_margin") for s in mine]
        margins = [m for m in margins if isinstance(m, (int, float))]
        _ratio_axis(ax, [s["ci_low"] for s in mine], [s["ci_high"] for s in mine], margins)
        _band(ax, margins, [s["concurrency"] for s in mine])
        for s in mine:
            colour = VERDICT_COLOURS.get(s.get("verdict"), NO_VERDICT_COLOUR)
            _whisker(ax, s["concurrency"], s["ratio_b_over_a"], s["ci_low"], s["ci_high"], colour)
            p = f"\np = {s['p_value']:.2g}" if isinstance(s.get("p_value"), (int, float)) else ""
            _label(ax, s["concurrency"], s["ratio_b_over_a"], f"{s.get('verdict') or 'no verdict'}{p}", colour)
        _concurrency_axis(ax, concurrencies)
        better = "higher" if mine[0].get("higher_is_better") else "lower"
        ax.set_ylabel(f"B/A of {_metric(metric)[1]}", fontsize=8)
        ax.set_title(f"{_metric(metric)[1]} ({better} is better)", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    _hide_unused(axes, len(metrics))
    verdicts = list(dict.fromkeys(s.get("verdict") for s in stats))
    margin_values = sorted({s["equivalence_margin"] for s in stats if isinstance(s.get("equivalence_margin"),
                                                                                  (int, float))})
    handles = _legend_handles(
        [(f"{v or 'no verdict'}: B/A and its interval", {"colour": VERDICT_COLOURS.get(v, NO_VERDICT_COLOUR),
                                                        "marker": "o", "linestyle": "-"}) for v in verdicts]
        + [("1 ± equivalence margin", {"colour": "#90caf9", "alpha": 0.45, "patch": True}),
           ("B/A = 1", {"colour": "black", "linestyle": "--"})])
    _figure_legend(fig, handles)
    fig.suptitle(title, fontsize=10)
    confidences = sorted({s["confidence"] for s in stats if isinstance(s.get("confidence"), (int, float))})
    conf = "/".join(f"{c * 100:g} %" for c in confidences) or "(confidence not stated)"
    runs = {"A": {len(s.get("a_values") or []) for s in stats}, "B": {len(s.get("b_values") or []) for s in stats}}
    caption = (f"B = {b}, A = {a}. Each dot is the receipt's ratio_b_over_a (median of B's runs over median of A's "
               f"runs) for one metric at one concurrency; each whisker is the receipt's {conf} interval "
               f"[ci_low, ci_high] of that ratio. {_said([s.get('interval_method') for s in stats], 'Interval method')}. "
               f"{_said([s.get('test_method') for s in stats], 'Test method')} (its p-value is in each label). "
               f"Shaded: 1 ± the receipt's equivalence_margin "
               f"({', '.join(f'{m:g}' for m in margin_values) or 'none recorded'}); dashed: B/A = 1. Labels: the "
               f"receipt's verdict. {_said([s.get('verdict_rule') for s in stats], 'Verdict rule')}. "
               f"Runs per arm (lengths of a_values / b_values): {_counts(runs)}. x: concurrency (log2); y: "
               f"logarithmic where the intervals span more than 4x.")
    return Figure(name=name, title=title, caption=caption, fig=fig)


def _drift_figure(name: str, title: str, arms: list[_Arm], concurrencies: list[int], drift: list[dict[str, Any]],
                  order: str | None) -> Figure | None:
    """Per concurrency: each arm's metric per run in run_index order, the receipt's drift check marked."""
    from matplotlib.ticker import MaxNLocator

    runs_with_order = [r for a in arms for r in a.runs if isinstance(r.get("run_index"), int)]
    if not runs_with_order:
        return None
    metrics = list(dict.fromkeys(d["metric"] for d in drift if d.get("metric"))) or [DRIFT_METRIC]
    cs = [c for c in sorted(set(concurrencies)) if any(r["concurrency"] == c for r in runs_with_order)]
    panels = [(m, c) for m in metrics for c in cs]
    if len(metrics) == 1:
        nrows, ncols = _grid(len(panels))
    else:
        nrows, ncols = len(metrics), len(cs)
    fig, axes = _new_figure(nrows, ncols)
    states: set[str] = set()
    for ax, (metric, c) in zip(axes, panels):
        run_field = _metric(metric)[0]
        xs_all: list[int] = []
        for i, arm in enumerate(arms):
            colour = ARM_COLOURS[i % len(ARM_COLOURS)]
            pts = sorted((r["run_index"], r[run_field]) for r in arm.runs
                         if r["concurrency"] == c and isinstance(r.get("run_index"), int)
                         and isinstance(r.get(run_field), (int, float)))
            ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", color=colour, markersize=4, linewidth=1)
            xs_all.extend(x for x, _ in pts)
            for d in drift:
                if (d.get("recipe"), d.get("concurrency"), d.get("metric")) != (arm.recipe, c, metric) or \
                        (arm.driver is not None and d.get("driver") not in (None, arm.driver)):
                    continue
                state = drift_state(d)
                states.add(state)
                ring = DRIFT_RINGS[state]
                xs, ys = [d["first_run_index"], d["last_run_index"]], [d["first"], d["last"]]
                ax.plot(xs, ys, "o", markersize=11, markerfacecolor="none", markeredgecolor=ring,
                        markeredgewidth=1.6, linestyle="none")
                if state == DRIFT_FLAGGED:
                    _label(ax, d["last_run_index"], d["last"], f"{d.get('change_percent', 0):+.1f} %", ring)
        ax.set_title(f"c = {c}" + (f", {_metric(metric)[1]}" if len(metrics) > 1 else ""), fontsize=9)
        ax.set_xlabel("run_index (run order in the arm)", fontsize=8)
        ax.set_ylabel(_axis_label(metric), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if xs_all:
            ax.set_xlim(min(xs_all) - 0.4, max(xs_all) + 0.9)  # room on the right for a drift label
    _hide_unused(axes, len(panels))
    handles = _legend_handles([(f"{a.label}: one run", {"colour": ARM_COLOURS[i % len(ARM_COLOURS)],
                                                        "marker": "o", "linestyle": "-", "markersize": 4})
                               for i, a in enumerate(arms)])
    handles += _legend_handles([(DRIFT_LEGEND[state], {"colour": DRIFT_RINGS[state], "marker": "o", "face": "none",
                                                       "markersize": 9}) for state in DRIFT_STATES if state in states])
    _figure_legend(fig, handles)
    fig.suptitle(title, fontsize=10)
    if drift:
        marks = ("Rings: the first and last run the receipt's drift check compared (drift[]: first_run_index, "
                 "last_run_index, first, last); red where it is flagged (its |change_percent| exceeds the spread "
                 "of the arm's other runs, other_runs_spread_percent), labelled with its change_percent; grey where "
                 "it is not" + ("; blue where the check could not run (fewer than 2 runs between the first and the "
                                "last: no spread to set the change against)"
                                if DRIFT_UNCHECKED in states else "") + f". {drift_summary(drift)}")
    else:
        marks = "The receipt records no drift check (drift[] is absent or empty), so nothing is marked."
    caption = (f"Each dot is one ok run's {', '.join(_metric(m)[1] for m in metrics)} at one concurrency, against "
               f"its run_index within its arm (workload order: {order or 'not recorded'}; with interleaved or "
               f"sandwich order an arm's runs were not back to back). {marks} A first run well below the rest is an "
               f"engine that was not yet warm.")
    return Figure(name=name, title=title, caption=caption, fig=fig)


def _agreement_figure(name: str, title: str, agreement: list[dict[str, Any]]) -> Figure | None:
    """Two drivers on one engine: per metric and concurrency the ratio of their medians, its interval, the band."""
    if not agreement:
        return None
    as_ratio = all(isinstance(e.get("ratio"), (int, float)) for e in agreement)
    metrics = list(dict.fromkeys(e["metric"] for e in agreement))
    drivers = list(dict.fromkeys(e["driver"] for e in agreement))
    concurrencies = sorted({e["concurrency"] for e in agreement})
    nrows, ncols = _grid(len(metrics))
    fig, axes = _new_figure(nrows, ncols)
    whiskers = 0
    for ax, metric in zip(axes, metrics):
        mine = [e for e in agreement if e["metric"] == metric]
        targets = [e["target_percent"] / 100 for e in mine if isinstance(e.get("target_percent"), (int, float))]
        if as_ratio:
            lows = [e["ci_low"] if isinstance(e.get("ci_low"), (int, float)) else e["ratio"] for e in mine]
            highs = [e["ci_high"] if isinstance(e.get("ci_high"), (int, float)) else e["ratio"] for e in mine]
            _ratio_axis(ax, lows, highs, targets)
            _band(ax, targets, [e["concurrency"] for e in mine])
        else:  # a receipt written before agreement carried a ratio: its difference in percent, band ± target
            ax.axhline(0.0, color="black", linewidth=0.8, linestyle="--")
            for e in mine:
                if isinstance(e.get("target_percent"), (int, float)):
                    t = e["target_percent"]
                    c = e["concurrency"]
                    ax.fill_between([c / 1.25, c * 1.25], -t, t, color="#90caf9", alpha=0.45, linewidth=0)
        for e in mine:
            i = drivers.index(e["driver"])
            x = _offset(e["concurrency"], i, len(drivers))
            verdict = e.get("verdict") or ("within target" if e.get("within_target") else "beyond target")
            colour = VERDICT_COLOURS.get(e.get("verdict"), NO_VERDICT_COLOUR)
            if as_ratio and isinstance(e.get("ci_low"), (int, float)) and isinstance(e.get("ci_high"), (int, float)):
                _whisker(ax, x, e["ratio"], e["ci_low"], e["ci_high"], colour, marker="os^D"[i % 4])
                whiskers += 1
                top = e["ratio"]
            else:
                y = e["ratio"] if as_ratio else e["difference_percent"]
                ax.plot([x], [y], marker="os^D"[i % 4], color=colour, linestyle="none")
                top = y
            _label(ax, x, top, verdict, colour)
        _concurrency_axis(ax, concurrencies)
        ax.set_ylabel(f"{'ratio of medians' if as_ratio else 'difference (%)'}", fontsize=8)
        ax.set_title(_metric(metric)[1], fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    _hide_unused(axes, len(metrics))
    verdicts = list(dict.fromkeys(e.get("verdict") for e in agreement))
    reference = ", ".join(dict.fromkeys(e["reference_driver"] for e in agreement))
    handles = _legend_handles(
        [(f"{v}" if v else "no verdict recorded", {"colour": VERDICT_COLOURS.get(v, NO_VERDICT_COLOUR),
                                                   "marker": "o", "linestyle": "-"}) for v in verdicts]
        + [(f"driver {d} over {reference}", {"colour": "black", "marker": "os^D"[i % 4]})
           for i, d in enumerate(drivers)]
        + [("agreement band (± target_percent)", {"colour": "#90caf9", "alpha": 0.45, "patch": True})])
    _figure_legend(fig, handles)
    fig.suptitle(title, fontsize=10)
    targets_said = ", ".join(f"{t:g}" for t in sorted({e["target_percent"] for e in agreement
                                                      if isinstance(e.get("target_percent"), (int, float))}))
    runs = {d: {e.get("runs") for e in agreement if e["driver"] == d and e.get("runs")} for d in drivers}
    runs[reference] = {e.get("reference_runs") for e in agreement if e.get("reference_runs")}
    if as_ratio:
        what = (f"Each dot is the receipt's ratio (median of {', '.join(drivers)}'s runs over median of "
                f"{reference}'s runs on the same engine) for one metric at one concurrency; each whisker is the "
                f"receipt's interval [ci_low, ci_high] of that ratio ({whiskers} drawn; an entry without an interval "
                f"is a dot alone). {_said([e.get('interval_method') for e in agreement], 'Interval method')}. "
                f"No rank test is made for agreement. Shaded: 1 ± target_percent ({targets_said} percent); dashed: "
                f"ratio 1.")
    else:
        what = (f"Each dot is the receipt's difference_percent of {', '.join(drivers)} against {reference} "
                f"(median over runs); the receipt holds no interval for it (written before agreement carried one), "
                f"so no whisker is drawn. Shaded: ± target_percent ({targets_said} percent).")
    caption = (f"{what} Labels: the receipt's verdict. "
               f"{_said([e.get('verdict_rule') for e in agreement], 'Verdict rule')}. "
               f"Runs per driver: {_counts({k: {x for x in v if x} for k, v in runs.items()}) or 'not recorded'}. "
               f"x: concurrency (log2); drivers set slightly apart sideways.")
    return Figure(name=name, title=title, caption=caption, fig=fig)


def _kis_figure(name: str, title: str, rows: list[dict[str, Any]], arm_a: str, arm_b: str,
                runs_said: str, verdict_rule: str | None) -> Figure | None:
    """Per concurrency: the kernel lab's predicted B/A (a diamond) and the measured B/A with its interval."""
    rows = [r for r in rows if isinstance(r.get("concurrency"), int)]
    if not rows:
        return None
    fig, (ax,) = _new_figure(1, 1)
    measured = [r for r in rows if all(isinstance((r.get("measured") or {}).get(k), (int, float))
                                       for k in ("ratio_b_over_a", "ci_low", "ci_high"))]
    predicted = [r for r in rows if isinstance(r.get("predicted_ratio"), (int, float))]
    _ratio_axis(ax, [r["measured"]["ci_low"] for r in measured] + [r["predicted_ratio"] for r in predicted],
                [r["measured"]["ci_high"] for r in measured] + [r["predicted_ratio"] for r in predicted], [])
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", zorder=1)
    for r in measured:
        m = r["measured"]
        colour = VERDICT_COLOURS.get(r.get("verdict"), NO_VERDICT_COLOUR)
        _whisker(ax, _offset(r["concurrency"], 1, 2), m["ratio_b_over_a"], m["ci_low"], m["ci_high"], colour)
        _label(ax, _offset(r["concurrency"], 1, 2), m["ratio_b_over_a"],
               "\n".join(x for x in (r.get("verdict") or "no verdict", qualifier(r)) if x), colour)
    for r in predicted:
        ax.plot([_offset(r["concurrency"], 0, 2)], [r["predicted_ratio"]], "D", color="#6a1b9a", markersize=7,
                linestyle="none", zorder=5)
    _concurrency_axis(ax, [r["concurrency"] for r in rows])
    ax.set_ylabel("B/A of output throughput (tok/s over tok/s)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    verdicts = list(dict.fromkeys(r.get("verdict") for r in measured))
    handles = _legend_handles(
        [("predicted B/A (kernel lab + Amdahl)", {"colour": "#6a1b9a", "marker": "D"})]
        + [(f"measured B/A and its interval: {v or 'no verdict'}",
            {"colour": VERDICT_COLOURS.get(v, NO_VERDICT_COLOUR), "marker": "o", "linestyle": "-"})
           for v in verdicts]
        + [("B/A = 1", {"colour": "black", "linestyle": "--"})])
    ax.legend(handles=handles, fontsize=7, loc="best")
    ax.set_title(title, fontsize=10)
    confs = sorted({r["measured"]["confidence"] for r in measured
                    if isinstance(r["measured"].get("confidence"), (int, float))})
    conf = "/".join(f"{c * 100:g} %" for c in confs) or "(confidence not stated)"
    caption = (f"B = {arm_b} (the candidate kernel inside the engine), A = {arm_a}. Diamonds: the receipt's "
               f"predicted_ratio per concurrency, from the kernel lab's per-call times through Amdahl on arm A's "
               f"decode step (the receipt's 1 + expected_gain_percent / 100 of its amdahl record). Dots: the measured "
               f"ratio_b_over_a of output throughput; whiskers: its {conf} interval [ci_low, ci_high]. "
               f"{_said([(r.get('measured') or {}).get('interval_method') for r in measured], 'Interval method')}. "
               f"Labels: the prediction's verdict as the receipt records it, and what it can say: BELOW or ABOVE, "
               f"the prediction outside the interval; CONSISTENT but not informative, an interval wider than the "
               f"predicted effect. "
               f"{_said([verdict_rule], 'Verdict rule')}. {runs_said} x: concurrency (log2); "
               f"predicted and measured set slightly apart sideways.")
    return Figure(name=name, title=title, caption=caption, fig=fig)


def _device(doc: dict[str, Any], block: dict[str, Any]) -> str:
    """The device a serving block names (its ``gpu``), as a title says it (``report.console.device_label``)."""
    from .console import device_label, is_functional

    return device_label(block.get("gpu"), functional=is_functional(doc))


def _public_label(arm: dict[str, Any]) -> str:
    return f"{arm.get('recipe')} · {arm['driver']}" if arm.get("driver") else str(arm.get("recipe"))


def _public_arms_figure(name: str, title: str, block: dict[str, Any], arms: list[_Arm]) -> Figure | None:
    """The public workload: each arm's runs and recorded median, against the published example."""
    recorded = block.get("arms") or []
    if not recorded:
        return None
    published = block.get("published_example") or {}
    fields = ("output_tokens_per_second", "request_throughput")
    fig, axes = _new_figure(1, 2)
    labels = [_public_label(a) for a in recorded]
    for ax, f in zip(axes, fields):
        for i, (rec, label) in enumerate(zip(recorded, labels)):
            colour = ARM_COLOURS[i % len(ARM_COLOURS)]
            arm = next((x for x in arms if x.label == label), None)
            values = [r[f] for r in (arm.runs if arm else []) if isinstance(r.get(f), (int, float))]
            ax.plot([i] * len(values), values, "o", color=colour, markersize=4, alpha=0.7, linestyle="none")
            if isinstance(rec.get(f), (int, float)):
                ax.plot([i - 0.25, i + 0.25], [rec[f]] * 2, "-", color=colour, linewidth=2)
        if isinstance(published.get(f), (int, float)):
            ax.axhline(published[f], color="#c62828", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=7, rotation=15)
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_xlabel("arm (recipe · driver)", fontsize=8)
        ax.set_ylabel(_axis_label(f), fontsize=8)
        ax.set_title(_metric(f)[1], fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    handles = _legend_handles(
        [("one run", {"colour": "#424242", "marker": "o", "markersize": 4}),
         ("the arm's median (arms[])", {"colour": "#424242", "linestyle": "-"})]
        + [("published example", {"colour": "#c62828", "linestyle": "--"})] * bool(published))
    _figure_legend(fig, handles)
    fig.suptitle(title, fontsize=10)
    w = block.get("workload") or {}
    disclosed = published.get("hardware_and_runtime_disclosed")
    pub = ("Dashed red: the published example's number as the receipt records it"
           + ("" if disclosed else " (the example does not disclose its hardware and runtime)") + "."
           if published else "The receipt records no published example.")
    per_arm = ", ".join(f"{_public_label(a)} {a.get('runs') or 'not recorded'}" for a in recorded)
    caption = (f"The public workload ({w.get('requests')} requests at concurrency {w.get('concurrency')}, "
               f"{w.get('input_tokens')} input / {w.get('output_tokens')} output tokens). Each dot is one ok run's "
               f"number; each short bar is the arm's median over its runs as the receipt's arms[] records it. {pub} "
               f"Runs per arm: {per_arm}.")
    return Figure(name=name, title=title, caption=caption, fig=fig)


# --- tables ---------------------------------------------------------------------------------------------------

def _statistics_table(stats: list[dict[str, Any]], a: str, b: str) -> Table:
    columns = ["concurrency", "metric", "unit", f"A median ({a})", f"B median ({b})", "ratio B/A", "CI low",
               "CI high", "confidence", "p", "min achievable p", "equivalence margin", "verdict"]
    rows = [[s.get("concurrency"), statistic_metric(s), _metric(s.get("metric", ""))[2], s.get("a_median"),
             s.get("b_median"), s.get("ratio_b_over_a"), s.get("ci_low"), s.get("ci_high"), s.get("confidence"),
             s.get("p_value"), s.get("min_achievable_p"), s.get("equivalence_margin"), s.get("verdict")]
            for s in sorted(stats, key=lambda s: (s.get("concurrency", 0), s.get("metric", "")))]
    caption = (f"B = {b} over A = {a}, per concurrency and metric, as the receipt's statistics[] record them. "
               f"{_said([s.get('interval_method') for s in stats], 'Interval method')}. "
               f"{_said([s.get('test_method') for s in stats], 'Test method')}. "
               f"{_said([s.get('verdict_rule') for s in stats], 'Verdict rule')}.")
    return Table(title=f"B/A per concurrency and metric: {b} over {a}", columns=columns, rows=rows, caption=caption)


def _comparisons_table(comparisons: list[dict[str, Any]]) -> Table:
    """The seed's derived comparison, for a receipt without statistics (v1): no interval, no test."""
    columns = ["recipe A", "recipe B", "concurrency", "throughput speedup (B/A)", "p95 TTFT reduction (%)",
               "p95 latency reduction (%)"]
    rows = [[c.get("recipe_a"), c.get("recipe_b"), c.get("concurrency"), c.get("throughput_speedup"),
             c.get("ttft_p95_reduction_percent"), c.get("latency_p95_reduction_percent")] for c in comparisons]
    return Table(title="B against A per concurrency (medians only)", columns=columns, rows=rows,
                 caption="As the receipt's comparisons[] record them: ratios and reductions of medians, with no "
                         "interval and no test (the receipt holds no statistics).")


def _drift_table(drift: list[dict[str, Any]]) -> Table:
    columns = ["recipe", "driver", "concurrency", "metric", "first run_index", "last run_index", "first", "last",
               "change (%)", "other runs' spread (%)", "flagged"]
    rows = [[d.get("recipe"), d.get("driver"), d.get("concurrency"), d.get("metric"), d.get("first_run_index"),
             d.get("last_run_index"), d.get("first"), d.get("last"), d.get("change_percent"),
             d.get("other_runs_spread_percent"),
             d.get("flagged") if drift_state(d) != DRIFT_UNCHECKED else UNCHECKED_CELL] for d in drift]
    return Table(title="Warm-up drift: each arm's first run against its last", columns=columns, rows=rows,
                 caption="As the receipt's drift[] records it: flagged when |change| exceeds the spread "
                         "((max - min) / median) of the arm's other runs; with fewer than 2 other runs there is no "
                         f"spread and the check could not run. {drift_summary(drift)}")


def _agreement_table(agreement: list[dict[str, Any]]) -> Table:
    columns = ["concurrency", "metric", "reference driver", "driver", "reference median", "median",
               "difference (%)", "ratio", "CI low", "CI high", "runs (driver / reference)", "target (%)",
               "within target", "verdict"]
    rows = [[e.get("concurrency"), e.get("metric"), e.get("reference_driver"), e.get("driver"),
             e.get("reference_median"), e.get("median"), e.get("difference_percent"), e.get("ratio"),
             e.get("ci_low"), e.get("ci_high"),
             f"{e.get('runs', '?')} / {e.get('reference_runs', '?')}" if e.get("runs") else None,
             e.get("target_percent"), e.get("within_target"), e.get("verdict")] for e in agreement]
    caption = (f"As the receipt's driver_agreement[] records it. "
               f"{_said([e.get('interval_method') for e in agreement], 'Interval method')}. "
               f"{_said([e.get('verdict_rule') for e in agreement], 'Verdict rule')}.")
    return Table(title="Driver agreement on one engine", columns=columns, rows=rows, caption=caption)


def _bench_measurements_table(measurements: list[dict[str, Any]]) -> Table:
    columns = ["recipe", "driver", "concurrency", "runs", "failures", "output tok/s", "request/s",
               "p95 TTFT (ms)", "p95 TPOT (ms)", "p95 latency (ms)"]
    rows = [[m.get("recipe"), m.get("driver"), m.get("concurrency"), m.get("runs"), m.get("failures"),
             m.get("output_tokens_per_second"), m.get("request_throughput"), m.get("ttft_p95_ms"),
             m.get("tpot_p95_ms"), m.get("latency_p95_ms")] for m in measurements]
    return Table(title="Medians per driver and concurrency", columns=columns, rows=rows,
                 caption="Median over each driver's ok runs, as the receipt's measurements[] record it.")


def _kis_table(rows: list[dict[str, Any]], arm_a: str, arm_b: str) -> Table:
    columns = ["concurrency", "decode rows", "predicted B/A", "expected gain (%)", "best possible gain (%)",
               "op share", "measured B/A", "CI low", "CI high", "confidence", "measured verdict", "verdict",
               "informative", "kernel verdict", "measured p95 TTFT B/A"]
    out = []
    for r in sorted(rows, key=lambda r: r.get("concurrency", 0)):
        m, amdahl = r.get("measured") or {}, r.get("amdahl") or {}
        out.append([r.get("concurrency"), r.get("decode_rows"), r.get("predicted_ratio"),
                    amdahl.get("expected_gain_percent"), amdahl.get("best_possible_gain_percent"),
                    amdahl.get("op_share"), m.get("ratio_b_over_a"), m.get("ci_low"), m.get("ci_high"),
                    m.get("confidence"), m.get("verdict"), r.get("verdict"), r.get("informative"),
                    r.get("kernel_verdict"), (r.get("prefill") or {}).get("measured_ttft_p95_ratio")])
    caption = (f"B = {arm_b}, A = {arm_a}, as the receipt's kernel_in_serving.prediction.concurrencies[] records "
               f"them. {_said([(r.get('measured') or {}).get('interval_method') for r in rows], 'Interval method')}.")
    return Table(title="Kernel in serving: predicted against measured B/A of output throughput", columns=columns,
                 rows=out, caption=caption)


def _public_table(block: dict[str, Any]) -> Table:
    columns = ["recipe", "driver", "runs", "failures", "output tok/s", "request/s", "p95 TTFT (ms)",
               "p95 TPOT (ms)", "p95 latency (ms)"]
    rows = [[a.get("recipe"), a.get("driver"), a.get("runs"), a.get("failures"), a.get("output_tokens_per_second"),
             a.get("request_throughput"), a.get("ttft_p95_ms"), a.get("tpot_p95_ms"), a.get("latency_p95_ms")]
            for a in block.get("arms") or []]
    published = block.get("published_example")
    if published:
        rows.append(["published example", "", None, None, published.get("output_tokens_per_second"),
                     published.get("request_throughput"), None, None, None])
    # the comparison boundary is part of the section's reason in the page's head (``build._head``): said once, there
    return Table(title="Public workload: each arm's medians" + (" and the published example" if published else ""),
                 columns=columns, rows=rows)


# --- sections -----------------------------------------------------------------------------------------------------

def _paired_parts(prefix: str, block: dict[str, Any], runs: list[dict[str, Any]],
                  source: str, what: str) -> tuple[list[Figure], list[Table], list[str], tuple[str, str]]:
    """The figures and tables of one ``paired_aiperf`` block (the PoC's, or the public A/B's embedded one)."""
    comparisons = block.get("comparisons") or [  # v1: compiled against eager, by name
        {"recipe_a": "eager", "recipe_b": "compiled", **c} for c in block.get("compiled_vs_eager") or []]
    if comparisons:
        a, b = comparisons[0]["recipe_a"], comparisons[0]["recipe_b"]
    else:
        recipes = list(dict.fromkeys(m["recipe"] for m in block.get("measurements") or []))
        a, b = (recipes + ["A", "B"])[:2]
    driver = block.get("primary_driver")
    notes = []
    source_said: str | None = f"{source}, driver {driver}"
    if not runs:
        runs = _runs_from_statistics(block, a, b)
        if runs:
            source_said = "from statistics[] a_values / b_values: the receipt holds no run records for this A/B"
            notes.append("no run records for this A/B: the dots are statistics[]' a_values / b_values, and the "
                         "drift figure (which needs run order) is not drawn")
        else:
            source_said = None
            notes.append("the receipt holds no per-run numbers for this A/B (neither runs[] nor statistics[]): "
                         "only its medians are drawn")
    measurements = block.get("measurements") or []
    arms = [_arm(f"{label} {recipe}", recipe, driver, runs, measurements) for label, recipe in (("A", a), ("B", b))]
    workload = block.get("workload") or {}
    concurrencies = list(workload.get("concurrency") or sorted({r["concurrency"] for x in arms for r in x.runs}
                                                               | {m["concurrency"] for m in measurements}))
    stats = block.get("statistics") or []
    drift = block.get("drift") or []
    figures = [
        _metrics_figure(f"{prefix}-metrics", f"{what}: each metric over concurrency, per arm", arms, concurrencies,
                        source_said),
        _ratio_figure(f"{prefix}-ratios", f"{what}: B/A ({b} over {a}) against the equivalence band", stats, a, b),
        _drift_figure(f"{prefix}-drift", f"{what}: each arm's runs in order (warm-up drift)", arms, concurrencies,
                      drift, workload.get("order")),
    ]
    tables = [_statistics_table(stats, a, b)] if stats else [_comparisons_table(comparisons)]
    if drift:
        tables.append(_drift_table(drift))
    # the block's decision and reason are the page's head's (``build._head``): said once, there
    return [f for f in figures if f is not None], tables, notes, (a, b)


def _paired_section(doc: dict[str, Any]) -> Section | None:
    block = doc.get("paired_aiperf")
    if not isinstance(block, dict):
        return None
    recipes = {m.get("recipe") for m in block.get("measurements") or []}
    runs, source = _paired_runs(doc, block, recipes)
    figures, tables, notes, (a, b) = _paired_parts("paired", block, runs, source, "Paired A/B")
    return Section(title=f"Serving A/B (paired_aiperf, {_device(doc, block)}): {b} over {a}",
                   figures=figures, tables=tables, notes=notes)


def _kis_section(doc: dict[str, Any]) -> Section | None:
    block = doc.get("kernel_in_serving")
    if not isinstance(block, dict):
        return None
    prediction = block.get("prediction") or {}
    rows = [r for r in prediction.get("concurrencies") or [] if isinstance(r, dict)]
    paired = doc.get("paired_aiperf") or {}
    comparisons = paired.get("comparisons") or []
    arm_a = prediction.get("arm_a") or (comparisons[0]["recipe_a"] if comparisons else "arm A")
    arm_b = comparisons[0]["recipe_b"] if comparisons else "arm B"
    runs = {(s["concurrency"]): (len(s.get("a_values") or []), len(s.get("b_values") or []))
            for s in paired.get("statistics") or [] if s.get("metric") == "output_tok_s"}
    runs_said = ("Runs per arm (A / B) per concurrency, from paired_aiperf's statistics: "
                 + ", ".join(f"c={c}: {na} / {nb}" for c, (na, nb) in sorted(runs.items())) + "."
                 if runs else "")
    # the verdict rule is the prediction's reason in the page's head: said once, there
    notes = [f"note: {prediction['note']}"] if prediction.get("note") else []
    notes += [f"candidate {prediction.get('candidate')} against incumbent {prediction.get('incumbent')}, "
              f"{prediction.get('mode')} mode, {prediction.get('calls_per_step')} calls per decode step"]
    figure = _kis_figure("kis-prediction", "Kernel in serving: predicted against measured B/A", rows, arm_a, arm_b,
                         runs_said, prediction.get("verdict_rule"))
    return Section(title=f"Kernel in serving: {arm_b} against {arm_a}", figures=[figure] if figure else [],
                   tables=[_kis_table(rows, arm_a, arm_b)] if rows else [], notes=notes)


def _bench_section(doc: dict[str, Any]) -> Section | None:
    block = doc.get("bench")
    if not isinstance(block, dict):
        return None
    recipe = block.get("recipe")
    measurements = block.get("measurements") or []
    drivers = list(dict.fromkeys([*(doc.get("drivers") or {}), *(m.get("driver") for m in measurements)]))
    runs = [r for r in doc.get("runs") or [] if r.get("recipe") == recipe]
    drivers = [d for d in drivers if any(r.get("driver") == d for r in runs)
               or any(m.get("driver") == d for m in measurements)]
    arms = [_arm(f"{recipe} · {d}", recipe, d, runs, measurements) for d in drivers]
    workload = block.get("workload") or {}
    concurrencies = list(workload.get("concurrency") or sorted({m["concurrency"] for m in measurements}))
    agreement = block.get("driver_agreement") or []
    drift = block.get("drift") or []
    figures = [
        _metrics_figure("bench-metrics", f"Benchmark of {recipe}: each metric over concurrency, per driver", arms,
                        concurrencies, "the receipt's runs[]"),
        _agreement_figure("bench-drivers", f"Driver agreement on one {recipe} engine", agreement),
        _drift_figure("bench-drift", f"Benchmark of {recipe}: each driver's runs in order (warm-up drift)", arms,
                      concurrencies, drift, workload.get("order")),
    ]
    tables = [_agreement_table(agreement)] if agreement else []
    tables.append(_bench_measurements_table(measurements))
    if drift:
        tables.append(_drift_table(drift))
    notes = [] if len(drivers) > 1 else [f"one driver ({', '.join(drivers) or 'none recorded'}): no agreement "
                                         "to show"]
    return Section(title=f"Serving benchmark (bench, {_device(doc, block)}): {recipe} under "
                         f"{', '.join(drivers)}", figures=[f for f in figures if f is not None], tables=tables,
                   notes=notes)


def _public_section(doc: dict[str, Any]) -> Section | None:
    block = doc.get("public_workload_reproduction")
    if not isinstance(block, dict):
        return None
    if not block.get("arms"):  # v1: two fixed arms, no recipe or driver named
        block = {**block, "arms": [{"recipe": k, "driver": None, **block[k]}
                                   for k in ("balanced", "throughput_mode") if isinstance(block.get(k), dict)]}
    recorded = block["arms"]
    recipes = {a.get("recipe") for a in recorded}
    concurrency = (block.get("workload") or {}).get("concurrency")
    # The runs behind it: this receipt's (serve bench), or the public A/B's receipt under evidence.public (a PoC).
    ab, runs, source = None, [], ""
    for gpu, r in _embedded(doc, "public"):
        pa = r.get("paired_aiperf") or {}
        if {m.get("recipe") for m in pa.get("measurements") or []} == recipes:
            ab, runs, source = pa, list(r.get("runs") or []), f"evidence.public.{gpu}.runs[] (the public A/B's " \
                                                              f"serve ab receipt)"
            break
    if ab is None:
        runs, source = list(doc.get("runs") or []), "the receipt's runs[]"
    runs = [r for r in runs if concurrency is None or r.get("concurrency") == concurrency]
    arms = [_arm(_public_label(a), a.get("recipe"), a.get("driver"), runs, [])
            for a in recorded]
    figures: list[Figure] = []
    tables = [_public_table(block)]
    # the section's decision and reason are the page's head's (``build._head``): said once, there
    notes = [f"driver agreement: {line}" for line in block.get("driver_agreement") or []]
    title = ("Public workload: each arm against the published example" if block.get("published_example") else
             "Public workload: each arm's runs and median (the workload has no published example)")
    fig = _public_arms_figure("public-arms", title, block, arms)
    if fig is not None:
        fig.caption += (f" Runs from {source}." if any(a.runs for a in arms) else
                        " The receipt holds no per-run numbers for these arms: no dots.")
        figures.append(fig)
    if ab is not None:
        more_figures, more_tables, more_notes, _ = _paired_parts("public", ab, runs, source, "Public-workload A/B")
        figures += more_figures
        tables += more_tables
        notes += more_notes
    return Section(title="Public workload reproduction", figures=figures, tables=tables, notes=notes)


def _cost_section(doc: dict[str, Any]) -> Section | None:
    """The receipt's cost per token (``decide.cost``): a serving receipt's one GPU type, or a PoC's types ranked."""
    cost = doc.get("cost")
    if not isinstance(cost, dict):
        return None
    blocks = ([("", cost)] if "per_recipe" in cost else
              [(f"{section} · {gpu}", b) for section, by in (cost.get("by_gpu") or {}).items()
               for gpu, b in sorted(by.items())])
    rows, notes = [], []
    for label, b in blocks:
        price = b.get("price")
        if price is None:
            notes.append(f"{label or 'this receipt'}: {b.get('note')}")
            continue
        for r in b.get("per_recipe") or []:
            rows.append([label or b.get("gpu_type"), r["recipe"], r["concurrency"], r["gpus"],
                         price["usd_per_gpu_hour"], r["output_usd_per_mtok"], r["input_usd_per_mtok"],
                         r["total_usd_per_mtok"]])
    if not rows and not notes:
        return None
    priced = [b for _, b in blocks if b.get("price")]
    caption = (f"{priced[0]['method']}. Prices: " + "; ".join(
        f"{b['gpu_type']} {b['price']['provider']}, {b['price']['source']}, read {b['price']['read_on']}"
        for b in priced)) if priced else ""
    table = Table(title="Cost per million tokens at the recorded GPU prices",
                  columns=["GPU", "recipe", "c", "GPUs", "USD per GPU-hour", "USD per M output", "USD per M input",
                           "USD per M tokens"], rows=rows, caption=caption)
    return Section(title="Cost per token", tables=[table] if rows else [], notes=notes)


def serving_sections(doc: dict[str, Any]) -> list[Section]:
    """The serving evidence of an optimization-poc receipt (v2 document, as JSON) as report sections, in the order
    paired A/B, kernel in serving, bench, public workload, cost; a section the receipt does not hold is left out (a
    receipt without serving evidence gives ``[]``)."""
    sections = [_paired_section(doc), _kis_section(doc), _bench_section(doc), _public_section(doc),
                _cost_section(doc)]
    return [s for s in sections if s is not None]

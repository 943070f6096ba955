"""The kernel lab's part of a report: a screening receipt (v3) drawn per timing mode, its verdict grid and its
Amdahl ceiling, or, for a functional screen (nothing timed), what it checked: correctness per implementation and row
count; and a PoC's ``custom_kernel`` block, one panel per GPU type that timed something, side by side.

Every figure draws numbers the receipt holds: per-trial medians (each trial's median of its kept samples, the unit
the comparisons pair), the floor the receipt records per cell, the speedups and intervals of its comparisons."""
from __future__ import annotations

from typing import Any

from .model import Figure, Section, Table, new_figure

VERDICT_COLOURS = {"FASTER": "#2e7d32", "SAME": "#607d8b", "SLOWER": "#c62828", "AMBIGUOUS": "#f9a825",
                   "FLAGGED": "#8e24aa"}
MARKERS = "osD^v<>ph*"


def rows_axes(ax: Any, *, ylabel: str, title: str, rows: list[int], log_y: bool = True) -> None:
    """The axes every kernel plot shares: rows on a log2 axis with a tick at, and room for, every row count in
    ``rows`` (all the receipt measured, drawn or not), a log y axis (``log_y``) and a light grid."""
    from matplotlib.ticker import NullLocator

    rs = sorted(set(rows))
    ax.set_xscale("log", base=2)
    if rs:
        ax.set_xlim(rs[0] / 1.5, rs[-1] * 1.5)
        ax.set_xticks(rs, [str(r) for r in rs])
        ax.xaxis.set_minor_locator(NullLocator())
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("rows (tokens in the batch)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def trial_medians(cell: dict[str, Any]) -> list[float]:
    """Each trial's median of its kept samples (``TimingCell.trial_medians``: the rejected samples left out)."""
    from ..receipts.screen_result import TimingCell

    return TimingCell.model_validate(cell).trial_medians()


def _cell_median(cell: dict[str, Any]) -> float | None:
    return (cell.get("summary") or {}).get("median")


def _timing_figure(result: dict[str, Any], mode: str) -> Figure | None:
    impls = [i for i in result["implementations"] if i["status"] == "ok" and
             any(c["mode"] == mode for c in i["timings"])]
    if not impls:
        return None
    fig, (ax,) = new_figure(8.5, 5.0)
    floors: dict[int, float] = {}
    for n, impl in enumerate(impls):
        cells = sorted((c for c in impl["timings"] if c["mode"] == mode and _cell_median(c) is not None),
                       key=lambda c: c["rows"])
        rows = [c["rows"] for c in cells]
        med = [_cell_median(c) for c in cells]
        lo, hi = [], []
        for c, m in zip(cells, med):
            t = trial_medians(c) or [m]
            lo.append(max(m - min(t), 0.0))
            hi.append(max(max(t) - m, 0.0))
        ax.errorbar(rows, med, yerr=[lo, hi], marker=MARKERS[n % len(MARKERS)], capsize=3, linewidth=1.2,
                    label=f"{impl['key']} ({impl.get('kind') or 'implementation'})")
        for c in cells:
            if c.get("floor_us") is not None:
                floors[c["rows"]] = c["floor_us"]
        for c, m in zip(cells, med):
            if c.get("flags"):
                ax.annotate("flagged", (c["rows"], m), textcoords="offset points", xytext=(3, 6), fontsize=7,
                            color=VERDICT_COLOURS["FLAGGED"])
    if floors:
        xs = sorted(floors)
        ax.plot(xs, [floors[x] for x in xs], linestyle="--", color="black", linewidth=1.0,
                label="floor (per cell, as recorded)")
    rows_axes(ax, ylabel="time per call (µs)", title=f"{mode} mode: time per call",
              rows=[*(result.get("rows") or []), *(c["rows"] for i in impls for c in i["timings"])])
    ax.legend(fontsize=8)
    method = (result.get("methods") or {}).get(mode, "")
    caption = (f"Median time per call over every kept sample of the cell; whiskers: the lowest and highest of the "
               f"{result.get('trials', '?')} trials' medians (each trial's median of its kept samples). Dashed: "
               f"the cell's physical floor as the receipt records it (the larger of the empty-kernel floor of "
               f"the mode and the byte floor at the measured copy bandwidth, where bytes reach device memory). "
               f"Cells with flags are marked. Method: {method}")
    return Figure(name=f"time-{mode}", title=f"Time per call, {mode} mode", caption=caption, fig=fig)


def _bandwidth_table(result: dict[str, Any]) -> Table | None:
    rows = []
    for impl in result["implementations"]:
        for c in impl["timings"]:
            if c.get("pct_of_copy_bandwidth") is not None:
                rows.append([impl["key"], c["mode"], c["rows"], f"{c['achieved_gbps']:.1f}",
                             f"{c['pct_of_copy_bandwidth']:.1f} %"])
    if not rows:
        return None
    copy = (result.get("calibration") or {}).get("copy_bandwidth") or {}
    caption = (f"Only cells whose bytes reach device memory and whose byte floor is well above the empty-kernel "
               f"floor carry a %; copy bandwidth {copy.get('median_gbps', 0):.1f} GB/s ({copy.get('method', '')}).")
    return Table(title="% of copy bandwidth", columns=["implementation", "mode", "rows", "GB/s", "% of copy"],
                 rows=rows, caption=caption)


def _host_table(result: dict[str, Any]) -> Table | None:
    """Launch mode: each implementation's launch time and the host's time per call beside it (``host_summary``),
    and whether the host bounds the launch time (``host_bound``); None when no cell carries host times."""
    rows = []
    for impl in result["implementations"]:
        for c in sorted((c for c in impl["timings"] if c["mode"] == "launch"), key=lambda c: c["rows"]):
            h = c.get("host_summary")
            if not isinstance(h, dict):
                continue
            rows.append([impl["key"], c["rows"], f"{c['summary']['median']:.3f}" + ("*" if c.get("flags") else ""),
                         f"{h['median']:.2f}", f"{h['q1']:.2f}–{h['q3']:.2f}",
                         {True: "yes", False: "no"}.get(c.get("host_bound"), "")])
    if not rows:
        return None
    method = result.get("host_method") or ""
    return Table(title="Host cost per call, launch mode",
                 columns=["implementation", "rows", "launch µs (median)", "host µs/call (median)", "host q1–q3",
                          "host-bound"], rows=rows,
                 caption="What a call costs the host, as eager vLLM pays it on every call; host-bound: the host's "
                         "median is at least 0.9 x the launch median, so the launch time is the host's pace of issuing "
                         f"calls, not the GPU's (* flagged: no verdict). Method: {method}")


def _speedup_figure(result: dict[str, Any], mode: str) -> Figure | None:
    comps = [c for c in result.get("comparisons", []) if c["mode"] == mode and c.get("speedup")]
    if not comps:
        return None
    candidates = sorted({c["candidate"] for c in comps})
    fig, axes = new_figure(min(5.5 * len(candidates), 16.0), 4.8, ncols=len(candidates))
    margin = (comps[0]["speedup"].get("same_margin") or 0.0)
    every_ref = sorted({c["reference"] for c in comps})  # one colour and marker per baseline in every panel
    for ax, cand in zip(axes, candidates):
        refs = sorted({c["reference"] for c in comps if c["candidate"] == cand})
        for ref in refs:
            n = every_ref.index(ref)
            cs = sorted((c for c in comps if (c["candidate"], c["reference"]) == (cand, ref)),
                        key=lambda c: c["rows"])
            xs = [c["rows"] * (1.0 + 0.06 * (n - len(every_ref) / 2)) for c in cs]  # an offset per baseline
            ys = [c["speedup"]["ratio"] for c in cs]
            lo = [max(c["speedup"]["ratio"] - c["speedup"]["ci_lo"], 0.0) for c in cs]
            hi = [max(c["speedup"]["ci_hi"] - c["speedup"]["ratio"], 0.0) for c in cs]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker=MARKERS[n % len(MARKERS)], capsize=3, linestyle="none",
                        color=f"C{n}", label=f"vs {ref}")
        ax.axhspan(1 - margin, 1 + margin, color="grey", alpha=0.25, label=f"SAME band (±{margin:g})")
        ax.axhline(1.0, color="black", linewidth=0.8)
        rows_axes(ax, ylabel="speedup (baseline time / candidate time)", title=f"{cand}, {mode} mode",
                  rows=[c["rows"] for c in comps])
        ax.legend(fontsize=7)
    sp = comps[0]["speedup"]
    caption = (f"Speedup and its {sp.get('confidence', 0.95) * 100:g} % interval per comparison, as the receipt "
               f"computed them: {sp.get('method', '')}.")
    return Figure(name=f"speedup-{mode}", title=f"Speedup with intervals, {mode} mode", caption=caption, fig=fig)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def timing_basis(doc: dict[str, Any], key: str) -> str | None:
    """One line on what candidate ``key``'s decision comparisons rest on, from the receipt's comparisons (those its
    decision family marks, ``family``): how many have clean timing cells, how many keep their verdict with the
    interval widened by the timers' disagreement (a widening flag rule), how many carry no verdict because a flag voids
    them — and what to do about those. None when the receipt marks no decision comparison of ``key``."""
    family = [c for c in (doc.get("result") or {}).get("comparisons", [])
              if c.get("candidate") == key and c.get("family")]
    if not family:
        return None
    clean = sum(1 for c in family if not c.get("flags"))
    widened = sum(1 for c in family if c.get("flags") and c.get("widened") and c.get("verdict") != "FLAGGED")
    voided = sum(1 for c in family if c.get("verdict") == "FLAGGED")
    short = sum(1 for c in family if c.get("flags") and c.get("verdict") == "INSUFFICIENT")
    if clean == len(family):
        return (f"{key}: all {_plural(clean, 'decision comparison', 'decision comparisons')} rest on "
                "clean timing")
    text = (f"{key}: {clean} of {_plural(len(family), 'decision comparison', 'decision comparisons')} "
            f"{'rests' if clean == 1 else 'rest'} on clean timing; "
            f"{widened} {'keeps its' if widened == 1 else 'keep their'} verdict with the interval widened by the "
            f"timers' disagreement; {voided} {'carries' if voided == 1 else 'carry'} no verdict (flagged)")
    if short:
        text += f"; {short} flagged {'has' if short == 1 else 'have'} too few paired trials for a verdict"
    if voided:
        text += " — rerun, or decide on another timing mode (--policy with timing_mode)"
    return text


def _verdict_table(result: dict[str, Any], mode: str) -> Table | None:
    comps = [c for c in result.get("comparisons", []) if c["mode"] == mode]
    if not comps:
        return None
    rows_all = sorted({c["rows"] for c in comps})
    by = {(c["candidate"], c["reference"], c["rows"]): c for c in comps}
    out = []
    for cand, ref in sorted({(c["candidate"], c["reference"]) for c in comps}):
        line: list[Any] = [cand, ref]
        for r in rows_all:
            c = by.get((cand, ref, r))
            if c is None:
                line.append("")
                continue
            sp = c.get("speedup") or {}
            ratio = f" {sp['ratio']:.3f}" if sp.get("ratio") is not None else ""
            line.append(f"{c['verdict']}{ratio}")
        out.append(line)
    return Table(title=f"Verdicts, {mode} mode (candidate × baseline × rows)",
                 columns=["candidate", "baseline", *[f"rows {r}" for r in rows_all]], rows=out,
                 caption="verdict and speedup (baseline time / candidate time) per cell; a cell flagged by a timer "
                         "disagreement keeps its verdict only where it holds on the interval widened by it (a widening "
                         "flag rule); FLAGGED cells carry no verdict (their flags are in the receipt)")


def _amdahl_section(doc: dict[str, Any]) -> Section | None:
    amdahl = doc.get("amdahl") or []
    if not amdahl:
        return None
    fig, (ax,) = new_figure(7.0, 4.0)
    rows = [str(a["rows"]) for a in amdahl]
    ax.bar([i - 0.2 for i in range(len(rows))], [a["best_possible_gain_percent"] for a in amdahl], width=0.4,
           label="ceiling: the op removed entirely")
    ax.bar([i + 0.2 for i in range(len(rows))], [a["expected_gain_percent"] for a in amdahl], width=0.4,
           label="expected at the measured speedup")
    ax.set_xticks(range(len(rows)), rows)
    ax.set_xlabel("rows")
    ax.set_ylabel("end-to-end decode gain (%)")
    ax.set_title("Amdahl: what the op can give a decode step")
    ax.legend(fontsize=8)
    table = Table(title="Amdahl ceiling",
                  columns=["rows", "baseline", "decode step (ms)", "op share", "op speedup", "ceiling", "expected",
                           "step source"],
                  rows=[[a["rows"], a["baseline"], f"{a['decode_step_ms']:.4g}", f"{a['op_share'] * 100:.2f} %",
                         f"{a['op_speedup']:.4f}", f"{a['best_possible_gain_percent']:.2f} %",
                         f"{a['expected_gain_percent']:.3f} %", a["decode_step_source"]] for a in amdahl])
    return Section(title="Amdahl ceiling", figures=[Figure(
        name="amdahl", title="Amdahl ceiling", fig=fig,
        caption="Per row count: the op's share of a decode step (calls per step × the baseline's time per call ÷ "
                "the step), the gain if the op cost nothing (ceiling) and at the candidate's measured speedup.")],
        tables=[table])


def _worst(cell: dict[str, Any]) -> tuple[float | None, float | None, int]:
    """One implementation's correctness at one row count, over every check (each of its phases: eager, reuse, graph
    replay) and every output compared: the largest max relative error, the largest max absolute error (None where no
    element was finite), the checks run (``check_index``es, as ``checks_per_rows`` counts them)."""
    checks = cell.get("checks") or []
    tensors = [t for c in checks for t in c.get("tensors") or []]
    rel = [t["max_rel_err"] for t in tensors if t.get("max_rel_err") is not None]
    abs_ = [t["max_abs_err"] for t in tensors if t.get("max_abs_err") is not None]
    return (max(rel) if rel else None), (max(abs_) if abs_ else None), len({c.get("check_index") for c in checks})


def _correctness_cell(cell: dict[str, Any]) -> str:
    """A correctness table cell: PASS with the worst errors, or FAIL with the first failing check (as the receipt's
    ``CorrectnessResult.failure_summary`` words it)."""
    from ..receipts.screen_result import CorrectnessResult

    rel, abs_, checks = _worst(cell)
    if not cell.get("passed"):
        return f"FAIL: {CorrectnessResult.model_validate(cell).failure_summary()}"
    errors = ", ".join(f"{name} {v:.2g}" for name, v in (("max rel", rel), ("max abs", abs_)) if v is not None)
    return f"PASS ({_plural(checks, 'check', 'checks')}): {errors}"


def _correctness_figure(result: dict[str, Any]) -> Figure | None:
    """Per implementation that was checked: its worst max relative error over rows, the rule's rtol, failures
    marked. None when nothing was checked (every implementation skipped): no empty axes."""
    impls = [i for i in result["implementations"]
             if any(_worst(c)[0] is not None for c in i.get("correctness") or [])]
    if not impls:
        return None
    tol = result.get("tolerance") or {}
    rows = [*(result.get("rows") or []), *(c["rows"] for i in impls for c in i["correctness"])]
    fig, (ax,) = new_figure(8.0, 3.6)
    ys_all: list[float] = []
    failed_drawn = False
    for n, impl in enumerate(impls):
        cells = sorted((c for c in impl["correctness"] if _worst(c)[0] is not None), key=lambda c: c["rows"])
        xs = [c["rows"] * 2 ** ((n - (len(impls) - 1) / 2) * 0.06) for c in cells]  # set apart for legibility
        ys = [_worst(c)[0] for c in cells]
        ys_all += ys
        ax.plot(xs, ys, marker=MARKERS[n % len(MARKERS)], linewidth=1.0,
                label=f"{impl['key']} ({impl.get('kind') or 'implementation'})")
        bad = [(x, y) for x, y, c in zip(xs, ys, cells) if not c.get("passed")]
        if bad:
            ax.plot([x for x, _ in bad], [y for _, y in bad], "x", color=VERDICT_COLOURS["SLOWER"], markersize=11,
                    markeredgewidth=2, linestyle="none",
                    label=None if failed_drawn else "failed (the receipt's verdict)")
            failed_drawn = True
    rtol = tol.get("rtol")
    if rtol:
        ax.axhline(rtol, color="black", linestyle="--", linewidth=1.0, label=f"rtol of the rule ({rtol:g})")
    top = max([*ys_all, rtol or 0.0])
    log_y = min(ys_all) > 0 and top / min(ys_all) > 50  # a failure far above the rest: keep every point readable
    rows_axes(ax, ylabel="max relative error (worst check)", title="Correctness against the op's oracle", rows=rows,
              log_y=log_y)
    if not log_y:
        ax.set_ylim(0, top * 1.15)
    ax.legend(fontsize=8)
    caption = (f"Per implementation and row count: the largest max relative error (|got - ref| / |ref|, over the "
               f"elements with |ref| > atol) over every check ({result.get('checks_per_rows', '?')} per row count on "
               f"fresh inputs, each also rerun on refilled buffers) and every output compared, from the receipt's "
               f"correctness records. Dashed: the rule's rtol. The rule is {tol.get('rule', 'not recorded')}, so an "
               f"element near zero may pass above the line on atol: pass or fail is the receipt's own verdict "
               f"(failures marked ×). Implementations not checked here are in the table.")
    return Figure(name="correctness", title="Correctness per implementation and row count", caption=caption, fig=fig)


def _correctness_section(result: dict[str, Any]) -> Section:
    """A functional screen (nothing timed): what was checked, per implementation and row count, as a figure and a
    table (pass or fail with the worst errors; skipped, with the reason and the implementation's notes)."""
    rows_all = sorted({*(result.get("rows") or []),
                       *(c["rows"] for i in result["implementations"] for c in i.get("correctness") or [])})
    table_rows = []
    for i in result["implementations"]:
        by_rows = {c["rows"]: c for c in i.get("correctness") or []}
        reason = ([r for r in (i.get("skip_reason"), _first_line(i.get("error"))) if r] + list(i.get("notes") or [])
                  if i["status"] != "ok" else [])  # why it was not checked, or failed (its notes say what else ran)
        table_rows.append([i["key"], i.get("kind") or "", i["status"],
                           *(_correctness_cell(by_rows[r]) if r in by_rows else "not checked" for r in rows_all),
                           "; ".join(reason)])
    tol = result.get("tolerance") or {}
    table = Table(title="Correctness per implementation and row count",
                  columns=["implementation", "kind", "status", *(f"rows {r}" for r in rows_all),
                           "reason / notes"], rows=table_rows,
                  caption="worst max relative and absolute error over every check and output at each row count; a "
                          "failure names its first failing check as the receipt records it")
    note = (f"Nothing timed: {result.get('run_kind_reason') or 'a functional run'}. Checked: each implementation that "
            f"runs here against the op's float32 oracle at rows {', '.join(map(str, rows_all))}, "
            f"{result.get('checks_per_rows', '?')} checks per row count; rule: {tol.get('rule', 'not recorded')} "
            f"(rtol {tol.get('rtol', '?')}, atol scale {tol.get('atol_scale', '?')}).")
    figure = _correctness_figure(result)
    return Section(title="Correctness, nothing timed", figures=[figure] if figure else [],
                   tables=[table], notes=[note])


def _first_line(text: Any) -> str:
    return str(text).strip().splitlines()[0] if text else ""


def kernel_sections(doc: dict[str, Any]) -> list[Section]:
    """Sections for a kernel screening receipt (v3: ``result`` holds every implementation's cells). A functional
    screen (nothing timed) is one correctness section: no timing figure is drawn for it."""
    result = doc.get("result")
    if not isinstance(result, dict) or "implementations" not in result:
        return [_measurements_section(doc)] if doc.get("measurements") else []
    if result.get("run_kind") == "functional":
        return [_correctness_section(result)]
    impl_rows = []
    for i in result["implementations"]:
        checked = [c["rows"] for c in i.get("correctness", []) if c.get("passed")]
        failed = [c["rows"] for c in i.get("correctness", []) if not c.get("passed")]
        state = (f"correct at rows {', '.join(map(str, checked))}" if checked and not failed else
                 f"INCORRECT at rows {', '.join(map(str, failed))}" if failed else
                 (i.get("skip_reason") or i.get("error") or ""))
        impl_rows.append([i["key"], i.get("kind") or "", i["status"], str(state).splitlines()[0] if state else ""])
    basis = [line for i in result["implementations"] if i.get("kind") == "candidate"
             for line in [timing_basis(doc, i["key"])] if line]
    sections = [Section(title="Implementations", tables=[Table(
        title="Implementations", columns=["key", "kind", "status", "correctness / reason"], rows=impl_rows)],
        notes=basis)]
    decision_mode = doc.get("measurements_timing_mode")
    modes = sorted(result.get("modes") or [], key=lambda m: m != decision_mode)  # the mode decided on first
    for mode in modes:
        s = Section(title=f"{mode} mode" + (" (the mode the decision reads)" if mode == decision_mode else ""))
        for f in (_timing_figure(result, mode), _speedup_figure(result, mode)):
            if f is not None:
                s.figures.append(f)
        vt = _verdict_table(result, mode)
        if vt is not None:
            s.tables.append(vt)
        ht = _host_table(result) if mode == "launch" else None
        if ht is not None:
            s.tables.append(ht)
        if s.figures or s.tables:
            sections.append(s)
    bw = _bandwidth_table(result)
    if bw is not None:
        sections.append(Section(title="Bandwidth", tables=[bw]))
    amdahl = _amdahl_section(doc)
    if amdahl is not None:
        sections.append(amdahl)
    return sections


def _draw_measurements(ax: Any, measurements: list[dict[str, Any]], title: str) -> None:
    """The seed's measurement rows (``<impl>_ms`` per row count) as time per call over rows, one line each. Only
    measurements that time something are drawn: a functional check (no measurements) gets no timing axes at all."""
    ms = sorted(measurements, key=lambda m: m["rows"])
    series = sorted({k[:-3] for m in ms for k in m if k.endswith("_ms")})
    for n, s in enumerate(series):
        pts = [(m["rows"], m[f"{s}_ms"] * 1000) for m in ms if m.get(f"{s}_ms") is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[n % len(MARKERS)], label=s)
    rows_axes(ax, ylabel="time per call (µs)", title=title, rows=[m["rows"] for m in ms])
    ax.legend(fontsize=7)


def _measurements_section(doc: dict[str, Any]) -> Section:
    """An older screening receipt (v1/v2: measurements only): its rows drawn and tabled as they stand."""
    ms = doc["measurements"]
    mode = doc.get("measurements_timing_mode") or "timing mode not recorded"
    cols = sorted({k for m in ms for k in m}, key=lambda k: (k != "rows", k))
    fig, (ax,) = new_figure(8.0, 4.5)
    _draw_measurements(ax, ms, f"time per call ({mode})")
    return Section(title="Measurements", figures=[Figure(
        name="measurements", title=f"Time per call ({mode})", fig=fig,
        caption="The median time per call the receipt records per row count and implementation; this receipt "
                "version keeps no per-trial evidence, so no whiskers are drawn.")],
        tables=[Table(title=f"Measurements ({mode})", columns=cols, rows=[[m.get(c, "") for c in cols] for m in ms])])


def _device_name(doc: dict[str, Any], key: str, block: dict[str, Any]) -> str:
    """The device a PoC's per-GPU kernel block was measured on, with its host index where the evidence records one
    (two GPUs of one type, ``h200`` and ``h200__2``, are told apart by it); a block measured without a GPU reads as
    the CPU it ran on (``report.console.device_label``)."""
    from ..poc.gpus import receipt_hardware
    from .console import device_label, is_functional

    hw = receipt_hardware((((doc.get("evidence") or {}).get("kernel") or {}).get(key)) or {})
    index = hw.get("gpu_index")
    return device_label(block.get("gpu"), functional=is_functional(block)) + (
        f" (GPU {index})" if index is not None else "")


def custom_kernel_sections(doc: dict[str, Any]) -> list[Section]:
    """A PoC's ``custom_kernel`` block: one panel per GPU that timed something, side by side (time per call over
    rows for the candidate and every baseline the block holds), and each GPU's decision in a table (its reason is
    in the page's head, once). A functional check times nothing: it gets no timing panel; what it checked is drawn
    under its kernel screen's section (``kernel_sections``)."""
    ck = doc.get("custom_kernel")
    if not isinstance(ck, dict):
        return []
    gpus = {k: v for k, v in ck.items() if isinstance(v, dict) and "measurements" in v}
    if not gpus:
        return []
    device = {k: _device_name(doc, k, g) for k, g in gpus.items()}
    timed = {k: g for k, g in gpus.items() if g["measurements"]}
    figures = []
    if timed:
        fig, axes = new_figure(min(5.0 * len(timed), 15.0), 4.5, ncols=len(timed))
        for ax, (key, g) in zip(axes, timed.items()):
            _draw_measurements(ax, g["measurements"], f"{key}: {device[key]}")
        figures.append(Figure(
            name="custom-kernel-per-gpu", title="Time per call per GPU type", fig=fig,
            caption="The median time per call the block records per row count (custom = the candidate), one panel "
                    "per GPU type that timed something; the full per-trial evidence is in each GPU's kernel "
                    "receipt."))
    notes = [f"{k}: {device[k]}, nothing timed; what was checked, per implementation and row count, is in its kernel "
             "screen's correctness section below" for k in gpus if k not in timed]
    table = Table(title="Per GPU", columns=["GPU", "device", "decision", "timing mode"],
                  rows=[[k, device[k], g.get("decision", ""), g.get("timing_mode") or "nothing timed"]
                        for k, g in gpus.items()])
    return [Section(title=f"Custom kernel: {ck.get('operator', '')}", figures=figures, tables=[table], notes=notes)]

"""Readable views of a receipt on the console: ``show`` and ``diff`` (and the console every command prints to).

``show`` leads with what was decided: every section's decision, reason and boundary (an incomplete receipt says so
first), then the conditions its numbers hold under (GPU, software, model, workload, timing mode), then, for a kernel
screen, its per-call times (``kernel_time_tables``: with the host's time per call beside the launch time where it was
read), then the evidence.
The default view is a summary that fits the console: a table too wide drops its least important columns (named
under it) rather than squeezing every cell, the serving runs are one compact table, long text and long lists are cut
short, tables nested two records deep are counted, and the provenance and the receipts a PoC receipt embeds are one
line each. ``all`` shows every field and every row (a table too wide for the console is split into column groups
that repeat its identifying columns); ``wide`` lets tables be as wide as they need (nothing folded or dropped).

``diff`` leads with both receipts' decisions side by side and one line counting the changed, same, only-in-A and
only-in-B fields, then lists the fields that differ, each record's under a line naming it: a list of values is one
field (a differing long one shows as its median and length); the records of a long list (the serving runs, whose
medians are compared elsewhere), the records only one receipt has, and the fields that name a run rather than
measure it are one line each. Two A/B receipts whose arms differ in one recipe each are compared arm by arm
(``arm_aliases``). ``all`` lists every field, values in full.

Both walk the JSON document rather than each schema, so every version renders. Text from a receipt is printed as
plain text (``safe`` and ``Text``), never as rich markup.
"""
from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterator

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..decide.prediction import qualifier
from ..decide.vocabulary import FUNCTIONAL_CLASSES

# Lists of raw numbers: summarized by length and median in every view (they stay in the file).
RAW_KEYS = frozenset({"samples_us", "kept_samples_us", "a_values", "b_values", "samples_gbps", "sample_clock_mhz",
                      "command_line"})
# The fields a section decides with; ``show`` prints them first, ``diff`` side by side.
VERDICT_KEYS = ("decision", "decision_code", "reason", "qualification_boundary", "comparison_boundary")
BOUNDARY_KEYS = ("qualification_boundary", "comparison_boundary")
# Keys that identify an element of a list of records, for aligned diffs and the first columns of a table.
IDENTITY_KEYS = ("implementation", "candidate", "baseline", "reference", "recipe", "recipe_a", "recipe_b", "metric",
                 "driver", "mode", "rows", "concurrency", "run_index", "key", "vllm_op", "impl", "shape")
# How a summary ranks a table's columns when it must drop some (``_rank``): after the identity, verdicts and headline
# numbers are kept longest; what names a run rather than measures it (paths, hashes, pids, times) goes first.
VERDICT_COLUMNS = frozenset({"verdict", "status", "passed", "decision_code", "flagged", "kernel_verdict",
                             "informative", "gate_passed", "exit_status", "available", "too_slow", "throttled"})
HEADLINE_COLUMNS = re.compile(r"(median|median_us|ratio|ratio_b_over_a|^ci_\w+|speedup|gain_percent|tokens_per_second|"
                              r"_p95_ms)$")
LOW_COLUMNS = re.compile(r"(sha256|_path|^path|_at|app_id|run_id|raw_export|command_line|pid|pids|coresident_with|"
                         r"upstream_issue|method|definition|verdict_rule|note|notes)$")
LOW_RANK = 6  # the rank of those: left out of the summary's tables
# Top-level keys that are not sections of evidence with a decision of their own.
NOT_SECTIONS = frozenset({"provenance", "evidence", "policy", "result", "merged_from"})
# Raw sub-documents (the kernel screen a screening receipt decided from): the summary counts their nested records.
RAW_SECTIONS = frozenset({"result"})
# Shown in the conditions block or the decision block; the summary does not repeat them.
CONDITION_KEYS = frozenset({"hardware", "software", "model", "model_shape_source", "complete", "incomplete_reason",
                            "drivers", "evidence_parts"})
# The serving runs in the summary: one row per run, the numbers a reader compares.
RUN_COLUMNS = (("recipe", "arm"), ("run_index", "#"), ("concurrency", "c"), ("driver", "driver"),
               ("status", "status"), ("output_tokens_per_second", "out tok/s"), ("ttft_p95_ms", "TTFT p95 ms"),
               ("tpot_p95_ms", "TPOT p95 ms"), ("latency_p95_ms", "e2e p95 ms"), ("failures", "fail"),
               ("error", "error"))

ROWS = 40           # rows of a table in the summary
NESTED_ROWS = 12    # rows of a table nested in a record, in the summary
CELL_TEXT = 64      # characters of text in a table cell, in the summary
MAX_TEXT = 240      # characters of a text value outside tables, in the summary
REASON_TEXT = 1500  # characters of a decision's reason, in the summary (about 20 lines)
SHORT_LIST = 8      # a list of more values is shown by its length (and median), in the summary
INLINE_DICT = 16    # a record's dict with more entries of one kind (a map: calls by shape) is not made columns
MIN_COLUMN = 4      # the narrowest a column folds to
WIDE = 10_000       # the console width of a wide view: no table needs more
PIPE_WIDTH = 100    # the console width when stdout is not a terminal and COLUMNS is not set


@dataclass(frozen=True)
class View:
    """``all``: every field and every row; ``wide``: tables as wide as they need; ``timing_mode``: the timing mode
    a kernel receipt decided in (its tables' rows in other modes are left to ``all``)."""

    all: bool = False
    wide: bool = False
    timing_mode: str | None = None


_CONTROL = {c: "?" for c in (*range(0x00, 0x09), 0x0B, 0x0C, 0x0D, *range(0x0E, 0x20), *range(0x7F, 0xA0))}


def safe(text: Any) -> str:
    """Text from a receipt as the terminal may show it: control characters (escape sequences, carriage returns) turned
    into '?', so a receipt cannot clear the screen or forge colours. Rich markup is not interpreted: callers put the
    result in ``Text``."""
    return str(text).translate(_CONTROL)


def console() -> Console:
    """The console the other commands print to: their tables kept whole when the output is a file or a pipe (at least
    200 columns there); a line of text is never broken (``soft_wrap``), so a progress line stays one line in a log.
    ``receipt show`` and ``diff`` fit their tables to the terminal and use ``fitted_console``."""
    con = Console(soft_wrap=True)
    if not con.is_terminal:
        con = Console(soft_wrap=True, width=max(con.width, 200))
    return con


def fitted_console(*, wide: bool = False) -> Console:
    """The console ``show`` and ``diff`` print to: the terminal's width as rich detects it; on a file or a pipe
    ``COLUMNS`` when set, else 100 columns. ``wide``: wide enough for any table, so nothing is folded or cut (for a
    file or a pager)."""
    if wide:
        return Console(soft_wrap=False, width=WIDE)
    con = Console(soft_wrap=False)
    if not con.is_terminal and not os.environ.get("COLUMNS"):
        con = Console(soft_wrap=False, width=PIPE_WIDTH)
    return con


# ---------------------------------------------------------------------------------------------------------- values

def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_scalar(v: Any) -> bool:
    return not isinstance(v, (dict, list))


def _is_table(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


def _list_summary(key: str, v: list[Any]) -> str:
    noun = "arguments" if key == "command_line" else "samples" if key in RAW_KEYS else "values"
    if v and all(_is_number(x) for x in v):
        return f"[{len(v)} {noun}, median {statistics.median(v):.6g}]"
    return f"[{len(v)} {noun}]"


def _fmt(v: Any, key: str = "", limit: int | None = None) -> str:
    """One value as text. ``limit`` (the summary): text cut to that many characters, a list of more than
    ``SHORT_LIST`` values shown by its length and median; raw samples are always summarized."""
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        if not v:
            return "[]"
        if _is_table(v):
            return f"[{len(v)} record{'s' if len(v) > 1 else ''}]"
        if not all(_is_scalar(x) for x in v):
            return f"[{len(v)} items]"
        if key in RAW_KEYS or (limit is not None and len(v) > SHORT_LIST):
            return _list_summary(key, v)
        return _cut(", ".join(_fmt(x) for x in v), limit)
    if isinstance(v, dict):
        if not v:
            return "{}"
        if _counted(v, limit):
            return f"{{{len(v)} entries}}"
        return _cut(", ".join(f"{safe(k)}={_value(x, k, limit)}" for k, x in v.items()), limit)
    return _cut(safe(v), limit)


def _counted(v: dict[str, Any], limit: int | None) -> bool:
    """Whether the summary shows a dict by its size alone: too many entries, or entries that are not plain values."""
    return limit is not None and (len(v) > SHORT_LIST or not all(_is_scalar(x) for x in v.values()))


def _value(v: Any, key: str = "", limit: int | None = None) -> str:
    """A value on the right of ``key=``: as ``_fmt``, but a dict in braces with ``:`` between its keys and values
    (``requests_per_point={2: 96, 4: 192}``) and a list in brackets (``concurrency=[2, 4]``), so that neither reads
    as more ``key=value`` pairs of the line."""
    if isinstance(v, dict) and v and not _counted(v, limit):
        return _cut("{" + ", ".join(f"{safe(k)}: {_value(x, k, limit)}" for k, x in v.items()) + "}", limit)
    text = _fmt(v, key, limit)
    return f"[{text}]" if isinstance(v, list) and not text.startswith("[") else text


# -------------------------------------------------------------------------------------------------------- verdicts

@dataclass
class Verdict:
    """What one section decided: ``label`` ('decision', or 'prediction' for a kernel inside the engine), its code and
    text, the reason, the boundaries it states; ``note`` says why a section decides nothing."""

    section: str
    label: str = "decision"
    code: str | None = None
    decision: str | None = None
    reason: str | None = None
    reason_label: str = "reason"
    boundaries: list[tuple[str, str]] = field(default_factory=list)
    note: str | None = None
    gpus: list[str] = field(default_factory=list)

    def headline(self) -> str:
        if self.note:
            return f"none — {self.note}"
        if self.decision is None:
            return safe(self.code) if self.code else "none (the section records no decision)"
        return f"{safe(self.code)} — {safe(self.decision)}" if self.code else safe(self.decision)

    def name(self) -> str:
        return f"{self.section} ({', '.join(self.gpus)})" if self.gpus else self.section

    def _same_as(self, other: Verdict) -> bool:
        return (self.code, self.decision, self.reason) == (other.code, other.decision, other.reason)


def _decides(d: dict[str, Any]) -> bool:
    return "decision" in d or "decision_code" in d


def _verdict(section: str, d: dict[str, Any]) -> Verdict:
    return Verdict(section, code=d.get("decision_code"), decision=d.get("decision"), reason=d.get("reason"),
                   boundaries=[(k, d[k]) for k in BOUNDARY_KEYS if d.get(k) is not None])


def _prediction(section: str, kis: dict[str, Any]) -> Verdict:
    """``kernel_in_serving``: the kernel lab's predicted B/A throughput against the measured interval, per
    concurrency."""
    p = kis.get("prediction") or {}
    parts = []
    for c in p.get("concurrencies") or []:
        m = c.get("measured") or {}
        text = f"c={_fmt(c.get('concurrency'))} {_fmt(c.get('verdict'))}"
        if _is_number(c.get("predicted_ratio")) and _is_number(m.get("ratio_b_over_a")):
            level = f"{m['confidence'] * 100:g} % " if _is_number(m.get("confidence")) else ""
            ci = (f", {level}CI {m['ci_low']:.4g}-{m['ci_high']:.4g}"
                  if _is_number(m.get("ci_low")) and _is_number(m.get("ci_high")) else "")
            text += f" (predicted B/A {c['predicted_ratio']:.4g}, measured {m['ratio_b_over_a']:.4g}{ci})"
        if said := qualifier(c):
            text += f", {said}"
        parts.append(text)
    return Verdict(f"{section}.prediction", label="prediction", decision="; ".join(parts) or None,
                   reason=p.get("verdict_rule"), reason_label="rule",
                   note=None if parts else "no concurrency was predicted")


def _quality(section: str, gate: dict[str, Any]) -> Verdict:
    """``quality_gate``: the semantic-quality gate's verdict and reason, or why it did not run."""
    if not gate.get("ran"):
        return Verdict(section, label="gate", note=f"did not run: {safe(gate.get('why_not'))}")
    acc = gate.get("accuracy") or {}
    head = (f"{_fmt(gate.get('reference'))} against {_fmt(gate.get('candidate'))} on "
            f"{_fmt((gate.get('items') or {}).get('items'))} items: accuracy {_fmt(acc.get('verdict'))}, "
            f"near ties {_fmt((gate.get('token_agreement') or {}).get('verdict'))}, log-probabilities "
            f"{_fmt((gate.get('logprob') or {}).get('verdict'))}")
    return Verdict(section, label="gate", code=gate.get("verdict"), decision=head, reason=gate.get("reason"))


def verdicts(doc: dict[str, Any]) -> list[Verdict]:
    """Every decision the receipt records, by section: its own (a kernel screen), each section's (``paired_aiperf``,
    ``public_workload_reproduction``, ``custom_kernel`` and each of its GPUs where they differ), each other
    candidate's, the kernel-in-serving prediction; ``bench`` says it decides nothing."""
    out: list[Verdict] = []
    if _decides(doc):
        cand = doc.get("candidate")
        key = (cand.get("key") or cand.get("implementation")) if isinstance(cand, dict) else None
        out.append(_verdict(f"candidate {safe(key)}" if key else "receipt", doc))
    for k, v in doc.items():
        if k in NOT_SECTIONS or v is None:
            continue
        if isinstance(v, dict) and k == "kernel_in_serving":
            out.append(_prediction(k, v))
        elif isinstance(v, dict) and k == "quality_gate":
            out.append(_quality(k, v))
        elif isinstance(v, dict) and k == "bench":
            out.append(Verdict(k, note=f"serve bench measures one recipe ({_fmt(v.get('recipe'))}) on every driver"))
        elif isinstance(v, dict) and _decides(v):
            parent = _verdict(k, v)
            out.append(parent)
            for g, sub in v.items():
                if isinstance(sub, dict) and _decides(sub):
                    child = _verdict(f"{k}.{g}", sub)
                    if child._same_as(parent):
                        parent.gpus.append(safe(g))
                    else:
                        out.append(child)
        elif _is_table(v) and any(_decides(r) for r in v):
            for r in v:
                if _decides(r):
                    names = [safe(r[i]) for i in IDENTITY_KEYS if i in r and _is_scalar(r[i])]
                    out.append(_verdict(f"{k}[{','.join(names)}]" if names else k, r))
    return out


def _incomplete(doc: dict[str, Any]) -> str | None:
    if doc.get("complete", True) is not False:
        return None
    from ..serving.progress import serving_progress_state

    return serving_progress_state(doc)


DECISION_STYLES = {"accept": "bold green", "retain": "bold yellow", "reject": "bold red", "inconclusive": "bold yellow"}


def _indented(text: Text, indent: int) -> Padding:
    return Padding(text, (0, 0, 0, indent), expand=False)


def _decision_block(doc: dict[str, Any], view: View) -> list[RenderableType]:
    """``decision``, then per section a line with its decision, its reason and boundaries indented under it, then the
    receipt's qualification boundary; an incomplete receipt says so first."""
    parts: list[RenderableType] = []
    state = _incomplete(doc)
    if state is not None:
        parts.append(Text(f"INCOMPLETE: {safe(state)} — the receipt is not finished; a section still to run decides "
                          "nothing yet", style="bold red"))
    parts.append(Text("decision", style="bold underline"))
    vs = verdicts(doc)
    for v in vs:
        line = Text()
        line.append(f"{safe(v.name())}  ", style="bold")
        line.append(f"{v.label}: ", style="bold")
        line.append(v.headline(), style=DECISION_STYLES.get(str(v.code), "bold"))
        parts.append(_indented(line, 2))
        if v.reason:
            reason = safe(v.reason)
            if not view.all and len(reason) > REASON_TEXT:
                reason = f"{reason[:REASON_TEXT - 1]}… ({len(reason)} characters; --all shows all)"
            parts.append(_indented(Text.assemble((f"{v.reason_label}: ", "bold"), reason), 4))
        for k, b in v.boundaries:
            parts.append(_indented(Text.assemble((f"{k}: ", "bold"), safe(b)), 4))
    top = [(k, doc[k]) for k in BOUNDARY_KEYS if doc.get(k) is not None and not _decides(doc)]
    for k, b in top:
        parts.append(_indented(Text.assemble((f"{k}: ", "bold"), safe(b)), 2))
    if not vs and not top:
        parts.append(_indented(Text("decision: none (the receipt records no decision)"), 2))
    return parts


# ------------------------------------------------------------------------------------------------------ conditions

def no_gpu(gpu: Any) -> bool:
    """Whether a receipt's ``gpu`` (``hardware.gpu``, a section's ``gpu``) says the machine had none
    (``env.capture.NO_GPU``)."""
    from ..env.capture import NO_GPU

    return isinstance(gpu, str) and gpu.strip().lower() == NO_GPU


def is_functional(doc: dict[str, Any]) -> bool:
    """Whether a receipt (or one GPU's section of it) says its evidence is a functional check: nothing timed on a
    GPU, or a serving A/B against InferCrane's test server."""
    return doc.get("evidence_class") in FUNCTIONAL_CLASSES


def device_label(gpu: Any, *, functional: bool = False) -> str:
    """How the device a receipt names reads in a title: the GPU's name; for a machine without one (``no_gpu``) the
    CPU, as a functional check where the receipt says so (``is_functional``)."""
    if no_gpu(gpu):
        return "CPU (functional check)" if functional else "CPU (no GPU)"
    return safe(gpu) if gpu else "GPU not recorded"


def _gpu_text(gpu: str, doc: dict[str, Any]) -> str:
    """A GPU condition's value: the name as recorded, with what it means where it is no GPU ("none: CPU …")."""
    return f"{safe(gpu)}: {device_label(gpu, functional=is_functional(doc))}" if no_gpu(gpu) else safe(gpu)


def _join(items: dict[str, Any], sep: str = " ") -> str:
    return ", ".join(f"{safe(k)}{sep}{_value(v)}" for k, v in items.items() if v is not None)


def conditions(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The conditions the receipt's numbers hold under, as (label, text): GPU, software, model, workload, arms,
    timing mode, token counting, drivers, evidence class, when and which run."""
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    hw = doc.get("hardware") if isinstance(doc.get("hardware"), dict) else prov.get("hardware") or {}
    rows: list[tuple[str, str]] = []
    if no_gpu(hw.get("gpu")):
        rows.append(("GPU", _gpu_text(hw["gpu"], doc)))
    elif hw.get("gpu"):
        extra = [hw.get("compute_capability"),
                 f"{hw['gpu_count']} GPUs" if (hw.get("gpu_count") or 1) > 1 else None,
                 f"{_fmt(hw['gpu_memory_gib'])} GiB" if hw.get("gpu_memory_gib") else None,
                 f"{hw['sm_count']} SMs" if hw.get("sm_count") else None,
                 f"driver {hw['driver']}" if hw.get("driver") else None,
                 f"CUDA {hw['cuda_runtime']}" if hw.get("cuda_runtime") else None]
        rows.append(("GPU", f"{safe(hw['gpu'])} ({', '.join(safe(e) for e in extra if e)})"))
    else:
        gpus: dict[str, list[str]] = {}
        for k, v in doc.items():
            if isinstance(v, dict) and k not in NOT_SECTIONS:
                for name, block in [(k, v), *((f"{k}.{g}", b) for g, b in v.items() if isinstance(b, dict))]:
                    if isinstance(block.get("gpu"), str):
                        gpus.setdefault(block["gpu"], []).append(name)
        if gpus:
            rows.append(("GPU", "; ".join(f"{_gpu_text(g, doc)} ({', '.join(s)})" for g, s in gpus.items())))
    if hw.get("cpu") or hw.get("host"):
        host = [safe(hw[k]) for k in ("host", "cpu") if hw.get(k)]
        host += [f"{hw['cpu_count']} cores" if hw.get("cpu_count") else ""]
        rows.append(("host", ", ".join(h for h in host if h)))
    software = doc.get("software") or prov.get("software")
    if isinstance(software, dict):
        rows.append(("software", _join(software)))
    model = doc.get("model") or doc.get("model_shape_source")
    if isinstance(model, dict):
        rest = {k: v for k, v in model.items() if k not in ("id", "revision", "source") and _is_scalar(v)}
        rev = f" @ {safe(model['revision'])[:12]}" if model.get("revision") else ""
        rows.append(("model", f"{safe(model.get('id', '?'))}{rev}" + (f" ({_join(rest, '=')})" if rest else "")))
    for k, v in doc.items():
        if isinstance(v, dict) and isinstance(v.get("workload"), dict) and k not in NOT_SECTIONS:
            w = {a: b for a, b in v["workload"].items() if a != "notes" and b is not None}
            rows.append(("workload", f"{safe(k)}: {_join(w, '=')}"))
    arms = list(dict.fromkeys(str(e["recipe"]) for e in doc.get("engines") or [] if isinstance(e, dict) and
                              e.get("recipe")))
    arms = arms or list(dict.fromkeys(str(r["recipe"]) for r in doc.get("runs") or [] if r.get("recipe")))
    if arms:
        rows.append(("arms", ", ".join(safe(a) for a in arms)))
    cand = doc.get("candidate")
    if isinstance(cand, dict):
        rows.append(("candidate", _join({k: cand.get(k) for k in ("key", "implementation", "dtype", "in_place")}, "=")))
    modes: dict[str, list[str]] = {}
    for where, mode in (("measurements", doc.get("measurements_timing_mode")),
                        ("policy", (doc.get("policy") or {}).get("timing_mode")),
                        ("kernel_in_serving", ((doc.get("kernel_in_serving") or {}).get("inputs") or {}).get("mode"))):
        if mode:
            modes.setdefault(str(mode), []).append(where)
    ck = doc.get("custom_kernel")
    if isinstance(ck, dict):
        for g, b in ck.items():
            if isinstance(b, dict) and b.get("timing_mode"):
                modes.setdefault(str(b["timing_mode"]), []).append(f"custom_kernel.{g}")
    if modes:
        rows.append(("timing mode", "; ".join(f"{safe(m)} ({', '.join(w)})" for m, w in modes.items())))
    sources = list(dict.fromkeys(str(r["token_count_source"]) for r in doc.get("runs") or []
                                 if isinstance(r, dict) and r.get("token_count_source")))
    if sources:
        rows.append(("token counts", ", ".join(safe(s) for s in sources)))
    if isinstance(doc.get("drivers"), dict) and doc["drivers"]:
        rows.append(("drivers", _join(doc["drivers"])))
    policy = doc.get("policy")
    if isinstance(policy, dict) and policy:
        rules = {k: v for k, v in policy.items() if k != "schema_version" and "notes" not in k and
                 (_is_scalar(v) or isinstance(v, list) and len(v) <= SHORT_LIST and all(_is_scalar(x) for x in v))}
        name = safe(policy.get("schema_version") or "policy")
        rows.append(("policy", f"{name}: {_join(rules, '=')}" if rules else name))
    run = doc.get("app_id") or prov.get("run_id")
    recorded = [safe(doc.get("recorded_at") or ""), f"run {safe(run)}" if run else "",
                safe(doc.get("evidence_class") or "")]
    if any(recorded):
        rows.append(("recorded", " ".join(x for x in recorded if x)))
    parts = doc.get("evidence_parts")
    if isinstance(parts, list) and parts:  # a PoC receipt's parts, each with its own class; the whole is the weakest
        rows.append(("evidence parts", "; ".join(f"{safe(p.get('section'))} {safe(p.get('gpu'))}: "
                                                 f"{safe(p.get('evidence_class'))} ({safe(p.get('basis'))})"
                                                 for p in parts if isinstance(p, dict))))
    return rows


def _conditions_block(doc: dict[str, Any]) -> list[RenderableType]:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    for label, text in conditions(doc):
        grid.add_row(Text("  " + label), Text(text))
    return [Text("conditions", style="bold underline"), grid]


# ------------------------------------------------------------------------------------------------ kernel times

HOST_NOTE = ("host µs/call: the host's time to issue one call (perf_counter around the same bursts of back-to-back "
             "calls, before synchronizing; median); host-bound: host >= 0.9 x launch, so the launch time is the "
             "host's pace, not the GPU's")


def _mode_cells(doc: dict[str, Any], mode: str) -> dict[tuple[str, int], dict[str, Any]]:
    result = doc.get("result") if isinstance(doc.get("result"), dict) else {}
    return {(str(i["key"]), c["rows"]): c for i in result.get("implementations") or [] if isinstance(i, dict)
            for c in i.get("timings") or [] if isinstance(c, dict) and c.get("mode") == mode
            and isinstance(c.get("summary"), dict)}


def _keys_of(doc: dict[str, Any], cells: dict[tuple[str, int], dict[str, Any]]) -> list[str]:
    """The implementations that have cells among ``cells``, in the result's order."""
    return [str(i["key"]) for i in (doc.get("result") or {}).get("implementations") or []
            if any(k == str(i["key"]) for k, _ in cells)]


def _median_text(cell: dict[str, Any] | None) -> Text:
    if cell is None:
        return Text("—")
    return Text(f"{cell['summary']['median']:.3f}" + ("*" if cell.get("flags") else ""))


def _host_table(doc: dict[str, Any], cells: dict[tuple[str, int], dict[str, Any]]) -> Table:
    """One line per implementation and row count: the launch-mode median (``*``: flagged), the host's time per call
    beside it and whether it bounds the launch time; the implementation named on its first line."""
    t = Table()
    for name, justify in (("implementation", "left"), ("rows", "right"), ("launch µs", "right"),
                          ("host µs/call", "right"), ("host-bound", "left")):
        t.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    keys = _keys_of(doc, cells)
    for k in keys:
        mine = sorted((r, c) for (key, r), c in cells.items() if key == k)
        for n, (rows, c) in enumerate(mine):
            h = c.get("host_summary")
            host = Text(f"{h['median']:.2f}") if isinstance(h, dict) else Text("—")
            bound = {True: "yes", False: "no"}.get(c.get("host_bound"), "—")  # type: ignore[arg-type]
            t.add_row(Text(safe(k) if n == 0 else ""), Text(str(rows)), _median_text(c), host, Text(bound),
                      end_section=n == len(mine) - 1 and k != keys[-1])
    return t


def kernel_time_tables(doc: dict[str, Any]) -> list[RenderableType]:
    """A kernel screen's per-call times, read from its result's timing cells: the medians in the mode the decision
    reads (rows down, every timed implementation across, even where the receipt's candidate was not timed; ``*``:
    flagged), and, where launch-mode cells carry the host's time per call (``host_summary``), the host cost table:
    each implementation's launch-mode median at each row count with the host's µs per call beside it and whether the
    host bounds it. Nothing for a receipt that timed nothing."""
    mode = doc.get("measurements_timing_mode")
    out: list[RenderableType] = []
    cells = _mode_cells(doc, mode) if mode else {}
    if cells:
        keys = _keys_of(doc, cells)
        out.append(Text(f"µs per call, {safe(mode)} mode, median (* flagged: no verdict)"))
        t = Table()
        t.add_column("rows", justify="right")
        for k in keys:
            t.add_column(Text(safe(k)), justify="right", overflow="fold")
        for rows in sorted({r for _, r in cells}):
            t.add_row(Text(str(rows)), *[_median_text(cells.get((k, rows))) for k in keys])
        out.append(t)
    launch = _mode_cells(doc, "launch")
    if any(isinstance(c.get("host_summary"), dict) for c in launch.values()):
        out.append(Text(f"host cost per call, launch mode (* flagged: no verdict); {HOST_NOTE}"))
        out.append(_host_table(doc, launch))
    return out


def _kernel_times_block(doc: dict[str, Any]) -> list[RenderableType]:
    tables = kernel_time_tables(doc)
    return [Text("times", style="bold underline"), *tables] if tables else []


# ----------------------------------------------------------------------------------------------------------- tables

@dataclass
class _Column:
    path: tuple[str, ...]
    cells: list[str]
    rank: int
    order: int
    header: str = ""
    numeric: bool = False

    def __post_init__(self) -> None:
        self.header = self.header or ".".join(safe(p) for p in self.path)

    @property
    def natural(self) -> int:
        return max([len(self.header)] + [len(line) for c in self.cells for line in c.split("\n")])

    @property
    def minimum(self) -> int:
        """The narrowest this column folds to: a number is not broken (up to 20 characters), text breaks at
        spaces and, past 16 characters, inside a word; a header breaks after '_', '.' or ' '."""
        head = max((len(p) for p in re.findall(r"[^_. ]+[_. ]?", self.header)), default=1)
        token = max((len(t) for c in self.cells for t in c.split()), default=1)
        return min(self.natural, max(MIN_COLUMN, head, min(token, 20 if self.numeric else 16)))


def _wrap_header(header: str, width: int) -> str:
    """A header broken after '_', '.' or ' ' to fit ``width``, so a key stays readable (and greppable)."""
    lines, line = [], ""
    for part in re.findall(r"[^_. ]+[_. ]?|[_. ]", header):
        if line and len(line) + len(part.rstrip(" ")) > width:
            lines.append(line.rstrip(" "))
            line = ""
        line += part
    return "\n".join([*lines, line.rstrip(" ")])


def _borders(n: int) -> int:
    """Characters a rich table with ``n`` columns spends on its edges, separators and padding."""
    return 3 * n + 1


def _fit(cols: list[_Column], width: int, first_last: bool = False, borders: int | None = None) -> list[int]:
    """Column widths that fit ``width`` (less ``borders``, a bordered table's by default): natural where they fit,
    else the widest columns folded first (each to no less than its minimum). ``first_last``: the first column (a
    diff's field names) keeps at least a third of the width, and all it needs when the others fit in the rest."""
    avail = width - (_borders(len(cols)) if borders is None else borders)
    nat = [c.natural for c in cols]
    if sum(nat) <= avail:
        return nat
    if first_last and len(cols) > 1:
        budget = max(sum(c.minimum for c in cols[1:]), min(sum(nat[1:]), avail * 2 // 3))  # the others' share
        first = min(nat[0], max(cols[0].minimum, avail - budget))
        rest = _water(cols[1:], avail - first)
        return [min(nat[0], first + max(0, avail - first - sum(rest))), *rest]
    return _water(cols, avail)


def _water(cols: list[_Column], avail: int) -> list[int]:
    """Widths that add up to at most ``avail``: every column capped at one width, the largest cap that fits (no
    column below its minimum)."""
    nat = [c.natural for c in cols]
    if sum(nat) <= avail:
        return nat
    mins = [c.minimum for c in cols]
    lo, hi = 0, max(nat)
    while lo < hi:  # the largest cap whose capped widths fit
        mid = (lo + hi + 1) // 2
        if sum(max(m, min(n, mid)) for m, n in zip(mins, nat)) <= avail:
            lo = mid
        else:
            hi = mid - 1
    return [max(m, min(n, lo)) for m, n in zip(mins, nat)]


def _fits(cols: list[_Column], width: int) -> bool:
    return sum(c.minimum for c in cols) + _borders(len(cols)) <= width


class _FittedTable:
    """A table of records fitted to the console at render time: the summary drops its least important columns
    (named under it), ``all`` splits a table too wide into column groups that repeat its identity columns, ``wide``
    keeps every column at its natural width. ``keep_all_columns`` (a diff): fold, never drop or split."""

    def __init__(self, title: str, cols: list[_Column], n_rows: int, notes: list[str], view: View,
                 keep_all_columns: bool = False, first_last: bool = False) -> None:
        self.title, self.cols, self.n_rows, self.notes, self.view = title, cols, n_rows, notes, view
        self.keep_all_columns, self.first_last = keep_all_columns, first_last

    def _table(self, title: str, cols: list[_Column], widths: list[int], notes: list[str]) -> RenderResult:
        """The title and the notes are lines of their own, as wide as the console, not the table."""
        t = Table()
        for c, w in zip(cols, widths):
            t.add_column(Text(_wrap_header(c.header, w)), width=w, overflow="fold",
                         justify="right" if c.numeric else "left")
        for i in range(self.n_rows):
            t.add_row(*[Text(c.cells[i]) for c in cols])
        yield Text(title, style="bold")
        yield t
        if notes:
            yield Text("; ".join(notes), style="dim")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self.view.wide or sum(c.natural for c in self.cols) + _borders(len(self.cols)) <= width:
            yield from self._table(self.title, self.cols, [c.natural for c in self.cols], self.notes)
            return
        if self.view.all or self.keep_all_columns:
            if self.keep_all_columns or _fits(self.cols, width):
                yield from self._table(self.title, self.cols, _fit(self.cols, width, self.first_last), self.notes)
                return
            yield from self._groups(width)
            return
        chosen: list[_Column] = []
        for c in sorted(self.cols, key=lambda c: (c.rank, len(c.path), c.order)):
            # the summary leaves out what names a run rather than measures it (paths, hashes, pids, times)
            if c.rank < LOW_RANK and _fits([*chosen, c], width) or not chosen:
                chosen.append(c)
        chosen.sort(key=lambda c: c.order)
        dropped = [c.header for c in self.cols if c not in chosen]
        notes = list(self.notes)
        if dropped:
            names = ", ".join(dropped[:6]) + (f" and {len(dropped) - 6} more" if len(dropped) > 6 else "")
            notes.append(f"not shown: {names} (--wide or --all shows them)")
        yield from self._table(self.title, chosen, _fit(chosen, width), notes)

    def _groups(self, width: int) -> RenderResult:
        ident = [c for c in self.cols if c.rank == 0][:4]
        while ident and not _fits(ident, width // 2):
            ident.pop()
        groups: list[list[_Column]] = [[]]
        for c in self.cols:
            if c in ident:
                continue
            if groups[-1] and not _fits([*ident, *groups[-1], c], width):
                groups.append([])
            groups[-1].append(c)
        for i, g in enumerate(groups, 1):
            cols = sorted([*ident, *g], key=lambda c: c.order)
            notes = self.notes if i == len(groups) else []
            yield from self._table(f"{self.title} (columns, part {i} of {len(groups)})", cols, _fit(cols, width),
                                   notes)


def _leaf_paths(records: list[dict[str, Any]]) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]],
                                                         list[tuple[str, ...]]]:
    """(column paths, paths of record lists, paths of large maps) over ``records``: a dict field becomes one column
    per entry (``speedup.ci_lo``) unless it is a large map of one kind of value (calls by shape)."""
    cols: dict[tuple[str, ...], None] = {}
    tables: dict[tuple[str, ...], None] = {}
    maps: dict[tuple[str, ...], None] = {}

    def walk(d: dict[str, Any], prefix: tuple[str, ...]) -> None:
        for k, v in d.items():
            p = (*prefix, k)
            if isinstance(v, dict) and v:
                kinds = {type(x) for x in v.values()}
                if p in maps or (len(v) > INLINE_DICT and len(kinds) == 1 and _is_scalar(next(iter(v.values())))):
                    maps[p] = None
                else:
                    walk(v, p)
            elif _is_table(v):
                tables[p] = None
            else:
                cols[p] = None

    for r in records:
        walk(r, ())
    cols = {p: None for p in cols if p not in tables and p not in maps}
    return list(cols), list(tables), list(maps)


def _get(record: dict[str, Any], path: tuple[str, ...]) -> Any:
    v: Any = record
    for p in path:
        if not isinstance(v, dict):
            return None
        v = v.get(p)
    return v


def _rank(path: tuple[str, ...], values: list[Any], cells: list[str]) -> int:
    """How much a column matters, 0 first: identity, verdicts and headline numbers, other numbers, short text,
    long text, nested values, then raw samples and what names a run rather than measures it (``LOW_RANK``)."""
    key = path[-1]
    if len(path) == 1 and key in IDENTITY_KEYS:
        return 0
    if key in VERDICT_COLUMNS or HEADLINE_COLUMNS.search(key):
        return 1
    if LOW_COLUMNS.search(key) or key in RAW_KEYS:  # raw samples: their median is a column of its own
        return LOW_RANK
    present = [v for v in values if v is not None]
    if present and all(_is_number(v) for v in present):
        return 2
    if any(isinstance(v, (list, dict)) for v in present):
        return 5
    return 3 if max((len(c) for c in cells), default=0) <= 24 else 4


def _table_of(title: str, records: list[dict[str, Any]], view: View, depth: int,
              nested: bool = False) -> Iterator[RenderableType]:
    """A list of records as one table, then each record's own lists of records as tables of their own
    (``engines[1].kernels``). ``depth``: how many records deep the list is; in the summary a list two deep is
    counted in a cell, and one inside a record (``nested``) shows fewer rows."""
    if len(records) == 1:  # one record reads better as key/value lines than as a one-row table
        yield from _section(records[0], f"{title}[0]", view, depth + 1, record=True)
        return
    limit = None if view.all or view.wide else CELL_TEXT  # a wide table has room for whole values
    notes: list[str] = []
    rows = list(range(len(records)))
    mode = view.timing_mode
    if not view.all and mode and any(r.get("mode") == mode for r in records) and \
            len({r.get("mode") for r in records}) > 1:
        rows = [i for i in rows if records[i].get("mode") == mode]
        notes.append(f"rows in the decision's timing mode ({safe(mode)}) only; {len(records) - len(rows)} rows in "
                     "other modes (--all shows them)")
    cap = None if view.all else (NESTED_ROWS if nested else ROWS)
    if cap is not None and len(rows) > cap:
        notes.append(f"{len(rows) - cap} more rows (--all shows them)")
        rows = rows[:cap]
    shown = [records[i] for i in rows]
    paths, tables, maps = _leaf_paths(records)
    expand = view.all or depth == 0  # the records' own record lists as tables (else a cell counts them)
    if not expand:
        paths += tables
    if not view.all:
        paths += maps
    curated = title == "runs" and not view.all and not view.wide  # the serving runs: RUN_COLUMNS
    cols: list[_Column] = []
    for order, p in enumerate(paths):
        values = [_get(r, p) for r in shown]
        cells = [_fmt(v, p[-1], limit) for v in values]
        cols.append(_Column(p, cells, _rank(p, values, cells), order,
                            numeric=any(v is not None for v in values) and
                            all(v is None or _is_number(v) for v in values)))
    if curated:
        headers = dict(RUN_COLUMNS)
        kept = [c for c in cols if len(c.path) == 1 and c.path[0] in headers and
                (c.path[0] != "error" or any(c.cells))]
        for c in kept:
            c.header, c.rank = headers[c.path[0]], 0
        left = [c.header for c in cols if c not in kept]
        cols = sorted(kept, key=lambda c: [k for k, _ in RUN_COLUMNS].index(c.path[0]))
        for i, c in enumerate(cols):
            c.order = i
        if left:
            notes.append(f"{len(left)} more fields per run ({', '.join(left[:3])}, …): --all shows them")
    elif not view.all and len(shown) > 1:
        same = [c for c in cols if c.rank != 0 and len(set(c.cells)) == 1]
        empty = [c for c in same if not c.cells[0]]
        const = [c for c in same if c.cells[0]]
        if const:
            more = f"; and {len(const) - 5} more" if len(const) > 5 else ""
            notes.append("every row: " + "; ".join(f"{c.header} = {_cut(c.cells[0], 48)}" for c in const[:5]) + more)
        if empty:
            notes.append("empty: " + ", ".join(c.header for c in empty))
        cols = [c for c in cols if c not in same]
    yield _FittedTable(safe(title), cols, len(shown), notes, view)
    for i in rows:
        r = records[i]
        if expand:
            for p in tables:
                v = _get(r, p)
                if _is_table(v):
                    yield from _table_of(f"{title}[{i}].{'.'.join(p)}", v, view, depth + 1, nested=True)
        if view.all:
            for p in maps:
                v = _get(r, p)
                if isinstance(v, dict):
                    yield from _section(v, f"{title}[{i}].{'.'.join(p)}", view, depth + 1, record=True)


# --------------------------------------------------------------------------------------------------------- sections

def _section(d: dict[str, Any], name: str, view: View, depth: int = 0, skip: frozenset[str] = frozenset(),
             record: bool = False) -> Iterator[RenderableType]:
    """A dict as a heading and its key/value lines, then its nested dicts and record lists, each under its path.
    ``depth`` and ``record`` (the dict is, or is inside, a record of a list): as for ``_table_of``."""
    limit = None if view.all else MAX_TEXT
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    nested: list[tuple[str, Any]] = []
    for k, v in d.items():
        if k in skip:
            continue
        if _is_table(v) and (view.all or depth < 2):
            nested.append((k, v))
        elif isinstance(v, dict) and v and (not _flat(v) or view.all and len(v) > INLINE_DICT):
            nested.append((k, v))
        else:
            grid.add_row(Text("  " + safe(k)), Text(_fmt(v, k, limit) if v is not None else "—"))
    if grid.row_count:
        yield Text(safe(name), style="bold")
        yield grid
    for k, v in nested:
        path = f"{name}.{k}" if name else k
        if _is_table(v):
            yield from _table_of(path, v, view, depth, nested=record)
        else:  # a decision shown up front is not repeated in the summary's sub-sections either
            yield from _section(v, path, view, depth, skip=skip if _decides(v) else frozenset(), record=record)


def _flat(d: dict[str, Any]) -> bool:
    """A dict of plain values and lists of plain values: one key/value line."""
    return all(_is_scalar(x) or isinstance(x, list) and all(_is_scalar(y) for y in x) for x in d.values())


def _provenance_line(prov: dict[str, Any]) -> str:
    commit = prov.get("git_commit")
    cmd = prov.get("command_line")
    parts = [f"infercrane {safe(prov.get('infercrane_version', '?'))}",
             f"git {safe(commit)[:12]}{' (dirty)' if prov.get('git_dirty') else ''}" if commit else "",
             f"run {safe(prov['run_id'])}" if prov.get("run_id") else "",
             f"command: {_cut(' '.join(safe(a) for a in cmd[1:]), 120)}" if isinstance(cmd, list) and cmd else ""]
    return "; ".join(p for p in parts if p)


def _evidence_line(ev: dict[str, Any]) -> str:
    parts = []
    for k, v in ev.items():
        if isinstance(v, dict) and v:
            kinds = ", ".join(f"{safe(g)}: {safe(str(r.get('schema_version', '?')).split('/')[0].split('.')[-1])}"
                              for g, r in v.items() if isinstance(r, dict))
            parts.append(f"{safe(k)} ({kinds})")
        elif v is not None and _is_scalar(v):
            parts.append(f"{safe(k)} = {safe(v)}")
    return "; ".join(parts) or "none"


def _evidence_block(doc: dict[str, Any], view: View) -> Iterator[RenderableType]:
    yield Text("evidence", style="bold underline")
    shown_verdicts = {v.section.split(".")[0].split("[")[0] for v in verdicts(doc)}
    scalars = {k: v for k, v in doc.items() if _is_scalar(v) or isinstance(v, list) and not _is_table(v) or
               isinstance(v, dict) and not v}
    top_skip = set(VERDICT_KEYS)
    if not view.all:  # shown in the header, the decision or the conditions block, or one line at the end
        top_skip |= CONDITION_KEYS | {"provenance", "evidence", "schema_version", "recorded_at", "policy"}
    yield from _section({k: v for k, v in scalars.items() if k not in top_skip}, "receipt", view)
    rest = [(k, v) for k, v in doc.items() if k not in scalars and k not in top_skip]
    ordered = [kv for kv in rest if kv[0] in shown_verdicts] + [kv for kv in rest if kv[0] not in shown_verdicts]
    hw = doc.get("hardware") or (doc.get("provenance") or {}).get("hardware") or {}
    run = doc.get("app_id") or (doc.get("provenance") or {}).get("run_id")
    for k, v in ordered:
        skip = set() if view.all else {*VERDICT_KEYS, "workload"}
        if not view.all and isinstance(v, dict):  # the GPU and run the conditions block names already
            skip |= {x for x, same in (("gpu", hw.get("gpu")), ("app_id", run)) if same and v.get(x) == same}
        skip = frozenset(skip)
        if _is_table(v):
            yield from _table_of(k, v, view, 0)
        else:  # a raw sub-document (a kernel screen's result): its records' own record lists are counted
            yield from _section(v, k, view, 1 if k in RAW_SECTIONS and not view.all else 0,
                                skip=skip if k in shown_verdicts else frozenset())
    if not view.all:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="bold")
        grid.add_column(overflow="fold")
        if isinstance(doc.get("provenance"), dict):
            grid.add_row(Text("  provenance"), Text(_provenance_line(doc["provenance"])))
        if isinstance(doc.get("evidence"), dict):
            grid.add_row(Text("  evidence"), Text(f"the receipts behind the sections, whole: "
                                                  f"{_evidence_line(doc['evidence'])}"))
        if grid.row_count:
            yield Text("not shown", style="bold")
            yield grid
        yield Text("summary: long text, lists and tables cut short; --all: every field and row; --wide: no folding",
                   style="dim")


def render_show(doc: dict[str, Any], *, show_all: bool = False, wide: bool = False) -> Group:
    """The receipt: its decisions first, then its conditions, then its evidence (see the module docstring)."""
    policy = doc.get("policy") if isinstance(doc.get("policy"), dict) else {}
    view = View(all=show_all, wide=wide, timing_mode=doc.get("measurements_timing_mode") or policy.get("timing_mode"))
    return Group(*_decision_block(doc, view), *_conditions_block(doc), *_kernel_times_block(doc),
                 *_evidence_block(doc, view))


# ------------------------------------------------------------------------------------------------------------- diff

# Identity keys that name an arm: a recipe only one receipt has is aligned with the one only the other has.
ARM_KEYS = ("recipe", "recipe_a", "recipe_b")
DIFF_RECORDS = 12   # a list of more records (the serving runs) is one line in the summary diff
DIFF_TEXT = 48      # characters of a text value in the summary diff


def flatten(data: Any, path: str = "", aliases: dict[str, str] | None = None) -> dict[str, Any]:
    """Leaves of a document by path. A list of plain values is one leaf; list elements that are records are keyed by
    their identity fields (an arm's recipe through ``aliases``, see ``arm_aliases``); an empty dict or list is a leaf
    of its own."""
    aliases = aliases or {}
    out: dict[str, Any] = {}
    if isinstance(data, dict) and data:
        for k, v in data.items():
            if not path and k in ("provenance", "content_sha256"):
                continue
            out.update(flatten(v, f"{path}.{k}" if path else k, aliases))
    elif isinstance(data, list) and data and not all(_is_scalar(x) for x in data):
        seen: dict[str, int] = {}
        for i, v in enumerate(data):
            if isinstance(v, dict):
                ident = ",".join(f"{k}={aliases.get(v[k], v[k]) if k in ARM_KEYS else v[k]}" for k in IDENTITY_KEYS
                                 if k in v and _is_scalar(v[k]))
                ident = ident or str(i)
                # records that share their identity (a sandwich A/B's two engines of one recipe) stay apart: the
                # second is "#2", in order, so one cannot hide a change in the other
                seen[ident] = seen.get(ident, 0) + 1
                key = f"{path}[{ident}]" if seen[ident] == 1 else f"{path}[{ident} #{seen[ident]}]"
            else:
                key = f"{path}[{i}]"
            out.update(flatten(v, key, aliases))
    else:
        out[path] = data
    return out


def _arm_names(doc: Any, out: set[str] | None = None, top: bool = True) -> set[str]:
    out = set() if out is None else out
    if isinstance(doc, dict):
        for k, v in doc.items():
            if top and k in ("provenance", "evidence"):
                continue
            if k in ARM_KEYS and isinstance(v, str):
                out.add(v)
            else:
                _arm_names(v, out, False)
    elif isinstance(doc, list):
        for v in doc:
            _arm_names(v, out, False)
    return out


def arm_aliases(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, str], dict[str, str], str | None]:
    """Two A/B receipts whose arms differ in one recipe each (``compiled`` vs ``compiled-triton`` in A,
    ``compiled`` vs ``compiled-cuda`` in B) are compared arm by arm: the two recipes share the identity
    ``compiled-triton|compiled-cuda``. Returns (A's aliases, B's aliases, a line saying so, or None)."""
    names_a, names_b = _arm_names(a), _arm_names(b)
    only_a, only_b = names_a - names_b, names_b - names_a
    if len(only_a) != 1 or len(only_b) != 1:
        return {}, {}, None
    x, y = only_a.pop(), only_b.pop()
    joined = f"{x}|{y}"
    return {x: joined}, {y: joined}, f"arms aligned: recipe {safe(x)} (A) with recipe {safe(y)} (B), named {safe(joined)}"


@dataclass
class FieldDiff:
    """One field of two receipts: ``state`` is changed, same, only_a or only_b. A row that stands for many fields
    (records only one receipt has, a long list of records) is ``group``; ``a`` then says what it stands for."""

    path: str
    a: Any
    b: Any
    state: str
    group: bool = False


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[FieldDiff]:
    """Every leaf of A and B (provenance and content hashes aside), A's order first; arms aligned (``arm_aliases``),
    so a recipe field that names the aligned arm on each side counts as the same."""
    al_a, al_b, _ = arm_aliases(a, b)
    fa, fb = flatten(a, aliases=al_a), flatten(b, aliases=al_b)
    out = []
    for p in [*fa, *(p for p in fb if p not in fa)]:
        if p not in fb:
            out.append(FieldDiff(p, fa[p], None, "only_a"))
            continue
        if p not in fa:
            out.append(FieldDiff(p, None, fb[p], "only_b"))
            continue
        va, vb = fa[p], fb[p]
        key = p.rsplit(".", 1)[-1]
        ma, mb = (al_a.get(va, va), al_b.get(vb, vb)) if key in ARM_KEYS and isinstance(va, str) and \
            isinstance(vb, str) else (va, vb)
        same = ma == mb and (type(ma) is type(mb) or _is_number(ma) and _is_number(mb))
        out.append(FieldDiff(p, va, vb, "same" if same else "changed"))
    return out


def _record_prefixes(path: str) -> list[str]:
    """``a[x].b[y].c`` -> ``['a[x]', 'a[x].b[y]']``: the records a path runs through, outermost first."""
    return [path[:m.end()] for m in re.finditer(r"\]", path)]


def _containers(path: str) -> list[str]:
    """``a.b[x=1.5].c`` -> ``['a', 'a.b', 'a.b[x=1.5]']``: the dicts, lists and records a path runs through,
    outermost first (a '.' inside an identity is not a boundary)."""
    out, depth = [], 0
    for i, ch in enumerate(path):
        if ch == "[":
            if depth == 0 and i:
                out.append(path[:i])
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "." and depth == 0:
            out.append(path[:i])
    return list(dict.fromkeys(out))


def _long_lists(paths: list[str]) -> dict[str, int]:
    """List paths (``runs``, ``engines[recipe=x].kernels[...].checks``) that hold more than ``DIFF_RECORDS``
    records, with their record counts."""
    records: dict[str, set[str]] = {}
    for p in paths:
        for m in re.finditer(r"\[[^\[\]]*\]", p):
            records.setdefault(p[:m.start()], set()).add(p[:m.end()])
    return {lp: len(r) for lp, r in records.items() if len(r) > DIFF_RECORDS}


def _summarize(rows: list[FieldDiff], paths: list[str]) -> list[FieldDiff]:
    """The summary diff's rows: the fields that differ, except that one line stands for each long list of records
    (the serving runs, whose medians are compared elsewhere: how many records and which fields differ), for the
    records of one list that only one receipt has, and for every field that names a run rather than measures it."""
    long = _long_lists(paths)
    out: list[FieldDiff] = []
    lists: dict[str, tuple[FieldDiff, set[str], list[str]]] = {}
    records: dict[tuple[str, str], tuple[FieldDiff, list[str], list[int]]] = {}
    present = {"only_a": set(), "only_b": set()}  # containers (dicts, records, lists) the other receipt has
    for r in rows:
        for side, absent in (("only_a", "only_b"), ("only_b", "only_a")):
            if r.state != absent:
                present[side].update(_containers(r.path))
    incidental: list[str] = []
    for r in rows:
        if r.state == "same":
            continue
        if _incidental(r.path) and not r.path.endswith("]"):
            name = re.sub(r"\[[^\[\]]*\]", "[]", r.path).rsplit(".", 1)[-1]
            incidental.append(name)
            continue
        lp = next((lp for lp in sorted(long, key=len) if r.path.startswith(lp + "[")), None)
        if lp is not None:
            if lp not in lists:
                lists[lp] = (FieldDiff(lp, None, None, "changed", group=True), set(), [])
                out.append(lists[lp][0])
            recs, names = lists[lp][1], lists[lp][2]
            recs.add(r.path[:r.path.index("]", len(lp)) + 1])
            leaf = re.sub(r"\[[^\[\]]*\]", "[]", r.path[r.path.index("]", len(lp)) + 1:]).lstrip(".") or "record"
            if leaf not in names:
                names.append(leaf)
            continue
        if r.state in ("only_a", "only_b"):  # the outermost dict or record the other receipt lacks: one line
            other = present["only_b" if r.state == "only_a" else "only_a"]
            prefix = next((p for p in _containers(r.path) if p not in other), None)
            if prefix is not None:
                lp = prefix[:prefix.rindex("[")] if prefix.endswith("]") else prefix  # records: one line per list
                if (r.state, lp) not in records:
                    records[(r.state, lp)] = (FieldDiff(lp, None, None, r.state, group=True), [], [0])
                    out.append(records[(r.state, lp)][0])
                if prefix != lp and prefix not in records[(r.state, lp)][1]:
                    records[(r.state, lp)][1].append(prefix)
                records[(r.state, lp)][2][0] += 1
                continue
        out.append(r)
    for lp, (g, recs, names) in lists.items():
        fields = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        g.a = f"{safe(lp)}: {len(recs)} of {long[lp]} records differ, in {safe(fields)} (--all lists them)"
    for (state, lp), (g, prefixes, n) in records.items():
        side = "A" if state == "only_a" else "B"
        if prefixes:
            idents = ", ".join(p[len(lp):] for p in prefixes)
            g.a = (f"{safe(lp)}: {len(prefixes)} record{'s' if len(prefixes) > 1 else ''} only in {side}: "
                   f"{_cut(safe(idents), 3 * DIFF_TEXT)}")
        else:
            g.a = f"{safe(lp)}: only in {side} ({n[0]} fields)"
    if incidental:
        names = list(dict.fromkeys(incidental))
        fields = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        out.append(FieldDiff("", f"{len(incidental)} fields that name a run rather than measure it differ: "
                                 f"{safe(fields)} (--all lists them)", None, "changed", group=True))
    return out


def diff_rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any, str, str]]:
    """(path, a, b, delta, ratio b/a) for every leaf that differs or is numeric in both."""
    rows = []
    for f in compare(a, b):
        delta, ratio = _delta(f.a, f.b)
        if f.state != "same" or delta:
            rows.append((f.path, f.a, f.b, delta, ratio))
    return rows


def _delta(va: Any, vb: Any) -> tuple[str, str]:
    """B - A and B / A of two numbers, or of the medians of two lists of numbers (the cells say "median");
    '' when neither."""
    if isinstance(va, list) and isinstance(vb, list) and va and vb and all(_is_number(x) for x in (*va, *vb)):
        va, vb = statistics.median(va), statistics.median(vb)
    if _is_number(va) and _is_number(vb):
        return f"{vb - va:+.4g}", f"{vb / va:.4f}" if va else "—"
    return "", ""


def _diff_cells(f: FieldDiff, view: View) -> tuple[str, str]:
    """A's and B's value as text. In the summary, two texts that differ late lose their common start ('…' stands
    for it) and are cut to ``DIFF_TEXT`` characters."""
    key = re.split(r"[.\[]", f.path.rsplit(".", 1)[-1])[0]
    if view.all:
        return tuple("—" if v is None else _fmt(v, key) for v in (f.a, f.b))  # type: ignore[return-value]
    ta, tb = ("—" if v is None else
              f"median {statistics.median(v):.6g} of {len(v)}" if isinstance(v, list) and len(v) > SHORT_LIST // 2
              and all(_is_number(x) for x in v) else _fmt(v, key, CELL_TEXT * 4) for v in (f.a, f.b))
    if isinstance(f.a, str) and isinstance(f.b, str):
        common = len(os.path.commonprefix([ta, tb]))
        if common > 16:
            ta, tb = "…" + ta[common - 8:], "…" + tb[common - 8:]
    return _cut(ta, DIFF_TEXT), _cut(tb, DIFF_TEXT)


def _incidental(path: str) -> bool:
    """A field that names a run rather than measures it (a pid, a path, a time stamp, a hash, an id)."""
    return bool(LOW_COLUMNS.search(re.split(r"[.\[]", path.rsplit(".", 1)[-1])[0]))


def _decisions_table(a: dict[str, Any], b: dict[str, Any], view: View) -> _FittedTable:
    va = {v.name(): v for v in verdicts(a)}
    vb = {v.name(): v for v in verdicts(b)}
    names = [*va, *(n for n in vb if n not in va)]
    limit = None if view.all else 200
    ca, cb = [], []
    for n in names:
        ta = f"{va[n].label}: {va[n].headline()}" if n in va else "—"
        tb = f"{vb[n].label}: {vb[n].headline()}" if n in vb else "—"
        ca.append(_cut(ta, limit))
        cb.append("same as A" if ta == tb else _cut(tb, limit))
    for k in BOUNDARY_KEYS:
        if (a.get(k) or b.get(k)) and not _decides(a):
            names.append(k)
            ca.append(_cut(safe(a.get(k) or "—"), limit))
            cb.append("same as A" if a.get(k) == b.get(k) else _cut(safe(b.get(k) or "—"), limit))
    cols = [_Column(("section",), [safe(n) for n in names], 0, 0), _Column(("A",), ca, 0, 1),
            _Column(("B",), cb, 0, 2)]
    return _FittedTable("decisions", cols, len(names), [], view, keep_all_columns=True)


def _numeric_text(text: str) -> bool:
    return not text or text == "—" or bool(re.fullmatch(r"[+-]?[\d.]+(e[+-]?\d+)?", text))


class _DiffRows:
    """The fields of a diff in aligned columns without borders (field, A, B, B - A, B / A); the fields of one
    record under a line of their own naming the record, each field by its own name."""

    HEADERS = ("field", "A", "B", "B - A", "B / A")

    def __init__(self, title: str, groups: list[tuple[str | None, list[tuple[str, ...]]]], view: View) -> None:
        self.title, self.groups, self.view = title, groups, view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rows = [r for record, rs in self.groups if record is not None for r in rs]
        cols = [_Column((h,), [r[i] for r in rows], 0, i, numeric=i > 0 and all(_numeric_text(r[i]) for r in rows))
                for i, h in enumerate(self.HEADERS)]
        gaps = 2 * (len(cols) - 1)
        widths = [c.natural for c in cols] if self.view.wide else _fit(cols, options.max_width, first_last=True,
                                                                        borders=gaps)

        def grid(header: bool) -> Table:
            t = Table(box=None, show_header=header, header_style="bold underline", padding=(0, 1), pad_edge=False)
            for c, w in zip(cols, widths):
                t.add_column(c.header, width=w, overflow="fold", justify="right" if c.numeric else "left")
            return t

        yield Text(self.title, style="bold")
        yield grid(header=True)
        for record, rs in self.groups:
            if record is None:  # a line that stands for many fields
                yield Text(rs[0][0], style="italic")
                continue
            if record:
                yield Text(record, style="bold")
            t = grid(header=False)
            for r in rs:
                t.add_row(*[Text(x) for x in r])
            yield t


def _rows_table(rows: list[FieldDiff], view: View, title: str) -> _DiffRows:
    groups: list[tuple[str | None, list[tuple[str, ...]]]] = []
    for f in rows:
        if f.group:
            groups.append((None, [(f.a,)]))
            continue
        record = next((p for p in reversed(_record_prefixes(f.path)) if p != f.path), "")
        if not groups or groups[-1][0] != record:
            groups.append((safe(record), []))
        name = f"  {f.path[len(record):].lstrip('.')}" if record else f.path
        delta, ratio = _delta(f.a, f.b)
        groups[-1][1].append((safe(name), *_diff_cells(f, view), delta, ratio))
    return _DiffRows(title, groups, view)


def render_diff(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str, *, show_all: bool = False,
                wide: bool = False) -> Group:
    """A and B: both decisions, the count of changed / same / only-in-A / only-in-B fields, then the fields that
    differ (``show_all``: every field, values in full)."""
    view = View(all=show_all, wide=wide)
    fields = compare(a, b)
    counts = {s: sum(1 for f in fields if f.state == s) for s in ("changed", "same", "only_a", "only_b")}
    differing = counts["changed"] + counts["only_a"] + counts["only_b"]
    head = Text(f"A = {safe(name_a)}\nB = {safe(name_b)}")
    aligned = arm_aliases(a, b)[2]
    if aligned:
        head.append(f"\n{aligned}")
    count = (f"{counts['changed']} changed, {counts['same']} same, {counts['only_a']} only in A, "
             f"{counts['only_b']} only in B (fields; a list of values is one field; provenance and content_sha256 "
             "are not compared)")
    summary = Text(f"nothing changed: {count}" if not differing else count, style="bold")
    rows = fields if show_all else _summarize(fields, [f.path for f in fields])
    parts: list[RenderableType] = [head, _decisions_table(a, b, view), summary]
    if rows:
        title = "every field" if show_all else "fields that differ (--all lists every field)"
        parts.append(_rows_table(rows, view, title))
    return Group(*parts)

"""Readable views of a receipt: ``show`` (tables of measurements, decision, reason, boundary) and ``diff``.

Both walk the JSON document rather than each schema, so every version renders; raw sample arrays are summarized by
their length (they stay in the file).
"""
from __future__ import annotations

from typing import Any, Iterator

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

# Lists of raw numbers shown by length only.
RAW_KEYS = frozenset({"samples_us", "a_values", "b_values", "command_line"})
# Shown last, highlighted.
VERDICT_KEYS = ("decision", "decision_code", "reason", "qualification_boundary", "comparison_boundary")
# Keys that identify an element of a list of records, for aligned diffs.
IDENTITY_KEYS = ("implementation", "candidate", "baseline", "recipe", "recipe_a", "recipe_b", "metric", "driver",
                 "mode", "rows", "concurrency", "run_index", "key")
MAX_ROWS = 40
MAX_TEXT = 240


_CONTROL = {c: "?" for c in (*range(0x00, 0x09), 0x0B, 0x0C, 0x0D, *range(0x0E, 0x20), *range(0x7F, 0xA0))}


def safe(text: Any) -> str:
    """Text from a receipt as the terminal may show it: control characters (escape sequences, carriage returns) turned
    into '?', so a receipt cannot clear the screen or forge colours. Rich markup is not interpreted: callers put the
    result in ``Text``."""
    return str(text).translate(_CONTROL)


def _fmt(v: Any, show_all: bool = True) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v):
        return f"[{len(v)} values]" if len(v) > 8 else ", ".join(_fmt(x) for x in v)
    text = safe(v)
    if not show_all and len(text) > MAX_TEXT:
        return f"{text[:MAX_TEXT]}… ({len(text)} characters; --all shows all)"
    return text


def _is_table(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _tables(title: str, records: list[dict[str, Any]], show_all: bool) -> Iterator[Table]:
    """The records as one table, then each record's own lists of records as tables of their own
    (``engines[1].kernels``). A key that holds a dict or records in any record is not a column."""
    nested = {k for r in records for k, v in r.items() if isinstance(v, dict) or _is_table(v)}
    yield _table(title, records, show_all, skip=nested)
    for i, r in enumerate(records if show_all else records[:MAX_ROWS]):
        for k, v in r.items():
            if _is_table(v):
                yield from _tables(f"{title}[{i}].{k}", v, show_all)


def _table(title: str, records: list[dict[str, Any]], show_all: bool, skip: set[str]) -> Table:
    cols: list[str] = []
    for r in records:
        cols += [k for k in r if k not in cols and k not in skip]
    t = Table(title=Text(safe(title)), title_justify="left", show_lines=False)
    for c in cols:
        t.add_column(Text(safe(c)), overflow="fold")
    shown = records if show_all else records[:MAX_ROWS]
    for r in shown:
        t.add_row(*[Text("" if r.get(c) is None else (f"[{len(r[c])} samples]" if c in RAW_KEYS and isinstance(r[c], list)
                                                   else _fmt(r[c]))) for c in cols])
    if len(shown) < len(records):
        t.caption = f"{len(records) - len(shown)} more rows (use --all)"
    return t


def _sections(doc: dict[str, Any], prefix: str, show_all: bool) -> Iterator[Any]:
    scalars = Table.grid(padding=(0, 2))
    scalars.add_column(style="bold")
    scalars.add_column()
    has_scalars = False
    nested: list[tuple[str, Any]] = []
    for k, v in doc.items():
        if k in VERDICT_KEYS and not prefix:
            continue
        if isinstance(v, dict) and v and any(isinstance(x, (dict, list)) for x in v.values()):
            nested.append((k, v))
        elif _is_table(v):
            nested.append((k, v))
        elif isinstance(v, dict):
            scalars.add_row(Text(safe(k)), Text(", ".join(f"{safe(a)}={_fmt(b, show_all)}" for a, b in v.items()) or "{}"))
            has_scalars = True
        else:
            scalars.add_row(Text(safe(k)), Text(f"[{len(v)} values]" if k in RAW_KEYS and isinstance(v, list)
                                                else _fmt(v, show_all)))
            has_scalars = True
    if has_scalars:
        yield Panel(scalars, title=Text(safe(prefix or "receipt")), title_align="left")
    for k, v in nested:
        name = f"{prefix}.{k}" if prefix else k
        if _is_table(v):
            yield from _tables(name, v, show_all)
        else:
            yield from _sections(v, name, show_all)


def render_show(doc: dict[str, Any], *, show_all: bool = False) -> Group:
    parts = list(_sections(doc, "", show_all))
    verdict = Text()
    for k in VERDICT_KEYS:
        if doc.get(k) is not None:
            verdict.append(f"{k}: ", style="bold")
            verdict.append(f"{safe(doc[k])}\n", style="bold green" if k.startswith("decision") else "")
    if verdict:
        parts.append(Panel(verdict, title="decision", title_align="left"))
    return Group(*parts)


def flatten(data: Any, path: str = "") -> dict[str, Any]:
    """Leaves of a document by path; list elements that are records are keyed by their identity fields."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            if k in RAW_KEYS or k in ("provenance", "content_sha256"):
                continue
            out.update(flatten(v, f"{path}.{k}" if path else k))
    elif isinstance(data, list):
        seen: dict[str, int] = {}
        for i, v in enumerate(data):
            if isinstance(v, dict):
                ident = ",".join(f"{k}={v[k]}" for k in IDENTITY_KEYS if k in v and not isinstance(v[k], (dict, list)))
                ident = ident or str(i)
                # records that share their identity (a sandwich A/B's two engines of one recipe) stay apart: the
                # second is "#2", in order, so one cannot hide a change in the other
                seen[ident] = seen.get(ident, 0) + 1
                key = f"{path}[{ident}]" if seen[ident] == 1 else f"{path}[{ident} #{seen[ident]}]"
            else:
                key = f"{path}[{i}]"
            out.update(flatten(v, key))
    else:
        out[path] = data
    return out


def diff_rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any, str, str]]:
    """(path, a, b, delta, ratio b/a) for every leaf that differs or is numeric in both."""
    fa, fb = flatten(a), flatten(b)
    rows = []
    for path in list(fa) + [p for p in fb if p not in fa]:
        va, vb = fa.get(path), fb.get(path)
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (va, vb))
        if numeric:
            delta = f"{vb - va:+.6g}"
            ratio = f"{vb / va:.4f}" if va else "—"
            rows.append((path, va, vb, delta, ratio))
        elif va != vb:
            rows.append((path, va, vb, "", ""))
    return rows


def render_diff(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str, *, changed_only: bool) -> Table:
    t = Table(title=Text(safe(f"A = {name_a}") + "\n" + safe(f"B = {name_b}")), title_justify="left")
    for c, j in (("field", "left"), ("A", "right"), ("B", "right"), ("B - A", "right"), ("B / A", "right")):
        t.add_column(c, justify=j, overflow="fold")
    for path, va, vb, delta, ratio in diff_rows(a, b):
        if changed_only and va == vb:
            continue
        t.add_row(Text(safe(path)), Text("—" if va is None else _fmt(va)), Text("—" if vb is None else _fmt(vb)),
                  Text(delta), Text(ratio))
    return t


def console() -> Console:
    """A console that keeps wide tables whole when the output is a file or a pipe."""
    con = Console(soft_wrap=False)
    if not con.is_terminal:
        con = Console(soft_wrap=False, width=max(con.width, 200))
    return con

"""The report as files: ``DIR/index.html`` (one self-contained page: its PNGs are embedded, so it opens with no
network and no folder beside it) and ``DIR/<receipt>/<figure>.png`` (the same images, to reuse). The HTML comes
from a Jinja2 template (``templates/report.html.j2``) with autoescaping on: every text of a receipt is escaped."""
from __future__ import annotations

import base64
import io
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .model import Figure, ReceiptReport

DPI = 110
REASON_CHARS = 480   # a decision's reason longer than this opens folded (the whole of it one click away)
CELL_CHARS = 240     # a table cell's text beyond this is cut, and says so: the receipt holds all of it
# verdict words -> the colour class the page gives a table cell that starts with one (kernel, serving, drivers,
# prediction against measurement, correctness)
VERDICT_CLASSES = {"FASTER": "good", "BETTER": "good", "AGREE": "good", "CONSISTENT": "good", "PASS": "good",
                   "SLOWER": "bad", "WORSE": "bad", "DISAGREE": "bad", "BELOW": "bad", "ABOVE": "bad", "FAIL": "bad",
                   "SAME": "same", "EQUIVALENT": "same",
                   "FLAGGED": "flag", "AMBIGUOUS": "unsure", "INCONCLUSIVE": "unsure", "UNDECIDED": "unsure",
                   "INSUFFICIENT": "unsure"}


@dataclass
class DrawnFigure:
    title: str
    caption: str
    file: str          # relative to index.html
    data_uri: str
    width_px: int
    height_px: int


@dataclass
class DrawnSection:
    title: str
    figures: list[DrawnFigure]
    tables: list[Any]
    notes: list[str]


@dataclass
class DrawnReceipt:
    anchor: str
    head: Any
    sections: list[DrawnSection]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "receipt"


def _draw(fig: Figure, folder: Path, rel: str) -> DrawnFigure:
    buf = io.BytesIO()
    fig.fig.savefig(buf, format="png", dpi=DPI)
    data = buf.getvalue()
    (folder / f"{fig.name}.png").write_bytes(data)
    w_in, h_in = fig.fig.get_size_inches()
    return DrawnFigure(title=fig.title, caption=fig.caption, file=f"{rel}/{fig.name}.png",
                       data_uri="data:image/png;base64," + base64.b64encode(data).decode("ascii"),
                       width_px=round(w_in * DPI), height_px=round(h_in * DPI))


def _verdict_class(cell: Any) -> str:
    word = str(cell).split(" ", 1)[0].rstrip(":,;")
    return VERDICT_CLASSES.get(word, "none")


def _cell(value: Any) -> str:
    """A table cell as text: floats to 4 significant digits (the receipt keeps every digit)."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + " … (the whole text is in the receipt)"


def render_page(reports: list[ReceiptReport], out: Path) -> Path:
    """Write every report's PNGs and the page; returns the page's path."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    from .. import __version__

    out.mkdir(parents=True, exist_ok=True)
    drawn, used = [], set()
    for n, rep in enumerate(reports):
        anchor = _slug(Path(rep.head.file).stem)
        if anchor in used:
            anchor = f"{anchor}-{n + 1}"
        used.add(anchor)
        folder = out / anchor
        folder.mkdir(exist_ok=True)
        names: set[str] = set()
        sections = []
        for s in rep.sections:
            figs = []
            for f in s.figures:
                if f.name in names:
                    raise ValueError(f"two figures named {f.name!r} in the report of {rep.head.file}")
                names.add(f.name)
                figs.append(_draw(f, folder, anchor))
            sections.append(DrawnSection(title=s.title, figures=figs, tables=s.tables, notes=s.notes))
        drawn.append(DrawnReceipt(anchor=anchor, head=rep.head, sections=sections))
    env = Environment(loader=PackageLoader("infercrane.report", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["verdict_class"] = _verdict_class
    env.filters["cell"] = _cell
    title = ", ".join(Path(r.head.file).name for r in reports)
    html = env.get_template("report.html.j2").render(
        receipts=drawn, title=title, version=__version__, reason_chars=REASON_CHARS,
        written_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    page = out / "index.html"
    page.write_text(html, encoding="utf-8")
    return page

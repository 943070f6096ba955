"""What a report is made of, apart from how it is drawn or laid out: per receipt, a head (decision, reason,
qualification boundary, conditions) and sections of figures, tables and notes. Figures are matplotlib ``Figure``
objects (Agg backend); ``page.py`` writes each as a PNG and embeds it in the HTML."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Figure:
    """One plot. ``name`` is its PNG file stem, unique in its receipt's part of the report; ``caption`` says what is
    drawn and how every interval or whisker was computed."""

    name: str
    title: str
    caption: str
    fig: Any  # matplotlib.figure.Figure


def new_figure(width_in: float, height_in: float, *, nrows: int = 1, ncols: int = 1) -> tuple[Any, list[Any]]:
    """A matplotlib figure made without pyplot (no global state), ``nrows x ncols`` axes (flattened, row-major)."""
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width_in, height_in), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]
    caption: str = ""


@dataclass
class Section:
    title: str
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Decision:
    section: str   # "kernel screen", "paired serving (c = 1, 8, 32)", "kernel in vLLM", ...
    decision: str
    reason: str
    code: str = ""


@dataclass
class ReceiptHead:
    """What the page opens with, per receipt: the decisions first, then why, then how far they reach."""

    file: str
    schema_version: str
    kind: str                 # "kernel screen", "serving A/B", "PoC", "kernel in vLLM", ...
    decisions: list[Decision]
    qualification_boundary: str
    conditions: list[tuple[str, str]] = field(default_factory=list)  # (label, value): GPU, versions, shapes, runs
    warnings: list[str] = field(default_factory=list)                # legacy format, incomplete, functional check
    legacy: str | None = None  # a legacy format's note (``receipts.registry.legacy_note``), also the first warning


@dataclass
class ReceiptReport:
    head: ReceiptHead
    sections: list[Section] = field(default_factory=list)

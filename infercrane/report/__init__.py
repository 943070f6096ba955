"""``infercrane report``: receipts drawn as one self-contained HTML page plus its PNGs (matplotlib, Jinja2).

``build.py`` turns a validated receipt into a ``model.ReceiptReport`` (decisions first, then evidence sections from
``kernel.py`` and ``serving.py``); ``page.py`` writes the PNGs and the page. ``console.py`` is the same receipts read
on the console (``receipt show`` and ``diff``), and the console every command prints to."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable

NEEDS = ("matplotlib", "jinja2")  # the `report` extra
INSTALL_HINT = "pip install 'infercrane[report]'"


def missing_dependency() -> str | None:
    """The first module ``infercrane report`` needs that is not installed, or None."""
    return next((m for m in NEEDS if importlib.util.find_spec(m) is None), None)


def default_out(receipts: list[Path]) -> Path:
    """Where a report goes when no folder is given: beside its receipt, named after it (``runs/RUN_ID/poc.json`` ->
    ``runs/RUN_ID/poc.report/``, as ``infercrane poc`` writes its own); the report of several receipts under
    ``runs/RUN_ID/report/`` (``runs/`` is where every InferCrane command writes, and git ignores it)."""
    if len(receipts) == 1:
        receipt = Path(receipts[0])
        return receipt.with_name(receipt.stem + ".report")
    from ..env.capture import new_run_id, run_id_from_env

    return Path("runs") / (run_id_from_env() or new_run_id()) / "report"


def write_report(receipts: list[Path], out: Path, say: Callable[[str], None] | None = None) -> Path:
    """Validate and draw ``receipts`` into ``out``; returns ``out/index.html``. ``say`` hears, as each receipt is read
    and before anything is drawn, the one line saying that it is of a legacy format (its conclusions not derived
    again)."""
    from .build import receipt_report
    from .page import render_page

    reports = []
    for p in receipts:
        rep = receipt_report(Path(p))
        if rep.head.legacy is not None and say is not None:
            say(f"{p}: {rep.head.legacy}")
        reports.append(rep)
    return render_page(reports, Path(out))

"""``infercrane export``: one receipt as a flat CSV table or a JSON summary for spreadsheets and dashboards."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from ..options import check_output_file, command_line, plain


def export(receipt: Path, /, *, format: Literal["csv", "json"] = "csv",
           table: Literal["measured", "comparisons"] | None = None, out: Path | None = None) -> int:
    """Export a receipt for a spreadsheet or a dashboard. CSV: one row per measured unit with its conditions (a kernel
    screen's timing cells and correctness checks, each with its implementation's decision; a serving receipt's runs,
    every metric recorded; a PoC's rows of every receipt it embeds, named in the section column), or with --table
    comparisons one row per comparison (kernel speedups, serving B/A statistics and family tests, driver agreement,
    predictions) with its interval, its method, the lab's verdict and its normalized one. JSON: one summary object
    (kind, schema version, content hash, conditions, each section's decision, reason and headline comparison with its
    interval and method). Columns and keys are listed in docs/exports.md. The receipt is validated first; an invalid
    one, or a v1 seed receipt (medians only), is refused.

    Parameters
    ----------
    receipt
        A receipt JSON file (kernel screen v2/v3, serve ab / serve bench / kernel apply, PoC or merged PoC).
    format
        csv: a table under one fixed header; json: one summary object.
    table
        Which CSV table: measured (one row per timing cell, check or run; the default) or comparisons (one row per
        comparison, with its verdict). CSV only.
    out
        Write the export to this file (atomically) instead of standard output.
    """
    from ..errors import InputError, ReceiptInvalid
    from ..receipts.io import write_atomic_bytes
    from ..receipts.validate import load_receipt
    from ..report.export import export_text

    if table is not None and format != "csv":
        raise InputError(f"--table {table}: chooses a CSV table; --format {format} writes the summary object",
                         hint="drop --table, or give --format csv")
    if out is not None:
        if out.exists() and receipt.exists() and out.samefile(receipt):
            raise InputError(f"--out {out}: is the receipt being exported; write the export elsewhere")
        check_output_file(out, "--out")
    try:
        r = load_receipt(receipt)
    except ReceiptInvalid as e:
        _, where, why = e.problems[0]
        more = f" (and {len(e.problems) - 1} more)" if len(e.problems) > 1 else ""
        raise InputError(f"{receipt}: not a valid receipt: {where}: {' '.join(why.split())}{more}",
                         hint=f"`{command_line('receipt', 'validate', receipt)}` lists every problem") from None
    text = export_text(r, format, table=table or "measured", label=str(receipt))
    if out is None:
        sys.stdout.write(text)
        return 0
    write_atomic_bytes(out, text.encode())
    what = "json summary" if format == "json" else f"csv, {table or 'measured'} table"
    print(f"wrote {plain(out)} ({what}) from {plain(receipt)}")
    return 0

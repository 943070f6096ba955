"""``infercrane receipt …``: validate, show, diff, schema."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from ..errors import InfercraneError, InputError, ReceiptInvalid
from .options import check_output_folder, plain


def validate(files: list[Path], /, *, quiet: bool = False) -> int:
    """Validate receipt files: schema, derived numbers, content hash.

    Parameters
    ----------
    files
        Receipt JSON files.
    quiet
        Print failures only.
    """
    from ..receipts.validate import load_receipt

    failed = 0
    for f in files:
        try:
            r = load_receipt(f)
        except ReceiptInvalid as e:
            failed += 1
            for file, path, reason in e.problems:
                print(f"INVALID {file}: {path}: {reason}")
        except InfercraneError as e:
            failed += 1
            print(f"INVALID {e.message}")
        else:
            if not quiet:
                print(f"ok      {f}: {r.schema_version}")
    if failed:
        print(f"{failed} of {len(files)} receipt(s) invalid")
        return 2
    return 0


def show(file: Path, /, *, all: Annotated[bool, Parameter(name="--all")] = False) -> int:
    """Show a receipt as tables: inputs, measurements, decision, reason, boundary.

    Parameters
    ----------
    file
        A receipt JSON file (it is validated first).
    all
        Show every row of long tables (raw evidence included).
    """
    from ..receipts.render import console, render_show
    from ..receipts.validate import load_receipt

    r = load_receipt(file)
    con = console()
    con.print(f"[bold]{plain(file)}[/bold]  ({plain(r.schema_version)}) — valid")
    con.print(render_show(r.document, show_all=all))
    return 0


def diff(a: Path, b: Path, /, *, changed_only: bool = False) -> int:
    """Compare two receipts of the same kind side by side, with deltas and ratios B/A.

    Parameters
    ----------
    a
        Receipt A.
    b
        Receipt B.
    changed_only
        Hide fields whose values are equal.
    """
    from ..receipts.registry import family
    from ..receipts.render import console, render_diff
    from ..receipts.validate import load_receipt

    ra, rb = load_receipt(a), load_receipt(b)
    if family(ra.schema_version) != family(rb.schema_version):
        raise InputError(f"cannot diff {ra.schema_version} ({a}) with {rb.schema_version} ({b}): different kinds of receipt",
                         hint="diff two screening receipts or two optimization-poc receipts")
    console().print(render_diff(ra.document, rb.document, str(a), str(b), changed_only=changed_only))
    return 0


def schema(*, version: str | None = None, write: Path | None = None) -> int:
    """Print the JSON Schema of one receipt version, or write every version's schema into a folder.

    Parameters
    ----------
    version
        A schema_version, e.g. infercrane.cuda-kernel-screening-receipt/v2. Default: list the known versions.
    write
        Write one file per version into this folder (as the repo's schemas/ folder holds them).
    """
    from ..receipts.schemas import json_schema, schema_filename
    from ..receipts.registry import MODELS, model_for

    if write is not None:
        check_output_folder(write, "--write")
        write.mkdir(parents=True, exist_ok=True)
        for v in MODELS:
            (write / schema_filename(v)).write_text(json.dumps(json_schema(v), indent=2) + "\n")
            print(f"wrote {write / schema_filename(v)}")
        return 0
    if version is None:
        print("\n".join(MODELS))
        return 0
    from ..errors import about

    with about("--version"):
        model_for(version)
    print(json.dumps(json_schema(version), indent=2))
    return 0

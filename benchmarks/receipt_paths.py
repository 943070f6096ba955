"""Do two receipts hold the same fields? Their field paths (list positions folded to ``[]``), outside ``provenance``
and ``content_sha256``, and what one has that the other lacks.

    python benchmarks/receipt_paths.py A.json B.json

Beside ``infercrane receipt diff`` (which compares values): a change that should move no field, such as a
reorganisation of the code, writes receipts with the same paths.
"""
from __future__ import annotations

import json
import sys
from typing import Any

SKIPPED = ("provenance", "content_sha256")


def field_paths(doc: Any, prefix: str = "") -> set[str]:
    """Every leaf's path in ``doc``: ``.a.b[].c``; the keys in ``SKIPPED`` and all below them left out."""
    if isinstance(doc, dict):
        return {p for k, v in doc.items() if k not in SKIPPED for p in field_paths(v, f"{prefix}.{k}")}
    if isinstance(doc, list):
        return {p for v in doc for p in field_paths(v, f"{prefix}[]")}
    return {prefix}


def compare(a_path: str, b_path: str) -> list[str]:
    """The lines this script prints for two receipt files."""
    a, b = (field_paths(json.load(open(f))) for f in (a_path, b_path))
    return ([f"{a_path}: {len(a)} field paths; {b_path}: {len(b)}; only in the first: {len(a - b)}; "
             f"only in the second: {len(b - a)}"]
            + [f"  only in the first: {p}" for p in sorted(a - b)]
            + [f"  only in the second: {p}" for p in sorted(b - a)])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: receipt_paths.py A.json B.json")
    print("\n".join(compare(sys.argv[1], sys.argv[2])))

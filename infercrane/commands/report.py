"""``infercrane report``: receipts drawn as one HTML page with its PNGs."""
from __future__ import annotations

from pathlib import Path

from ..options import check_output_folder, plain


def report(receipts: list[Path], /, *, out: Path | None = None) -> int:
    """Draw receipts as one self-contained HTML page (``OUT/index.html``, its images embedded, nothing fetched at
    view time) plus the PNGs it embeds (``OUT/<receipt>/<figure>.png``). Each receipt opens with its decisions,
    reason and qualification boundary, then its evidence: for a kernel screen, time per call per timing mode with
    the floors, speedups with their intervals, the verdict grid and the Amdahl ceiling; for serving, every metric
    over concurrency with every run, B/A ratios with their intervals against the equivalence band, warm-up drift and
    driver agreement; for a kernel inside vLLM, the prediction against the measurement; per-GPU panels side by
    side. Every receipt is validated first; an invalid one is refused. A receipt of a legacy format (v1, v2 kernel
    screen) is drawn after a first line, on the console and on its page, saying that its conclusions were not
    derived again.

    Parameters
    ----------
    receipts
        Receipt JSON files (kernel screen, serving A/B or benchmark, PoC, kernel apply, merged).
    out
        Folder for index.html and the PNGs (created; files of the same names are replaced). Default: beside the
        receipt, named after it (runs/RUN_ID/serve-ab.json -> runs/RUN_ID/serve-ab.report/, as infercrane poc
        writes its own); for several receipts, runs/RUN_ID/report/.
    """
    from ..errors import InputError

    for r in receipts:
        if not r.is_file():
            raise InputError(f"receipt {r}: no such file", hint="give receipt JSON files written by InferCrane")
    from ..report import INSTALL_HINT, default_out, missing_dependency, write_report

    out = default_out(list(receipts)) if out is None else out
    check_output_folder(out, "--out")

    if (missing := missing_dependency()) is not None:
        raise InputError(f"infercrane report needs matplotlib and Jinja2 ({missing} is missing)", hint=INSTALL_HINT)

    page = write_report(list(receipts), out, say=lambda line: print(f"LEGACY  {line}", flush=True))
    print(f"report: {plain(page)}")
    return 0

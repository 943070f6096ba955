"""What the kernel lab decided on a GPU, from the files ``benchmarks/kernel_decides_h200.sh`` wrote: per op and timing
mode, how many decode-row comparisons carry a verdict (and which), how many flagged cells kept their verdict on the
widened interval; each candidate's decision; and the standalone timer's comparison of every graph cell.

    python3 benchmarks/kernel_decides_summary.py [--cold] EVIDENCE > summary.txt

``--cold`` adds, per implementation, every cold cell's trial median against its second timer (the driver-API event
pair; in screens before it, CUPTI's marker span and the calibrated offset).

``EVIDENCE`` is the script's output folder or a ``.tar.xz`` of it. Reads JSON only (no InferCrane import)."""
from __future__ import annotations

import json
import statistics
import sys
import tarfile
from collections import Counter
from pathlib import Path

VERDICTS = ("FASTER", "SLOWER", "SAME", "AMBIGUOUS", "FLAGGED", "INSUFFICIENT")
NO_VERDICT = ("FLAGGED", "INSUFFICIENT")


def _files(evidence: Path) -> dict[str, str]:
    if evidence.is_dir():
        return {p.name: p.read_text() for p in evidence.iterdir() if p.suffix in (".json", ".jsonl")}
    with tarfile.open(evidence) as tar:
        return {Path(m.name).name: tar.extractfile(m).read().decode() for m in tar.getmembers()
                if m.isfile() and Path(m.name).suffix in (".json", ".jsonl")}


def summary(files: dict[str, str], max_rows: int = 512, cold: bool = False) -> list[str]:
    lines = []
    for name in sorted(n for n in files if n.endswith(".json")):
        doc = json.loads(files[name])
        res = doc["result"]
        op = res["spec"]["op"]
        for mode in res["modes"]:
            cs = [c for c in res["comparisons"] if c["mode"] == mode and c["rows"] <= max_rows]
            n = Counter(c["verdict"] for c in cs)
            widened = [c for c in cs if c.get("widened")]
            kept = sum(1 for c in widened if c["widened"]["holds"])
            got = sum(v for k, v in n.items() if k not in NO_VERDICT)
            lines.append(f"{op} {mode}: {got} of {len(cs)} decode-row comparisons carry a verdict ("
                         + ", ".join(f"{v} {n.get(v, 0)}" for v in VERDICTS)
                         + f"); {len(widened)} flagged by a timer disagreement, {kept} of them keep their verdict "
                         "on the widened interval")
        lines.append(f"{op} decision of {doc['candidate']['key']}: {doc['decision_code']}")
        for other in doc.get("other_candidates", []):
            lines.append(f"{op} decision of {other['implementation']}: {other['decision_code']}")
        lines.append(f"{op} wall_s {res['wall_s']:.1f}; handshake cost per sample job (us): " + ", ".join(
            f"{m} {v:.0f}" for m, v in res["calibration"]["parent_overhead_us"].items()))
    for name in sorted(n for n in files if cold and n.endswith(".json")):  # cold: the events against the second timer
        res = json.loads(files[name])["result"]
        for im in res["implementations"]:
            cells = []
            for c in im["timings"]:
                trials = [b for b in c.get("blocks", []) if b.get("second_timer_us") is not None]
                if c["mode"] != "cold" or c["rows"] > max_rows or not trials:
                    continue
                own = trials[-1].get("second_timer_reference_us") or statistics.median(trials[-1]["samples_us"])
                flagged = "*" if any(f.startswith("timer_disagreement") for f in c["flags"]) else ""
                cells.append(f"{c['rows']}: {own:.3f} - {c['second_timer_us']:.3f} = "
                             f"{own - c['second_timer_us']:+.3f}{flagged}")
            if cells:
                offset = next((c["second_timer_offset_us"] for c in im["timings"] if c["mode"] == "cold"
                               and c.get("second_timer_offset_us") is not None), None)
                if offset is None:  # the driver-API event pair: the same quantity, no offset
                    lines.append(f"{res['spec']['op']} cold {im['key']}: trial median - second timer (us) per rows, "
                                 "* flagged: " + "; ".join(cells))
                else:
                    lines.append(f"{res['spec']['op']} cold {im['key']}: trial median - marker span (us) per rows, "
                                 f"* flagged; calibrated offset {offset:+.3f}: " + "; ".join(cells))
    for name in sorted(n for n in files if n.startswith("standalone-") and n.endswith(".jsonl")):
        rows = [json.loads(line)["summary"] for line in files[name].splitlines() if '"summary"' in line]
        cmp = [r for r in rows if r.get("kind") == "compare"]
        if not cmp:
            continue
        worst = max(cmp, key=lambda r: abs(r["level_matched"]))
        within = sum(1 for r in cmp if r["within_limit"])
        lines.append(f"{name}: {within} of {len(cmp)} graph cells within 3 % of the standalone timer, level-matched; "
                     f"largest {worst['level_matched']:+.4f} ({worst['impl']} rows {worst['rows']}); largest "
                     f"unmatched difference {max(abs(r['difference']) for r in cmp):.4f}")
    return lines


def main(argv: list[str]) -> int:
    cold = "--cold" in argv
    args = [a for a in argv if a != "--cold"]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(summary(_files(Path(args[0])), cold=cold)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

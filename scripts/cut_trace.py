#!/usr/bin/env python3
"""Cut a Mooncake-format trace to a span and scale its lengths for a small model; what made
infercrane/serving/traces/mooncake-conversation-180s.jsonl (its README says with which arguments).

    python scripts/cut_trace.py SOURCE.jsonl OUT.jsonl --from-s 0 --to-s 180 --input-scale 16 \
        --max-input 3072 --max-output 1024 --source-block-size 512

Each line in [from, to) is kept, its timestamp made relative to ``from``. Input lengths are divided by the scale
(rounded up) and the hash-id blocks shrink with them (a block of B tokens becomes B / scale), so each request keeps
its blocks and the blocks it shares with others: the trace's prefix sharing is unchanged. An input still above
``--max-input`` keeps its first max-input tokens, and its hash ids the blocks those tokens lie in. Output lengths are
capped at ``--max-output``, not scaled. Timestamps are not changed (a workload's trace_speedup scales them).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def cut(lines: list[dict], *, from_s: float, to_s: float, input_scale: int, max_input: int, max_output: int,
        source_block_size: int) -> list[dict]:
    if source_block_size % input_scale:
        raise SystemExit(f"--source-block-size {source_block_size} is not a multiple of --input-scale {input_scale}")
    block = source_block_size // input_scale
    out = []
    for rec in lines:
        if not from_s * 1000 <= rec["timestamp"] < to_s * 1000:
            continue
        n = min(math.ceil(rec["input_length"] / input_scale), max_input)
        new = {"timestamp": rec["timestamp"] - int(from_s * 1000), "input_length": n,
               "output_length": min(rec["output_length"], max_output)}
        if rec.get("hash_ids") is not None:
            new["hash_ids"] = rec["hash_ids"][:math.ceil(n / block)]
        out.append(new)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--from-s", type=float, default=0.0)
    ap.add_argument("--to-s", type=float, required=True)
    ap.add_argument("--input-scale", type=int, default=1)
    ap.add_argument("--max-input", type=int, required=True)
    ap.add_argument("--max-output", type=int, required=True)
    ap.add_argument("--source-block-size", type=int, default=512)
    args = ap.parse_args(argv)
    lines = [json.loads(line) for line in args.source.read_text().splitlines() if line.strip()]
    kept = cut(lines, from_s=args.from_s, to_s=args.to_s, input_scale=args.input_scale, max_input=args.max_input,
               max_output=args.max_output, source_block_size=args.source_block_size)
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; not overwritten")
    args.out.write_text("".join(json.dumps(r) + "\n" for r in kept))
    print(f"{len(kept)} of {len(lines)} lines -> {args.out} (block size {args.source_block_size // args.input_scale})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

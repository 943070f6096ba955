"""A standalone graph-mode timer: what one kernel costs per call when replayed in a CUDA graph, outside InferCrane's
harness, and what in a graph's history sets the level it reads.

It imports torch, Triton (through the implementations) and the implementations themselves
(``infercrane.kernels.registry``), nothing of the harness: no worker processes, no ``timing.py``. Each timed graph is
the kernel lab's graph-mode sample as a user would write it by hand: ``--calls`` back-to-back calls on one set of
buffers captured into a ``torch.cuda.CUDAGraph`` (after three warm-up calls on a side stream), one replay between two
CUDA events per sample, per-call time = replay time / calls, in-place inputs restored between samples outside the
events; a graph's figure is the median of ``--samples`` samples.

Experiments (``--experiment``; each one prints one JSON line per timed graph and a summary):

  placements  for each implementation, in a fresh process of its own, ``--trials`` trials of ``--graphs`` graphs per
              row count, each graph on new buffers under a seeded placement condition (the kernel lab's
              ``placement.draw``: the allocator's cache emptied, a pad allocation that shifts the inputs, tiny
              unrelated graphs captured and freed, or kept alive, before the timed capture), every graph of a trial
              placed first and then timed, as a screen's graph-mode visit does. With ``--receipt`` it takes the
              cells, calls per graph and conditions from a screen's receipt and compares the screen's figure of each
              graph cell (mean of its graphs' medians) with its own over the same conditions.
  history     one implementation, one set of buffers, a sequence of graphs, each after a seeded number of tiny graphs
              captured and freed / kept alive: does the graph's history set its level?
  sequence    one set of buffers, ``--placements`` graphs in a row with nothing between them, each freed after it
              is timed (``free``) or kept alive (``keep``).

Usage (repository root; ``PYTHONPATH=.`` where InferCrane is not installed):
    python3 benchmarks/graph_timer.py --op fused_add_rmsnorm --impls triton,torch_compile --rows 1,512 --out F.jsonl
    python3 benchmarks/graph_timer.py --receipt kernel-screen.json --out standalone.jsonl
    python3 benchmarks/graph_timer.py --experiment history --impls triton --rows 1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HIDDEN = 1024  # Qwen3-0.6B
EPS = 1e-6
TINY_ELEMENTS = 256


def _spec(op: str, rows: list[int]) -> Any:
    from infercrane.kernels import registry

    return registry.op_module(op).SPEC(hidden_size=HIDDEN, eps=EPS, rows=tuple(rows))


def _load(op: str, key: str, spec: Any) -> tuple[Callable[..., Any] | None, bool, str]:
    from infercrane.kernels import registry

    impl = registry.get(op, key)
    ok, reason = impl.probe()
    if not ok:
        return None, impl.in_place, reason
    return impl.load(spec), impl.in_place, ""


def _call_on(spec: Any, fn: Callable[..., Any], in_place: bool, rows: int, seed: int) -> tuple[Any, Any, Any]:
    """``(call, restore, tensors)`` on fresh inputs: the op's contract, in-place inputs restorable."""
    import torch

    dev = torch.device("cuda")
    tensors = spec.make_inputs(rows, dev, seed, 1.0)
    for name in spec.buffers(in_place):
        tensors[name] = torch.empty((rows, spec.hidden_size), dtype=tensors[spec.ROW_TENSORS[0]].dtype, device=dev)
    args = spec.arguments(tensors, in_place)
    mutated = [tensors[b] for b in spec.IN_PLACE.writes.values() if b in spec.INPUTS] if in_place else []
    pristine = [t.clone() for t in mutated]

    def restore() -> None:
        for t, t0 in zip(mutated, pristine):
            t.copy_(t0)

    return (lambda: fn(*args)), (restore if mutated else None), tensors


def _capture(call: Callable[[], Any], calls: int) -> Any:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    torch.cuda.synchronize()
    return graph


def _tiny_graph() -> tuple[Any, Any]:
    import torch

    scratch = torch.zeros(TINY_ELEMENTS, device="cuda")
    return _capture(lambda: scratch.add_(1.0), 1), scratch


def _time(graph: Any, restore: Any, calls: int, samples: int) -> dict[str, float]:
    import torch

    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(samples):
        if restore is not None:
            restore()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    q = statistics.quantiles(times, n=10)
    return {"median_us": statistics.median(times), "p10_us": q[0], "p90_us": q[-1]}


def _place(spec: Any, fn: Any, in_place: bool, rows: int, calls: int, seed: int, condition: dict[str, Any]) -> dict:
    """Buffers and a captured graph under ``condition``, as the kernel lab's worker places a graph: the allocator's
    cache emptied, a pad of ``pad_bytes`` allocated and held, new buffers, ``freed`` tiny graphs captured and freed,
    ``kept`` tiny graphs captured and held, then the timed graph captured and replayed once (upload)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    pad = torch.empty(int(condition["pad_bytes"]), dtype=torch.uint8, device="cuda") if condition["pad_bytes"] else None
    call, restore, tensors = _call_on(spec, fn, in_place, rows, seed)
    for _ in range(int(condition["freed"])):
        g, s_ = _tiny_graph()
        del g, s_
    kept = [_tiny_graph() for _ in range(int(condition["kept"]))]
    graph = _capture(call, calls)
    graph.replay()
    if restore is not None:
        restore()
    row0 = tensors[spec.ROW_TENSORS[0]]
    return {"graph": graph, "restore": restore, "holds": (pad, kept, tensors),
            "input_offset_mod_2mib": int(row0.data_ptr()) % (2 << 20)}


def _trial(spec: Any, fn: Any, in_place: bool, rows: int, calls: int, samples: int,
           conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One trial as a screen's graph-mode visit makes it: every graph placed first, then each timed in turn."""
    placed = [_place(spec, fn, in_place, rows, calls, 1000 + c["index"], c) for c in conditions]
    out = []
    for c, p in zip(conditions, placed):
        out.append({"condition": c, "input_offset_mod_2mib": p["input_offset_mod_2mib"],
                    **_time(p["graph"], p["restore"], calls, samples)})
    del placed
    return out


def _calls_for(spec: Any, fn: Any, in_place: bool, rows: int, target_us: float, max_calls: int) -> int:
    """Calls per graph so a sample lasts about ``target_us``: from a 256-call graph's replay."""
    call, restore, _ = _call_on(spec, fn, in_place, rows, 1)
    graph = _capture(call, 256)
    per_call = _time(graph, restore, 256, 5)["median_us"]
    del graph
    return int(max(1, min(max_calls, round(target_us / per_call))))


def _levels(medians: list[float], gap: float) -> dict[str, Any]:
    from infercrane.kernels.harness.placement import split_levels

    return split_levels(medians, gap).model_dump()


def run_one(args: argparse.Namespace, key: str) -> list[dict[str, Any]]:
    """Every graph of one implementation (in this process)."""
    import torch

    from infercrane.kernels.harness.placement import draw

    rows_list = [int(r) for r in args.rows.split(",")]
    spec = _spec(args.op, rows_list)
    fn, in_place, reason = _load(args.op, key, spec)
    meta = {"op": args.op, "impl": key, "experiment": args.experiment, "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__}
    if fn is None:
        return [{**meta, "skipped": reason}]
    out = []
    for rows in rows_list:
        calls = args.calls or ((args.cells or {}).get((key, rows)) or {}).get("calls") or \
            _calls_for(spec, fn, in_place, rows, args.target_us, args.max_calls)
        if args.experiment == "placements":
            cells = args.cells.get((key, rows)) if args.cells else None
            if args.cells and cells is None:
                continue
            trials = cells["trials"] if cells else [[draw(args.seed, t * args.graphs + g).model_dump()
                                                      for g in range(args.graphs)] for t in range(args.trials)]
            calls = cells["calls"] if cells else calls
            for t, conditions in enumerate(trials):
                for rec in _trial(spec, fn, in_place, rows, calls, args.samples, conditions):
                    out.append({**meta, "rows": rows, "calls": calls, "trial": t, "index": rec["condition"]["index"],
                                **rec})
        elif args.experiment == "history":
            import random

            rng = random.Random(args.seed)
            call, restore, tensors = _call_on(spec, fn, in_place, rows, 7)
            for i in range(args.placements):
                cond = {"freed": rng.randrange(4), "kept": rng.randrange(2)}
                for _ in range(cond["freed"]):
                    g, s = _tiny_graph()
                    del g, s
                kept = [_tiny_graph() for _ in range(cond["kept"])]
                graph = _capture(call, calls)
                out.append({**meta, "rows": rows, "calls": calls, "index": i, "condition": cond,
                            **_time(graph, restore, calls, args.samples)})
                del graph, kept
            del tensors
        else:  # sequence
            call, restore, tensors = _call_on(spec, fn, in_place, rows, 7)
            for variant in ("free", "keep"):
                alive = []
                for i in range(args.placements):
                    graph = _capture(call, calls)
                    out.append({**meta, "rows": rows, "calls": calls, "index": i, "condition": {"sequence": variant},
                                **_time(graph, restore, calls, args.samples)})
                    if variant == "keep":
                        alive.append(graph)
                    del graph
                del alive
            del tensors
    return out


COMPARE_LIMIT = 0.03


def _graph_medians(block: dict[str, Any]) -> list[tuple[int, float]]:
    rejected = set(block.get("rejected") or [])
    out = []
    for g in block.get("graphs") or []:
        idx = range(g["first_sample"], g["first_sample"] + g["samples"])
        kept = [block["samples_us"][i] for i in idx if i not in rejected] or [block["samples_us"][i] for i in idx]
        out.append((g["condition"]["index"], statistics.median(kept)))
    return out


def receipt_cells(path: Path) -> tuple[dict, dict, str]:
    """From a kernel screen receipt: per (implementation, rows) graph cell, its calls per graph and each trial's
    placement conditions; and the screen's own per-graph medians, by condition index."""
    doc = json.loads(path.read_text())
    result = doc["result"]
    cells, screen = {}, {}
    for impl in result["implementations"]:
        for cell in impl.get("timings", []):
            if cell["mode"] != "graph" or not any(b.get("graphs") for b in cell["blocks"]):
                continue
            blocks = sorted(cell["blocks"], key=lambda b: b["trial"])
            cells[(impl["key"], cell["rows"])] = {
                "calls": cell["calls_per_sample"], "trials": [[g["condition"] for g in b["graphs"]] for b in blocks]}
            screen[(impl["key"], cell["rows"])] = dict(m for b in blocks for m in _graph_medians(b))
    return cells, screen, result["spec"]["op"]


def compare(records: list[dict[str, Any]], screen: dict) -> list[dict[str, Any]]:
    """Per graph cell: the screen's graphs against this timer's over the same placement conditions.

    ``difference``: the screen's mean of its graphs' medians over this timer's mean (the same conditions, so the
    same weights). ``level_matched``: each screen graph held against the nearest level this timer found for the
    cell (its low or high level where its graphs split in two, else its mean), averaged over graphs: where a
    graph's level is set by placement that neither process controls (the buffers' physical placement), two
    processes can see the levels in other proportions, and only a level-to-level comparison says whether they
    time the same thing. ``within_limit`` reads the level-matched figure against ``COMPARE_LIMIT``."""
    mine: dict[tuple[str, int], dict[int, float]] = {}
    for r in records:
        if "median_us" in r:
            mine.setdefault((r["impl"], r["rows"]), {})[r["index"]] = r["median_us"]
    out = []
    for key, theirs in sorted(screen.items()):
        ours = mine.get(key, {})
        both = sorted(set(theirs) & set(ours))
        if not both:
            continue
        s_us = statistics.fmean(theirs[i] for i in both)
        o_us = statistics.fmean(ours[i] for i in both)
        lv = _levels([ours[i] for i in both], 0.04)
        levels = [lv["low_median_us"], lv["high_median_us"]] if lv["levels"] == 2 else [o_us]
        matched = [theirs[i] / min(levels, key=lambda v: abs(theirs[i] / v - 1.0)) - 1.0 for i in both]
        level_matched = statistics.fmean(matched)
        out.append({"kind": "compare", "impl": key[0], "rows": key[1], "graphs": len(both), "screen_us": s_us,
                    "standalone_us": o_us, "difference": s_us / o_us - 1.0, "level_matched": level_matched,
                    "level_matched_worst_graph": max(matched, key=abs),
                    "within_limit": abs(level_matched) <= COMPARE_LIMIT,
                    "screen_levels": _levels([theirs[i] for i in both], 0.04), "standalone_levels": lv})
    return out


def summarize(records: list[dict[str, Any]], gap: float) -> list[dict[str, Any]]:
    """Per (implementation, rows, condition kind): the graphs' medians, their levels, mean and spread."""
    groups: dict[tuple[str, int, str], list[float]] = {}
    for r in records:
        if "median_us" in r:
            kind = r["experiment"] if r["experiment"] != "sequence" else f"sequence-{r['condition']['sequence']}"
            groups.setdefault((r["impl"], r["rows"], kind), []).append(r["median_us"])
    out = []
    for (impl, rows, kind), meds in sorted(groups.items()):
        out.append({"impl": impl, "rows": rows, "kind": kind, "graphs": len(meds), "mean_us": statistics.fmean(meds),
                    "min_us": min(meds), "max_us": max(meds), **_levels(meds, gap)})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="fused_add_rmsnorm")
    p.add_argument("--impls", default="eager,torch_compile,vllm_vendor,triton,cuda")
    p.add_argument("--rows", default="1,8,32,128,512")
    p.add_argument("--experiment", choices=("placements", "history", "sequence"), default="placements")
    p.add_argument("--placements", type=int, default=12, help="timed graphs per row count")
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--calls", type=int, default=0, help="calls per graph (0: sized to --target-us a sample)")
    p.add_argument("--target-us", type=float, default=1000.0)
    p.add_argument("--max-calls", type=int, default=8192)
    p.add_argument("--seed", type=int, default=7_777_777, help="placement seed (a screen's timing_input_seed)")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--graphs", type=int, default=4, help="graphs per trial")
    p.add_argument("--receipt", type=Path, default=None,
                   help="a kernel screen receipt: time every graph cell of it again here (its op, implementations, "
                        "rows, calls per graph and each trial's placement conditions) and compare")
    p.add_argument("--gap", type=float, default=0.04, help="relative gap that separates two levels")
    p.add_argument("--out", type=Path, default=None, help="JSON lines: every graph, then the summary rows")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: time one implementation, print JSON
    args = p.parse_args(argv)
    args.cells, args.screen = None, None
    if args.receipt:
        args.cells, args.screen, op = receipt_cells(args.receipt)
        args.op = op
        args.impls = ",".join(dict.fromkeys(k for k, _ in args.cells))
        args.rows = ",".join(str(r) for r in sorted({r for _, r in args.cells}))
    if args.one:
        print(json.dumps(run_one(args, args.one)))
        return 0
    records: list[dict[str, Any]] = []
    for key in args.impls.split(","):  # each implementation in a fresh process, as the kernel lab isolates them
        cmd = [sys.executable, str(Path(__file__).resolve()), "--one", key, *(argv if argv is not None else sys.argv[1:])]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            x for x in (str(ROOT), os.environ.get("PYTHONPATH", "")) if x)})
        if done.returncode != 0:
            records.append({"impl": key, "error": done.stderr[-2000:]})
            print(f"{key}: failed (exit {done.returncode})\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        records += json.loads(done.stdout.strip().splitlines()[-1])
    rows = summarize(records, args.gap)
    if args.screen:
        rows += compare(records, args.screen)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
            for r in rows:
                f.write(json.dumps({"summary": r}) + "\n")
    for r in records:
        if "skipped" in r or "error" in r:
            print(f"{r['impl']}: {r.get('skipped') or 'error'}")
    for r in rows:
        if r.get("kind") == "compare":
            print(f"{r['impl']:>14} rows {r['rows']:>4} screen {r['screen_us']:.4f} us, standalone {r['standalone_us']:.4f} "
                  f"us: {r['difference']:+.2%}; level-matched {r['level_matched']:+.2%} "
                  f"({'within' if r['within_limit'] else 'BEYOND'} ±{COMPARE_LIMIT:.0%})")
            continue
        lv = (f"levels {r['low_median_us']:.4f} ({r['low_n']}) / {r['high_median_us']:.4f} ({r['high_n']})"
              if r["levels"] == 2 else "one level")
        print(f"{r['impl']:>14} rows {r['rows']:>4} {r['kind']:>14}: {r['graphs']:>3} graphs, mean {r['mean_us']:.4f} "
              f"us, {r['min_us']:.4f}-{r['max_us']:.4f}; {lv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why graph-mode timings of one cell sit at two levels from trial to trial, and which level a screen should report.

Seen on an H200 (docs/benchmarks/2026-12-01-h200-kernel-in-vllm/README.md, "bimodal by trial"): the per-call time of
a kernel replayed in a CUDA graph is either ~1.10 or ~1.29 us at one row (fused add + RMSNorm, hidden 1024, bf16),
the same offset at every row count, at a steady SM clock; ``triton.testing.do_bench_cudagraph`` always reads the upper
level. Each visit of the harness allocates fresh inputs and captures a fresh graph (``kernels/harness/timing.py``
``time_graph``), so the level could follow the graph, the buffers, or what ran on the GPU before. This probe takes
blocks of samples the way a visit does (CUDA events around one replay of a graph of ``--calls`` calls; per-call time
= replay time / calls; median of ``--samples`` samples a block) under five conditions, ``--blocks`` blocks each:

  reuse       one graph and one set of buffers for every block: the baseline spread
  regraph     the same buffers, a new graph each block
  rebuffer    new buffers and a new graph each block (what a harness visit does)
  after_heavy as rebuffer, each block after ~50 ms of a 4096-row graph (what follows the largest cell of a trial)
  second      triton.testing.do_bench_cudagraph on the same buffers, once a block

and prints each condition's block medians, their lowest and highest, and the input's address (for a placement
effect). Needs a CUDA GPU. Usage (from the repository root; ``PYTHONPATH=.`` where InferCrane is not installed):
    PYTHONPATH=. python3 benchmarks/graph_levels_probe.py [--impl triton|cuda] [--rows 1] [--blocks 12] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

HIDDEN = 1024  # Qwen3-0.6B
EPS = 1e-6
HEAVY_ROWS = 4096
HEAVY_MS = 50.0
CONDITIONS = ("reuse", "regraph", "rebuffer", "after_heavy", "second")


def levels(medians: list[float], gap: float = 0.05) -> dict[str, Any]:
    """Block medians split at their widest relative gap when it exceeds ``gap``: two levels, with counts; else one."""
    ordered = sorted(medians)
    if len(ordered) < 2:
        return {"levels": 1, "low": ordered, "high": []}
    jumps = [(b / a - 1.0, i) for i, (a, b) in enumerate(zip(ordered, ordered[1:])) if a > 0]
    widest, at = max(jumps)
    if widest <= gap:
        return {"levels": 1, "widest_gap": round(widest, 4)}
    low, high = ordered[: at + 1], ordered[at + 1:]
    return {"levels": 2, "widest_gap": round(widest, 4), "low_n": len(low), "low_median": statistics.median(low),
            "high_n": len(high), "high_median": statistics.median(high)}


def _buffers(rows: int, seed: int) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=g)
    r = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
    return x, r, w, x.clone(), r.clone()


def _call(kernel: Callable[..., Any], bufs: tuple[Any, ...]) -> tuple[Callable[[], Any], Callable[[], None]]:
    x, r, w, x0, r0 = bufs

    def restore() -> None:
        x.copy_(x0)
        r.copy_(r0)

    return (lambda: kernel(x, r, w, EPS)), restore


def _block(graph: Any, restore: Callable[[], None], samples: int, calls: int) -> float:
    """Median per-call time of ``samples`` replays, each between CUDA events, inputs restored outside them."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(samples):
        restore()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def _captured(call: Callable[[], Any], calls: int) -> Any:
    import torch

    from infercrane.kernels.harness.timing import capture_graph

    graph = capture_graph(call, calls)
    graph.replay()  # the first replay uploads the graph; not timed (as time_graph)
    torch.cuda.synchronize()
    return graph


def _heavy(kernel: Callable[..., Any]) -> tuple[Callable[[], None], tuple[Any, ...]]:
    """~HEAVY_MS of a graph of 4096-row calls, as the largest cell of a trial runs before a trial's first cell, and
    the buffers that graph reads and writes: the caller holds them while it replays (a graph does not keep its
    tensors alive, and ``torch.cuda.graph`` empties the allocator's cache, so freed ones are unmapped)."""
    import torch

    bufs = _buffers(HEAVY_ROWS, 99)
    call, restore = _call(kernel, bufs)
    graph = _captured(call, 64)
    per_replay_ms = _block(graph, restore, 3, 1) / 1e3
    replays = max(1, int(HEAVY_MS / max(per_replay_ms, 1e-3)))

    def run() -> None:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()

    return run, bufs


def probe(kernel: Callable[..., Any], *, rows: int, blocks: int, samples: int, calls: int) -> dict[str, Any]:
    from infercrane.kernels.harness.timing import warm_up
    from triton.testing import do_bench_cudagraph

    out: dict[str, Any] = {}
    base = _buffers(rows, 0)
    call, restore = _call(kernel, base)
    warm_up(call, restore)
    graph = _captured(call, calls)
    heavy, _heavy_bufs = _heavy(kernel)
    for cond in CONDITIONS:
        medians, addrs = [], []
        for b in range(blocks):
            if cond == "second":
                medians.append(float(do_bench_cudagraph(call, rep=20, return_mode="median")) * 1e3)
                addrs.append(base[0].data_ptr())
                continue
            if cond == "reuse":
                g, rs, addr = graph, restore, base[0].data_ptr()
            else:
                bufs = base if cond == "regraph" else _buffers(rows, 1000 + b)
                c, rs = _call(kernel, bufs)
                if cond == "after_heavy":
                    heavy()
                g, addr = _captured(c, calls), bufs[0].data_ptr()
            medians.append(_block(g, rs, samples, calls))
            addrs.append(addr)
        out[cond] = {"block_median_us": [round(m, 4) for m in medians], "min_us": round(min(medians), 4),
                     "max_us": round(max(medians), 4), "input_addr_mod_2MiB": [a % (2 << 20) for a in addrs],
                     **levels(medians)}
        print(f"{cond:12s} " + " ".join(f"{m:.3f}" for m in medians) + f"  levels={out[cond]['levels']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=["triton", "cuda"], default="triton")
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--calls", type=int, default=2000, help="calls per graph (the screens' graphs held 1931-2039)")
    p.add_argument("--out", type=Path, default=None, help="also write the result here as one JSON line")
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("graph_levels_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.impl == "triton":
        from infercrane.kernels.ops.fused_add_rmsnorm.triton_kernel import fused_add_rmsnorm_triton as kernel
    else:
        from infercrane.kernels.ops.fused_add_rmsnorm.cuda_kernel import fused_add_rmsnorm_cuda as kernel
    from infercrane.kernels.harness.timing import ClockReader

    clock = ClockReader(torch.device("cuda"))
    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "impl": args.impl, "rows": args.rows,
            "hidden": HIDDEN, "dtype": "bfloat16", "blocks": args.blocks, "samples": args.samples,
            "calls_per_graph": args.calls, "sm_clock_before_mhz": clock.read_mhz()}
    print(json.dumps(head), flush=True)
    result = head | {"conditions": probe(kernel, rows=args.rows, blocks=args.blocks, samples=args.samples,
                                         calls=args.calls), "sm_clock_after_mhz": clock.read_mhz()}
    if args.out is not None:
        args.out.write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

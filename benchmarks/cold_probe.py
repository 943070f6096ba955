"""What separates cold mode's two timers on a GPU: CUDA events (the primary) against CUPTI spans (the second), for one
implementation at a few row counts, under each spin length and before/after CUPTI was first attached in the process.

    python3 benchmarks/cold_probe.py --op rms_norm --impls triton torch_compile --rows 1 512 --out cold.jsonl

Each line of the output: op, impl, rows, spin cycles, phase (``before_cupti`` / ``after_cupti``), and the median of
each timer over ``--samples`` samples (torch's events after the same L2 flush and spin; the driver-API event pair,
cold mode's second timer; CUPTI from the spin's end to a marker kernel queued after the call), plus the empty
kernel's figures under the same conditions. Nothing of InferCrane's harness
runs but its timing functions (``infercrane.kernels.harness.timing``), called here with their constants replaced."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_timer import _call_on, _load, _spec  # noqa: E402


class _NoClock:
    def read_mhz(self):
        return None


def _events(timing, call, restore, flush, spin: int, samples: int) -> float:
    timing.COLD_SPIN_CYCLES = spin
    times, _ = timing.time_cold(call, samples=samples, restore=restore, clock=_NoClock(), flush=flush)
    return statistics.median(times)


def _driver(timing, call, restore, flush, spin: int, samples: int) -> float:
    """Cold mode's second timer: the driver-API event pair after the same flush and spin."""
    timing.COLD_SECOND_SPIN_CYCLES = spin
    timing.COLD_SECOND_SAMPLES = samples
    return timing._second_cold(call, restore, flush)


def _cupti_marker(call, restore, flush, spin: int, samples: int) -> float:
    """CUPTI from the spin's end to the start of a marker kernel queued right after the call: the call's device time
    up to the point the stream moves on (its writes done), the quantity the end event marks."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    marker = torch.empty(1, device="cuda")
    spans = []
    for _ in range(samples):
        if restore is not None:
            restore()
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(spin)
            call()
            marker.zero_()
            torch.cuda.synchronize()
        gpu = sorted(((e.start_ns(), e.start_ns() + e.duration_ns()) for e in prof.profiler.kineto_results.events()
                      if e.device_type() == DeviceType.CUDA), key=lambda t: t[0])
        spans.append((gpu[-1][0] - gpu[0][1]) / 1e3)
    return statistics.median(spans)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", default="rms_norm")
    ap.add_argument("--impls", nargs="+", default=["triton", "cuda", "torch_compile", "eager"])
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 512])
    ap.add_argument("--spins", nargs="+", type=int, default=[200_000, 2_000_000])
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import torch

    from infercrane.kernels.harness import timing

    flush = torch.empty(timing.l2_flush_bytes(torch.device("cuda")) // 4, dtype=torch.float32, device="cuda")
    spec = _spec(args.op, args.rows)
    empty = torch.empty(1, device="cuda")
    cases = [("empty_kernel", 0, (lambda: empty.zero_()), None)]
    for key in args.impls:
        fn, in_place, why = _load(args.op, key, spec)
        if fn is None:
            print(f"{key}: not available ({why})")
            continue
        for rows in args.rows:
            call, restore, _ = _call_on(spec, fn, in_place, rows, 0)
            for _ in range(20):
                call()
            cases.append((key, rows, call, restore))
    torch.cuda.synchronize()
    out = []
    for phase in ("before_cupti", "after_cupti"):
        for key, rows, call, restore in cases:
            for spin in args.spins:
                ev = _events(timing, call, restore, flush, spin, args.samples)
                rec = {"op": args.op, "impl": key, "rows": rows, "spin_cycles": spin, "phase": phase,
                       "events_us": round(ev, 4)}
                if phase == "after_cupti":
                    n = max(20, args.samples // 3)
                    rec["driver_events_us"] = round(_driver(timing, call, restore, flush, spin, n), 4)
                    rec["cupti_marker_us"] = round(_cupti_marker(call, restore, flush, spin, n), 4)
                out.append(rec)
                print(json.dumps(rec), flush=True)
        if phase == "before_cupti":  # attach CUPTI once: what a profiler in the process does to both timers
            _cupti_marker(cases[0][2], None, flush, args.spins[-1], 5)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

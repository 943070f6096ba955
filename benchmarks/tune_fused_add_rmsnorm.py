"""Tune InferCrane's fused residual-add + RMSNorm kernels (Triton and handwritten CUDA) on one GPU.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python3 benchmarks/tune_fused_add_rmsnorm.py            # ~1-3 minutes
    PYTHONPATH=. python3 benchmarks/tune_fused_add_rmsnorm.py --no-compile --rows 1 512 32768

What it does, in order (one failing step or variant is reported and the run goes on):

1. Correctness: every variant, and the default configuration at several hidden sizes, against the float32
   oracle (``oracle.fused_add_rmsnorm_ref``) on fresh random inputs (never zeros) inside NaN guard rows.
   Rule: ``|got - ref| <= atol + rtol * |ref|``, all finite; bf16 ``out``: rtol 2**-7, atol 1e-5; the stored
   residual: exact (both round one float32 sum once, to nearest even). Then one call of each default kernel
   captured in a CUDA graph and replayed on new inputs (proves the launch is on the capture stream).
2. Calibration: an empty kernel (CuPy and Triton), a kernel that copies one row per program (Triton), and a
   device-to-device copy moving the same bytes as the op (``x.copy_`` of 2 * rows * hidden elements).
3. Timing, mode ``graph``: per (variant, rows) a CUDA graph of ``--calls`` back-to-back in-place calls is
   captured on the same tensors (L2 is hot whenever they fit), replayed 3 times to warm up, then ``--replays``
   times, each bracketed by CUDA events. Time per call = replay time / calls. Reported: median (µs per call),
   q1, q3, min, and achieved bandwidth = spec byte model (read x, residual, weight; write out, residual)
   / median time. Clocks are not locked; the run records the GPU and versions.

Prints a compact table (median µs per call; TB/s at large rows) and writes everything to ``$OUT/tune.json``
when ``OUT`` is set (or ``--json PATH``). Depends only on torch, triton, cupy and InferCrane's kernel modules,
spec and oracle (and, for the reference lines, the baselines module when it imports).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from typing import Any, Callable

import torch

try:
    import triton
    import triton.language as tl
except Exception:  # the Triton lines are skipped; the CUDA kernel still runs
    triton = None
    tl = None

from infercrane.kernels.ops.fused_add_rmsnorm import cuda_kernel as ck
from infercrane.kernels.ops.fused_add_rmsnorm import triton_kernel as tk
from infercrane.kernels.ops.fused_add_rmsnorm.oracle import fused_add_rmsnorm_ref
from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

DEVICE = "cuda"
ROWS = (1, 8, 32, 128, 512, 2048, 8192, 32768)
HIDDEN = 1024
EPS = 1e-6
RTOL_OUT = {"bfloat16": 2.0**-7, "float16": 2.0**-10}
ATOL_OUT = 1e-5
CORRECTNESS_HIDDENS = (896, 1000, 1001, 2048, 3584, 4096, 5120, 8192)
CORRECTNESS_ROWS = (1, 5, 300)

# Variants: None = the module's heuristic for each row count ("auto").
TRITON_VARIANTS: dict[str, dict[str, Any] | None] = {
    "auto": None,
    "r1w1": {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 1},
    "r1w2": {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 2},
    "r1w4": {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 4},
    "r1w8": {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 8},
    "r2w4": {"variant": "fused", "block_n": 1024, "rows_per_program": 2, "num_warps": 4},
    "r2w8": {"variant": "fused", "block_n": 1024, "rows_per_program": 2, "num_warps": 8},
    "r4w4": {"variant": "fused", "block_n": 1024, "rows_per_program": 4, "num_warps": 4},
    "r4w8": {"variant": "fused", "block_n": 1024, "rows_per_program": 4, "num_warps": 8},
    "r8w8": {"variant": "fused", "block_n": 1024, "rows_per_program": 8, "num_warps": 8},
    "r1w4-intRNE": {"variant": "fused", "block_n": 1024, "rows_per_program": 1, "num_warps": 4,
                    "round_by_bits": True},
}
CUDA_VARIANTS: dict[str, dict[str, Any] | None] = {
    "auto": None,
    "t32r1": {"threads_per_row": 32, "rows_per_block": 1},
    "t32r2": {"threads_per_row": 32, "rows_per_block": 2},
    "t32r4": {"threads_per_row": 32, "rows_per_block": 4},
    "t32r8": {"threads_per_row": 32, "rows_per_block": 8},
    "t16r4": {"threads_per_row": 16, "rows_per_block": 4},
    "t64r1": {"threads_per_row": 64, "rows_per_block": 1},
    "t64r2": {"threads_per_row": 64, "rows_per_block": 2},
    "t128r1": {"threads_per_row": 128, "rows_per_block": 1},
    "t32r4-p8": {"threads_per_row": 32, "rows_per_block": 4, "persistent_blocks_per_sm": 8},
    "t32r8-p4": {"threads_per_row": 32, "rows_per_block": 8, "persistent_blocks_per_sm": 4},
}


def log(msg: str) -> None:
    print(msg, flush=True)


def short_error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) < 300 else text[:300] + " ..."


# ----------------------------------------------------------------------------------------- correctness


def make_inputs(rows: int, hidden: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(rows, hidden, generator=g)
    res = 2.0 * torch.randn(rows, hidden, generator=g)
    w = torch.randn(hidden, generator=g) + 0.5
    buf_x = torch.full((rows + 2, hidden), float("nan"), dtype=dtype, device=DEVICE)
    buf_r = torch.full((rows + 2, hidden), float("nan"), dtype=dtype, device=DEVICE)
    buf_x[1:-1].copy_(x.to(dtype))
    buf_r[1:-1].copy_(res.to(dtype))
    weight = w.to(dtype).to(DEVICE)
    ref_out, ref_res = fused_add_rmsnorm_ref(buf_x[1:-1].cpu(), buf_r[1:-1].cpu(), weight.cpu(), EPS)
    return {"buf_x": buf_x, "buf_r": buf_r, "x": buf_x[1:-1], "r": buf_r[1:-1], "w": weight,
            "ref_out": ref_out, "ref_res": ref_res}


def compare(got: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> dict[str, Any]:
    got = got.float().cpu()
    err = (got - ref).abs()
    ok = torch.isfinite(got) & (err <= atol + rtol * ref.abs())
    finite = torch.isfinite(err)
    out: dict[str, Any] = {
        "pass": bool(ok.all()),
        "max_abs_err": float(err[finite].max()) if bool(finite.any()) else float("nan"),
        "max_rel_err": float((err / ref.abs().clamp_min(1e-30))[finite].max()) if bool(finite.any()) else float("nan"),
        "rtol": rtol, "atol": atol,
    }
    if not out["pass"]:
        first = tuple(int(i) for i in (~ok).nonzero()[0])
        out.update(first_bad_index=list(first), got=float(got[first]), ref=float(ref[first]),
                   n_bad=int((~ok).sum()))
    return out


def check_inputs_after(inp: dict[str, Any], dtype_name: str = "bfloat16") -> dict[str, Any]:
    torch.cuda.synchronize()
    out = compare(inp["x"], inp["ref_out"], RTOL_OUT[dtype_name], ATOL_OUT)
    res = compare(inp["r"], inp["ref_res"], 0.0, 0.0)
    guards_ok = all(bool(torch.isnan(b[[0, -1]]).all()) for b in (inp["buf_x"], inp["buf_r"]))
    return {"pass": out["pass"] and res["pass"] and guards_ok, "out": out, "residual": res, "guards_untouched": guards_ok}


def check_one(fn: Callable[..., Any], rows: int, hidden: int, seed: int, **kw: Any) -> dict[str, Any]:
    inp = make_inputs(rows, hidden, seed)
    fn(inp["x"], inp["r"], inp["w"], EPS, **kw)
    return check_inputs_after(inp)


def check_graph(fn: Callable[..., Any], rows: int, hidden: int) -> dict[str, Any]:
    """Capture one call on static tensors, refill them with new inputs, replay, check against the new oracle."""
    first = make_inputs(rows, hidden, seed=101)
    fn(first["x"], first["r"], first["w"], EPS)  # compile/load outside the capture
    torch.cuda.synchronize()
    static = make_inputs(rows, hidden, seed=102)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(static["x"], static["r"], static["w"], EPS)
    fresh = make_inputs(rows, hidden, seed=103)
    static["x"].copy_(fresh["x"])
    static["r"].copy_(fresh["r"])
    static["w"].copy_(fresh["w"])
    static["ref_out"], static["ref_res"] = fresh["ref_out"], fresh["ref_res"]
    g.replay()
    return check_inputs_after(static)


def run_correctness(impls: dict[str, tuple[Callable[..., Any], dict[str, dict[str, Any] | None]]],
                    hidden: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for impl, (fn, variants) in impls.items():
        for name, cfg in variants.items():
            key = f"{impl}/{name}"
            per: list[dict[str, Any]] = []
            for rows in (1, 7, 64, 2048):
                try:
                    r = check_one(fn, rows, hidden, seed=rows * 31 + 7, **({"config": cfg} if cfg else {}))
                except Exception as e:
                    r = {"pass": False, "error": short_error(e)}
                per.append({"rows": rows, "hidden": hidden, **r})
            results[key] = per
        for h in CORRECTNESS_HIDDENS:
            for rows in CORRECTNESS_ROWS:
                try:
                    r = check_one(fn, rows, h, seed=rows * 131 + h)
                except Exception as e:
                    r = {"pass": False, "error": short_error(e)}
                results.setdefault(f"{impl}/auto@hiddens", []).append({"rows": rows, "hidden": h, **r})
        for rows in (1, 512):
            try:
                r = check_graph(fn, rows, hidden)
            except Exception as e:
                r = {"pass": False, "error": short_error(e)}
            results.setdefault(f"{impl}/cuda-graph", []).append({"rows": rows, "hidden": hidden, **r})
    return results


# ----------------------------------------------------------------------------------------- timing


def time_graph(call: Callable[[], Any], calls: int, replays: int, warmup: int = 3) -> dict[str, Any]:
    """Capture ``calls`` invocations of ``call`` in one CUDA graph; µs per call over ``replays`` replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            call()
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    per_call_us: list[float] = []
    for _ in range(replays):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        per_call_us.append(start.elapsed_time(end) * 1e3 / calls)
    del g
    q = statistics.quantiles(per_call_us, n=4) if len(per_call_us) >= 2 else [per_call_us[0]] * 3
    return {"median_us": statistics.median(per_call_us), "q1_us": q[0], "q3_us": q[2], "min_us": min(per_call_us),
            "max_us": max(per_call_us), "n": len(per_call_us), "samples_us": per_call_us}


def bench_inplace(fn: Callable[..., Any], rows: int, hidden: int, calls: int, replays: int,
                  **kw: Any) -> dict[str, Any]:
    x = torch.randn(rows, hidden, device=DEVICE).bfloat16()
    r = torch.randn(rows, hidden, device=DEVICE).bfloat16()
    w = (torch.randn(hidden, device=DEVICE) + 0.5).bfloat16()
    return time_graph(lambda: fn(x, r, w, EPS, **kw), calls, replays)


def bench_out_of_place(fn: Callable[..., Any], rows: int, hidden: int, calls: int, replays: int) -> dict[str, Any]:
    x = torch.randn(rows, hidden, device=DEVICE).bfloat16()
    r = torch.randn(rows, hidden, device=DEVICE).bfloat16()
    w = (torch.randn(hidden, device=DEVICE) + 0.5).bfloat16()
    fn(x, r, w, EPS)  # compile outside the capture
    return time_graph(lambda: fn(x, r, w, EPS), calls, replays)


def bench_copy(rows: int, hidden: int, calls: int, replays: int) -> dict[str, Any]:
    """Device-to-device copy of 2*rows*hidden bf16: reads and writes the op's activation bytes."""
    src = torch.randn(2 * rows, hidden, device=DEVICE).bfloat16()
    dst = torch.empty_like(src)
    return time_graph(lambda: dst.copy_(src), calls, replays)


# Reference kernels (undecorated; wrapped by triton.jit at first use).
def _triton_empty(x_ptr):
    pass


def _triton_swap_rows(x_ptr, r_ptr, HIDDEN: tl.constexpr, BLOCK_N: tl.constexpr):
    """Reads one row of x and of r, writes each to the other: the op's activation traffic, no math."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = cols < HIDDEN
    a = tl.load(x_ptr + row * HIDDEN + cols, mask=m)
    b = tl.load(r_ptr + row * HIDDEN + cols, mask=m)
    tl.store(x_ptr + row * HIDDEN + cols, b, mask=m)
    tl.store(r_ptr + row * HIDDEN + cols, a, mask=m)


def reference_calls(hidden: int) -> dict[str, Callable[[int], Callable[[], Any]]]:
    """label -> (rows -> thunk launching the reference kernel on torch's current stream)."""
    out: dict[str, Callable[[int], Callable[[], Any]]] = {}
    try:
        import cupy
        import numpy as np

        k = cupy.RawKernel('extern "C" __global__ void ic_empty(int n) {}', "ic_empty")

        def cupy_empty(rows: int) -> Callable[[], Any]:
            def call() -> None:
                s = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
                k((1,), (32,), (np.int32(0),), stream=s)

            return call

        out["empty-cupy"] = cupy_empty
    except Exception as e:
        log(f"  empty-cupy: skipped: {short_error(e)}")
    if triton is not None:
        empty = triton.jit(_triton_empty)
        swap = triton.jit(_triton_swap_rows)

        def triton_empty(rows: int) -> Callable[[], Any]:
            buf = torch.empty(16, device=DEVICE)
            return lambda: empty[(1,)](buf)

        def triton_swap(rows: int) -> Callable[[], Any]:
            x = torch.randn(rows, hidden, device=DEVICE).bfloat16()
            r = torch.randn(rows, hidden, device=DEVICE).bfloat16()
            bn = 1 << (hidden - 1).bit_length()
            nw = max(1, min(16, bn // 256))
            return lambda: swap[(rows,)](x, r, HIDDEN=hidden, BLOCK_N=bn, num_warps=nw)

        out["empty-triton"] = triton_empty
        out["triton-swap-rows"] = triton_swap
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    ap.add_argument("--calls", type=int, default=200, help="calls captured per CUDA graph")
    ap.add_argument("--replays", type=int, default=20, help="timed replays per point")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile reference line")
    ap.add_argument("--only", choices=("triton", "cuda"), default=None)
    ap.add_argument("--json", default=None, help="write the JSON here (default: $OUT/tune.json when OUT is set)")
    ap.add_argument("--budget-s", type=float, default=165.0, help="skip optional work past this wall time")
    args = ap.parse_args(argv)
    t0 = time.time()
    if not torch.cuda.is_available():
        log("no CUDA device: this script times kernels on a GPU")
        return 2
    hidden = args.hidden
    spec = FusedAddRMSNormSpec(hidden_size=hidden, eps=EPS, rows=tuple(args.rows))
    props = torch.cuda.get_device_properties(0)
    env: dict[str, Any] = {
        "gpu": props.name, "sm_count": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "l2_bytes": getattr(props, "L2_cache_size", None), "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "python": platform.python_version(),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception as e:
        env["triton"] = f"unavailable: {short_error(e)}"
    try:
        import cupy

        env["cupy"] = cupy.__version__
        env["nvrtc"] = ".".join(str(v) for v in cupy.cuda.nvrtc.getVersion())
        env["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception as e:
        env["cupy"] = f"unavailable: {short_error(e)}"
    log(f"# {env['gpu']} ({env['sm_count']} SMs, L2 {env['l2_bytes']} B) torch {env['torch']} "
        f"triton {env.get('triton')} cupy {env.get('cupy')} nvrtc {env.get('nvrtc')}; hidden {hidden} bf16; "
        f"timing_mode=graph ({args.calls} calls/graph, median of {args.replays} replays), L2 hot where it fits")

    impls: dict[str, tuple[Callable[..., Any], dict[str, dict[str, Any] | None]]] = {}
    for name, mod, fn, variants in (("triton", tk, tk.fused_add_rmsnorm_triton, TRITON_VARIANTS),
                                    ("cuda", ck, ck.fused_add_rmsnorm_cuda, CUDA_VARIANTS)):
        if args.only and args.only != name:
            continue
        ok, reason = mod.available()
        if not ok:
            log(f"  {name}: skipped: {reason}")
            continue
        if hidden != 1024:  # fixed variant configs are written for hidden 1024; keep only the heuristic
            variants = {k: v for k, v in variants.items() if v is None or "block_n" not in v}
        impls[name] = (fn, variants)

    report: dict[str, Any] = {"schema": "infercrane.tune_fused_add_rmsnorm/1", "env": env, "hidden": hidden,
                              "dtype": "bfloat16", "eps": EPS, "timing_mode": "graph", "calls_per_graph": args.calls,
                              "replays": args.replays, "rows": args.rows,
                              "tolerance": {"rule": "|got-ref| <= atol + rtol*|ref|, all finite",
                                            "out": {"rtol": RTOL_OUT["bfloat16"], "atol": ATOL_OUT},
                                            "residual": {"rtol": 0.0, "atol": 0.0}}}

    # 1. correctness
    log("## correctness (vs float32 oracle; guard rows; graph capture)")
    try:
        corr = run_correctness(impls, hidden)
    except Exception as e:
        corr = {"error": short_error(e), "traceback": traceback.format_exc()}
    report["correctness"] = corr
    failed_variants = set()
    for key, per in corr.items():
        if not isinstance(per, list):
            log(f"  {key}: {per}")
            continue
        bad = [p for p in per if not p.get("pass")]
        worst = max((p.get("out", {}).get("max_rel_err", 0.0) for p in per if "out" in p), default=float("nan"))
        if bad:
            failed_variants.add(key)
            b = bad[0]
            detail = b.get("error") or {k: b[k] for k in ("out", "residual", "guards_untouched") if k in b}
            log(f"  FAIL {key}: {len(bad)}/{len(per)} cases; first rows={b['rows']} hidden={b['hidden']}: {detail}")
        else:
            log(f"  ok   {key}: {len(per)} cases, max rel err(out) {worst:.2e}")

    # 2+3. timing
    table: dict[str, dict[int, dict[str, Any]]] = {}

    def record(label: str, rows: int, thunk: Callable[[], dict[str, Any]], moves_bytes: bool = True) -> None:
        try:
            t = thunk()
            if moves_bytes:
                t["bytes"] = spec.bytes_moved(rows)
                t["tb_s"] = t["bytes"] / (t["median_us"] * 1e-6) / 1e12
        except Exception as e:
            t = {"error": short_error(e)}
            torch.cuda.synchronize()
        table.setdefault(label, {})[rows] = t

    log("## timing")
    refs = reference_calls(hidden)
    for label, factory in refs.items():
        for rows in ([1] if label.startswith("empty") else args.rows):
            record(label, rows, lambda f=factory, r=rows: time_graph(f(r), args.calls, args.replays),
                   moves_bytes=not label.startswith("empty"))
    for rows in args.rows:
        record("d2d-copy", rows, lambda r=rows: bench_copy(r, hidden, args.calls, args.replays))
    for impl, (fn, variants) in impls.items():
        for name, cfg in variants.items():
            for rows in args.rows:
                record(f"{impl}/{name}", rows,
                       lambda r=rows, c=cfg, f=fn: bench_inplace(f, r, hidden, args.calls, args.replays,
                                                                 **({"config": c} if c else {})))
    # configs the heuristics pick, recorded with the numbers
    report["auto_configs"] = {
        "triton": {r: _safe(lambda r=r: tk.triton_config(r, hidden)) for r in args.rows},
        "cuda": {r: _safe(lambda r=r: ck.cuda_config(r, hidden, num_sms=props.multi_processor_count))
                 for r in args.rows},
    }
    # reference lines
    try:
        from infercrane.kernels.ops.fused_add_rmsnorm import baselines

        ok, reason = baselines.vllm_available()
        if ok:
            vfn = baselines.load_vllm(None)
            report["vllm"] = baselines.describe_vllm()
            for rows in args.rows:
                record("vllm-vendor", rows, lambda r=rows: bench_inplace(vfn, r, hidden, args.calls, args.replays))
        else:
            log(f"  vllm-vendor: skipped: {reason}")
        if args.no_compile:
            log("  torch.compile: skipped (--no-compile)")
        else:
            compiled = baselines.load_torch_compile(None)
            for rows in args.rows:
                if time.time() - t0 > args.budget_s:
                    log(f"  torch.compile: stopped at rows={rows}: past the {args.budget_s:.0f} s budget")
                    break
                record("torch.compile", rows,
                       lambda r=rows: bench_out_of_place(compiled, r, hidden, args.calls, args.replays))
    except Exception as e:
        log(f"  reference lines failed: {short_error(e)}")
    report["timing"] = {k: {str(r): v for r, v in per.items()} for k, per in table.items()}

    # table
    copy_bw = max((v.get("tb_s", 0.0) for r, v in table.get("d2d-copy", {}).items() if r >= 8192), default=0.0)
    report["copy_tb_s"] = copy_bw
    log(f"## µs per call (median; graph replay of {args.calls} calls); TB/s = spec bytes / median")
    width = 8
    log("variant".ljust(22) + "".join(str(r).rjust(width) for r in args.rows) + "   TB/s@max  %copy  fail")
    big = max(args.rows)
    for label, per in table.items():
        cells = []
        for r in args.rows:
            v = per.get(r)
            cells.append(("err" if "error" in v else f"{v['median_us']:.2f}") if v else "-")
        last = per.get(big, {})
        tb = last.get("tb_s")
        pct = f"{100 * tb / copy_bw:5.1f}" if tb and copy_bw else "    -"
        fail = "FAIL" if label in failed_variants else ""
        log(label[:22].ljust(22) + "".join(c.rjust(width) for c in cells)
            + (f"   {tb:7.3f}  {pct}  {fail}" if tb else f"         -      -  {fail}"))
    errors = [(label, r, v["error"]) for label, per in table.items() for r, v in per.items() if "error" in v]
    for label, r, e in errors[:8]:
        log(f"  error {label} rows={r}: {e}")
    if len(errors) > 8:
        log(f"  ... {len(errors) - 8} more errors in the JSON")
    # best per rows
    best = {}
    for impl in impls:
        for r in args.rows:
            cands = [(v["median_us"], label) for label, per in table.items() if label.startswith(impl + "/")
                     and label not in failed_variants and "median_us" in per.get(r, {}) for v in [per[r]]]
            if cands:
                best.setdefault(impl, {})[r] = min(cands)
    report["best"] = {impl: {str(r): {"median_us": m, "variant": lab} for r, (m, lab) in per.items()}
                      for impl, per in best.items()}
    for impl, per in best.items():
        log(f"best {impl}: " + "  ".join(f"{r}:{lab.split('/', 1)[1]}={m:.2f}" for r, (m, lab) in per.items()))
    report["implementations"] = {"triton": _safe(tk.describe), "cuda": _safe(ck.describe)}
    report["wall_s"] = time.time() - t0
    log(f"# wall {report['wall_s']:.0f} s")

    path = args.json or (os.path.join(os.environ["OUT"], "tune.json") if os.environ.get("OUT") else None)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(report, f, indent=1, default=str)
        log(f"# wrote {path}")
    return 0


def _safe(thunk: Callable[[], Any]) -> Any:
    try:
        return thunk()
    except Exception as e:
        return {"error": short_error(e)}


if __name__ == "__main__":
    sys.exit(main())

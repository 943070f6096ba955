"""Where the host time of one kernel call goes, layer by layer, without vLLM.

For fused residual-add + RMSNorm at a decode shape, times calls issued back to back with one synchronize at the end
(microseconds per call: the larger of the host's cost and the GPU's; the GPU's is ~1-3 us here, so these read host
cost), for each layer the vLLM provider stacks on a launch:

  torch_add_         one in-place torch op (the dispatcher's floor)
  check_inputs       InferCrane's contract checks alone (no launch)
  config             the per-shape configuration lookup alone
  triton_jit         Triton's JIT launch with every argument given (its own cache lookup and binding)
  triton_uncached    InferCrane's Triton function with its launch cache turned off (checks + configuration + JIT
                     launch: every call as a first call)
  triton_kernel      InferCrane's Triton function as called (a repeat call: its cached compiled launch,
                     ``triton_rowwise.TritonKernels.launch_cached``)
  cuda_kernel        InferCrane's CUDA function (checks + configuration + cached CuPy launch)
  custom_op_noop     a bare ``torch.library.custom_op`` whose body does nothing
  custom_op_triton   the Triton function as a bare ``torch.library.custom_op``
  eager              the op in plain torch operations
  compiled_runner    Triton's compiled kernel for this shape launched through ``CompiledKernel[grid](*args)``
                     (every argument of the kernel, constants included, in order), skipping the JIT's binding and
                     cache lookup
  compiled_run       ``CompiledKernel.run`` with the stream and the launch's fixed parts looked up once

Needs a CUDA GPU. Usage: ``PYTHONPATH=. python3 benchmarks/host_cost_probe.py [--hidden 576 1024] [--rows 8]
[--calls 3000] [--out FILE]`` (JSON lines).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provider_overhead import EPS, per_call_us  # noqa: E402  (the same timing as the provider's benchmark)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, nargs="+", default=[576, 1024])
    p.add_argument("--rows", type=int, nargs="+", default=[8])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    import torch
    import triton

    if not torch.cuda.is_available():
        print("host_cost_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    from infercrane.kernels.ops import triton_rowwise
    from infercrane.kernels.ops.fused_add_rmsnorm import baselines, cuda_kernel, triton_kernel

    kernels = triton_kernel.KERNELS
    fn_triton = triton_kernel.fused_add_rmsnorm_triton
    noop = torch.library.custom_op("infercrane_probe::noop", lambda x, r, w, eps: None, mutates_args=("x", "r"),
                                   schema="(Tensor(a!) x, Tensor(b!) r, Tensor w, float eps) -> ()")
    noop.register_fake(lambda *a: None)
    opaque = torch.library.custom_op("infercrane_probe::triton", lambda x, r, w, eps: fn_triton(x, r, w, eps),
                                     mutates_args=("x", "r"),
                                     schema="(Tensor(a!) x, Tensor(b!) r, Tensor w, float eps) -> ()")
    opaque.register_fake(lambda *a: None)

    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "op": "fused_add_rmsnorm", "dtype": "bfloat16",
            "calls": args.calls, "repeats": args.repeats,
            "timing": "back-to-back calls, one synchronize at the end; us per call; median and range of repeats"}
    print(json.dumps(head), flush=True)
    out = [head]
    for hidden in args.hidden:
        for rows in args.rows:
            g = torch.Generator(device="cuda").manual_seed(rows)
            x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
            r = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
            w = torch.ones(hidden, device="cuda", dtype=torch.bfloat16)
            cfg = kernels.config(rows, hidden)
            rows_kernel, _ = triton_rowwise._jitted(kernels.source, (kernels.rows_body, kernels.chunked_body), False)
            grid = (cfg["grid"],)
            jit_kwargs = {"HIDDEN": hidden, "BLOCK_N": cfg["block_n"], "INT64": cfg["int64_offsets"],
                          "ROUND_BY_BITS": False, "num_warps": cfg["num_warps"], "ROWS": cfg["rows_per_program"],
                          "MASKED": cfg["masked"], "PDL": False, "EVICT": False}
            ck = rows_kernel[grid](x, r, w, rows, EPS, **jit_kwargs)  # the compiled kernel of this shape
            values = {"x_ptr": x, "res_ptr": r, "w_ptr": w, "n_rows": rows, "eps": EPS,
                      **{k: v for k, v in jit_kwargs.items() if k != "num_warps"}}
            ordered = tuple(values[name] if name in values else None for name in rows_kernel.arg_names)
            stream = torch.cuda.current_stream().cuda_stream
            # CompiledKernel[grid] reads grid[0], grid[1] and grid[2]: the three-dimensional grid (a 1-tuple gave
            # the IndexError of the first H100 run)
            runner = ck[(grid[0], 1, 1)] if hasattr(ck, "__getitem__") else None
            names = list(rows_kernel.arg_names)
            row_meta = {"arg_names": names, "missing": [n for n in names if n not in values]}

            def compiled_run() -> None:
                ck.run(grid[0], 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, *ordered)

            variants = {
                "torch_add_": lambda: x.add_(0),
                "check_inputs": lambda: triton_kernel.check_inputs(x, r, w),
                "config": lambda: kernels.config(rows, hidden),
                "triton_jit": lambda: rows_kernel[grid](x, r, w, rows, EPS, **jit_kwargs),
                "triton_uncached": lambda: fn_triton(x, r, w, EPS),  # timed with the cache turned off (below)
                "triton_kernel": lambda: fn_triton(x, r, w, EPS),
                "cuda_kernel": lambda: cuda_kernel.fused_add_rmsnorm_cuda(x, r, w, EPS),
                "custom_op_noop": lambda: noop(x, r, w, EPS),
                "custom_op_triton": lambda: opaque(x, r, w, EPS),
                "eager": lambda: baselines.BASELINES.eager(x, r, w, EPS),
                "compiled_runner": lambda: runner(*ordered),
                "compiled_run": compiled_run,
            }
            row: dict = {"hidden": hidden, "rows": rows, **row_meta}
            for name, fn in variants.items():
                if name == "triton_uncached":  # an instance attribute shadows the method: every call misses
                    kernels.launch_cached = lambda tensors, eps: False
                try:
                    runs = sorted(per_call_us(fn, args.calls) for _ in range(args.repeats))
                    row[name] = {"median": round(runs[len(runs) // 2], 3), "min": round(runs[0], 3),
                                 "max": round(runs[-1], 3)}
                except Exception as e:  # a layer that cannot run here is reported, not fatal
                    row[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
                finally:
                    kernels.__dict__.pop("launch_cached", None)
            # the compiled launches wrote the same result as the function (one call each on fresh copies)
            try:
                x1, r1, x2, r2 = x.clone(), r.clone(), x.clone(), r.clone()
                fn_triton(x1, r1, w, EPS)
                ck.run(grid[0], 1, 1, stream, ck.function, ck.packed_metadata, None, None, None,
                       *(dict(values, x_ptr=x2, res_ptr=r2).get(n) for n in names))
                torch.cuda.synchronize()
                row["compiled_run_equal"] = bool(torch.equal(x1, x2) and torch.equal(r1, r2))
            except Exception as e:
                row["compiled_run_equal"] = f"{type(e).__name__}: {e}"[:300]
            print(json.dumps(row), flush=True)
            out.append(row)
    if args.out is not None:
        args.out.write_text("\n".join(json.dumps(o) for o in out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

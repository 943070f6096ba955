"""What one call of a kernel costs when vLLM runs it outside a CUDA graph, as InferCrane's provider and as vLLM's own.

Outside CUDA graphs (vLLM captures batches up to 512 tokens; bigger prefill batches run eagerly through the compiled
code) every call of an IR op pays its host-side cost. This times, per row count, calls issued back to back and
synchronized once at the end (so the time per call is the larger of the host's cost and the GPU's), for:

  kernel            InferCrane's kernel function, called directly
  opaque            that call wrapped as a bare ``torch.library.custom_op`` (the dispatch the provider pays)
  provider          vLLM's registered implementation for InferCrane's provider: the opaque op with InferCrane's
                    call counter, shape bookkeeping and gate (``infercrane/vllm_plugin/providers.py``)
  vllm_c            vLLM's own C++ op as its registered implementation (``vllm_c``): what eager vLLM runs in the
                    provider's place, so ``provider - vllm_c`` is what each call of the op adds to an eager decode step
  native            vLLM's native implementation (PyTorch operations), eager
  native_compiled   the same under ``torch.compile`` (Inductor's code for the op alone: no neighbours to fuse with)
  via_ir_provider   the call eager vLLM makes (``ir.ops.fused_add_rms_norm.maybe_inplace``, what its RMSNorm layer
                    calls, without the torch custom-op wrap, as vLLM runs eager: ``ir_enable_torch_wrap`` off), with
                    InferCrane's provider first in the priority: vLLM's dispatch (the provider's ``supports_args``)
                    and the provider
  via_ir_vllm_c     the same call with vLLM's C++ op first: ``via_ir_provider - via_ir_vllm_c`` is what each call
                    adds in the engine, dispatch included

Needs a CUDA GPU and vLLM 0.22.1 (its IR op registry). Usage (from the repository root; ``PYTHONPATH=.`` where
InferCrane is not installed):
    PYTHONPATH=. python3 benchmarks/provider_overhead.py [--impl triton|cuda] [--hidden 1024] [--rows 8 1024 4096]
        [--calls 2000] [--out FILE]

``--hidden``: the row width (1024: Qwen3-0.6B; 576: SmolLM2-135M-Instruct, the catalog's real model).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

HIDDEN = 1024  # Qwen3-0.6B: the default row width
EPS = 1e-6


def per_call_us(fn, calls: int) -> float:
    import torch

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def opaque_op(name: str, kernel):
    """``kernel(x, r, w, eps)`` (in place on x and r) as a bare ``torch.library.custom_op`` with a fake that does
    nothing. The schema is spelled out: this module's annotations are strings, which ``infer_schema`` cannot read."""
    import torch

    op = torch.library.custom_op(name, lambda x, r, w, eps: kernel(x, r, w, eps), mutates_args=("x", "r"),
                                 schema="(Tensor(a!) x, Tensor(b!) r, Tensor w, float eps) -> ()")
    op.register_fake(lambda *a: None)
    return op


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=["triton", "cuda"], default="triton")
    p.add_argument("--hidden", type=int, default=HIDDEN)
    p.add_argument("--rows", type=int, nargs="+", default=[8, 1024, 4096])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--out", type=Path, default=None, help="also write the results as JSON lines here")
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("provider_overhead: needs a CUDA GPU", file=sys.stderr)
        return 2
    try:
        import vllm
        from vllm import ir
        from vllm.platforms import current_platform
    except ImportError as exc:
        print(f"provider_overhead: needs vLLM (its IR op registry): {exc}", file=sys.stderr)
        return 2

    from infercrane.vllm_plugin.providers import load_kernel, register_choice
    from infercrane.vllm_plugin.selection import KernelChoice

    # vLLM's built-in implementations (its C++ op among them) register when the platform imports them, as the
    # engine does at start-up; importing vllm.ir alone registers only the native one
    try:
        current_platform.import_ir_kernels()
    except Exception as exc:  # noqa: BLE001  (a kernel module vLLM cannot load here: the vllm_c column is left out)
        print(f"provider_overhead: vLLM's kernels did not load ({type(exc).__name__}: {exc}); no vllm_c column",
              file=sys.stderr)
    choice = KernelChoice("fused_add_rms_norm", args.impl)
    register_choice(choice, ir.ops, None)
    op = ir.ops.fused_add_rms_norm
    provider = op.impls[choice.provider].impl_fn
    native = op.impls["native"].impl_fn
    vllm_c = op.impls["vllm_c"].impl_fn if "vllm_c" in op.impls else None  # absent where vLLM's kernels did not load
    native_compiled = torch.compile(native, dynamic=True)  # one compile for every row count
    kernel = load_kernel(choice).fn

    opaque = opaque_op(f"infercrane_bench::opaque_{args.impl}", kernel)

    rows_out = []
    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "vllm": vllm.__version__,
            "python": platform.python_version(), "impl": args.impl, "hidden": args.hidden, "dtype": "bfloat16",
            "calls": args.calls, "timing": "back-to-back calls, one synchronize at the end; us per call"}
    print(json.dumps(head))
    for rows in args.rows:
        g = torch.Generator(device="cuda").manual_seed(rows)
        x = torch.randn(rows, args.hidden, device="cuda", dtype=torch.bfloat16, generator=g)
        r = torch.randn(rows, args.hidden, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.ones(args.hidden, device="cuda", dtype=torch.bfloat16)
        # in-place ops on the same buffers: values grow but stay finite over a few thousand calls of a norm
        variants = {
            "kernel": lambda: kernel(x, r, w, EPS),
            "opaque": lambda: opaque(x, r, w, EPS),
            "provider": lambda: provider(x, r, w, EPS),
            **({"vllm_c": lambda: vllm_c(x, r, w, EPS)} if vllm_c is not None else {}),
            "native": lambda: native(x, r, w, EPS),
            "native_compiled": lambda: native_compiled(x, r, w, EPS),
        }
        row = {"rows": rows} | {name: round(per_call_us(fn, args.calls), 3) for name, fn in variants.items()}
        for name, first in (("via_ir_provider", choice.provider), ("via_ir_vllm_c", "vllm_c")):
            if first in op.impls:
                with ir.enable_torch_wrap(False), op.set_priority([first, "native"]):
                    row[name] = round(per_call_us(lambda: op.maybe_inplace(x, r, w, EPS, None), args.calls), 3)
        rows_out.append(row)
        print(json.dumps(row))
    if args.out is not None:
        args.out.write_text("\n".join(json.dumps(o) for o in [head, *rows_out]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

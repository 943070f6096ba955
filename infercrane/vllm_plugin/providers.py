"""InferCrane's kernels as providers of vLLM IR ops (vLLM 0.22.1: ``vllm.ir.ops.<op>.register_impl``).

For each chosen op (``selection.KernelChoice``) this module builds three things and registers the last one:

1. **The launch, an opaque custom op** ``infercrane::<op>_<impl>`` (``torch.library.custom_op``, with a fake
   implementation that does nothing): Inductor sees one node and never traces into the Triton or CuPy launch (tracing
   into it kills the engine: "Cannot access data pointer of Tensor (e.g. FakeTensor…)"). Outside tracing (eager
   vLLM, and every call of a compiled graph's Python fallback) the implementation calls the op's body directly and
   skips the custom op's dispatch (``_launcher``). Its Python body runs at
   run time: it counts the call (``stats.ProviderStats``) and, on the first call of each shape outside CUDA-graph
   capture, runs **the in-engine gate**: vLLM's own native implementation on copies of the inputs, the kernel on
   the real ones, every output compared with the kernel lab's rule for the op and dtype
   (``kernels.harness.correctness.compare``); the largest errors are recorded, and on CUDA one warm call of each is
   timed: a kernel ``SLOWDOWN_LIMIT`` times slower than native fails too. A failed check is recorded, not raised:
   InferCrane reads the record and fails the arm (``serving/kernels.py``).
2. **The implementation**, with the native implementation's exact signature and annotations (``register_impl``
   compares schemas; ``infer_schema`` needs annotations, so this module does not use postponed annotations). It
   calls the launch and returns what the native returns (in place, as vLLM's ``vllm_c`` provider does, for
   ``fused_add_rms_norm``).
3. **``supports_args``**, with the native's parameter names and defaults: it declines (vLLM then takes the next
   provider in the priority list) what the kernel cannot take — a ``variance_size``, no weight, a dtype other than
   bf16/fp16, mixed dtypes, non-contiguous activations, a non-CUDA device — and counts each decline by reason.

The kernels follow the kernel lab's calling contract (``infercrane.kernels.ops.<op>.spec``): InferCrane's are in
place; a user's file may be either form (declared in the file or by the choice's ``in_place``), and an out-of-place
one is copied into vLLM's buffers.
"""
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from infercrane.vllm_plugin.selection import KernelChoice, kernel_sources_sha256
from infercrane.vllm_plugin.stats import MAX_CHECKED_SHAPES, RAISED, ProviderStats

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
# Row counts the kernel is run at once, on scratch tensors, at its first call outside CUDA-graph capture (CUDA devices
# only; ``prewarm_rows``): vLLM's decode batch sizes up to its default largest captured graph, so that no Triton JIT or
# NVRTC compile and module load happens while a graph is being captured, and more (below) so that none happens while
# serving either.
PREWARM_ROWS = (1, 2, 4, 8, 16, 24, 32, 64, 128, 256, 512)
# The in-engine gate also times one warm call of the kernel and of vLLM's native on CUDA (each on copies of the
# inputs, synchronized): a kernel this many times slower fails the gate (orders of magnitude, not a speed claim).
SLOWDOWN_LIMIT = 100.0


def _interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def _capturing(x: Tensor) -> bool:
    """Whether ``x``'s call is being captured into a CUDA graph."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def prewarm_rows(first_rows: int) -> tuple[int, ...]:
    """The row counts the prewarm runs, given the first call's (vLLM's profiling run: its largest batch).

    ``PREWARM_ROWS``, the first call's count, and p - 1, p and p + 1 for every power of two p up to it. A launcher
    picks its compiled configuration by row-count regimes with power-of-two bounds and by whether the rows fill its
    power-of-two tiles, and each new configuration is a compile: on the H200, prefill batches of more than 2048 rows
    that are not a multiple of the Triton kernel's rows per program compiled while serving when only the decode sizes
    had been run (``docs/benchmarks/2026-12-01-h200-kernel-in-vllm``)."""
    top = max(int(first_rows), max(PREWARM_ROWS))
    rows = {*PREWARM_ROWS, top}
    p = 1
    while p <= top:
        rows |= {r for r in (p - 1, p, p + 1) if 1 <= r <= top}
        p *= 2
    return tuple(sorted(rows))


def _shape(t: Tensor) -> str:
    rows = t.numel() // max(1, int(t.shape[-1]))
    return f"{rows}x{int(t.shape[-1])} {str(t.dtype).removeprefix('torch.')}"


# --------------------------------------------------------------------------------------------- kernels


@dataclass(frozen=True)
class Kernel:
    """The callable the launch runs, in the kernel lab's contract, and its label (its sources' hash:
    ``selection.kernel_sources_sha256``)."""

    fn: Callable[..., Any]
    in_place: bool
    label: str


def load_kernel(choice: KernelChoice) -> Kernel:
    from infercrane.kernels import registry

    op = choice.lab_op
    if choice.impl == "user":
        from infercrane.kernels.user_candidate import load_candidate, parse_candidate_ref

        ref = parse_candidate_ref(choice.candidate or "", in_place_override=choice.in_place)
        loaded = load_candidate(ref)  # an undeclared contract is an InputError here: the engine cannot guess it
        return Kernel(loaded.fn, loaded.in_place, f"user candidate {ref.text}")
    impl = registry.get(op, choice.impl)
    ok, why = impl.probe()
    if not ok:
        raise RuntimeError(f"InferCrane's {choice.impl} kernel for {op} cannot run in this engine: {why}")
    return Kernel(impl.load(None), impl.in_place, impl.label)


# --------------------------------------------------------------------------------------------- the gate


def _tolerance(choice: KernelChoice, dtype: torch.dtype) -> Any:
    from infercrane.kernels import registry

    return registry.op_module(choice.lab_op).TOLERANCES[str(dtype).removeprefix("torch.")]


def _check(choice: KernelChoice, names: tuple[str, ...], got: tuple[Tensor, ...], ref: tuple[Tensor, ...],
           shape: str) -> dict[str, Any]:
    from infercrane.kernels.harness.correctness import compare

    tol = _tolerance(choice, got[0].dtype)
    checks = [compare(n, g, r.to(torch.float32), tol) for n, g, r in zip(names, got, ref)]
    return {"shape": shape, "passed": all(c.passed for c in checks), "against": "vLLM native",
            "outputs": [c.model_dump(mode="json") for c in checks],
            "max_abs_err": max((c.max_abs_err or 0.0) for c in checks),
            "max_rel_err": max((c.max_rel_err or 0.0) for c in checks)}


# --------------------------------------------------------------------------------------------- per op


def _outputs(value: Any) -> tuple[Any, ...]:
    """An out-of-place call's outputs as a tuple: a tensor alone, or the tuple or list it returned."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


class _Provider:
    """One op, one kernel: the launch body (stats, prewarm, gate), what it reads of the launch's arguments (from the
    op's spec), and ``takes`` for ``supports_args``; the op's folder gives vLLM's signatures (``vllm_adapter``:
    the launch, the implementation, ``supports_args``)."""

    def __init__(self, choice: KernelChoice, kernel: Kernel, native: Callable[..., Any], stats: ProviderStats):
        from infercrane.kernels import registry

        self.choice, self.kernel, self.native, self.stats = choice, kernel, native, stats
        self.spec = registry.op_module(choice.lab_op).SPEC  # the op's contracts: what the launch's arguments are
        self.adapter = registry.vllm_adapter(choice.lab_op)  # its vLLM signatures
        self.output_names: tuple[str, ...] = tuple(self.spec.OUTPUTS)
        # positions in the launch's arguments (the in-place contract's), worked out once: activations() is on the
        # hot path of every call
        at = {name: i for i, name in enumerate(self.spec.IN_PLACE.args)}
        self._x_at = at[self.spec.ROW_TENSORS[0]]
        self._outputs_at = tuple(at[self.spec.IN_PLACE.writes[o]] for o in self.spec.OUTPUTS)
        self.prewarmed: set[tuple[int, torch.dtype]] = set()

    def wants_check(self, shape: str, x: Tensor, key: Any, capturing: bool) -> bool:
        first = self.stats.call(shape, capturing, key)
        width = (int(x.shape[-1]), x.dtype)  # each width and dtype the op meets is prewarmed at its first call
        if not capturing and x.device.type == "cuda" and width not in self.prewarmed:
            self.prewarmed.add(width)
            self.prewarm(prewarm_rows(x.numel() // max(1, width[0])), width[0], x.dtype, x.device)
        return first and not capturing and self.stats.checks_made() < MAX_CHECKED_SHAPES

    def prewarm(self, row_counts: tuple[int, ...], hidden: int, dtype: torch.dtype, device: torch.device) -> None:
        try:
            weight = torch.ones(hidden, device=device, dtype=dtype)
            for rows in row_counts:
                a, b = torch.randn(rows, hidden, device=device, dtype=dtype), torch.randn(rows, hidden, device=device,
                                                                                         dtype=dtype)
                self.run_scratch(a, b, weight)
            torch.cuda.synchronize(device)
            self.stats.doc["detail"].setdefault("prewarmed_rows", {})[f"{hidden} {str(dtype).removeprefix('torch.')}"] \
                = list(row_counts)
        except Exception as exc:  # recorded; the real call that follows reports the kernel's own failure
            self.stats.error(f"prewarm failed: {type(exc).__name__}: {exc}")

    def speed(self, native: Callable[[], Any], kernel: Callable[[], Any], x: Tensor) -> dict[str, Any]:
        """One warm, synchronized call of each (CUDA only): ``native_us``, ``kernel_us``, ``slowdown``."""
        if x.device.type != "cuda":
            return {"native_us": None, "kernel_us": None, "slowdown": None}
        import time

        def one(fn: Callable[[], Any]) -> float:
            fn()
            torch.cuda.synchronize(x.device)
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize(x.device)
            return (time.perf_counter() - t0) * 1e6

        native_us, kernel_us = one(native), one(kernel)
        return {"native_us": native_us, "kernel_us": kernel_us, "slowdown": kernel_us / max(native_us, 1e-3)}

    def checked(self, record: dict[str, Any], timing: dict[str, Any]) -> None:
        slow = timing["slowdown"] is not None and timing["slowdown"] > SLOWDOWN_LIMIT
        self.stats.checked({**record, **timing, "too_slow": slow, "passed": record["passed"] and not slow})

    def run_scratch(self, a: Tensor, b: Tensor, weight: Tensor) -> None:
        """The kernel on two scratch row tensors (fused: x, residual; rms_norm: out, x)."""
        self.run(a, b, weight, 1e-6)

    def launch_body(self, *args: Any) -> None:
        """What the opaque launch runs: count the call; at a shape's first call outside capture, the in-engine gate
        (vLLM's native on copies, the kernel on the real arguments, compared; one warm call of each timed)."""
        x = self.activations(args)
        key, capturing = (x.shape, x.dtype), _capturing(x)
        if self.stats.count(key, capturing):  # the hot path, every call after an input's first: counted; run it
            try:
                self.run(*args)
            except Exception as exc:
                raise self.raised(_shape(x), exc)
            return
        shape = _shape(x)
        try:
            if self.wants_check(shape, x, key, capturing):
                ref = self.reference(args)
                self.run(*args)
                record = _check(self.choice, self.output_names, self.outputs(args), ref, shape)
                self.checked(record, self.speed(lambda: self.reference(args), lambda: self.run(*self.scratch(args)), x))
                return
            self.run(*args)
        except Exception as exc:
            raise self.raised(shape, exc)

    # per op, from its spec's contracts: the launch's arguments are the in-place contract's (``IN_PLACE.args``)
    def _named(self, args: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(self.spec.IN_PLACE.args, args))

    def activations(self, args: tuple[Any, ...]) -> Tensor:
        """The first row tensor (``ROW_TENSORS``): its shape and dtype name the call."""
        return args[self._x_at]

    def reference(self, args: tuple[Any, ...]) -> tuple[Tensor, ...]:
        """vLLM's native implementation, called as the out-of-place contract (``RETURNS``), on copies of the row
        tensors: what the launch should write, in ``OUTPUTS`` order."""
        named = self._named(args)
        return _outputs(self.native(*(named[a].clone() if a in self.spec.ROW_TENSORS else named[a]
                                      for a in self.spec.RETURNS.args)))

    def outputs(self, args: tuple[Any, ...]) -> tuple[Tensor, ...]:
        """What the launch wrote, in ``OUTPUTS`` order (the buffers ``IN_PLACE.writes`` names)."""
        return tuple(args[i] for i in self._outputs_at)

    def scratch(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Arguments for a timing call that writes somewhere else than vLLM's buffers: each written one copied."""
        written = set(self.spec.IN_PLACE.writes.values())
        return tuple(v.clone() if k in written else v for k, v in self._named(args).items())

    def run(self, *args: Any) -> None:
        """The kernel on the launch's arguments, writing its buffers: in place as called, or (an out-of-place user
        kernel) called as ``RETURNS`` with each output copied into the buffer ``IN_PLACE.writes`` names."""
        if self.kernel.in_place:
            self.kernel.fn(*args)
            return
        named = self._named(args)
        got = _outputs(self.kernel.fn(*(named[a] for a in self.spec.RETURNS.args)))
        for name, value in zip(self.spec.RETURNS.returns, got):
            named[self.spec.IN_PLACE.writes[name]].copy_(value)

    def raised(self, shape: str, exc: Exception) -> Exception:
        """Record that the kernel (or its check) raised at ``shape``, then let it propagate: vLLM fails the step or
        the engine, and InferCrane reads the record (``serving.kernels``: stage ``raised``)."""
        self.stats.error(f"{RAISED} at {shape}: {type(exc).__name__}: {str(exc)[:500]}")
        return exc

    def takes(self, x: Tensor, others: tuple[Tensor, ...], weight: Optional[Tensor],
              variance_size: Optional[int]) -> bool:
        """``supports_args``'s answer: True, or False with the reason counted (``common_declines``)."""
        reason = self.common_declines(x, others, weight, variance_size)
        if reason is None:
            return True
        self.stats.declined(reason)
        return False

    def common_declines(self, x: Tensor, others: tuple[Tensor, ...], weight: Optional[Tensor],
                        variance_size: Optional[int]) -> Optional[str]:
        if variance_size is not None:
            return "variance_size given"
        if weight is None:
            return "no weight"
        if x.dtype not in SUPPORTED_DTYPES:
            return f"dtype {str(x.dtype).removeprefix('torch.')}"
        if any(t.dtype != x.dtype for t in (*others, weight)):
            return "mixed dtypes"
        if not all(t.is_contiguous() for t in (x, *others)):
            return "not contiguous"
        if x.device.type != "cuda" and not (self.choice.impl == "triton" and _interpreting()) \
                and self.choice.impl != "user":
            return f"device {x.device.type}"
        return None


_LIVE: dict[str, _Provider] = {}  # custom-op name -> the provider its body runs (the latest registered)
_OPS: dict[str, Any] = {}


def _opaque(name: str, provider: _Provider) -> Any:
    """``torch.library.custom_op`` around the launch body; its fake does nothing (the launch only mutates). A name
    is defined once per process; registering it again rebinds the body to the new provider."""
    _LIVE[name] = provider
    if name not in _OPS:
        launch = provider.adapter.launch_function(lambda *args: _LIVE[name].launch_body(*args))
        op = torch.library.custom_op(name, mutates_args=provider.adapter.MUTATES)(launch)
        op.register_fake(lambda *args: None)
        _OPS[name] = op
    return _OPS[name]


def _launcher(name: str) -> Callable[..., None]:
    """What the implementation calls to launch: the opaque op while anything traces it (Dynamo; make_fx, which
    vLLM's IR lowering pass runs on fake tensors with symbolic shapes; any tensor subclass), so the graph gets one
    node; the launch body itself otherwise. Outside tracing the custom op only adds its dispatch, which eager vLLM
    pays on every call (a bare custom op costs about half of what the Triton function does on an H200:
    docs/benchmarks/2026-12-06-h200-layout-gpu-check, benchmarks/host_cost_probe.py); the body (call counter,
    in-engine gate, kernel) is the same either way."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    is_compiling, plain = torch.compiler.is_compiling, torch.Tensor

    def launch(*args: Any) -> None:
        if type(args[0]) is not plain or is_compiling() or get_proxy_mode() is not None:
            return _OPS[name](*args)
        return _LIVE[name].launch_body(*args)

    return launch


def register_choice(choice: KernelChoice, ir_ops: Any, stats_dir: Optional[str]) -> ProviderStats:
    """Register one provider with vLLM's IR op ``getattr(ir_ops, choice.vllm_op)``; returns its record keeper.
    A kernel that cannot load is recorded (``errors``) and re-raised: vLLM then logs the plugin's failure, and the
    priority list names a provider that does not exist, which vLLM refuses at start-up."""
    ir_op = getattr(ir_ops, choice.vllm_op)
    stats = ProviderStats(stats_dir, provider=choice.provider, vllm_op=choice.vllm_op, impl=choice.impl,
                          source_sha256=choice.source_sha256)
    try:
        kernel = load_kernel(choice)
        stats.doc["detail"].update({"kernel": kernel.label, "in_place": kernel.in_place, "sources_sha256":
                                    kernel_sources_sha256(choice.vllm_op, choice.impl, choice.candidate)})
        provider = _Provider(choice, kernel, ir_op.impls["native"].impl_fn, stats)
        name = f"infercrane::{choice.vllm_op}_{choice.impl}"
        _opaque(name, provider)
        impl_fn, supports_args = provider.adapter.functions(_launcher(name), provider.takes)
        ir_op.register_impl(choice.provider, supported=True, supports_args=supports_args,
                            inplace=provider.adapter.INPLACE)(impl_fn)
    except Exception as exc:
        stats.error(f"registration failed: {type(exc).__name__}: {exc}")
        raise
    stats.doc["detail"]["registered"] = True
    stats.write()
    return stats

"""The worker's half of a correctness check: run the call on inputs it is handed and hand back every byte it touched.

Runs in the implementation's own process and decides nothing: the checker (``correctness.py``, in InferCrane's
process) generated the inputs, keeps its own copy of them and of the oracle's answer, and reads what this code writes
into the shared ``TensorPack``. A candidate that patches this module, the checker's functions in its own process, or
the reply it sends, can change only what it hands back — never the verdict.

Per phase (``eager`` and ``reuse`` everywhere; ``graph`` on CUDA):

* every ``[rows, hidden]`` argument sits between NaN guard rows; extra output buffers start as NaN;
* out of place: blocks of the outputs' size are filled with NaN and freed first, so a kernel that leaves part of
  its output unwritten hands back NaN (reliably on CUDA, whose caching allocator hands the blocks back); on the CPU,
  where glibc reuses freed memory unpredictably (a block can hold an earlier call's right answer for the same seeded
  inputs), the call runs with glibc's heap perturbed (``perturbed_heap``): every block it is handed reads 0x7F7F…
  (bfloat16 and float32 3.4e38, float16 NaN), so unwritten rows fail whatever ran in the process before;
* on CUDA the call runs on a fresh non-default stream and its results are copied out on that stream after
  synchronizing only it (a kernel that works on another stream is read before it finishes);
* ``reuse``: the argument buffers are framed with the ``eager`` inputs and called once (the result is discarded),
  then the same buffers are overwritten in place with the ``reuse`` inputs (other buffers and the guard rows back to
  NaN; out of place, the allocator poisoned again) and called again on the same tensors (same addresses, same objects): a kernel
  that caches its result keyed on its inputs' ``data_ptr`` or identity hands back the first inputs' answer — what
  timing, which calls on the same buffers again and again, would otherwise reward;
* ``graph``: the call is captured into a CUDA graph on other inputs (after a warm-up call on scratch copies), the
  buffers are reset to those inputs, out-of-place outputs are set to NaN, and the graph is replayed once: a kernel
  that behaves differently while captured hands back a wrong answer;
* handed back: the argument buffers after the call (inputs must be untouched unless the contract writes them), the
  returned outputs (out of place), and the guard rows.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator

GUARD_ROWS = 1


class HarnessFault(Exception):
    """The harness failed before the implementation ran (out of memory allocating inputs, a broken pack): the
    harness's error, never a verdict on the implementation."""


class _Guarded:
    """``fn`` that remembers whether it has been called: from its first call on, a failure is the implementation's,
    whichever code raises it (CUDA reports a kernel's illegal access asynchronously, in a later call of the harness)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.called = False

    def __call__(self, *args: Any) -> Any:
        self.called = True
        return self.fn(*args)


def guarded(fn: Callable[..., Any]) -> _Guarded:
    """A fresh guard around ``fn`` (the flag starts unset)."""
    return _Guarded(fn.fn if isinstance(fn, _Guarded) else fn)


def attribute(work: Callable[[], Any], what: str, fn: _Guarded) -> Any:
    """Run harness ``work`` around the guarded implementation ``fn``: a failure before ``fn`` first ran is a
    ``HarnessFault``; any failure after it is the implementation's and comes out as itself."""
    try:
        return work()
    except HarnessFault:
        raise
    except Exception as e:
        if fn.called:
            raise
        raise HarnessFault(f"the harness failed during {what}, before the implementation ran: "
                           f"{type(e).__name__}: {e}") from e


def _storage_ptr(t: Any) -> int:
    return int(t.untyped_storage().data_ptr())


M_PERTURB = -6  # glibc's mallopt parameter: fill each block malloc hands out with ~byte, each freed one with byte
PERTURB_BYTE = 0x80  # blocks handed out read 0x7F bytes


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt`` from the symbols already loaded in this process (no library search); None without it."""
    import ctypes

    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


@contextmanager
def perturbed_heap() -> Iterator[bool]:
    """Within the block, every heap block glibc hands out is filled first (``mallopt(M_PERTURB, PERTURB_BYTE)``), so
    CPU memory a call allocates and leaves unwritten reads as 0x7F7F… rather than what the process freed before;
    yields whether it took hold (False where the C library is not glibc)."""
    mallopt = _mallopt()
    if mallopt is None:
        yield False
        return
    on = bool(mallopt(M_PERTURB, PERTURB_BYTE))
    try:
        yield on
    finally:
        if on:
            mallopt(M_PERTURB, 0)


def _poison_allocator(shape: tuple[int, ...], dt: Any, device: Any, blocks: int = 2) -> None:
    """Fill freshly allocated output-sized blocks with NaN and free them, so the next allocations get NaN memory."""
    import torch

    held = [torch.full(shape, float("nan"), dtype=dt, device=device) for _ in range(blocks)]
    del held


def _framed_args(spec: Any, pack: Any, phase: str, in_place: bool, rows: int, device: Any) -> tuple[dict, dict]:
    """Argument tensors for ``phase`` (row tensors framed by NaN guard rows) and their backing buffers."""
    import torch

    tensors: dict[str, Any] = {}
    frames: dict[str, Any] = {}
    row_args = [*spec.ROW_TENSORS, *spec.buffers(in_place)]
    for name in spec.INPUTS:
        src = pack.tensor(f"in.{phase}.{name}")
        if name in row_args:
            continue
        tensors[name] = src.to(device).clone()
    for name in row_args:
        dt = pack.tensor(f"after.{phase}.{name}").dtype
        frame = torch.full((rows + 2 * GUARD_ROWS, *spec.tensor_shape(name, rows)[1:]), float("nan"), dtype=dt,
                           device=device)
        view = frame[GUARD_ROWS:GUARD_ROWS + rows]
        if name in spec.INPUTS:
            view.copy_(pack.tensor(f"in.{phase}.{name}").to(device))
        frames[name], tensors[name] = frame, view
    return tensors, frames


def _reset(spec: Any, pack: Any, phase: str, tensors: dict, frames: dict, device: Any) -> None:
    for name, t in tensors.items():
        if name in spec.INPUTS:
            t.copy_(pack.tensor(f"in.{phase}.{name}").to(device))
        else:
            t.fill_(float("nan"))
    for frame in frames.values():
        frame[:GUARD_ROWS].fill_(float("nan"))
        frame[-GUARD_ROWS:].fill_(float("nan"))


def _returned(spec: Any, value: Any, tensors: dict, rows: int) -> tuple[list[Any] | None, str | None]:
    """The out-of-place outputs in ``OUTPUTS`` order, or the contract error."""
    import torch

    names = spec.RETURNS.returns
    got = [value] if len(names) == 1 and isinstance(value, torch.Tensor) else value
    if not isinstance(got, (tuple, list)) or len(got) != len(names):
        want = names[0] if len(names) == 1 else f"({', '.join(names)})"
        return None, f"out-of-place contract: expected {want}, got {type(value).__name__}"
    ref = tensors[spec.ROW_TENSORS[0]]
    inputs = {_storage_ptr(t) for n, t in tensors.items() if n in spec.INPUTS}
    for name, t in zip(names, got):
        if not isinstance(t, torch.Tensor):
            return None, f"out-of-place contract: {name} is a {type(t).__name__}, not a tensor"
        want = spec.tensor_shape(name, rows)
        if tuple(t.shape) != want or t.dtype != ref.dtype or t.device != ref.device:
            return None, (f"out-of-place contract: {name} is {tuple(t.shape)} {t.dtype} on {t.device}, expected "
                          f"{want} {ref.dtype} on {ref.device}")
        if _storage_ptr(t) in inputs:
            return None, f"out-of-place contract: {name} shares memory with an input (must be a new tensor)"
    return list(got), None


def _hand_back(spec: Any, pack: Any, phase: str, in_place: bool, tensors: dict, frames: dict,
               outputs: list[Any] | None) -> None:
    """Copy everything the call touched into the pack, on the current stream (then the caller synchronizes)."""
    for name, t in tensors.items():
        pack.tensor(f"after.{phase}.{name}").copy_(t, non_blocking=False)
    for name, frame in frames.items():
        guard = pack.tensor(f"guard.{phase}.{name}")
        guard[:GUARD_ROWS].copy_(frame[:GUARD_ROWS])
        guard[GUARD_ROWS:].copy_(frame[-GUARD_ROWS:])
    if outputs is not None:
        for name, t in zip(spec.RETURNS.returns, outputs):
            pack.tensor(f"ret.{phase}.{name}").copy_(t)


def _eager(fn: Callable[..., Any], spec: Any, pack: Any, in_place: bool, rows: int, device: Any) -> str | None:
    tensors, frames = _framed_args(spec, pack, "eager", in_place, rows, device)
    if not in_place:
        ref = tensors[spec.ROW_TENSORS[0]]
        _poison_allocator(spec.tensor_shape(spec.RETURNS.returns[0], rows), ref.dtype, device)
    value = fn(*spec.arguments(tensors, in_place))
    outputs = None
    if not in_place:
        outputs, error = _returned(spec, value, tensors, rows)
        if error:
            return error
    _hand_back(spec, pack, "eager", in_place, tensors, frames, outputs)
    return None


def _reuse(fn: Callable[..., Any], spec: Any, pack: Any, in_place: bool, rows: int, device: Any) -> str | None:
    tensors, frames = _framed_args(spec, pack, "eager", in_place, rows, device)
    args = spec.arguments(tensors, in_place)
    value = fn(*args)  # the first call, on the eager inputs: its result is discarded
    del value
    _reset(spec, pack, "reuse", tensors, frames, device)  # the same buffers, in place: same data_ptr, same objects
    if not in_place:
        ref = tensors[spec.ROW_TENSORS[0]]
        _poison_allocator(spec.tensor_shape(spec.RETURNS.returns[0], rows), ref.dtype, device)
    value = fn(*args)
    outputs = None
    if not in_place:
        outputs, error = _returned(spec, value, tensors, rows)
        if error:
            return error
    _hand_back(spec, pack, "reuse", in_place, tensors, frames, outputs)
    return None


def _graph(fn: Callable[..., Any], spec: Any, pack: Any, in_place: bool, rows: int, device: Any) -> str | None:
    import torch

    scratch, _ = _framed_args(spec, pack, "graph", in_place, rows, device)
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn(*spec.arguments(scratch, in_place))  # warm-up outside the capture (compiles, workspaces)
    torch.cuda.current_stream(device).wait_stream(side)
    side.synchronize()
    del scratch
    tensors, frames = _framed_args(spec, pack, "graph", in_place, rows, device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            value = fn(*spec.arguments(tensors, in_place))
    except Exception as e:
        return f"graph contract: the call cannot be captured in a CUDA graph: {type(e).__name__}: {e}"
    outputs = None
    if not in_place:
        outputs, error = _returned(spec, value, tensors, rows)
        if error:
            return error
        for t in outputs:
            t.fill_(float("nan"))
    _reset(spec, pack, "graph", tensors, frames, device)
    graph.replay()
    _hand_back(spec, pack, "graph", in_place, tensors, frames, outputs)
    return None


def run_check(fn: Callable[..., Any], spec: Any, in_place: bool, rows: int, device: Any, pack: Any,
              phases: list[str]) -> dict[str, str | None]:
    """Run each phase on the pack's inputs and write back what the call touched; return each phase's contract error
    (``None`` when the call kept to its contract as far as this process can tell). Exceptions from ``fn`` propagate
    as themselves, and so does any failure once ``fn`` has run; a failure before it first ran is the harness's
    (``HarnessFault``)."""
    import torch

    dev = torch.device(device)
    errors: dict[str, str | None] = {}
    call = fn if isinstance(fn, _Guarded) else guarded(fn)
    for phase, run in (("eager", _eager), ("reuse", _reuse), ("graph", _graph)):
        if phase in phases:
            errors[phase] = attribute(lambda: _phase(run, call, spec, pack, in_place, rows, dev), f"the {phase} check",
                                      call)
    return errors


def _phase(run: Callable[..., str | None], fn: Callable[..., Any], spec: Any, pack: Any, in_place: bool, rows: int,
           dev: Any) -> str | None:
    import torch

    if dev.type != "cuda":
        with perturbed_heap():
            return run(fn, spec, pack, in_place, rows, dev)
    stream = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(stream):
        error = run(fn, spec, pack, in_place, rows, dev)
    stream.synchronize()
    # The results are in the pack. Now wait for stray work a kernel left on other streams, so that it cannot write
    # into memory the next phase reuses.
    torch.cuda.synchronize(dev)
    return error

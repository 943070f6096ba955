"""The Triton kernels' cached launch (``triton_rowwise.TritonKernels.launch_cached``): a repeat call with the same
launch key goes straight to the compiled kernel its first, checked call went to.

On CPU: the key, the argument order handed to the compiled kernel, and the cache's refusals (a key not met, eps not
positive, an active launch hook, not tensors) against a recording stand-in for Triton's compiled kernel. On a GPU
(``gpu``): the cached launch writes bit for bit what the JIT launch writes, at aligned and misaligned pointers, fused
and chunked variants, both ops; a launch hook sends calls back through the JIT.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from infercrane.kernels.ops import triton_rowwise  # noqa: E402
from infercrane.kernels.ops.fused_add_rmsnorm import _triton_source as fused_source  # noqa: E402
from infercrane.kernels.ops.fused_add_rmsnorm import triton_kernel as fused  # noqa: E402
from infercrane.kernels.ops.rms_norm import triton_kernel as rms  # noqa: E402


def _tensors(rows=4, hidden=576, dtype=torch.bfloat16):
    x = torch.randn(rows, hidden, dtype=dtype)
    return x, torch.randn(rows, hidden, dtype=dtype), torch.ones(hidden, dtype=dtype)


def _jit(fn):
    """A compiled-mode JIT function whatever ``TRITON_INTERPRET`` says (``triton.jit`` reads it)."""
    from triton.runtime.jit import JITFunction

    return JITFunction(fn, do_not_specialize=["n_rows"])


def test_launch_key_separates_what_the_checks_and_triton_read():
    x, r, w = _tensors()
    key = triton_rowwise.launch_key((x, r, w))
    assert key == triton_rowwise.launch_key((x.clone(), r.clone(), w.clone()))  # torch aligns allocations
    buf = torch.zeros(4 * 576 + 1, dtype=torch.bfloat16)
    misaligned = buf[1:].view(4, 576)  # 2-byte offset: Triton compiles another kernel
    others = [
        (x.float(), r, w),  # dtype
        (x[:3], r[:3], w),  # shape
        (x.t(), r, w),  # contiguity
        (misaligned, r, w),  # alignment
    ]
    for tensors in others:
        assert triton_rowwise.launch_key(tensors) != triton_rowwise.launch_key((x, r, w))


def test_ordered_arguments_follow_the_body_signature_with_defaults():
    jit_fn = _jit(fused_source.fused_add_rmsnorm_rows)
    x, r, w = _tensors()
    keywords = {"ROWS": 1, "MASKED": True, "HIDDEN": 576, "BLOCK_N": 1024, "INT64": False, "ROUND_BY_BITS": False,
                "num_warps": 2}  # num_warps is a launch option, not an argument; PDL and EVICT take defaults
    got = triton_rowwise.ordered_arguments(jit_fn, (x, r, w, 4, 1e-6), keywords)
    assert got == (576, 1024, 1, True, False, False, False, False)
    assert len(got) + 5 == len(jit_fn.arg_names)


class _Compiled:
    """Stands in for Triton's CompiledKernel: records each launch's arguments."""

    def __init__(self):
        self.calls = []
        self.function, self.packed_metadata = "fn", ("meta",)

    def run(self, *args):
        self.calls.append(args)


class _Hooks:
    def __init__(self, enter=None, exit=None):
        self.launch_enter_hook, self.launch_exit_hook = enter, exit


def _kernels_with(compiled, tensors, rows, hooks=None):
    k = triton_rowwise.TritonKernels(fused.KERNELS.source, fused.KERNELS.rows_body, fused.KERNELS.chunked_body,
                                     fused.SUPPORTED_DTYPES, heuristic=fused.triton_config, finish=fused._finish)
    k._runtime = (hooks or _Hooks(), lambda: 0, lambda device: 1234)
    jit_fn = _jit(fused_source.fused_add_rmsnorm_rows)
    keywords = {"ROWS": 1, "MASKED": True, "HIDDEN": 576, "BLOCK_N": 1024, "INT64": False, "ROUND_BY_BITS": False,
                "num_warps": 2}
    k._keep(compiled, jit_fn, tensors, rows, rows, keywords)
    return k


def test_a_kept_launch_is_replayed_with_the_same_arguments_in_order():
    x, r, w = _tensors()
    compiled = _Compiled()
    k = _kernels_with(compiled, (x, r, w), 4)
    assert k.launch_cached((x, r, w), 1e-5) is True
    (args,) = compiled.calls
    assert args[:9] == (4, 1, 1, 1234, "fn", ("meta",), None, None, None)
    assert args[9] is x and args[10] is r and args[11] is w
    assert args[12:] == (4, 1e-5, 576, 1024, 1, True, False, False, False, False)
    # other tensors with the same key launch on those tensors
    x2, r2, w2 = x.clone(), r.clone(), w.clone()
    if triton_rowwise.launch_key((x2, r2, w2)) == triton_rowwise.launch_key((x, r, w)):
        assert k.launch_cached((x2, r2, w2), 1e-5) is True
        assert compiled.calls[-1][9] is x2


def test_the_cache_declines_what_it_has_not_checked():
    x, r, w = _tensors()
    compiled = _Compiled()
    k = _kernels_with(compiled, (x, r, w), 4)
    assert k.launch_cached((x[:3], r[:3], w), 1e-5) is False  # another shape: the JIT path checks it
    assert k.launch_cached((x, r, w), 0.0) is False  # eps not positive: the JIT path raises
    assert k.launch_cached(("x", r, w), 1e-5) is False  # not tensors: the checks say what is wrong
    empty = triton_rowwise.TritonKernels(fused.KERNELS.source, fused.KERNELS.rows_body, fused.KERNELS.chunked_body,
                                         fused.SUPPORTED_DTYPES, heuristic=fused.triton_config, finish=fused._finish)
    assert empty.launch_cached((x, r, w), 1e-5) is False  # nothing kept yet
    assert compiled.calls == []


class _Chain:
    def __init__(self, calls):
        self.calls = calls


@pytest.mark.parametrize("hooks,declines", [
    (_Hooks(enter=lambda m: None), True),
    (_Hooks(exit=lambda m: None), True),
    (_Hooks(enter=_Chain([print])), True),  # Triton 3.5+: a chain with a hook in it
    (_Hooks(enter=_Chain([]), exit=_Chain([])), False),  # empty chains: nothing would run
])
def test_an_active_launch_hook_sends_calls_through_the_jit(hooks, declines):
    x, r, w = _tensors()
    compiled = _Compiled()
    k = _kernels_with(compiled, (x, r, w), 4, hooks)
    assert k.launch_cached((x, r, w), 1e-5) is (not declines)


def test_the_interpreter_keeps_nothing(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x, r, w = _tensors(2, 64)
    before = dict(fused.KERNELS._launches)
    fused.fused_add_rmsnorm_triton(x, r, w, 1e-6)
    assert fused.KERNELS._launches == before


# ----------------------------------------------------------------------------------------------------------- GPU

GPU_CASES = [(1, 576), (8, 576), (7, 1000), (3000, 576), (5, 4096), (2, 20000)]


def _pair(rows, hidden, offset, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(2):
        buf = torch.empty(rows * hidden + offset, device="cuda", dtype=torch.bfloat16)
        t = buf[offset:].view(rows, hidden)
        t.copy_(torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=g))
        out.append(t)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("rows,hidden", GPU_CASES)
@pytest.mark.parametrize("offset", [0, 1])
def test_cached_launch_matches_the_jit_launch_bit_for_bit(rows, hidden, offset):
    w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16).abs() + 0.5
    for op in ("fused", "rms"):
        a1, b1 = _pair(rows, hidden, offset, rows + hidden)
        a2, b2 = a1.clone(), b1.clone()  # the clones are 16-byte aligned: another key
        if op == "fused":
            kernels, fn = fused.KERNELS, fused.fused_add_rmsnorm_triton
        else:
            kernels, fn = rms.KERNELS, rms.rms_norm_triton
        fn(a1, b1, w, 1e-6)  # the first call of this key: checked, through the JIT, kept
        key = (torch.cuda.current_device(), triton_rowwise.launch_key((a1, b1, w)))
        assert key in kernels._launches
        a1.copy_(a2)
        b1.copy_(b2)
        assert kernels.launch_cached((a1, b1, w), 1e-6) is True  # the cached launch
        cfg = kernels.config(rows, hidden)
        a3, b3 = _pair(rows, hidden, offset, rows + hidden)
        a3.copy_(a2)
        b3.copy_(b2)
        fn(a3, b3, w, 1e-6, config=cfg)  # a config given: the JIT path, same compiled kernel
        torch.cuda.synchronize()
        assert torch.equal(a1, a3) and torch.equal(b1, b3), (op, rows, hidden, offset)


@pytest.mark.gpu
def test_a_launch_hook_on_the_gpu_sends_calls_through_the_jit():
    from triton import knobs

    x, r = _pair(8, 576, 0, 1)
    w = torch.ones(576, device="cuda", dtype=torch.bfloat16)
    fused.fused_add_rmsnorm_triton(x, r, w, 1e-6)
    seen = []
    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):
        chain.add(seen.append)
        try:
            assert fused.KERNELS.launch_cached((x, r, w), 1e-6) is False
            fused.fused_add_rmsnorm_triton(x, r, w, 1e-6)
        finally:
            chain.remove(seen.append)
    else:
        knobs.runtime.launch_enter_hook = seen.append
        try:
            assert fused.KERNELS.launch_cached((x, r, w), 1e-6) is False
            fused.fused_add_rmsnorm_triton(x, r, w, 1e-6)
        finally:
            knobs.runtime.launch_enter_hook = None
    torch.cuda.synchronize()
    assert len(seen) == 1
    assert fused.KERNELS.launch_cached((x, r, w), 1e-6) is True

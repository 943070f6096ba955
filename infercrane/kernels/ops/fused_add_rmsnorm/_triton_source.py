"""Triton source of InferCrane's fused residual-add + RMSNorm (undecorated kernel bodies).

This module imports Triton at the top, so only ``triton_kernel.py`` imports it, lazily, at the first
launch. The bodies stay undecorated here: ``triton_kernel`` wraps them with ``triton.jit`` per mode
(compiled, or the CPU interpreter under ``TRITON_INTERPRET=1``), so a process can use both modes.

Numerics (both bodies): load bf16/fp16, add in float32, round the sum once to the storage dtype and
store it as the new residual; that rounded value is what is normalized, in float32; multiply by the
weight in float32; round once on the store of ``out`` into ``x``.

Rounding to bf16 is round-to-nearest-even. Compiled, ``.to(tl.bfloat16)`` is ``cvt.rn``. Triton's CPU
interpreter truncates on that cast instead, so ``ROUND_BY_BITS`` (set for bf16 under the interpreter,
or on request) rounds with integer arithmetic: ``(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16``, exact
RNE for finite values, the same result as ``cvt.rn``.

Sums are ``tl.reduce(..., tl.standard._sum_combine)``, which is what ``tl.sum`` expands to for float32. Called
directly, they run in the interpreter however Triton was first imported: ``tl.sum`` itself is a jitted
function whose interpreted form exists only if ``TRITON_INTERPRET=1`` was set before ``triton.language``
was first imported; the interpreter recognizes ``_sum_combine`` and reduces with numpy.
"""
import triton.language as tl
from triton.language.extra import cuda as tl_cuda  # gdc_wait / gdc_launch_dependents (Triton >= 3.4)


def fused_add_rmsnorm_rows(
    x_ptr,
    res_ptr,
    w_ptr,
    n_rows,
    eps,
    HIDDEN: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    MASKED: tl.constexpr,
    INT64: tl.constexpr,
    ROUND_BY_BITS: tl.constexpr,
    PDL: tl.constexpr = False,
    EVICT: tl.constexpr = False,
):
    """One program owns ``ROWS`` whole rows held in registers: one global read of x and residual each.

    ``BLOCK_N`` is the next power of two >= ``HIDDEN``; columns past ``HIDDEN`` are masked. ``HIDDEN``
    is a compile-time constant so row offsets carry its power-of-two divisibility and loads vectorize
    to 16 bytes whenever ``HIDDEN`` is a multiple of 8. ``MASKED`` is false only when ``HIDDEN ==
    BLOCK_N`` and ``ROWS`` divides the row count: then loads and stores carry no predicate at all.

    All three loads (weight first) are issued before any use, so a program waits one memory round trip.
    ``PDL``: programmatic dependent launch (launched with ``launch_pdl=True``): wait for the previous grid
    on the stream (``griddepcontrol.wait``: its writes are visible after it) before the first load, then let
    the next grid launch at once, so its launch and prologue overlap this grid. Every load follows the wait,
    so x, residual and weight may all have been written by the previous kernel.
    ``EVICT``: x and residual stream through L2 (``evict_first``), the weight, read by every program, stays
    (``evict_last``): for row counts whose activations do not fit in L2.
    """
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    if INT64:
        rows = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    offs = rows[:, None] * HIDDEN + cols[None, :]
    if PDL:
        tl_cuda.gdc_wait()
        tl_cuda.gdc_launch_dependents()
    if HIDDEN == BLOCK_N:
        w = tl.load(w_ptr + cols, eviction_policy="evict_last" if EVICT else "")
    else:
        w = tl.load(w_ptr + cols, mask=cols < HIDDEN, other=0.0, eviction_policy="evict_last" if EVICT else "")
    if MASKED:
        mask = (rows[:, None] < n_rows) & (cols[None, :] < HIDDEN)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first" if EVICT else "")
        r = tl.load(res_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first" if EVICT else "")
    else:
        mask = None
        x = tl.load(x_ptr + offs, eviction_policy="evict_first" if EVICT else "")
        r = tl.load(res_ptr + offs, eviction_policy="evict_first" if EVICT else "")

    summed = x.to(tl.float32) + r.to(tl.float32)
    if ROUND_BY_BITS:
        bits = summed.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        summed = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        summed = summed.to(x_ptr.dtype.element_ty)
    tl.store(res_ptr + offs, summed, mask=mask)
    s = summed.to(tl.float32)
    mean_sq = tl.reduce(s * s, 1, tl.standard._sum_combine) / HIDDEN
    inv_rms = tl.math.rsqrt(mean_sq + eps)
    out = s * inv_rms[:, None] * w.to(tl.float32)[None, :]
    if ROUND_BY_BITS:
        bits = out.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        out = out.to(x_ptr.dtype.element_ty)
    tl.store(x_ptr + offs, out, mask=mask)


def fused_add_rmsnorm_chunked(
    x_ptr,
    res_ptr,
    w_ptr,
    n_rows,
    eps,
    HIDDEN: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INT64: tl.constexpr,
    ROUND_BY_BITS: tl.constexpr,
):
    """One program per row, for rows too wide for registers: two passes over ``BLOCK_N`` chunks.

    Pass 1 reads x and residual, stores the rounded sum as the new residual and accumulates the sum
    of squares; pass 2 re-reads that stored sum (the same thread wrote each element it reads: both
    passes use one layout), normalizes and stores ``out``. That re-read is the price of a row that
    does not fit in registers: 5 row transfers instead of 4.
    """
    row = tl.program_id(0)
    if INT64:
        row = row.to(tl.int64)
    base = row * HIDDEN
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], 0.0, tl.float32)
    for start in range(0, HIDDEN, BLOCK_N):
        c = start + cols
        m = c < HIDDEN
        x = tl.load(x_ptr + base + c, mask=m, other=0.0)
        r = tl.load(res_ptr + base + c, mask=m, other=0.0)
        summed = x.to(tl.float32) + r.to(tl.float32)
        if ROUND_BY_BITS:
            bits = summed.to(tl.uint32, bitcast=True)
            bits = bits + 0x7FFF + ((bits >> 16) & 1)
            summed = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            summed = summed.to(x_ptr.dtype.element_ty)
        tl.store(res_ptr + base + c, summed, mask=m)
        s = summed.to(tl.float32)
        acc += s * s
    inv_rms = tl.math.rsqrt(tl.reduce(acc, 0, tl.standard._sum_combine) / HIDDEN + eps)
    tl.debug_barrier()
    for start in range(0, HIDDEN, BLOCK_N):
        c = start + cols
        m = c < HIDDEN
        s = tl.load(res_ptr + base + c, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32)
        out = s * inv_rms * w
        if ROUND_BY_BITS:
            bits = out.to(tl.uint32, bitcast=True)
            bits = bits + 0x7FFF + ((bits >> 16) & 1)
            out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            out = out.to(x_ptr.dtype.element_ty)
        tl.store(x_ptr + base + c, out, mask=m)

"""Triton source of InferCrane's fused residual-add + RMSNorm (undecorated kernel bodies).

This module imports Triton at the top, so only ``triton_kernel.py`` imports it, lazily, at the first
launch. The bodies stay undecorated here: ``triton_kernel`` wraps them with ``triton.jit`` per mode
(compiled, or the CPU interpreter under ``TRITON_INTERPRET=1``), so a process can use both modes.

Numerics (both bodies; the row-wise kernels' shared helpers, their rounding and sums:
``infercrane.kernels.ops._triton_rowwise_source``): load bf16/fp16, add in float32, round the sum once to the
storage dtype and store it as the new residual; that rounded value is what is normalized, in float32; multiply by
the weight in float32; round once on the store of ``out`` into ``x``.
"""
import triton.language as tl
from triton.language.extra import cuda as tl_cuda  # gdc_wait / gdc_launch_dependents (Triton >= 3.4)

from infercrane.kernels.ops._triton_rowwise_source import (
    inverse_rms,
    normalize_chunk,
    round_to_storage,
    row_start,
    row_tile,
)


def fused_add_rmsnorm_rows(x_ptr, res_ptr, w_ptr, n_rows, eps, HIDDEN: tl.constexpr, BLOCK_N: tl.constexpr,
                           ROWS: tl.constexpr, MASKED: tl.constexpr, INT64: tl.constexpr,
                           ROUND_BY_BITS: tl.constexpr, PDL: tl.constexpr = False, EVICT: tl.constexpr = False):
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
    rows, cols, offs = row_tile(ROWS, BLOCK_N, HIDDEN, INT64)
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
    summed = round_to_storage(summed, x_ptr, ROUND_BY_BITS)
    tl.store(res_ptr + offs, summed, mask=mask)
    s = summed.to(tl.float32)
    inv_rms = inverse_rms(s * s, 1, HIDDEN, eps)
    out = s * inv_rms[:, None] * w.to(tl.float32)[None, :]
    out = round_to_storage(out, x_ptr, ROUND_BY_BITS)
    tl.store(x_ptr + offs, out, mask=mask)


def fused_add_rmsnorm_chunked(x_ptr, res_ptr, w_ptr, n_rows, eps, HIDDEN: tl.constexpr, BLOCK_N: tl.constexpr,
                              INT64: tl.constexpr, ROUND_BY_BITS: tl.constexpr):
    """One program per row, for rows too wide for registers: two passes over ``BLOCK_N`` chunks.

    Pass 1 reads x and residual, stores the rounded sum as the new residual and accumulates the sum
    of squares; pass 2 re-reads that stored sum (the same thread wrote each element it reads: both
    passes use one layout), normalizes and stores ``out``. That re-read is the price of a row that
    does not fit in registers: 5 row transfers instead of 4.
    """
    base = row_start(HIDDEN, INT64)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], 0.0, tl.float32)
    for start in range(0, HIDDEN, BLOCK_N):
        c = start + cols
        m = c < HIDDEN
        x = tl.load(x_ptr + base + c, mask=m, other=0.0)
        r = tl.load(res_ptr + base + c, mask=m, other=0.0)
        summed = x.to(tl.float32) + r.to(tl.float32)
        summed = round_to_storage(summed, x_ptr, ROUND_BY_BITS)
        tl.store(res_ptr + base + c, summed, mask=m)
        s = summed.to(tl.float32)
        acc += s * s
    inv_rms = inverse_rms(acc, 0, HIDDEN, eps)
    tl.debug_barrier()
    for start in range(0, HIDDEN, BLOCK_N):
        normalize_chunk(res_ptr, w_ptr, x_ptr, base, start + cols, inv_rms, HIDDEN, ROUND_BY_BITS)

"""Triton source of InferCrane's RMSNorm (undecorated kernel bodies).

This module imports Triton at the top, so only ``triton_kernel.py`` imports it, lazily, at the first
launch. The bodies stay undecorated here: ``triton_kernel`` wraps them with ``triton.jit`` per mode
(compiled, or the CPU interpreter under ``TRITON_INTERPRET=1``), so a process can use both modes.

Numerics (both bodies; the row-wise kernels' shared helpers, their rounding and sums:
``infercrane.kernels.ops._triton_rowwise_source``): x in float32, sum of squares and normalization in float32,
multiply by the weight in float32, round once on the store of ``out``.
"""
import triton.language as tl

from infercrane.kernels.ops._triton_rowwise_source import (
    inverse_rms,
    normalize_chunk,
    round_to_storage,
    row_start,
    row_tile,
)


def rms_norm_rows(out_ptr, x_ptr, w_ptr, n_rows, eps, HIDDEN: tl.constexpr, BLOCK_N: tl.constexpr,
                  ROWS: tl.constexpr, MASKED: tl.constexpr, INT64: tl.constexpr, ROUND_BY_BITS: tl.constexpr):
    """One program owns ``ROWS`` whole rows held in registers: x is read once and ``out`` written once.

    ``BLOCK_N`` is the next power of two >= ``HIDDEN``; columns past ``HIDDEN`` are masked. ``HIDDEN``
    is a compile-time constant so row offsets carry its power-of-two divisibility and accesses vectorize
    to 16 bytes whenever a row is a multiple of 16 bytes. ``MASKED`` is false only when ``HIDDEN ==
    BLOCK_N`` and ``ROWS`` divides the row count: then loads and stores carry no predicate at all.
    Narrow rows (q/k norms at head_dim 128) are packed several per program, so each thread still owns a
    whole 16-byte vector. Both loads (weight first) are issued before any use: one memory round trip.
    The weight is loaded in the tile's own shape (each row of the tile reads it again: L1 hits), so it lands
    in x's register layout: a ``[BLOCK_N]`` load broadcast over the rows needs a layout conversion through
    shared memory behind a barrier when several rows share a program (Triton 3.9 PTX at head_dim 128, 16 rows:
    8-byte/2-byte weight loads and one extra ``bar.sync``; tile-shaped: 16-byte loads, no barrier).
    """
    rows, cols, offs = row_tile(ROWS, BLOCK_N, HIDDEN, INT64)
    wcols = tl.broadcast_to(cols[None, :], (ROWS, BLOCK_N))
    if HIDDEN == BLOCK_N:
        w = tl.load(w_ptr + wcols)
    else:
        w = tl.load(w_ptr + wcols, mask=wcols < HIDDEN, other=0.0)
    if MASKED:
        mask = (rows[:, None] < n_rows) & (cols[None, :] < HIDDEN)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    else:
        mask = None
        x = tl.load(x_ptr + offs)

    xf = x.to(tl.float32)
    inv_rms = inverse_rms(xf * xf, 1, HIDDEN, eps)
    out = xf * inv_rms[:, None] * w.to(tl.float32)
    out = round_to_storage(out, out_ptr, ROUND_BY_BITS)
    tl.store(out_ptr + offs, out, mask=mask)


def rms_norm_chunked(out_ptr, x_ptr, w_ptr, n_rows, eps, HIDDEN: tl.constexpr, BLOCK_N: tl.constexpr,
                     INT64: tl.constexpr, ROUND_BY_BITS: tl.constexpr):
    """One program per row, for rows too wide for registers: two passes over ``BLOCK_N`` chunks.

    Pass 1 reads x and accumulates the sum of squares; pass 2 reads x again (x is an input, never written),
    normalizes and stores ``out``. That second read is the price of a row that does not fit in registers:
    3 row transfers instead of 2.
    """
    base = row_start(HIDDEN, INT64)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], 0.0, tl.float32)
    for start in range(0, HIDDEN, BLOCK_N):
        c = start + cols
        xf = tl.load(x_ptr + base + c, mask=c < HIDDEN, other=0.0).to(tl.float32)
        acc += xf * xf
    inv_rms = inverse_rms(acc, 0, HIDDEN, eps)
    for start in range(0, HIDDEN, BLOCK_N):
        normalize_chunk(x_ptr, w_ptr, out_ptr, base, start + cols, inv_rms, HIDDEN, ROUND_BY_BITS)

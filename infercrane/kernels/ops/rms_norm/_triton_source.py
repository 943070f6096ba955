"""Triton source of InferCrane's RMSNorm (undecorated kernel bodies).

This module imports Triton at the top, so only ``triton_kernel.py`` imports it, lazily, at the first
launch. The bodies stay undecorated here: ``triton_kernel`` wraps them with ``triton.jit`` per mode
(compiled, or the CPU interpreter under ``TRITON_INTERPRET=1``), so a process can use both modes.

Numerics (both bodies): load bf16/fp16/fp32, cast to float32 before any arithmetic (Triton's interpreter
gives NaN for bf16 arithmetic), sum of squares and normalization in float32, multiply by the weight in
float32, round once on the store of ``out``.

Rounding to bf16 is round-to-nearest-even. Compiled, ``.to(tl.bfloat16)`` is ``cvt.rn``. Triton's CPU
interpreter truncates on that cast instead (checked with Triton 3.9: 1 + 2^-8 + 2^-10 becomes 1.0), so
``ROUND_BY_BITS`` (set for bf16 under the interpreter, or on request) rounds with integer arithmetic:
``(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16``, exact RNE for finite values, the same result as ``cvt.rn``.

Sums are ``tl.reduce(..., tl.standard._sum_combine)``, which is what ``tl.sum`` expands to for float32. Called
directly, they run in the interpreter however Triton was first imported: ``tl.sum`` itself is a jitted
function whose interpreted form exists only if ``TRITON_INTERPRET=1`` was set before ``triton.language``
was first imported; the interpreter recognizes ``_sum_combine`` and reduces with numpy.
"""
import triton.language as tl


def rms_norm_rows(
    out_ptr,
    x_ptr,
    w_ptr,
    n_rows,
    eps,
    HIDDEN: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    MASKED: tl.constexpr,
    INT64: tl.constexpr,
    ROUND_BY_BITS: tl.constexpr,
):
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
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    if INT64:
        rows = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    offs = rows[:, None] * HIDDEN + cols[None, :]
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
    mean_sq = tl.reduce(xf * xf, 1, tl.standard._sum_combine) / HIDDEN
    inv_rms = tl.math.rsqrt(mean_sq + eps)
    out = xf * inv_rms[:, None] * w.to(tl.float32)
    if ROUND_BY_BITS:
        bits = out.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        out = out.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offs, out, mask=mask)


def rms_norm_chunked(
    out_ptr,
    x_ptr,
    w_ptr,
    n_rows,
    eps,
    HIDDEN: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INT64: tl.constexpr,
    ROUND_BY_BITS: tl.constexpr,
):
    """One program per row, for rows too wide for registers: two passes over ``BLOCK_N`` chunks.

    Pass 1 reads x and accumulates the sum of squares; pass 2 reads x again (x is an input, never written),
    normalizes and stores ``out``. That second read is the price of a row that does not fit in registers:
    3 row transfers instead of 2.
    """
    row = tl.program_id(0)
    if INT64:
        row = row.to(tl.int64)
    base = row * HIDDEN
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full([BLOCK_N], 0.0, tl.float32)
    for start in range(0, HIDDEN, BLOCK_N):
        c = start + cols
        xf = tl.load(x_ptr + base + c, mask=c < HIDDEN, other=0.0).to(tl.float32)
        acc += xf * xf
    inv_rms = tl.math.rsqrt(tl.reduce(acc, 0, tl.standard._sum_combine) / HIDDEN + eps)
    for start in range(0, HIDDEN, BLOCK_N):
        c = start + cols
        m = c < HIDDEN
        xf = tl.load(x_ptr + base + c, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32)
        out = xf * inv_rms * w
        if ROUND_BY_BITS:
            bits = out.to(tl.uint32, bitcast=True)
            bits = bits + 0x7FFF + ((bits >> 16) & 1)
            out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            out = out.to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + base + c, out, mask=m)

"""Triton device code the row-wise norm kernels share (jitted helpers their bodies call).

This module imports Triton at the top, so only an op's ``_triton_source.py`` imports it (itself imported lazily,
at the first launch). The helpers are ``DeviceFunction``s, usable from kernel bodies wrapped in either of
``triton_kernel``'s modes: compiled, Triton inlines each call of a jitted function, so the kernel's code is the
same as if the helper's body were written out in it (with a call's arguments evaluated before the call: a body
calls a helper where it would have written the helper's first line); interpreted (``TRITON_INTERPRET=1``), a
kernel body runs as Python and calls the helper as Python.

Numerics every body shares: load bf16/fp16/fp32, cast to float32 before any arithmetic (Triton's interpreter gives
NaN for bf16 arithmetic), sums of squares and the normalization in float32, one rounding on each store
(``round_to_storage``).

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
from triton.runtime.jit import JITFunction


class DeviceFunction(JITFunction):
    """A jitted helper that a kernel body calls in both modes: compiled, Triton's code generator calls it as the
    ``JITFunction`` it is; interpreted, the body is plain Python and calls it as a function (where
    ``JITFunction.__call__`` would refuse)."""

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


@DeviceFunction
def round_to_storage(v, ptr, ROUND_BY_BITS: tl.constexpr):
    """``v`` (float32) rounded to nearest even to ``ptr``'s element type: by ``cvt.rn`` (the cast), or with
    ``ROUND_BY_BITS`` to bf16 by integer arithmetic (what the interpreter needs; see the module's docstring)."""
    if ROUND_BY_BITS:
        bits = v.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(ptr.dtype.element_ty)


@DeviceFunction
def row_tile(ROWS: tl.constexpr, BLOCK_N: tl.constexpr, HIDDEN: tl.constexpr, INT64: tl.constexpr):
    """``(rows, cols, offs)`` of this program's tile: its ``ROWS`` row indices (int64 with ``INT64``), the
    ``BLOCK_N`` column indices and the ``[ROWS, BLOCK_N]`` element offsets."""
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    if INT64:
        rows = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    return rows, cols, rows[:, None] * HIDDEN + cols[None, :]


@DeviceFunction
def row_start(HIDDEN: tl.constexpr, INT64: tl.constexpr):
    """Offset of this program's row (one row per program), int64 with ``INT64``."""
    row = tl.program_id(0)
    if INT64:
        row = row.to(tl.int64)
    return row * HIDDEN


@DeviceFunction
def inverse_rms(squares, AXIS: tl.constexpr, HIDDEN: tl.constexpr, eps):
    """``rsqrt(mean + eps)``, the mean of ``squares`` (float32) along ``AXIS`` over ``HIDDEN`` elements."""
    return tl.math.rsqrt(tl.reduce(squares, AXIS, tl.standard._sum_combine) / HIDDEN + eps)


@DeviceFunction
def normalize_chunk(src_ptr, w_ptr, out_ptr, base, c, inv_rms, HIDDEN: tl.constexpr, ROUND_BY_BITS: tl.constexpr):
    """One chunk of a chunked kernel's second pass: columns ``c`` of the row at ``base``: ``src * inv_rms *
    weight`` in float32, rounded once, stored to ``out_ptr``."""
    m = c < HIDDEN
    s = tl.load(src_ptr + base + c, mask=m, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32)
    out = s * inv_rms * w
    out = round_to_storage(out, out_ptr, ROUND_BY_BITS)
    tl.store(out_ptr + base + c, out, mask=m)

"""The row-wise Triton kernels' one float32 -> 16-bit rounding (``_triton_rowwise_source.round_to_storage``).

Under Triton's CPU interpreter (``TRITON_INTERPRET=1``, set for each test only) the kernels round bf16 with integer
arithmetic (``ROUND_BY_BITS``), since the interpreter's cast truncates. That arithmetic must give
torch's own round-to-nearest-even bit for bit, on values chosen to need it: ties broken to even both ways, values
just past a tie (which truncation gets wrong), a carry into the exponent, negatives, zeros, subnormals and the
largest finite magnitudes; and on random values.
"""
from __future__ import annotations

import struct

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import triton.language as tl  # noqa: E402

from infercrane.kernels.ops._triton_rowwise_source import round_to_storage  # noqa: E402

N = 4096


def _round(src_ptr, out_ptr, N: tl.constexpr, ROUND_BY_BITS: tl.constexpr):
    i = tl.arange(0, N)
    out = round_to_storage(tl.load(src_ptr + i), out_ptr, ROUND_BY_BITS)
    tl.store(out_ptr + i, out)


def _rounded(monkeypatch, src, dtype, round_by_bits: bool):
    """``src`` (float32, N values) through ``round_to_storage`` into a ``dtype`` tensor, interpreted."""
    import triton

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # triton.jit reads it when it wraps
    out = torch.empty(N, dtype=dtype)
    triton.jit(_round)[(1,)](src, out, N=N, ROUND_BY_BITS=round_by_bits)
    return out


def _from_bits(*bits: int) -> list[float]:
    return [struct.unpack("<f", struct.pack("<I", b))[0] for b in bits]


def _values() -> torch.Tensor:
    one = 0x3F800000
    chosen = _from_bits(
        one | 0x8000,             # 1 + 2^-8: a tie, mantissa even below -> 1.0
        one | 0x18000,            # 1 + 3 * 2^-8: a tie, odd below -> rounds up to 1 + 2^-6
        one | 0x8000 | 0x2000,    # 1 + 2^-8 + 2^-10: past a tie -> 1 + 2^-7 (truncation gives 1.0)
        one | 0x7FFF,             # just below a tie -> 1.0
        0x3FFFFFFF,               # just below 2: the carry reaches the exponent -> 2.0
        0x00000001, 0x00018000,   # subnormals
        0x7F7F7FFF, 0x7F7F0000,   # the largest finite magnitudes that stay finite
        0x00000000, 0x80000000,   # +0, -0
    )
    values = torch.tensor(chosen + [-v for v in chosen], dtype=torch.float32)
    rand = torch.randn(N - values.numel(), generator=torch.Generator().manual_seed(0)) * 10.0
    return torch.cat([values, rand])


def test_integer_rounding_is_torchs_round_to_nearest_even(monkeypatch):
    src = _values()
    out = _rounded(monkeypatch, src, torch.bfloat16, True)
    want = src.to(torch.bfloat16)
    bad = (out.view(torch.int16) != want.view(torch.int16)).nonzero()
    assert bad.numel() == 0, (f"{bad.numel()} of {N} values rounded differently; first: {float(src[bad[0]])} -> "
                              f"{float(out[bad[0]])}, torch gives {float(want[bad[0]])}")
    assert float(out[2]) == 1.0 + 2**-7 and float(out[4]) == 2.0  # the cases truncation and carries get wrong


def test_without_round_by_bits_the_cast_rounds_to_the_pointers_type(monkeypatch):
    """fp16 (and a compiled kernel's bf16) round by the cast to the output pointer's element type; the
    interpreter's fp16 cast is numpy's, round to nearest even as well."""
    src = _values().clamp(-6e4, 6e4)  # within fp16's range
    out = _rounded(monkeypatch, src, torch.float16, False)
    assert torch.equal(out.view(torch.int16), src.to(torch.float16).view(torch.int16))

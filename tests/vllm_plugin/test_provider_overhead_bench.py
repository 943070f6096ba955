"""benchmarks/provider_overhead.py builds its bare custom op from a module whose annotations are strings (``from
__future__ import annotations``), which ``torch.library.infer_schema`` cannot read: the op must carry its schema."""
from __future__ import annotations

import pytest

from bench_scripts import load_script

torch = pytest.importorskip("torch")


def _bench():
    return load_script("provider_overhead")


def test_opaque_op_runs_the_kernel_in_place_and_declares_its_mutations():
    calls = []

    def kernel(x, r, w, eps):
        calls.append(eps)
        r.add_(x)
        x.copy_(r * w)

    op = _bench().opaque_op("infercrane_bench_test::opaque", kernel)
    x, r, w = torch.ones(2, 4), torch.full((2, 4), 2.0), torch.full((4,), 0.5)
    assert op(x, r, w, 1e-6) is None
    assert calls == [1e-6]
    assert torch.equal(r, torch.full((2, 4), 3.0)) and torch.equal(x, torch.full((2, 4), 1.5))
    schema = str(op._opoverload._schema)
    assert "Tensor(a!) x" in schema and "Tensor(b!) r" in schema and "Tensor w" in schema and "float eps" in schema

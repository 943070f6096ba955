"""benchmarks/provider_overhead.py builds its bare custom op from a module whose annotations are strings (``from
__future__ import annotations``), which ``torch.library.infer_schema`` cannot read: the op must carry its schema."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "provider_overhead.py"


def _bench():
    spec = importlib.util.spec_from_file_location("provider_overhead_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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

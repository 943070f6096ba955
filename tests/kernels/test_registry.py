"""Registry: explicit order, unknown keys named, every unavailable implementation carries its reason."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infercrane.errors import InputError
from infercrane.kernels import registry
from infercrane.kernels.ops.fused_add_rmsnorm import candidates
from infercrane.kernels.registry import Implementation
from infercrane.kernels.user_candidate import parse_candidate_ref

OP = "fused_add_rmsnorm"
FIXTURES = Path(__file__).parent / "fixtures"


def test_known_keys_in_screening_order():
    assert registry.known_keys(OP) == ["eager", "torch_compile", "vllm_vendor", "triton", "cuda", "user"]
    assert [i.key for i in registry.implementations(OP)] == list(candidates.KEYS)
    kinds = {i.key: i.kind for i in registry.implementations(OP)}
    assert kinds == {"eager": "baseline", "torch_compile": "baseline", "vllm_vendor": "baseline",
                     "triton": "candidate", "cuda": "candidate"}


def test_unknown_key_lists_known_keys():
    with pytest.raises(InputError) as e:
        registry.validate_keys(OP, ["eager", "cutlass"])
    assert "'cutlass'" in str(e.value)
    for k in registry.known_keys(OP):
        assert k in str(e.value)
    with pytest.raises(InputError, match="known keys"):
        registry.get(OP, "nope")


def test_unknown_op():
    with pytest.raises(InputError, match="fused_add_rmsnorm"):
        registry.known_keys("layernorm")


def test_validate_keys_orders_dedupes_and_handles_user():
    assert registry.validate_keys(OP, ["triton", "eager", "triton"]) == ["eager", "triton"]
    ref = parse_candidate_ref(f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm")
    assert registry.validate_keys(OP, ["eager"], ref) == ["eager", "user"]
    with pytest.raises(InputError, match="candidate"):
        registry.validate_keys(OP, ["eager", "user"])
    with pytest.raises(InputError, match="no implementation selected"):
        registry.validate_keys(OP, [])


def test_user_implementation_from_registry():
    ref = parse_candidate_ref(f"{FIXTURES / 'cheaters.py'}:honest_in_place")
    impl = registry.get(OP, "user", candidate=ref)
    assert (impl.key, impl.kind, impl.in_place) == ("user", "candidate", True)
    assert impl.probe() == (True, "")
    assert impl.describe()["function"] == "honest_in_place"
    with pytest.raises(InputError, match="candidate"):
        registry.get(OP, "user")


def test_eager_is_available_and_loads():
    impl = registry.get(OP, "eager")
    assert impl.probe() == (True, "")
    assert impl.in_place is False
    assert callable(impl.load(None))


def test_unavailable_implementations_say_why_on_cpu(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this checks the reasons given without a GPU")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    reasons = {i.key: i.probe() for i in registry.implementations(OP)}
    assert reasons["vllm_vendor"][0] is False and "CUDA" in reasons["vllm_vendor"][1]
    assert reasons["cuda"][0] is False and "no GPU" in reasons["cuda"][1]
    assert reasons["triton"][0] is False and "TRITON_INTERPRET" in reasons["triton"][1]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert registry.get(OP, "triton").probe() == (True, "")
    assert registry.get(OP, "triton").probe_cpu() == (True, "")
    assert registry.get(OP, "cuda").probe_cpu()[0] is False


def test_torch_compile_on_cpu_needs_a_cxx_compiler(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CPU rule")
    impl = registry.get(OP, "torch_compile")
    has_cxx = any(shutil.which(c) for c in ("g++", "c++", "clang++"))
    assert impl.probe()[0] is has_cxx
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    ok, reason = impl.probe()
    assert ok is False and "C++ compiler" in reason


def test_missing_module_is_skipped_with_reason():
    from infercrane.kernels.ops.rowwise import module_available

    probe = module_available("infercrane.kernels.ops.fused_add_rmsnorm", "no_such_kernel_module", "fn")
    ok, reason = probe()
    assert ok is False and "no_such_kernel_module" in reason and "not importable" in reason


def test_probe_turns_exceptions_into_reasons():
    def broken() -> tuple[bool, str]:
        raise OSError("libcuda.so: cannot open shared object file")

    impl = Implementation(key="x", label="x", kind="candidate", in_place=True, source="-", available=broken,
                          load=lambda spec: None)
    ok, reason = impl.probe()
    assert ok is False and "OSError" in reason and "libcuda" in reason
    silent = Implementation(key="y", label="y", kind="candidate", in_place=True, source="-",
                            available=lambda: (False, ""), load=lambda spec: None)
    assert silent.probe() == (False, "unavailable (no reason given)")

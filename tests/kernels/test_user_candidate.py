"""User candidates: loaded by path; the in-place contract is declared, never guessed."""
from __future__ import annotations

from pathlib import Path

import pytest

from infercrane.errors import InputError
from infercrane.kernels.user_candidate import CandidateRef, load_candidate, parse_candidate_ref

FIXTURES = Path(__file__).parent / "fixtures"


def _write(tmp_path: Path, body: str, name: str = "cand.py") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def test_good_file_function_attribute(tmp_path):
    p = _write(tmp_path, "def k(x, r, w, eps):\n    return None\nk.in_place = True\n")
    c = load_candidate(parse_candidate_ref(f"{p}:k"))
    assert c.in_place is True and "function attribute" in c.declared_by and callable(c.fn)
    assert len(c.sha256) == 64


def test_module_constant_and_attribute_precedence(tmp_path):
    p = _write(tmp_path, "IN_PLACE = False\ndef a(*args):\n    pass\ndef b(*args):\n    pass\nb.in_place = True\n")
    assert load_candidate(parse_candidate_ref(f"{p}:a")).in_place is False
    b = load_candidate(parse_candidate_ref(f"{p}:b"))
    assert b.in_place is True and "function attribute" in b.declared_by


def test_fixture_file_loads():
    c = load_candidate(parse_candidate_ref(f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm"))
    assert c.in_place is False and c.declared_by == "module constant IN_PLACE"


def test_missing_function_names_it_and_lists_callables(tmp_path):
    p = _write(tmp_path, "IN_PLACE = True\ndef present(*a):\n    pass\n")
    with pytest.raises(InputError) as e:
        load_candidate(parse_candidate_ref(f"{p}:absent"))
    assert "absent" in str(e.value) and str(p) in str(e.value) and "present" in str(e.value)


def test_missing_file_names_it(tmp_path):
    ref = parse_candidate_ref(f"{tmp_path / 'nowhere.py'}:k")
    with pytest.raises(InputError, match="nowhere.py"):
        load_candidate(ref)


def test_undeclared_contract_says_how_to_declare(tmp_path):
    p = _write(tmp_path, "def k(x, r, w, eps):\n    return x, r\n")
    with pytest.raises(InputError) as e:
        load_candidate(parse_candidate_ref(f"{p}:k"))
    text = str(e.value)
    assert "does not declare" in text and "k.in_place = True" in text and "IN_PLACE" in text


def test_override_declares_undeclared_and_conflict_is_an_error(tmp_path):
    p = _write(tmp_path, "def k(*a):\n    pass\n")
    c = load_candidate(parse_candidate_ref(f"{p}:k", in_place_override=False))
    assert c.in_place is False and "override" in c.declared_by
    q = _write(tmp_path, "IN_PLACE = True\ndef k(*a):\n    pass\n", "q.py")
    assert load_candidate(parse_candidate_ref(f"{q}:k", in_place_override=True)).in_place is True
    with pytest.raises(InputError, match="override"):
        load_candidate(parse_candidate_ref(f"{q}:k", in_place_override=False))


def test_declaration_must_be_a_bool(tmp_path):
    p = _write(tmp_path, "def k(*a):\n    pass\nk.in_place = 'yes'\n")
    with pytest.raises(InputError, match="True or False"):
        load_candidate(parse_candidate_ref(f"{p}:k"))


def test_import_error_in_file_is_input_error(tmp_path):
    p = _write(tmp_path, "import no_such_module_anywhere\n")
    with pytest.raises(InputError, match="failed to import"):
        load_candidate(parse_candidate_ref(f"{p}:k"))


def test_sibling_import_works(tmp_path):
    _write(tmp_path, "VALUE = 3\n", "helper_mod_for_candidate.py")
    p = _write(tmp_path, "import helper_mod_for_candidate\nIN_PLACE = True\ndef k(*a):\n"
                         "    return helper_mod_for_candidate.VALUE\n")
    assert load_candidate(parse_candidate_ref(f"{p}:k")).fn() == 3


@pytest.mark.parametrize("text,match", [
    ("kernel.py", "PATH.py:FUNCTION"),
    ("kernel.txt:fn", "not a .py file"),
    ("kernel.py:not-a-name", "not a Python function name"),
    (":fn", "no file path"),
])
def test_parse_errors(text, match):
    with pytest.raises(InputError, match=match):
        parse_candidate_ref(text)


def test_ref_json_round_trip(tmp_path):
    ref = parse_candidate_ref(f"{tmp_path / 'k.py'}:fn", in_place_override=True)
    assert CandidateRef.from_json(ref.to_json()) == ref


@pytest.mark.parametrize("op, body, in_place", [
    ("fused_add_rmsnorm", "from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager as k\n",
     False),
    ("fused_add_rmsnorm", "from infercrane.kernels.ops.fused_add_rmsnorm.baselines import fused_add_rmsnorm_eager\n"
                          "def k(x, r, w, eps):\n    o, n = fused_add_rmsnorm_eager(x, r, w, eps)\n"
                          "    x.copy_(o)\n    r.copy_(n)\n", True),
    ("rms_norm", "from infercrane.kernels.ops.rms_norm.baselines import rms_norm_eager as k\n", False),
    ("rms_norm", "from infercrane.kernels.ops.rms_norm.baselines import rms_norm_eager\n"
                 "def k(out, x, w, eps):\n    out.copy_(rms_norm_eager(x, w, eps))\n", True),
])
def test_an_undeclared_contract_is_inferred_when_one_form_fits(tmp_path, op, body, in_place):
    pytest.importorskip("torch")
    from infercrane.kernels import registry
    from infercrane.kernels.user_candidate import infer_contract

    spec = registry.op_module(op).SPEC(hidden_size=64, eps=1e-6)
    p = _write(tmp_path, body)
    c = load_candidate(parse_candidate_ref(f"{p}:k"), infer=lambda fn: infer_contract(fn, spec, "cpu"))
    assert c.in_place is in_place and c.declared_by.startswith("inferred: one call followed the")

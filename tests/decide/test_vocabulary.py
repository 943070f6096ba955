"""One vocabulary of verdicts across the labs: every verdict and decision word the code can emit is mapped in
``infercrane.decide.vocabulary``, and nothing else is.

The words are read from the code, not copied: the ``Literal`` and ``Enum`` types of every field named ``*verdict*``,
``decision`` or ``decision_code`` in the receipt models (walked from the registry, nested models included) and in the
decision models of ``decide/`` and ``stats/``; and, for words written as plain strings (the prediction's), every string
constant the package assigns to a ``verdict`` (``verdict=...``, ``x["verdict"] = ...``, ``{"verdict": ...}``). A new
word in any of them fails this test until it is mapped.
"""
from __future__ import annotations

import ast
import enum
import importlib
import pkgutil
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

import infercrane
from infercrane.decide.vocabulary import (
    DECISIONS,
    NORMALIZED,
    VERDICTS,
    WORDS,
    UnknownVerdict,
    normalized,
)

PACKAGE = Path(infercrane.__file__).parent
# Presentation and the command line show words; they do not make them.
NOT_EMITTERS = ("report", "commands", "cli.py")


def _literal_words(annotation: object) -> set[str]:
    """Every string a type admits through Literal or a str Enum, through Optional, lists and Annotated."""
    out: set[str] = set()
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {a for a in typing.get_args(annotation) if isinstance(a, str)}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {m.value for m in annotation if isinstance(m.value, str)}
    for arg in typing.get_args(annotation):
        out |= _literal_words(arg)
    return out


def _nested_models(annotation: object) -> set[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return {m for arg in typing.get_args(annotation) for m in _nested_models(arg)}


def _model_roots() -> set[type[BaseModel]]:
    """The receipt models of every version, and every pydantic model defined in decide/, stats/ and kernels/."""
    from infercrane.receipts.registry import MODELS

    roots: set[type[BaseModel]] = set(MODELS.values())
    for pkg in ("infercrane.decide", "infercrane.stats", "infercrane.kernels", "infercrane.serving"):
        module = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{pkg}."):
            try:
                mod = importlib.import_module(info.name)
            except ImportError:  # an optional toolchain (cupy, vllm) missing here
                continue
            roots |= {v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, BaseModel)
                      and v.__module__ == mod.__name__}
    return roots


def _words_from_models() -> tuple[set[str], set[str]]:
    """(verdict words, decision words) admitted by the models' fields."""
    verdicts: set[str] = set()
    decisions: set[str] = set()
    seen: set[type[BaseModel]] = set()
    todo = list(_model_roots())
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, f in model.model_fields.items():
            if "verdict" in name and name != "verdict_rule":
                verdicts |= _literal_words(f.annotation)
            elif name in ("decision", "decision_code"):
                decisions |= _literal_words(f.annotation)
            todo += _nested_models(f.annotation)
    return verdicts, decisions


def _constants(node: ast.AST) -> set[str]:
    """String constants a value expression can evaluate to (a constant or a conditional of constants)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _constants(node.body) | _constants(node.orelse)
    return set()


def _words_from_source() -> set[str]:
    out: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if any(part in NOT_EMITTERS for part in path.relative_to(PACKAGE).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "verdict":
                out |= _constants(node.value)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and _constants(t.slice) == {"verdict"}:
                        out |= _constants(node.value)
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if k is not None and _constants(k) == {"verdict"} and v is not None:
                        out |= _constants(v)
    return out


@pytest.fixture(scope="module")
def emitted() -> tuple[set[str], set[str]]:
    verdicts, decisions = _words_from_models()
    return verdicts | _words_from_source(), decisions


def test_every_verdict_word_the_labs_emit_is_mapped(emitted) -> None:
    verdicts, _ = emitted
    # the harvest reaches both labs and the prediction (a walk that found nothing would pass vacuously)
    assert {"FASTER", "FLAGGED", "BETTER", "AGREE", "CONSISTENT", "NO PREDICTION"} <= verdicts
    assert verdicts - set(VERDICTS) == set(), "verdict words emitted but not in infercrane/decide/vocabulary.py"


def test_every_mapped_word_is_emitted_somewhere(emitted) -> None:
    verdicts, _ = emitted
    assert set(VERDICTS) - verdicts == set(), "words in the vocabulary that no lab emits"


def test_decision_codes_are_one_vocabulary(emitted) -> None:
    _, decisions = emitted
    assert decisions == set(DECISIONS)


def test_a_word_reads_the_same_wherever_it_is_used() -> None:
    readings: dict[str, set[str]] = {}
    for _, _, word, norm, meaning in WORDS:
        readings.setdefault(word, set()).add(norm)
        assert norm in NORMALIZED and meaning
    assert {w: r for w, r in readings.items() if len(r) > 1} == {}
    assert set(NORMALIZED) == {norm for *_, norm, _ in WORDS}  # every normalized word is used


def test_normalized_reads_words_enum_members_and_none() -> None:
    from infercrane.stats.compare import EquivalenceVerdict, Verdict

    assert normalized("FASTER") == normalized(Verdict.FASTER) == normalized(EquivalenceVerdict.BETTER) == "improved"
    assert normalized("SLOWER") == normalized("WORSE") == "worse"
    assert normalized(None) == "not-decided"
    with pytest.raises(UnknownVerdict, match="'FASTISH' is not in InferCrane's vocabulary"):
        normalized("FASTISH")

"""Explicit, ordered registry of the implementations screened for each operator.

Each operator lists its implementations in one place (``infercrane/kernels/ops/<op>/candidates.py``), in the order
they are screened and reported: baselines first, then InferCrane's candidates; a user's candidate file comes last.
Nothing registers itself by being imported: this module maps an op name to that listing by module path and imports
it only when asked.

Every implementation probes its own capability: ``available() -> (ok, reason)``. A missing toolchain (no GPU, no
vLLM, no CuPy) is reported as ``skipped: <reason>``, never dropped silently. An unknown key is an InputError that
lists the known keys.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable

from infercrane.errors import InputError
from infercrane.kernels.op import USER_KEY, Implementation, Kind  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from infercrane.kernels.user_candidate import CandidateRef


# op name -> module that defines ``KEYS`` and ``implementations()`` for it (a user's file: ``user_candidate``).
OPS: dict[str, str] = {
    "fused_add_rmsnorm": "infercrane.kernels.ops.fused_add_rmsnorm.candidates",
    "rms_norm": "infercrane.kernels.ops.rms_norm.candidates",
}


def known_ops() -> list[str]:
    return list(OPS)


def _known(op: str) -> str:
    """``op``, or InputError naming the known ones."""
    if op not in OPS:
        raise InputError(f"unknown operator {op!r}; known operators: {', '.join(OPS)}")
    return op


def _folder_module(op: str, name: str = "") -> Any:
    """Module ``name`` of the op's folder package (``infercrane.kernels.ops.<op>``; the package itself for "")."""
    package = OPS[_known(op)].rsplit(".", 1)[0]
    return importlib.import_module(f"{package}.{name}" if name else package)


def op_module(op: str) -> Any:
    """The op's folder package (``infercrane.kernels.ops.<op>``): its ``spec`` module says what the op is."""
    return _folder_module(op, "spec")


def vllm_adapter(op: str) -> Any:
    """The op's vLLM signatures (``infercrane.kernels.ops.<op>.vllm_adapter``; imports torch)."""
    return _folder_module(op, "vllm_adapter")


def vllm_ops() -> dict[str, str]:
    """vLLM IR op -> the op of the same computation, for every op whose folder names one (its package's
    ``VLLM_OP``; nothing heavy is imported)."""
    named = {op: getattr(_folder_module(op), "VLLM_OP", None) for op in OPS}
    return {name: op for op, name in named.items() if name}


def default_rows(op: str) -> tuple[int, ...]:
    """Row counts screened by default (decode-sized batches)."""
    return tuple(op_module(op).DEFAULT_ROWS)


def bandwidth_rows(op: str) -> tuple[int, ...]:
    """Row counts added by ``--bandwidth-rows`` (the memory-bandwidth regime)."""
    return tuple(op_module(op).BANDWIDTH_ROWS)


def make_spec(op: str, config: dict[str, Any], **kw: Any) -> Any:
    """The op's resolved problem from a Hugging Face style ``config.json`` dict (``rows``, ``dtype``, ``model_id``,
    ``model_revision`` as keywords); raises ValueError when the config lacks a field the op needs."""
    return op_module(op).SPEC.from_model_config(config, **kw)


def _op_module(op: str) -> Any:
    return importlib.import_module(OPS[_known(op)])


def known_keys(op: str) -> list[str]:
    """Implementation keys for ``op`` in screening order, ``user`` last."""
    return [*_op_module(op).KEYS, USER_KEY]


def validate_keys(op: str, keys: list[str] | tuple[str, ...], candidate: "CandidateRef | None" = None) -> list[str]:
    """Check keys without loading anything; return them in registry order (duplicates removed).

    A candidate given without the ``user`` key adds it; ``user`` without a candidate is an InputError.
    """
    known = known_keys(op)
    wanted = list(dict.fromkeys(keys))
    unknown = [k for k in wanted if k not in known]
    if unknown:
        raise InputError(
            f"unknown implementation key(s) {', '.join(map(repr, unknown))} for {op}; known keys: {', '.join(known)}"
        )
    if candidate is not None and USER_KEY not in wanted:
        wanted.append(USER_KEY)
    if USER_KEY in wanted and candidate is None:
        raise InputError(
            f"implementation {USER_KEY!r} needs a candidate file", hint="pass --candidate path/to/file.py:function"
        )
    if not wanted:
        raise InputError(f"no implementation selected for {op}; known keys: {', '.join(known)}")
    return [k for k in known if k in wanted]


def get(op: str, key: str, *, candidate: "CandidateRef | None" = None,
        infer: Callable[[Callable[..., Any]], tuple[bool, str]] | None = None) -> Implementation:
    """The implementation ``key`` of ``op``. For ``user`` this executes the candidate file (do it in a worker);
    ``infer(fn)`` settles an undeclared contract (``user_candidate.infer_contract``)."""
    module = _op_module(op)
    if key == USER_KEY:
        if candidate is None:
            raise InputError(
                f"implementation {USER_KEY!r} needs a candidate file", hint="pass --candidate path/to/file.py:function"
            )
        from infercrane.kernels.user_candidate import user_implementation

        return user_implementation(candidate, infer)
    by_key = {impl.key: impl for impl in module.implementations()}
    if key not in by_key:
        raise InputError(f"unknown implementation key {key!r} for {op}; known keys: {', '.join(known_keys(op))}")
    return by_key[key]


def implementations(op: str) -> list[Implementation]:
    """Built-in implementations of ``op`` in screening order (the user's candidate is not among them)."""
    return list(_op_module(op).implementations())

"""A user's candidate kernel, named on the command line as ``path/to/file.py:function``.

The file is loaded by path (``importlib.util.spec_from_file_location``), never by module name, so it need not be on
``sys.path``; its own directory is put on ``sys.path`` while it executes so that it can import sibling modules.

The calling contract (``spec.py`` of the op) is **declared**, never guessed:

* a function attribute ``fn.in_place = True`` or ``False`` (wins over the module constant), or
* a module-level constant ``IN_PLACE = True`` or ``False``, or
* an explicit override given when screening (``in_place_override``), for files one cannot edit.

An override that contradicts the file's own declaration is an error, not a silent choice.

Parsing (``parse_candidate_ref``) and the file check (``check_candidate_file``) run no user code and can be done in
the parent process before any GPU time is spent; ``load_candidate`` executes the file and belongs in the worker.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from infercrane.errors import InputError

DECLARE_HINT = (
    "declare the calling contract in the file: set `{fn}.in_place = True` (fn(x, residual, weight, eps) -> None; "
    "afterwards x holds out and residual holds x + residual) or `{fn}.in_place = False` (returns (out, residual_out), "
    "inputs untouched); or put `IN_PLACE = True`/`False` at module level; or override it when screening "
    "(in_place_override / the screen command's in-place flag)"
)


@dataclass(frozen=True)
class CandidateRef:
    """Where a user candidate lives: a Python file, a function name in it, and an optional contract override."""

    path: Path
    function: str
    in_place_override: bool | None = None

    @property
    def text(self) -> str:
        return f"{self.path}:{self.function}"

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "function": self.function, "in_place_override": self.in_place_override}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CandidateRef":
        return cls(Path(data["path"]), str(data["function"]), data.get("in_place_override"))


@dataclass(frozen=True)
class LoadedCandidate:
    """The user's function, the contract it declared, and how that contract was declared."""

    fn: Callable[..., Any]
    in_place: bool
    declared_by: str
    ref: CandidateRef
    sha256: str


def parse_candidate_ref(text: str, *, in_place_override: bool | None = None) -> CandidateRef:
    """``"path/to/file.py:fn"`` -> ``CandidateRef``. Raises InputError naming what is malformed."""
    if not isinstance(text, str) or ":" not in text:
        raise InputError(
            f"candidate {text!r} must be written PATH.py:FUNCTION (e.g. my_kernels.py:fused_add_rmsnorm)"
        )
    path_text, function = text.rsplit(":", 1)
    if not path_text:
        raise InputError(f"candidate {text!r} has no file path before ':'")
    if not function.isidentifier():
        raise InputError(f"candidate {text!r}: {function!r} after ':' is not a Python function name")
    if not path_text.endswith(".py"):
        raise InputError(f"candidate {text!r}: {path_text!r} is not a .py file")
    if in_place_override is not None and not isinstance(in_place_override, bool):
        raise InputError(f"in_place_override must be True, False or None, got {in_place_override!r}")
    return CandidateRef(Path(path_text).expanduser().resolve(), function, in_place_override)


def check_candidate_file(ref: CandidateRef) -> None:
    """Fail early (no user code runs) when the candidate's file is missing or not a file."""
    if not ref.path.exists():
        raise InputError(f"candidate file {ref.path} does not exist", hint="check the PATH part of PATH.py:FUNCTION")
    if not ref.path.is_file():
        raise InputError(f"candidate path {ref.path} is not a file")


def _declared(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{where} must be True or False, got {value!r}")
    return value


def load_candidate(ref: CandidateRef) -> LoadedCandidate:
    """Execute the candidate file and return its function with the declared contract.

    Raises InputError when the file or the function is missing, the file fails to import, the contract is
    undeclared, or an override contradicts the declaration.
    """
    check_candidate_file(ref)
    data = ref.path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    module_name = f"infercrane_user_candidate_{sha[:16]}"
    module_spec = importlib.util.spec_from_file_location(module_name, ref.path)
    if module_spec is None or module_spec.loader is None:
        raise InputError(f"candidate file {ref.path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    folder = str(ref.path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise InputError(
            f"candidate file {ref.path} failed to import: {type(e).__name__}: {e}",
            hint="run `python {}` to see the full error".format(ref.path),
        ) from e
    finally:
        if added:
            try:
                sys.path.remove(folder)
            except ValueError:
                pass
    if not hasattr(module, ref.function):
        defined = sorted(
            n for n, v in vars(module).items() if callable(v) and not n.startswith("_") and not isinstance(v, type)
        )
        raise InputError(
            f"candidate file {ref.path} has no function {ref.function!r}",
            hint=f"callables defined there: {', '.join(defined) or '(none)'}",
        )
    fn = getattr(module, ref.function)
    if not callable(fn):
        raise InputError(f"{ref.text}: {ref.function!r} is a {type(fn).__name__}, not a callable")

    declared: bool | None = None
    declared_by = ""
    if hasattr(fn, "in_place"):
        declared = _declared(getattr(fn, "in_place"), f"{ref.text}: {ref.function}.in_place")
        declared_by = f"function attribute {ref.function}.in_place"
    elif hasattr(module, "IN_PLACE"):
        declared = _declared(getattr(module, "IN_PLACE"), f"{ref.path}: module constant IN_PLACE")
        declared_by = "module constant IN_PLACE"

    override = ref.in_place_override
    if declared is None and override is None:
        raise InputError(
            f"candidate {ref.text} does not declare whether it works in place",
            hint=DECLARE_HINT.format(fn=ref.function),
        )
    if declared is not None and override is not None and declared != override:
        raise InputError(
            f"candidate {ref.text} declares in_place={declared} ({declared_by}) but the override says "
            f"in_place={override}",
            hint="drop the override or fix the declaration in the file",
        )
    if declared is None:
        return LoadedCandidate(fn, bool(override), "override given when screening", ref, sha)
    return LoadedCandidate(fn, declared, declared_by, ref, sha)

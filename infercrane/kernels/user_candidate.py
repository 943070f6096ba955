"""A user's candidate kernel, named on the command line as ``path/to/file.py:function``.

The file is loaded by path (``importlib.util.spec_from_file_location``), never by module name, so it need not be on
``sys.path``; its own directory is put on ``sys.path`` while it executes so that it can import sibling modules. It is
read once, bounded (``datafiles.read_bytes``), and those bytes are hashed and executed.

The calling contract (the op's ``spec.py``: ``RETURNS`` out of place, ``IN_PLACE`` in place) is declared, or
inferred when that is unambiguous:

* a function attribute ``fn.in_place = True`` or ``False`` (wins over the module constant), or
* a module-level constant ``IN_PLACE = True`` or ``False``, or
* an explicit override given when screening (``in_place_override``; ``--candidate-in-place`` /
  ``--candidate-out-of-place``), for files one cannot edit;
* otherwise ``infer_contract`` calls the function once in each form on small fresh inputs, in the worker: it
  follows the out-of-place form if it returns the op's outputs and leaves its inputs alone, the in-place form if it
  returns None and wrote exactly the buffers that form names. Exactly one form must fit; otherwise the error names
  both and what each call did.

An override that contradicts the file's own declaration is an error, not a silent choice.

Parsing (``parse_candidate_ref``) and the file check (``check_candidate_file``) run no user code and can be done in
the parent process before any GPU time is spent; ``load_candidate`` executes the file and belongs in the worker.
"""
from __future__ import annotations

import hashlib
import importlib.util
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from infercrane.errors import InputError

DECLARE_HINT = (
    "declare the calling contract in the file: `{fn}.in_place = True` for the op's in-place form or `False` for its "
    "out-of-place form (`infercrane kernel list --op OP` shows both), or `IN_PLACE = True`/`False` at module level; "
    "or pass --candidate-in-place / --candidate-out-of-place"
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


def check_candidate_file(ref: CandidateRef) -> bytes:
    """The candidate file's bytes, read bounded (``datafiles.CANDIDATE``); fails early (no user code runs) when the
    file is missing, not a regular file (a directory, a FIFO, a device) or too large."""
    from infercrane.datafiles import CANDIDATE, read_bytes

    if not ref.path.exists():
        raise InputError(f"candidate file {ref.path} does not exist", hint=CANDIDATE.missing_hint)
    return read_bytes(ref.path, CANDIDATE)


def _declared(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{where} must be True or False, got {value!r}")
    return value


def load_candidate(ref: CandidateRef, infer: Callable[[Callable[..., Any]], tuple[bool, str]] | None = None
                   ) -> LoadedCandidate:
    """Execute the candidate file and return its function with its contract (declared, or ``infer(fn)``).

    Raises InputError when the file or the function is missing, the file fails to import, the contract is
    undeclared and cannot be inferred (no ``infer``, or both or neither form fits), or an override contradicts the
    declaration.
    """
    data = check_candidate_file(ref)  # what is hashed is what runs: the bytes read once, compiled below
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
        exec(compile(data, str(ref.path), "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - the user's kernel
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise InputError(
            f"candidate file {ref.path} failed to import: {type(e).__name__}: {e}",
            hint=f"run `python {shlex.quote(str(ref.path))}` to see the full error",
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
    if declared is None and override is None and infer is not None:
        in_place, how = infer(fn)
        return LoadedCandidate(fn, in_place, f"inferred: {how}", ref, sha)
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


def _same(a: Any, b: Any) -> bool:
    """Equal element by element, NaN equal to NaN."""
    return bool(((a == b) | (a.isnan() & b.isnan())).all().item())


def _try_form(fn: Callable[..., Any], spec: Any, in_place: bool, device: Any) -> str | None:
    """None when one call of ``fn`` on fresh inputs follows the contract form, else what it did instead."""
    import torch

    rows = 2
    tensors = spec.make_inputs(rows, device, 20_241_201, 1.0)
    for name in spec.buffers(in_place):
        tensors[name] = torch.full((rows, spec.hidden_size), float("nan"), dtype=tensors[spec.ROW_TENSORS[0]].dtype,
                                   device=device)
    before = {k: v.clone() for k, v in tensors.items()}
    try:
        value = fn(*spec.arguments(tensors, in_place))
    except Exception as e:  # the wrong form often fails on arity; any exception means "not this form"
        return f"raised {type(e).__name__}: {str(e)[:160]}"
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    changed = sorted(k for k in tensors if not _same(tensors[k], before[k]))
    contract = spec.contract(in_place)
    if in_place:
        if value is not None:
            return f"returned a {type(value).__name__}, not None"
        wanted = sorted(set(contract.writes.values()))
        return None if changed == wanted else f"changed {changed or 'nothing'}, not {wanted}"
    n = len(contract.returns)
    got = [value] if n == 1 and isinstance(value, torch.Tensor) else value
    if not isinstance(got, (tuple, list)) or len(got) != n or not all(isinstance(t, torch.Tensor) for t in got):
        return f"returned {type(value).__name__}, not {n} tensor(s)"
    return None if not changed else f"returned its outputs but also changed {changed}"


def infer_contract(fn: Callable[..., Any], spec: Any, device: Any, name: str = "the candidate") -> tuple[bool, str]:
    """Which of the op's two forms ``fn`` follows, from one call in each on small fresh inputs; ``(in_place, how)``.
    Raises InputError naming both forms when neither or both fit."""
    outcomes = {ip: _try_form(fn, spec, ip, device) for ip in (False, True)}
    fitting = [ip for ip, why in outcomes.items() if why is None]
    if len(fitting) == 1:
        ip = fitting[0]
        return ip, f"one call followed the {'in-place' if ip else 'out-of-place'} form {spec.contract(ip).text()}"
    said = "; ".join(f"{'in place' if ip else 'out of place'} ({spec.contract(ip).text()}): "
                     f"{why or 'fits'}" for ip, why in outcomes.items())
    raise InputError(f"cannot tell which calling contract {name} follows ({'both' if fitting else 'neither'} form "
                     f"fits): {said}", hint=DECLARE_HINT.format(fn=name.split(":")[-1]))


def user_implementation(ref: CandidateRef, infer: Callable[[Callable[..., Any]], tuple[bool, str]] | None = None
                        ) -> Any:
    """The user's candidate as a registry ``Implementation`` (any op: the contract is the op's). Executes the file:
    call it in a worker."""
    from infercrane.kernels.op import USER_KEY, Implementation

    loaded = load_candidate(ref, infer)
    return Implementation(
        key=USER_KEY,
        label=f"user candidate {ref.path.name}:{ref.function}",
        kind="candidate",
        in_place=loaded.in_place,
        source=ref.text,
        available=lambda: (True, ""),
        load=lambda spec: loaded.fn,
        notes=(f"in_place={loaded.in_place} declared by {loaded.declared_by}",),
        describe=lambda: {"file": str(ref.path), "function": ref.function, "sha256": loaded.sha256,
                          "in_place_declared_by": loaded.declared_by},
    )

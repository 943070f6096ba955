"""InferCrane's data files (recipes, workloads, policies): YAML mappings validated into pydantic models.

One place for: finding a shipped file by name or a user's file by path, reading it as a YAML mapping, and turning a
validation failure into one InputError that names the file and every bad field.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import InputError

M = TypeVar("M", bound=BaseModel)
NAME_RE = r"^[a-z0-9][a-z0-9._-]*$"


def find_file(name_or_path: str | Path, folder: Path, what: str) -> Path:
    """A path as given, or the shipped ``folder/<name>.yaml``; InputError listing the shipped names otherwise."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        shipped = folder / f"{text}.yaml"
        if not re.match(NAME_RE, text) or not shipped.exists():
            names = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
            raise InputError(f"no {what} named {text!r} and no such file",
                             hint=f"shipped {what}s: {names}; or give a path to a .yaml file")
        path = shipped
    if not path.is_file():
        raise InputError(f"{what} file {path} does not exist", hint="check the path")
    return path


def read_mapping(text: str, *, what: str, source: str) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"{what} file {source} is not valid YAML: {e}", hint="fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} {source}: expected a mapping of fields, got {type(data).__name__}")
    return data


def validate(model: type[M], data: dict[str, Any], *, what: str, source: str, hint: str) -> M:
    """``model.model_validate(data)``, or one InputError naming every bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            field = ".".join(str(p) for p in e["loc"]) or "(top level)"
            detail = "unknown key" if e["type"] == "extra_forbidden" else f"{e['msg']} (got {e.get('input')!r})"
            problems.append(f"field '{field}': {detail}")
        raise InputError(f"{what} {source} is invalid:\n  " + "\n  ".join(problems), hint=hint) from None


def load(model: type[M], name_or_path: str | Path, folder: Path, *, what: str, hint: str) -> M:
    path = find_file(name_or_path, folder, what)
    return validate(model, read_mapping(path.read_text(), what=what, source=str(path)), what=what,
                    source=str(path), hint=hint)

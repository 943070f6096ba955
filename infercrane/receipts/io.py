"""Reading, hashing and writing receipts.

Writing is atomic: the JSON goes to a temporary file in the destination folder, is flushed and fsynced, then renamed
over the destination (and the folder fsynced), so a reader sees the old file or the new one, never a torn one, even if
the process is killed mid-write.

The content hash (``infercrane/hashing.py``) is sha256 over the canonical JSON of the document without its
``content_sha256`` field.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..datafiles import RECEIPT, read_text
from ..errors import InputError
from ..hashing import HASH_FIELD, content_hash


def non_finite_paths(data: Any, path: str = "") -> list[str]:
    """Paths of NaN/inf numbers in a parsed JSON tree (JSON has no such numbers; Python's parser accepts them)."""
    if isinstance(data, float) and not math.isfinite(data):
        return [path or "<root>"]
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in non_finite_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in non_finite_paths(v, f"{path}[{i}]")]
    return []


MAX_JSON_DEPTH = 64  # receipts nest about a dozen levels; deeper is not a receipt


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _depth_exceeds(text: str, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than ``limit`` (checked before parsing, so a deep document
    cannot exhaust the parser's recursion)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _lone_surrogate(data: Any, path: str = "") -> str | None:
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            return path or "<root>"
        return None
    if isinstance(data, dict):
        for k, v in data.items():
            found = _lone_surrogate(k, f"{path}.{k}" if path else str(k)) or _lone_surrogate(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    if isinstance(data, list):
        for i, v in enumerate(data):
            found = _lone_surrogate(v, f"{path}[{i}]")
            if found:
                return found
    return None


def read_json(path: Path) -> dict[str, Any]:
    """Parse one receipt file into a dict, or raise InputError naming the file and what is wrong with it.

    Read through ``datafiles.read_text`` (a regular file of at most ``datafiles.RECEIPT.max_bytes``, bounded in
    time); then nested at most ``MAX_JSON_DEPTH`` deep, without duplicate keys or strings that are not Unicode (a
    lone surrogate)."""
    path = Path(path)
    text = read_text(path, RECEIPT)
    if not text.strip():
        raise InputError(f"{path}: empty file")
    if _depth_exceeds(text, MAX_JSON_DEPTH):
        raise InputError(f"{path}: nested more than {MAX_JSON_DEPTH} levels deep; not a receipt")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno} (truncated file?)") from None
    except ValueError as e:  # a duplicate key
        raise InputError(f"{path}: {e}: a receipt names each field once") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: <root>: a receipt is a JSON object, got {type(data).__name__}")
    bad = _lone_surrogate(data)
    if bad:
        raise InputError(f"{path}: {bad}: a string that is not Unicode text (a lone surrogate)")
    return data


def dump_document(model: BaseModel, *, hashed: bool) -> dict[str, Any]:
    """The JSON document for a model; with ``hashed``, its ``content_sha256`` filled in."""
    doc = model.model_dump(mode="json", exclude_none=False)
    if hashed:
        doc[HASH_FIELD] = content_hash(doc)
    return doc


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, document: dict[str, Any]) -> Path:
    return write_atomic_bytes(path, (json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode())


def write_atomic_bytes(path: Path, payload: bytes) -> Path:
    """Write ``payload`` to ``path`` atomically: a temporary file beside it, fsync, rename, fsync of the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _umask_mode())  # mkstemp makes 0600; a receipt is read by others like any file written here
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path

"""Reading, hashing and writing receipts.

Writing is atomic: the JSON goes to a temporary file in the destination folder, is flushed and fsynced, then renamed
over the destination (and the folder fsynced), so a reader sees the old file or the new one, never a torn one, even if
the process is killed mid-write.

The content hash is sha256 over the canonical JSON (sorted keys, no whitespace, UTF-8) of the document without its
``content_sha256`` field.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import InputError

HASH_FIELD = "content_sha256"


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def content_hash(document: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json({k: v for k, v in document.items() if k != HASH_FIELD})).hexdigest()


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(config)).hexdigest()


def non_finite_paths(data: Any, path: str = "") -> list[str]:
    """Paths of NaN/inf numbers in a parsed JSON tree (JSON has no such numbers; Python's parser accepts them)."""
    if isinstance(data, float) and not math.isfinite(data):
        return [path or "<root>"]
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in non_finite_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in non_finite_paths(v, f"{path}[{i}]")]
    return []


def read_json(path: Path) -> dict[str, Any]:
    """Parse one receipt file into a dict, or raise InputError naming the file and what is wrong with it."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a receipt file", hint="pass the JSON files inside it")
    text = path.read_bytes()
    if not text.strip():
        raise InputError(f"{path}: empty file")
    try:
        data = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno} (truncated file?)") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: <root>: a receipt is a JSON object, got {type(data).__name__}")
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

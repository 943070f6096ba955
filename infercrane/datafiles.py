"""InferCrane's data files: every file a user names is read here, bounded; recipes, workloads, policies and PoC
configs are YAML mappings validated into pydantic models.

One place for: reading a file a user names (``read_bytes`` / ``read_text``, with the limits of ``FileKind``),
finding a shipped file by name or a user's file by path, reading it as a YAML mapping, and turning a validation
failure into one InputError that names the file and every bad field.

**How a file is read.** It is opened without blocking (``O_NONBLOCK``: the open of a FIFO with no writer returns at
once instead of waiting for one), and the opened descriptor is ``fstat``'ed: anything but a regular file (a FIFO,
a socket, a device such as ``/dev/zero``, a directory) is refused before a byte is read, and so is a size above the
kind's limit (a sparse file of 10 GB is refused by its size, unread). The read then takes at most limit + 1 bytes,
so a file that grows while it is read, or whose size says less than it holds (``/proc``), cannot exhaust memory.
The open, the check and the read run in a thread that the caller waits on for at most ``READ_TIME_LIMIT_S``: a file
on a filesystem that hangs (a stalled network mount) is one error, not a wait without end; the reading thread also
stops between chunks once the time is up. Every refusal is one InputError line naming the path and what is wrong.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import InputError

M = TypeVar("M", bound=BaseModel)
NAME_RE = r"^[a-z0-9][a-z0-9._-]*$"

KiB, MiB = 1024, 1024 * 1024
READ_TIME_LIMIT_S = 60.0  # a receipt of the largest size reads in about a second from a local disk
_CHUNK_BYTES = 1 * MiB


@dataclass(frozen=True)
class FileKind:
    """A kind of file InferCrane reads: what messages call it, the most bytes it may have, and what to do when the
    path is missing or a directory."""

    what: str
    max_bytes: int
    missing_hint: str | None = None
    directory_hint: str | None = None


# Every limit on a file InferCrane reads, declared once.
RECEIPT = FileKind("receipt", 64 * MiB, directory_hint="pass the JSON files inside it")  # its own are a few MiB
ENVELOPE = FileKind("signature envelope", 4 * -(-RECEIPT.max_bytes // 3) + 1 * MiB,  # base64 of a receipt + signatures
                    missing_hint="sign the receipt with `infercrane receipt sign`")
KEY = FileKind("key", 64 * KiB, missing_hint="make a key pair with `infercrane receipt keygen`")  # a PEM key: < 1 KiB
_YAML_HINT = "give the path of a .yaml file"
RECIPE = FileKind("recipe", 1 * MiB,
                  missing_hint="check the path, or name a shipped recipe (`infercrane serve recipes`)",
                  directory_hint=f"{_YAML_HINT}, or a shipped recipe's name (`infercrane serve recipes`)")
WORKLOAD = FileKind("workload", 1 * MiB,
                    missing_hint="check the path, or name a shipped workload (`infercrane serve recipes`)",
                    directory_hint=f"{_YAML_HINT}, or a shipped workload's name (`infercrane serve recipes`)")
POC_CONFIG = FileKind("PoC config", 1 * MiB, missing_hint="check the path, or name a shipped config",
                      directory_hint=f"{_YAML_HINT}, or a shipped config's name")
POLICY = FileKind("policy", 1 * MiB, missing_hint="check the path", directory_hint=_YAML_HINT)
TRACE = FileKind("trace", 256 * MiB, missing_hint="check the path",  # a million requests: ~80 MB of JSONL
                 directory_hint="give the path of a .jsonl trace")
TRACE_SPEC = FileKind("trace spec", 1 * MiB, missing_hint="check the path", directory_hint=_YAML_HINT)
GATE_RULES = FileKind("gate rules", 1 * MiB, missing_hint="check the path, or name shipped rules (docs/gate.md)",
                      directory_hint=f"{_YAML_HINT}, or shipped rules' name")
CANDIDATE = FileKind("candidate kernel file", 4 * MiB, missing_hint="check the PATH part of PATH.py:FUNCTION")
MODEL_CONFIG = FileKind("model config", 16 * MiB)  # a Hugging Face config.json (a few KiB) or a stand-in's marker
# A file an option names, shipped by content to an executor's job: at most the largest kind an option takes.
OPTION_FILE = FileKind("file", max(RECEIPT.max_bytes, POLICY.max_bytes, KEY.max_bytes, CANDIDATE.max_bytes))

# Where InferCrane keeps what it can make again (vLLM's compile caches per kernel set, converted models, fetched
# packages), declared once.
CACHE_ROOT = "~/.cache/infercrane"


def cache_dir(*parts: str) -> Path:
    """A folder under InferCrane's cache (``CACHE_ROOT``, the user's home expanded); not created here."""
    return Path(CACHE_ROOT).expanduser().joinpath(*parts)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.4g} {unit} ({n} bytes)" if n % scale else f"{n // scale} {unit}"
    return f"{n} bytes"


def _not_regular(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


def _check_type(path: Path, kind: FileKind, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise InputError(f"{path}: is a directory, not a {kind.what} file", hint=kind.directory_hint)
    if not stat.S_ISREG(mode):
        raise InputError(f"{path}: is {_not_regular(mode)}, not a regular file; a {kind.what} is read from a regular "
                         "file")


def _read(path: Path, kind: FileKind, deadline: float) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise InputError(f"{path}: no such file", hint=kind.missing_hint) from None
        try:  # a socket cannot be opened at all (ENXIO): say what it is rather than the errno
            _check_type(path, kind, os.stat(path).st_mode)
        except OSError:
            pass
        raise InputError(f"{path}: cannot be read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        _check_type(path, kind, st.st_mode)
        if st.st_size > kind.max_bytes:
            raise InputError(f"{path}: {_size(st.st_size)}, more than the {_size(kind.max_bytes)} a {kind.what} may "
                             "have")
        chunks, total = [], 0
        while total <= kind.max_bytes:
            if time.monotonic() > deadline:
                raise InputError(f"{path}: not read within {READ_TIME_LIMIT_S:g} s")
            try:
                chunk = os.read(fd, min(_CHUNK_BYTES, kind.max_bytes + 1 - total))
            except OSError as e:
                raise InputError(f"{path}: cannot be read ({e.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > kind.max_bytes:
            raise InputError(f"{path}: more than the {_size(kind.max_bytes)} a {kind.what} may have (it grew while "
                             "read, or its size is not what the filesystem says)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bytes(path: str | Path, kind: FileKind) -> bytes:
    """The bytes of the regular file at ``path``, bounded as the module docstring says; InputError otherwise."""
    path = Path(path)
    deadline = time.monotonic() + READ_TIME_LIMIT_S
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["data"] = _read(path, kind, deadline)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread as it is
            outcome["error"] = e

    reader = threading.Thread(target=work, name=f"infercrane-read {path}", daemon=True)
    reader.start()
    reader.join(READ_TIME_LIMIT_S)
    if reader.is_alive():  # the open or a read is stuck in the kernel: the thread is left to it, the caller is not
        raise InputError(f"{path}: not read within {READ_TIME_LIMIT_S:g} s (a filesystem that does not answer?)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["data"]


def read_text(path: str | Path, kind: FileKind) -> str:
    """``read_bytes`` decoded as UTF-8; InputError naming the first bad byte otherwise."""
    raw = read_bytes(path, kind)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def find_file(name_or_path: str | Path, folder: Path, kind: FileKind) -> Path:
    """A path as given, or the shipped ``folder/<name>.yaml``; InputError listing the shipped names otherwise. What
    is at the path is ``read_text``'s to judge (no such file, a directory, a FIFO…)."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if not (path.suffix in (".yaml", ".yml") or os.path.lexists(path)):
        shipped = folder / f"{text}.yaml"
        if not re.match(NAME_RE, text) or not shipped.exists():
            names = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
            raise InputError(f"no {kind.what} named {text!r} and no such file",
                             hint=f"shipped {kind.what}s: {names}; or give a path to a .yaml file")
        path = shipped
    return path


def read_mapping(text: str, *, what: str, source: str) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:  # PyYAML's message runs over several lines: one here
        raise InputError(f"{what} file {source} is not valid YAML: {' '.join(str(e).split())}",
                         hint="fix the YAML syntax") from None
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


def load(model: type[M], name_or_path: str | Path, folder: Path, *, kind: FileKind, hint: str) -> M:
    """A shipped file by name or a user's YAML file, read bounded and validated into ``model``."""
    path = find_file(name_or_path, folder, kind)
    return validate(model, read_mapping(read_text(path, kind), what=kind.what, source=str(path)), what=kind.what,
                    source=str(path), hint=hint)

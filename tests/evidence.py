"""Committed evidence packed in an archive under ``docs/benchmarks``, as a file the tests can open.

``archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/rms_norm.json")`` names a member the way a README cites it
(relative to ``docs/benchmarks``) and returns the path of that member extracted under this process's temporary
folder, under its own name: ``/tmp/evidence-…/2026-12-01-h200-kernel-two-ops/receipts/rms_norm.json`` (kept short: a
command's output that names the file must fit the width a test sets, as the committed path did). Without a member
(``"….tar.xz"``) the whole archive is extracted and its folder returned. Each member is extracted once per process
(a module-level path is then free); the folder is removed when the process ends. A test must not change the files it
gets: copy one to edit it.
"""
from __future__ import annotations

import atexit
import functools
import shutil
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "docs" / "benchmarks"
ARCHIVES = (".tar.xz", ".tar.gz", ".tgz")


@functools.cache
def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="evidence-"))
    atexit.register(shutil.rmtree, root, True)
    return root


def _split(where: str) -> tuple[Path, str]:
    parts = Path(where).parts
    for k, part in enumerate(parts):
        if part.endswith(ARCHIVES):
            return BENCHMARKS.joinpath(*parts[:k + 1]), "/".join(parts[k + 1:])
    raise ValueError(f"{where}: names no archive (…/NAME.tar.xz/MEMBER)")


@functools.cache
def archived(where: str) -> Path:
    """The member ``where`` (``FOLDER/ARCHIVE.tar.xz/MEMBER``, relative to ``docs/benchmarks``) as a file, or with no
    member the archive extracted whole, as a folder."""
    archive, member = _split(where)
    if not archive.is_file():
        raise FileNotFoundError(f"no committed archive {archive}")
    folder = _root() / archive.parent.relative_to(BENCHMARKS) / archive.name.removesuffix(
        next(ext for ext in ARCHIVES if archive.name.endswith(ext)))
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        if not member:
            tar.extractall(folder, filter="data")
            return folder
        for info in tar:
            if info.isfile() and info.name.removeprefix("./") == member:
                data = tar.extractfile(info)
                assert data is not None
                out = folder / member
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data.read())
                return out
    raise FileNotFoundError(f"{archive.name} has no member {member}")

"""Model folders written atomically: built in a temporary folder beside the target, then renamed into place, so a
reader never sees a half-written folder and a failure leaves nothing under the target's name."""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any


def read_marker_json(folder: Path | str, name: str, what: str, hint: str) -> tuple[Path, Any] | None:
    """``(path, parsed JSON)`` of the marker file ``name`` of a model folder (or the marker file itself given as
    ``folder``); None when there is none. A marker that is there but is not JSON is an InputError naming ``what``
    (``stand-in``, ``real-model``) with ``hint``: a receipt must not report a folder it cannot read."""
    import json

    from infercrane.datafiles import MODEL_CONFIG, read_text
    from infercrane.errors import InputError

    path = Path(folder)
    marker_path = path if path.name == name else path / name
    if not marker_path.is_file():
        return None
    try:
        return marker_path, json.loads(read_text(marker_path, MODEL_CONFIG))
    except json.JSONDecodeError as e:
        raise InputError(f"{what} marker {marker_path} is unreadable: {e}", hint=hint) from None


def temp_dir_beside(out_dir: Path) -> Path:
    """A new, empty, world-readable folder beside ``out_dir`` (``.NAME.XXXX.tmp``), for building it."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is meant to be shared
    return tmp


def replace_dir(tmp: Path, out_dir: Path) -> None:
    """Move the finished ``tmp`` to ``out_dir``; an existing ``out_dir`` is swapped out first and deleted last."""
    if not out_dir.exists():
        os.replace(tmp, out_dir)
        return
    if not any(out_dir.iterdir()):
        out_dir.rmdir()
        os.replace(tmp, out_dir)
        return
    old = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex}.old")
    os.replace(out_dir, old)
    try:
        os.replace(tmp, out_dir)
    except BaseException:
        os.replace(old, out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)


def hub_cache_repo_dir(cache: Path, model_id: str) -> Path:
    """A model's entry in a Hugging Face hub cache: ``CACHE/models--ORG--NAME``."""
    return cache / ("models--" + model_id.replace("/", "--"))


def write_hub_cache_entry(cache: Path, model_id: str, revision: str, files: dict[str, bytes]) -> Path:
    """Lay ``files`` out in ``cache`` as huggingface_hub does (``models--ORG--NAME/{refs/main, snapshots/REV/}``), so
    that a tool resolving ``model_id`` offline (``snapshot_download(local_files_only=True)``) finds them; returns the
    snapshot folder. ``cache`` is written whole, atomically (``temp_dir_beside``, ``replace_dir``)."""
    tmp = temp_dir_beside(cache)
    try:
        snapshot = hub_cache_repo_dir(tmp, model_id) / "snapshots" / revision
        snapshot.mkdir(parents=True)
        for name, data in files.items():
            (snapshot / name).write_bytes(data)
        refs = snapshot.parent.parent / "refs"
        refs.mkdir()
        (refs / "main").write_text(revision, encoding="ascii")  # as huggingface_hub writes it: no newline
        replace_dir(tmp, cache)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return hub_cache_repo_dir(cache, model_id) / "snapshots" / revision

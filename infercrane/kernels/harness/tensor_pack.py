"""Named tensors in one file that two processes map: how inputs reach a worker and its outputs come back to the checker.

The parent creates the file (``TensorPack.create``), writes the inputs and sends the worker the layout
(``to_json``); the worker maps the same file (``TensorPack.open``) with ``torch.from_file(..., shared=True)``, copies
the inputs to its device and writes back what it computed. Nothing the worker says about its outputs is trusted: the
parent reads the bytes. The file lives in ``/dev/shm`` when that has room, else in the temporary directory
(``INFERCRANE_SHM_DIR`` overrides both), and is removed by ``close``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

ALIGN = 64


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    import torch

    n = 1
    for s in shape:
        n *= int(s)
    return n * torch.empty((), dtype=_dtype(dtype)).element_size()


def _folder(size: int) -> str:
    wanted = os.environ.get("INFERCRANE_SHM_DIR")
    if wanted:
        return wanted
    shm = "/dev/shm"
    try:
        if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * size:
            return shm
    except OSError:
        pass
    return tempfile.gettempdir()


class TensorPack:
    """A file holding named tensors at fixed offsets; ``tensor(name)`` is a view on the shared mapping."""

    def __init__(self, path: str, layout: dict[str, tuple[int, list[int], str]], size: int, owner: bool) -> None:
        import torch

        self.path = path
        self.layout = layout
        self.size = size
        self.owner = owner
        self._raw = torch.from_file(path, shared=True, size=max(size, 1), dtype=torch.uint8)

    @classmethod
    def create(cls, entries: dict[str, tuple[tuple[int, ...], str]]) -> "TensorPack":
        """A new pack with room for ``entries`` (name -> (shape, torch dtype name)), all bytes zero."""
        layout: dict[str, tuple[int, list[int], str]] = {}
        offset = 0
        for name, (shape, dtype) in entries.items():
            layout[name] = (offset, [int(s) for s in shape], dtype)
            offset += (_nbytes(tuple(shape), dtype) + ALIGN - 1) // ALIGN * ALIGN
        fd, path = tempfile.mkstemp(prefix="infercrane-pack-", suffix=".bin", dir=_folder(offset))
        try:
            os.ftruncate(fd, max(offset, 1))
        finally:
            os.close(fd)
        return cls(path, layout, offset, owner=True)

    @classmethod
    def open(cls, data: dict[str, Any]) -> "TensorPack":
        layout = {k: (int(v[0]), [int(s) for s in v[1]], str(v[2])) for k, v in data["layout"].items()}
        return cls(str(data["path"]), layout, int(data["size"]), owner=False)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "layout": {k: list(v) for k, v in self.layout.items()}}

    def __contains__(self, name: str) -> bool:
        return name in self.layout

    def tensor(self, name: str) -> Any:
        offset, shape, dtype = self.layout[name]
        n = _nbytes(tuple(shape), dtype)
        return self._raw[offset:offset + n].view(_dtype(dtype)).view(shape)

    def close(self) -> None:
        self._raw = None
        if self.owner:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

"""What a provider did inside one engine process, written where InferCrane reads it (``ENV_STATS``).

Each vLLM process that registers a provider keeps one ``ProviderStats`` per provider and writes it to
``<ENV_STATS>/<provider>-<vllm op>-<pid>.json`` (whole file, atomically): at registration, at the first call of every
shape, after every gate check, at each power-of-two call count, and at exit. So the record on disk is never more
than a factor of two behind the calls, and costs O(log calls) writes.

Calls are Python-level: a call replayed from a CUDA graph does not run Python and is not counted; a call made while
a graph was being captured is counted in ``calls_captured`` (the kernel is then in that graph, and runs at every
replay). Declines are ``supports_args`` answering no (vLLM then takes the next provider), by reason; under
torch.compile vLLM asks once per graph node at compile time, in eager mode at every call.
"""
from __future__ import annotations

import atexit
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Hashable

MAX_CHECKED_SHAPES = 64  # the in-engine gate checks the first call of at most this many shapes
RAISED = "the kernel raised"  # how an error in a record says the kernel raised (serving.kernels: stage "raised")


class ProviderStats:
    def __init__(self, folder: str | None, *, provider: str, vllm_op: str, impl: str, source_sha256: str,
                 detail: dict[str, Any] | None = None) -> None:
        self.path = (Path(folder) / f"{provider}-{vllm_op}-{os.getpid()}.json") if folder else None
        self.lock = threading.Lock()
        self._shape_of: dict[Hashable, str] = {}
        self.doc: dict[str, Any] = {
            "provider": provider, "vllm_op": vllm_op, "impl": impl, "source_sha256": source_sha256,
            "pid": os.getpid(), "registered_at": time.time(), "detail": dict(detail or {}),
            "calls": 0, "calls_captured": 0, "calls_by_shape": {}, "declined": {}, "checks": [], "errors": [],
        }
        self.write()
        atexit.register(self.write)

    def write(self) -> None:
        if self.path is None:
            return
        with self.lock:
            text = json.dumps(self.doc, sort_keys=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            os.replace(tmp, self.path)
        except OSError:  # a record that cannot be written must not take the engine down; InferCrane sees it missing
            pass

    def call(self, shape: str, captured: bool, key: Hashable | None = None) -> bool:
        """Count one call; True when this is the shape's first call (the caller then may check it). ``key``: the
        caller's own name for this input (its shape and dtype), under which ``count`` counts later calls."""
        with self.lock:
            d = self.doc
            d["calls"] += 1
            d["calls_captured"] += int(captured)
            first = shape not in d["calls_by_shape"]
            d["calls_by_shape"][shape] = d["calls_by_shape"].get(shape, 0) + 1
            n = d["calls"]
            if key is not None:
                self._shape_of[key] = shape
        if first or n & (n - 1) == 0:
            self.write()
        return first

    def count(self, key: Hashable, captured: bool) -> bool:
        """Count a call of an input met before under ``key`` (``call``) and say True; False, counting nothing, for a
        ``key`` not met yet (its first call goes through ``call``). The hot path: no lock and no string. Only the
        calling thread changes counts, and only by incrementing existing entries, so a concurrent ``write`` sees a
        consistent dict."""
        shape = self._shape_of.get(key)
        if shape is None:
            return False
        d = self.doc
        d["calls"] += 1
        if captured:
            d["calls_captured"] += 1
        d["calls_by_shape"][shape] += 1
        n = d["calls"]
        if n & (n - 1) == 0:
            self.write()
        return True

    def declined(self, reason: str) -> None:
        with self.lock:
            self.doc["declined"][reason] = self.doc["declined"].get(reason, 0) + 1
            n = self.doc["declined"][reason]
        if n & (n - 1) == 0:
            self.write()

    def checked(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.doc["checks"].append(record)
        self.write()

    def checks_made(self) -> int:
        with self.lock:
            return len(self.doc["checks"])

    def error(self, text: str) -> None:
        with self.lock:
            self.doc["errors"].append(text[:2000])
        self.write()


def read_stats(folder: str | Path) -> list[dict[str, Any]]:
    """Every record in ``folder`` (unreadable ones as ``{"unreadable": path}``), in file-name order."""
    out: list[dict[str, Any]] = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            out.append({"unreadable": str(path)})
    return out

"""Canonical JSON and the content hashes InferCrane records (a leaf: anything may import it).

The canonical JSON of a value: sorted keys, no whitespace, UTF-8, no NaN or infinity. A document's content hash is the
sha256 of the canonical JSON of the document without its ``content_sha256`` field (``HASH_FIELD``); a configuration's
hash is the sha256 of its canonical JSON.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

HASH_FIELD = "content_sha256"


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def content_hash(document: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json({k: v for k, v in document.items() if k != HASH_FIELD})).hexdigest()


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(config)).hexdigest()

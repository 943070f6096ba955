"""Editing a receipt in a test: the edited document re-hashed (so only the edit can fail it), and the problems
validation finds in it."""
from __future__ import annotations

from infercrane.hashing import HASH_FIELD, content_hash
from infercrane.receipts.validate import check_document


def rehashed(doc: dict) -> dict:
    doc = {k: v for k, v in doc.items() if k != HASH_FIELD}
    return doc | {HASH_FIELD: content_hash(doc)}


def problems(doc: dict) -> list[tuple[str, str]]:
    """(field path, message) of each problem validation finds in ``doc`` once re-hashed; it must still parse."""
    model, found = check_document(rehashed(doc))
    assert model is not None, found
    return found

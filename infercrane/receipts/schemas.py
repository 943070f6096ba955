"""JSON Schemas generated from the receipt models (the repo's ``schemas/`` folder holds one file per version)."""
from __future__ import annotations

from typing import Any

from .registry import model_for


def schema_filename(version: str) -> str:
    return version.replace("/", ".") + ".schema.json"


def json_schema(version: str) -> dict[str, Any]:
    s = model_for(version).model_json_schema(mode="validation")
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["$id"] = f"https://infercrane.dev/schemas/{schema_filename(version)}"
    return s

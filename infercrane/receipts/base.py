"""Shared pieces of every receipt model: strictness, finite numbers, time-zone-aware timestamps."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class Strict(BaseModel):
    """Persisted models reject unknown keys and non-finite numbers; field order is the document's order."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)


def _tz_aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp must carry a time zone offset (e.g. 2026-12-01T10:00:00+00:00)")
    return value


AwareDatetime = Annotated[datetime, AfterValidator(_tz_aware)]


def _nonempty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


NonEmptyStr = Annotated[str, AfterValidator(_nonempty)]

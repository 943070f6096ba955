"""Seed receipts validate and round-trip; edited copies are rejected with the field named."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercrane.errors import InputError, ReceiptInvalid
from infercrane.receipts.registry import MODELS
from infercrane.receipts.validate import check_document, load_receipt


def _edit(src: Path, tmp_path: Path, fn) -> Path:
    doc = json.loads(src.read_text())
    fn(doc)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(doc, indent=2))
    return out


def _problems(path: Path) -> list[tuple[str, str, str]]:
    with pytest.raises(ReceiptInvalid) as e:
        load_receipt(path)
    return e.value.problems


@pytest.mark.parametrize("fixture", ["seed_poc", "seed_screening"])
def test_seed_validates_and_round_trips(fixture: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    r = load_receipt(path)
    raw = json.loads(path.read_text())
    assert r.model.model_dump(mode="json", exclude_unset=True) == raw
    assert r.schema_version == raw["schema_version"]


def test_changed_custom_ms_is_caught_with_both_values(seed_poc: Path, tmp_path: Path) -> None:
    def edit(d):
        d["custom_kernel"]["h100"]["measurements"][2]["custom_ms"] = 0.005
    problems = _problems(_edit(seed_poc, tmp_path, edit))
    assert len(problems) == 1
    _, path, reason = problems[0]
    assert path == "custom_kernel.h100.measurements[2].speedup_vs_vllm"
    assert "1.0819" in reason and "1.2782" in reason  # stated value and 0.006391 / 0.005


def test_changed_cuda_ms_in_screening_seed(seed_screening: Path, tmp_path: Path) -> None:
    def edit(d):
        d["measurements"][0]["cuda_ms"] = 0.0060
    paths = {p for _, p, _ in _problems(_edit(seed_screening, tmp_path, edit))}
    assert paths == {"measurements[0].speedup_vs_triton", "measurements[0].speedup_vs_vllm_vendor"}


def test_changed_percent_is_caught(seed_poc: Path, tmp_path: Path) -> None:
    def edit(d):
        d["paired_aiperf"]["compiled_vs_eager"][1]["ttft_p95_reduction_percent"] = 40.0
    [(_, path, reason)] = _problems(_edit(seed_poc, tmp_path, edit))
    assert path == "paired_aiperf.compiled_vs_eager[1].ttft_p95_reduction_percent"
    assert "40.0" in reason and "45.26" in reason


def test_removed_decision(seed_screening: Path, tmp_path: Path) -> None:
    [(_, path, reason)] = _problems(_edit(seed_screening, tmp_path, lambda d: d.pop("decision")))
    assert path == "decision" and "missing" in reason


def test_extra_key(seed_poc: Path, tmp_path: Path) -> None:
    def edit(d):
        d["paired_aiperf"]["workload"]["temperature"] = 0.7
    [(_, path, reason)] = _problems(_edit(seed_poc, tmp_path, edit))
    assert path == "paired_aiperf.workload.temperature" and "unknown field" in reason


def test_unknown_schema_version(seed_poc: Path, tmp_path: Path) -> None:
    def edit(d):
        d["schema_version"] = "infercrane.optimization-poc-receipt-x/v1"
    [(_, path, reason)] = _problems(_edit(seed_poc, tmp_path, edit))
    assert path == "schema_version" and "receipt-x/v1" in reason and "known:" in reason


def test_wrong_type_and_nan(seed_screening: Path, tmp_path: Path) -> None:
    def edit(d):
        d["measurements"][1]["rows"] = "eight"
    [(_, path, reason)] = _problems(_edit(seed_screening, tmp_path, edit))
    assert path == "measurements[1].rows"
    text = seed_screening.read_text().replace('"cuda_ms": 0.0063238095', '"cuda_ms": NaN')
    nan = tmp_path / "nan.json"
    nan.write_text(text)
    [(_, path, reason)] = _problems(nan)
    assert path == "measurements[0].cuda_ms" and "NaN" in reason


def test_missing_timezone(seed_screening: Path, tmp_path: Path) -> None:
    def edit(d):
        d["recorded_at"] = "2026-09-20T00:00:00"
    [(_, path, reason)] = _problems(_edit(seed_screening, tmp_path, edit))
    assert path == "recorded_at" and "time zone" in reason


@pytest.mark.parametrize(
    "content, needle",
    [(None, "is a directory"), (b"", "empty file"), (b"[1, 2]", "JSON object"), (b"\xff\xfe", "UTF-8")],
)
def test_bad_files(tmp_path: Path, content: bytes | None, needle: str) -> None:
    path = tmp_path / "r.json"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(InputError) as e:
        load_receipt(path)
    assert str(path) in str(e.value) and needle in str(e.value)


def test_truncated_file(seed_poc: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_bytes(seed_poc.read_bytes()[:1000])
    with pytest.raises(InputError) as e:
        load_receipt(path)
    assert "not valid JSON" in str(e.value) and str(path) in str(e.value)


def test_every_known_version_has_rules() -> None:
    for version in MODELS:
        model, problems = check_document({"schema_version": version})
        assert model is None and problems  # a bare document fails on the missing fields, naming them
        assert all(p for p, _ in problems)

"""Two GPUs of one type in one merged receipt: receipts that record different devices (``hardware.gpu_uuid``) are
filed as ``h200`` and ``h200__2``; one device twice, or a receipt that does not say which device it ran on beside
another of its type, is refused in one line; a merged receipt whose sections of one type share a device, or sit
under another type's key, does not validate."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from builders import on_device, poc_of, rehash
from infercrane.cli import main
from infercrane.receipts.validate import check_document, load_receipt

GPU_A, GPU_B = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _merge(capsys, *paths: Path, out: Path) -> tuple[int, list[str]]:
    rc = main(["receipt", "merge", *map(str, paths), "--out", str(out)])
    return rc, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_two_devices_of_one_type_are_filed_as_h200_and_h200_2(h200_docs, tmp_path, capsys):
    a = _write(tmp_path / "a.json", on_device(h200_docs["kernel"], GPU_A, 0))
    b = _write(tmp_path / "b.json", on_device(h200_docs["kernel"], GPU_B, 1))
    out = tmp_path / "m.json"
    assert _merge(capsys, a, b, out=out)[0] == 0
    doc = load_receipt(out).document
    assert set(doc["evidence"]["kernel"]) == {"h200", "h200__2"}
    assert doc["evidence"]["kernel"]["h200"]["hardware"]["gpu_uuid"] == GPU_A
    assert doc["evidence"]["kernel"]["h200__2"]["hardware"]["gpu_uuid"] == GPU_B
    assert set(doc["custom_kernel"]) >= {"h200", "h200__2"}
    assert doc["custom_kernel"]["h200"]["decision"] == doc["custom_kernel"]["h200__2"]["decision"]


def test_two_pocs_on_two_devices_keep_every_section_per_device(h200_docs, tmp_path, capsys):
    pa = poc_of({s: on_device(d, GPU_A, 0) for s, d in h200_docs.items()})
    pb = poc_of({s: on_device(d, GPU_B, 1) for s, d in h200_docs.items()})
    out = tmp_path / "m.json"
    assert _merge(capsys, _write(tmp_path / "a.json", pa), _write(tmp_path / "b.json", pb), out=out)[0] == 0
    doc = load_receipt(out).document
    for section in ("kernel", "paired", "public"):
        assert set(doc["evidence"][section]) == {"h200", "h200__2"}, section
        assert doc["evidence"][section]["h200__2"]["provenance"]["hardware"]["gpu_uuid"] == GPU_B
    # each device's kernel is decided with that device's paired A/B
    steps = doc["evidence"]["kernel"]["h200__2"]["decode_steps"]
    paired_b = doc["evidence"]["paired"]["h200__2"]["content_sha256"]
    assert paired_b != doc["evidence"]["paired"]["h200"]["content_sha256"]
    assert steps and all(f"paired A/B receipt {paired_b[:16]}" in s["source"] for s in steps)


def test_one_device_twice_is_refused_naming_it(h200_docs, tmp_path, capsys):
    a = _write(tmp_path / "a.json", on_device(h200_docs["kernel"], GPU_A))
    again = on_device(h200_docs["kernel"], GPU_A)  # another receipt of that device (one receipt twice: test_merge.py)
    again["app_id"] = again["provenance"]["run_id"] = "another-run"
    b = _write(tmp_path / "b.json", rehash(again))
    rc, lines = _merge(capsys, a, b, out=tmp_path / "m.json")
    assert rc == 2
    assert f"both hold a kernel section measured on h200 (device {GPU_A})" in lines[0] and str(a) in lines[0]
    assert any("kernel agree A B" in line for line in lines)
    assert not (tmp_path / "m.json").exists()


def test_a_receipt_without_its_device_beside_another_of_its_type_is_refused(h200_docs, tmp_path, capsys):
    a = _write(tmp_path / "a.json", on_device(h200_docs["kernel"], GPU_A))
    b = _write(tmp_path / "b.json", h200_docs["kernel"])  # measured before devices were recorded
    rc, lines = _merge(capsys, a, b, out=tmp_path / "m.json")
    assert rc == 2
    assert "does not say which device it ran on (hardware.gpu_uuid)" in lines[0]
    assert str(a) in lines[0] and str(b) in lines[0]


def _merged(h200_docs, tmp_path, capsys) -> dict:
    a = _write(tmp_path / "a.json", on_device(h200_docs["kernel"], GPU_A))
    b = _write(tmp_path / "b.json", on_device(h200_docs["kernel"], GPU_B))
    assert _merge(capsys, a, b, out=tmp_path / "m.json")[0] == 0
    return load_receipt(tmp_path / "m.json").document


def test_sections_of_one_type_on_one_device_do_not_validate(h200_docs, tmp_path, capsys):
    doc = copy.deepcopy(_merged(h200_docs, tmp_path, capsys))
    second = doc["evidence"]["kernel"]["h200__2"]
    for hw in (second["hardware"], second["provenance"]["hardware"]):
        hw["gpu_uuid"] = GPU_A
    doc["evidence"]["kernel"]["h200__2"] = rehash(second)
    problems = check_document(rehash(doc))[1]
    assert ("evidence.kernel", "its h200 sections h200, h200__2 were measured on 1 device(s): one section per GPU") \
        in problems


def test_an_instance_key_of_another_type_does_not_validate(h200_docs, tmp_path, capsys):
    doc = copy.deepcopy(_merged(h200_docs, tmp_path, capsys))
    doc["evidence"]["kernel"]["h100__2"] = doc["evidence"]["kernel"].pop("h200__2")
    problems = check_document(rehash(doc))[1]
    assert ("evidence.kernel.h100__2", "is filed under GPU type 'h100' but was measured on 'h200'") in problems

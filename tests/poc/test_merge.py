"""`receipt merge` joins PoC receipts of two GPU types into one receipt with a kernel section per GPU, recording its
inputs, and validating like any PoC receipt; it refuses, in one line, receipts of different models or policies and
two receipts of one GPU type for the same section."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from builders import H100, rehash, relabel
from infercrane.cli import main
from infercrane.receipts.validate import check_document, load_receipt


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_two_gpu_types_merge_into_one_receipt_that_validates(h200_poc, tmp_path, capsys):
    h100 = relabel(h200_poc, H100)
    assert check_document(h100)[1] == []
    a, b = _write(tmp_path / "h200.json", h200_poc), _write(tmp_path / "h100.json", h100)
    out = tmp_path / "merged.json"
    assert main(["receipt", "merge", str(a), str(b), "--out", str(out)]) == 0
    doc = load_receipt(out).document  # validates: each GPU's section derived again from its evidence
    ck = doc["custom_kernel"]
    assert {"h100", "h200"} <= set(ck) and ck["h100"]["gpu"] == H100 and ck["h200"]["gpu"] == "NVIDIA H200"
    assert sorted(doc["evidence"]["kernel"]) == ["h100", "h200"]
    assert [m["receipt"] for m in doc["merged_from"]] == [str(a), str(b)]
    assert [m["content_sha256"] for m in doc["merged_from"]] == [h200_poc["content_sha256"], h100["content_sha256"]]
    # the first input's serving sections are the receipt's paired and public blocks
    assert doc["evidence"]["serving_gpu"] == "h200" and doc["paired_aiperf"]["gpu"] == "NVIDIA H200"
    assert doc["complete"] is True
    # each GPU's kernel decision rests on its own GPU's paired A/B
    for g in ("h100", "h200"):
        paired_sha = doc["evidence"]["paired"][g]["content_sha256"]
        assert all(paired_sha[:16] in s["source"] for s in doc["evidence"]["kernel"][g]["decode_steps"])
    edited = copy.deepcopy(doc)
    edited["custom_kernel"]["h100"]["decision"] = "accept on H100"
    assert any(p.startswith("custom_kernel.h100.decision") for p, _ in check_document(rehash(edited))[1])


def test_a_kernel_receipt_joins_a_poc_receipt(h200_docs, h200_poc, tmp_path):
    """A kernel screen from another GPU type (no serving evidence there) adds its section as it was decided."""
    kernel_h100 = relabel(h200_docs["kernel"], H100)
    a, b = _write(tmp_path / "poc.json", h200_poc), _write(tmp_path / "k.json", kernel_h100)
    out = tmp_path / "merged.json"
    assert main(["receipt", "merge", str(a), str(b), "--out", str(out)]) == 0
    doc = load_receipt(out).document
    assert doc["custom_kernel"]["h100"]["decision"] == kernel_h100["decision"]
    assert doc["evidence"]["kernel"]["h100"]["content_sha256"] == kernel_h100["content_sha256"]
    assert "decided per GPU type" in doc["custom_kernel"]["decision"] or \
        doc["custom_kernel"]["decision"] == kernel_h100["decision"]


def test_one_gpu_type_twice_is_refused(h200_poc, tmp_path, capsys):
    a, b = _write(tmp_path / "a.json", h200_poc), _write(tmp_path / "b.json", h200_poc)
    assert main(["receipt", "merge", str(a), str(b), "--out", str(tmp_path / "m.json")]) == 2
    [line] = _error_lines(capsys)
    assert "both hold a kernel section measured on h200" in line and str(a) in line and str(b) in line
    assert not (tmp_path / "m.json").exists()


def test_another_model_revision_is_refused(h200_docs, h200_poc, tmp_path, capsys):
    other = relabel(h200_docs["kernel"], H100)
    for block in (other["model_shape_source"], other["provenance"]["model"]):
        block["revision"] = "0" * 40
    other["result"]["spec"]["model_revision"] = "0" * 40
    other = rehash(other)
    assert check_document(other)[1] == []
    a, b = _write(tmp_path / "a.json", h200_poc), _write(tmp_path / "b.json", other)
    assert main(["receipt", "merge", str(a), str(b), "--out", str(tmp_path / "m.json")]) == 2
    [line] = _error_lines(capsys)
    assert "revision 0000" in line and "one model at one revision" in line


def test_another_policy_is_refused(h200_docs, h200_poc, tmp_path, capsys):
    """A kernel decided again under another policy (kernel decide --policy) is a different decision rule."""
    policy = tmp_path / "wide.yaml"
    policy.write_text("schema_version: infercrane.kernel-policy/v1\nsame_margin: 0.05\n")
    kfile = _write(tmp_path / "k100.json", relabel(h200_docs["kernel"], H100))
    decided = tmp_path / "k100-wide.json"
    assert main(["kernel", "decide", str(kfile), "--policy", str(policy), "--out", str(decided)]) == 0
    capsys.readouterr()
    a = _write(tmp_path / "a.json", h200_poc)
    assert main(["receipt", "merge", str(a), str(decided), "--out", str(tmp_path / "m.json")]) == 2
    [line] = _error_lines(capsys)
    assert "another kernel policy" in line and str(a) in line


def test_a_serving_receipt_alone_is_not_merged(h200_docs, h200_poc, tmp_path, capsys):
    a = _write(tmp_path / "a.json", h200_poc)
    b = _write(tmp_path / "serve.json", relabel(h200_docs["paired"], H100))
    assert main(["receipt", "merge", str(a), str(b), "--out", str(tmp_path / "m.json")]) == 2
    [line] = _error_lines(capsys)
    assert "of serve ab / serve bench" in line and "receipt merge joins PoC receipts" in line


def test_merged_kernels_alone_make_an_incomplete_receipt(h200_docs, tmp_path):
    a = _write(tmp_path / "k200.json", h200_docs["kernel"])
    b = _write(tmp_path / "k100.json", relabel(h200_docs["kernel"], H100))
    out = tmp_path / "m.json"
    assert main(["receipt", "merge", str(a), str(b), "--out", str(out)]) == 0
    doc = load_receipt(out).document
    assert doc["complete"] is False and "no paired, public section" in doc["incomplete_reason"]
    assert doc["custom_kernel"]["h100"]["decision"] == doc["custom_kernel"]["h200"]["decision"]
    assert doc["paired_aiperf"] is None and doc["policy"] == {}

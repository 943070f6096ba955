"""`receipt merge` joins PoC receipts of two GPU types into one receipt with a kernel section per GPU, recording its
inputs, and validating like any PoC receipt; it refuses, in one line, receipts of different models or policies and
two receipts of one GPU type for the same section."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from builders import H100, rehash, relabel
from evidence import archived

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
    other_run = copy.deepcopy(h200_poc)  # another receipt of the same GPU (the same receipt twice: test_same_as_itself)
    other_run["provenance"]["run_id"] = "poc-2"
    a, b = _write(tmp_path / "a.json", h200_poc), _write(tmp_path / "b.json", rehash(other_run))
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


# --- a thing merged with itself; parts of different evidence classes ------------------------------------------------

BENCH = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
TWO_OPS_RMS = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/rms_norm.json")
CPU_SCREENS = BENCH / "2026-12-06-layout-receipts-clean-ups" / "receipts.tar.xz"  # after/screen.json: rms_norm on a CPU


def test_the_same_receipt_twice_is_refused(h200_docs, tmp_path, capsys):
    a = _write(tmp_path / "k.json", h200_docs["kernel"])
    copy_of_a = _write(tmp_path / "copy.json", h200_docs["kernel"])
    for first, second, same in ((a, a, "the same file"), (a, copy_of_a, "the same receipt")):
        assert main(["receipt", "merge", str(first), str(second), "--out", str(tmp_path / "m.json")]) == 2
        [line] = _error_lines(capsys)
        assert line.startswith(f"infercrane: error: {first} and {second}: are {same} (content sha256 "
                               f"{h200_docs['kernel']['content_sha256'][:12]}") and "give each receipt once" in line
    assert not (tmp_path / "m.json").exists()


def test_a_timed_screen_and_a_cpu_check_merge_labelled_by_the_weakest_naming_each_part(tmp_path, capsys):
    """A screen timed on an H200 and a functional check on a CPU (the same op, model and policy): the merged receipt
    is a functional-check, and it says which part is which: evidence_parts, the boundary and the command's line."""
    import tarfile

    with tarfile.open(CPU_SCREENS) as tar:
        cpu = tmp_path / "cpu.json"
        cpu.write_bytes(tar.extractfile("after/screen.json").read())
    out = tmp_path / "m.json"
    assert main(["receipt", "merge", str(TWO_OPS_RMS), str(cpu), "--out", str(out)]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert line.endswith("; evidence functional-check, the weakest of its parts (kernel cpu: functional-check; "
                         "kernel h200: real-gpu-measurement)")
    doc = load_receipt(out).document
    assert doc["evidence_class"] == "functional-check"
    assert [(p["section"], p["gpu"], p["evidence_class"]) for p in doc["evidence_parts"]] == [
        ("kernel", "cpu", "functional-check"), ("kernel", "h200", "real-gpu-measurement")]
    assert doc["evidence_parts"][1]["basis"] == "kernel screen timed on NVIDIA H200"
    boundary = doc["qualification_boundary"]
    assert boundary.startswith("MIXED PoC, labelled functional-check by its weakest parts: functional check only, "
                               "claiming nothing about speed: kernel cpu (kernel screen without a GPU")
    assert "measured on a GPU: kernel h200 (kernel screen timed on NVIDIA H200)" in boundary
    assert {doc["custom_kernel"][g]["evidence_class"] for g in ("cpu", "h200")} == {"cpu-functional-check",
                                                                                     "real-gpu-microbenchmark"}
    # a part relabelled, or the whole labelled by the stronger part, does not validate
    relabelled = copy.deepcopy(doc)
    relabelled["evidence_parts"][0]["evidence_class"] = "real-gpu-measurement"
    assert any(p.startswith("evidence_parts[0].evidence_class") for p, _ in check_document(rehash(relabelled))[1])
    stronger = copy.deepcopy(doc)
    stronger["evidence_class"] = "real-gpu-measurement"
    assert any(p == "evidence_class" for p, _ in check_document(rehash(stronger))[1])


def test_a_poc_receipt_without_parts_is_compared_without_them(h200_poc):
    """A PoC receipt written before evidence_parts existed (the committed ones) makes no claim about them."""
    assert h200_poc["evidence_parts"] and check_document(h200_poc)[1] == []
    older = copy.deepcopy(h200_poc)
    del older["evidence_parts"]
    assert check_document(rehash(older))[1] == []

"""The H200 evidence of docs/benchmarks/2026-12-02-h200-kernel-decides/: its receipts (packed in evidence.tar.xz)
validate and re-decide as written under this InferCrane, and summary.txt is what the summary script reads from them."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from bench_scripts import load_script

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "2026-12-02-h200-kernel-decides"
EVIDENCE = FOLDER / "evidence.tar.xz"


def _receipts() -> dict[str, dict]:
    with tarfile.open(EVIDENCE) as tar:
        return {m.name: json.loads(tar.extractfile(m).read()) for m in tar.getmembers()
                if m.isfile() and m.name.endswith(".json")}


@pytest.mark.parametrize("name", ["fused_add_rmsnorm.json", "rms_norm.json"])
def test_each_packed_receipt_validates(name):
    from infercrane.receipts.validate import check_document

    doc = _receipts()[name]
    model, problems = check_document(doc)
    assert problems == [] and model is not None, problems[:5]
    assert doc["result"]["comparison_policy"]["flag_rule"] == "widen"
    assert doc["result"]["placement"]["graphs_per_trial"] == 4


def test_the_summary_is_what_the_script_reads_from_the_evidence():
    summary = load_script("kernel_decides_summary")
    lines = summary.summary(summary._files(EVIDENCE))
    assert (FOLDER / "summary.txt").read_text().splitlines() == lines


def test_the_report_says_what_each_candidates_decision_rests_on():
    from infercrane.report.kernel import kernel_sections, timing_basis

    doc = _receipts()["fused_add_rmsnorm.json"]
    [impls] = [s for s in kernel_sections(doc) if s.title == "Implementations"]
    assert impls.notes == [timing_basis(doc, "triton"), timing_basis(doc, "cuda")]
    assert impls.notes[0] == "triton: all 15 decision comparisons rest on clean timing"


LATEST = FOLDER.parent / "2026-12-03-h200-kernel-decides"


def _latest() -> dict[str, dict]:
    with tarfile.open(LATEST / "evidence-00a87fe.tar.xz") as tar:
        return {Path(m.name).name: json.loads(tar.extractfile(m).read()) for m in tar.getmembers()
                if m.isfile() and m.name.endswith(".json")}


@pytest.mark.parametrize("name", ["fused_add_rmsnorm.json", "rms_norm.json"])
def test_the_driver_event_screens_validate_and_hold_cold_cells_against_the_driver_pair(name):
    """The fourth H200 run (docs/benchmarks/2026-12-03-h200-kernel-decides/): cold cells held against the driver-API
    event pair with no offset, comparisons made under 'widen_ratio', and every decode-row cold comparison decided."""
    from infercrane.kernels.harness.timing import SECOND_TIMER_METHODS
    from infercrane.receipts.validate import check_document

    doc = _latest()[name]
    model, problems = check_document(doc)
    assert problems == [] and model is not None, problems[:5]
    res = doc["result"]
    assert res["comparison_policy"]["flag_rule"] == "widen_ratio"
    cold = [c for i in res["implementations"] for c in i["timings"] if c["mode"] == "cold"]
    assert cold and all(c["second_timer_method"] == SECOND_TIMER_METHODS["cold"] for c in cold)
    assert all(c["second_timer_offset_us"] is None for c in cold)
    decode = [c for c in res["comparisons"] if c["mode"] == "cold" and c["rows"] <= 512]
    assert len(decode) == 40 and not any(c["verdict"] in ("FLAGGED", "INSUFFICIENT") for c in decode)


def test_the_fourth_runs_summary_is_what_the_script_reads_from_its_evidence():
    summary = load_script("kernel_decides_summary")
    lines = summary.summary(summary._files(LATEST / "evidence-00a87fe.tar.xz"), cold=True)
    assert (LATEST / "summary-00a87fe.txt").read_text().splitlines() == lines

"""What a fan-out concludes from jobs of one GPU type (``--gpus H200,H200``), from receipts of the committed H200
screen as if measured on two devices: two devices are merged as ``h200`` and ``h200__2`` and their screens compared
cell by cell; two jobs that ran at the same time on one device are flagged, and only the first is merged."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "poc"))
from builders import H200_KERNEL, on_device  # noqa: E402
from evidence import archived  # noqa: E402

from infercrane.executors.fanout import FanoutRecord, JobRecord, _conclude, summary_lines  # noqa: E402
from infercrane.receipts.validate import load_receipt  # noqa: E402

POC = archived("2026-12-01-h200-poc/poc-evidence.tar.xz/poc.json")
GPU_A, GPU_B = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"


@pytest.fixture(scope="module")
def screen() -> dict:
    return json.loads(H200_KERNEL.read_text())


def _job(tmp_path: Path, screen: dict, label: str, uuid: str, index: int, start: str, end: str) -> JobRecord:
    path = tmp_path / f"screen.{label}.json"
    path.write_text(json.dumps(on_device(screen, uuid, index)))
    return JobRecord(gpu_request="H200", label=label, state="done", receipt=str(path), measured_gpu="NVIDIA H200",
                     measured_key="h200", gpu_uuid=uuid, gpu_index=index, elapsed_s=100.0,
                     started_at=f"2026-12-02T10:{start}+00:00", finished_at=f"2026-12-02T10:{end}+00:00")


def _record(*jobs: JobRecord) -> FanoutRecord:
    return FanoutRecord(executor="ray", argv=["kernel", "screen"], caller_infercrane_version="0.1.0",
                        caller_git_commit=None, jobs=list(jobs), wall_s=103.0)


def test_two_devices_at_once_are_merged_and_compared(tmp_path, screen):
    record = _record(_job(tmp_path, screen, "h200", GPU_A, 0, "00:00", "01:40"),
                     _job(tmp_path, screen, "h200__2", GPU_B, 1, "00:01", "01:41"))
    out = tmp_path / "screen.json"
    _conclude(record, out)
    assert record.complete and record.result == str(out)
    assert not any(j.same_device for j in record.jobs)
    doc = load_receipt(out).document
    assert set(doc["evidence"]["kernel"]) == {"h200", "h200__2"}
    [ag] = record.agreement
    assert (ag.a, ag.b, ag.gpu, ag.op) == ("h200", "h200__2", "h200", "fused_add_rmsnorm")
    # the same measurements on both sides: every compared cell agrees, and the decisions are the same
    assert ag.compared > 0 and ag.agreeing == ag.compared and ag.disagreeing == [] and ag.decisions_same
    lines = summary_lines(record)
    assert f"h200 vs h200__2 (fused_add_rmsnorm, h200): {ag.compared} of {ag.compared} compared cells agree" \
        in "\n".join(lines)
    assert "wall: 103 s for 2 jobs (the longest 100 s, their sum 200 s)" in lines


def test_a_poc_job_is_compared_by_its_kernel_section_and_a_disagreeing_cell_is_named(tmp_path, screen):
    """The committed PoC's H200 screen against the two-op screen made earlier that day: eager's graph-mode cells at
    1 and 8 rows sit 1.2-1.6 % apart, outside both screens' trial ranges."""
    poc = json.loads(POC.read_text())
    a = _job(tmp_path, screen, "h200", GPU_A, 0, "00:00", "01:40")
    b = _job(tmp_path, poc, "h200__2", GPU_B, 1, "00:01", "01:41")
    ag = _same_type(a, b)
    assert [d.split(":")[0] for d in ag.disagreeing] == ["eager 1 graph", "eager 8 graph"]
    assert ag.disagreeing[0].endswith("(B/A 1.016)")
    assert ag.agreeing == ag.compared - 2 and ag.compared > 2


def _same_type(a: JobRecord, b: JobRecord):
    from infercrane.executors.fanout import _same_type_agreement

    [ag], notes = _same_type_agreement([a, b])
    assert notes == []
    return ag


def test_two_jobs_at_once_on_one_device_are_flagged_and_one_is_merged(tmp_path, screen):
    record = _record(_job(tmp_path, screen, "h200", GPU_A, 0, "00:00", "01:40"),
                     _job(tmp_path, screen, "h200__2", GPU_A, 0, "00:30", "02:10"))
    _conclude(record, tmp_path / "screen.json")
    first, second = record.jobs
    assert first.same_device is None
    assert second.same_device == f"ran at the same time as h200 on one device ({GPU_A}): each timed the other's load"
    assert any(n.startswith("h200__2: measured on the same device as h200") for n in record.notes)
    assert record.result is None and not (tmp_path / "screen.json").exists()
    assert "[flagged: ran at the same time as h200" in "\n".join(summary_lines(record))


def test_one_device_in_turn_is_not_flagged(tmp_path, screen):
    record = _record(_job(tmp_path, screen, "h200", GPU_A, 0, "00:00", "01:40"),
                     _job(tmp_path, screen, "h200__2", GPU_A, 0, "01:41", "03:20"))
    _conclude(record, tmp_path / "screen.json")
    assert not any(j.same_device for j in record.jobs)
    assert len(record.agreement) == 1

"""The Ray executor, live on a local CPU Ray cluster (conftest): jobs placed by GPU type, gathered, flagged and
merged; a failed type that leaves the others' receipts; an unknown type; no cluster; Ctrl-C cancelling every task."""
from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from evidence import archived

from infercrane.errors import InputError, UnavailableError
from infercrane.executors import check_gpus
from infercrane.executors.fanout import fan_out, read_record
from infercrane.executors.jobs import Job
from infercrane.receipts.validate import load_receipt

REPO = Path(__file__).resolve().parents[2]
H200_SCREEN = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")
HANGS = REPO / "tests" / "kernels" / "fixtures" / "lifecycle_candidates.py"
SCREEN = ("kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager,triton", "--modes", "launch")

pytestmark = pytest.mark.slow


@pytest.fixture
def ray_executor(ray_cluster, monkeypatch):
    from infercrane.executors.ray_cluster import RayExecutor

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    return RayExecutor(address=ray_cluster.address)


def test_fan_out_places_by_type_gathers_flags_and_merges_keeping_a_failed_type_apart(ray_executor, tmp_path):
    jobs = [
        # the committed H200 screen decided again there: a receipt whose hardware is the H200 that measured it
        Job(gpu="H200", argv=("kernel", "decide", H200_SCREEN.name, "--decode-step-ms", "5"),
            files={H200_SCREEN.name: H200_SCREEN.read_bytes()}, needs_gpu=False, timeout_s=300),
        Job(gpu="L40S", argv=SCREEN, needs_gpu=False, timeout_s=300),  # a functional screen: measured on the CPU
        Job(gpu="H100", argv=(*SCREEN, "--model", "no-such-org/no-such-model"), needs_gpu=False, timeout_s=300),
    ]
    out = tmp_path / "screen.json"
    record = fan_out(ray_executor, jobs, out=out, argv=list(SCREEN), con=Console(file=io.StringIO(), width=200))
    by = {r.gpu_request: r for r in record.jobs}

    assert by["H200"].state == "done" and by["H200"].measured_key == "h200" and by["H200"].gpu_mismatch is None
    assert by["L40S"].state == "done" and by["L40S"].measured_key == "cpu"
    assert by["L40S"].gpu_mismatch == "asked for L40S, ran on no GPU (CPU)"
    assert by["H100"].state == "failed" and "no-such-org/no-such-model" in by["H100"].log_tail
    assert by["H100"].receipt is None and "exited with code" in by["H100"].error
    # every task has its own Ray run id, and the receipt it wrote carries it
    assert len({r.run_id for r in record.jobs}) == 3 and all(r.run_id.startswith("ray-") for r in record.jobs)
    l40s = load_receipt(Path(by["L40S"].receipt)).document
    assert l40s["app_id"] == by["L40S"].run_id and l40s["provenance"]["run_id_kind"] == "ray-task"
    assert l40s["hardware"]["gpu_request"] == "L40S" and l40s["hardware"]["gpu"] == "none"
    # the two finished types are merged per measured type; the failed one is a note, and the fan-out is incomplete
    merged = load_receipt(out).document
    assert merged["schema_version"].startswith("infercrane.optimization-poc-receipt/")
    assert {"h200", "cpu"} <= set(merged["custom_kernel"])
    assert {Path(i["receipt"]).name for i in merged["merged_from"]} == {"screen.h200.json", "screen.l40s.json"}
    assert record.result == str(out) and record.complete is False
    assert any(n.startswith("h100: failed") for n in record.notes)
    assert read_record(tmp_path / "screen.fanout.json") == record


def test_a_type_given_twice_runs_two_tasks_at_once(ray_executor, tmp_path):
    """Two jobs of one stand-in type on a cluster with room for both (2 CPUs): they run at the same time, each under
    its own label and run id. A CPU records no device, so the two receipts are kept but not merged, and said so."""
    from datetime import datetime

    jobs = [Job(gpu="H200", argv=SCREEN, needs_gpu=False, timeout_s=300) for _ in range(2)]
    out = tmp_path / "screen.json"
    record = fan_out(ray_executor, jobs, out=out, argv=list(SCREEN), con=Console(file=io.StringIO(), width=200))
    a, b = record.jobs
    assert (a.label, b.label) == ("h200", "h200__2") and a.state == b.state == "done"
    assert a.run_id != b.run_id and all(r.run_id.startswith("ray-") for r in (a, b))
    assert (tmp_path / "screen.h200.json").exists() and (tmp_path / "screen.h200__2.json").exists()
    start = [datetime.fromisoformat(r.started_at) for r in (a, b)]
    end = [datetime.fromisoformat(r.finished_at) for r in (a, b)]
    assert start[0] < end[1] and start[1] < end[0], "the two tasks did not overlap"
    assert a.same_device is None and b.same_device is None  # no device recorded on a CPU: nothing to flag
    assert record.result is None and any("does not say which device it ran on" in n for n in record.notes)
    [ag] = record.agreement
    assert (ag.a, ag.b) == ("h200", "h200__2")


def test_an_unknown_gpu_type_is_refused_listing_the_clusters_types(ray_executor):
    with pytest.raises(InputError) as e:
        check_gpus(ray_executor, ["H100", "B200"])
    assert "B200" in e.value.message and "H100, H200, L40S" in str(e.value)


def test_ray_not_installed_says_what_to_install(monkeypatch):
    from infercrane.executors.ray_cluster import RayExecutor

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UnavailableError, match=r"infercrane\[ray\]"):
        RayExecutor()


def test_no_cluster_reachable_says_how_to_start_one(tmp_path, ray_cluster):
    with socket_port() as port:
        proc = subprocess.run([sys.executable, "-m", "infercrane", *SCREEN, "--executor", "ray", "--ray-address",
                               f"127.0.0.1:{port}", "--gpus", "H100", "--out", str(tmp_path / "s.json")],
                              capture_output=True, text=True, timeout=240, env=ray_cluster.env, cwd=tmp_path)
    assert proc.returncode != 0
    assert "no Ray cluster reachable" in proc.stderr and "ray start --head" in proc.stderr
    assert not (tmp_path / "s.json").exists()


def test_ctrl_c_cancels_every_task_and_leaves_nothing_running(ray_cluster, tmp_path):
    ray_cluster.pid_file.unlink(missing_ok=True)
    out = tmp_path / "screen.json"
    cmd = [sys.executable, "-m", "infercrane", "kernel", "screen", "--device", "cpu", "--rows", "1", "--modes",
           "launch", "--candidate", f"{HANGS}:hangs", "--impls", "user", "--executor", "ray", "--ray-address",
           ray_cluster.address, "--gpus", "H100,L40S", "--out", str(out)]
    proc = subprocess.Popen(cmd, env=ray_cluster.env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    pids = _wait_for_workers(ray_cluster.pid_file, 2, proc)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=150)
    assert proc.returncode == 130, output
    record = read_record(tmp_path / "screen.fanout.json")
    assert [r.state for r in record.jobs] == ["cancelled", "cancelled"]
    assert any("interrupted" in n for n in record.notes)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (any(_alive(p) for p in pids) or _job_processes()):
        time.sleep(0.5)
    assert not [p for p in pids if _alive(p)], "a cancelled job's candidate worker is still running"
    assert not _job_processes(), "InferCrane job processes left running"


def _job_processes() -> list[str]:
    """The live processes of InferCrane jobs (their command line names the job's folder, infercrane-job-*)."""
    ps = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout.splitlines()
    return [line for line in ps if "infercrane-job-" in line and not line.lstrip().startswith("Z")]


def _wait_for_workers(pid_file: Path, n: int, proc: subprocess.Popen) -> list[int]:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        lines = pid_file.read_text().split("\n") if pid_file.exists() else []
        pids = [int(line.split()[1]) for line in lines if line.startswith("worker ")]
        if len(pids) >= n:
            return pids
        time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"the jobs' candidate workers did not start: {proc.communicate()[0][-3000:]}")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class socket_port:
    """A loopback port nothing listens on (bound here, released on entry)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def __exit__(self, *exc) -> None:
        return None


def test_job_results_round_trip_through_json():
    from infercrane.executors.jobs import JobResult

    r = JobResult(gpu="H100!", state="timed-out", error="did not finish within 5 s", elapsed_s=5.0)
    assert JobResult.model_validate(json.loads(r.model_dump_json())) == r

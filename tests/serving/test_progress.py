"""A partial receipt tells a live writer from a gone one: the writer's pid, host and last update in its reason."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from infercrane.commands.serve import _check_not_being_written
from infercrane.errors import InputError
from infercrane.serving.progress import parse_progress, progress_reason, serving_progress_state, this_host


def _doc(reason: str | None, complete: bool = False) -> dict:
    return {"complete": complete, "incomplete_reason": reason}


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_reason_names_writer_and_time():
    at = datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC)
    reason = progress_reason(3, 12, at=at)
    assert reason == f"in progress: 3 of 12 driver runs done (pid {os.getpid()} on host {this_host()}, last update " \
                     "2026-12-01T10:00:05Z)"
    assert parse_progress(reason) == {"what": "3 of 12 driver runs done", "pid": os.getpid(), "host": this_host(),
                                      "at": at}
    assert parse_progress("stopped part-way: x") is None


def test_a_live_writer_is_in_progress_and_a_gone_one_interrupted():
    now = datetime.now(UTC)
    assert serving_progress_state(_doc(progress_reason(1, 4, at=now))).startswith(
        f"in progress (pid {os.getpid()} on this host; 1 of 4 driver runs done; last update ")
    gone = _gone_pid()
    state = serving_progress_state(_doc(progress_reason(1, 4, pid=gone, at=now - timedelta(minutes=5))), now=now)
    assert state == (f"interrupted (the writer, pid {gone} on this host, is gone; 1 of 4 driver runs done; last "
                     f"update {(now - timedelta(minutes=5)).strftime('%Y-%m-%dT%H:%M:%SZ')}, 5 min ago)")


def test_a_reused_pid_is_not_the_writer():
    # this process started after the recorded update: whoever wrote then, it was not this process
    state = serving_progress_state(_doc(progress_reason(2, 4, at=datetime(2020, 1, 1, tzinfo=UTC))))
    assert state.startswith(f"interrupted (the writer, pid {os.getpid()} on this host, is gone")


def test_other_hosts_old_receipts_and_finished_ones():
    other = progress_reason(1, 2, host="elsewhere-7", at=datetime.now(UTC))
    assert serving_progress_state(_doc(other)).startswith(f"in progress or interrupted: written by pid {os.getpid()} "
                                                          "on host elsewhere-7, not this host")
    assert serving_progress_state(_doc("in progress: 1 of 2 driver runs done")) == \
        "in progress or interrupted (its writer was not recorded; 1 of 2 driver runs done)"
    assert serving_progress_state(_doc("stopped part-way: engine died")) == "stopped part-way: engine died"
    assert serving_progress_state(_doc(None, complete=True)) == "complete"


def test_an_out_being_written_by_a_live_run_is_refused(tmp_path):
    out = tmp_path / "r.json"
    out.write_text(json.dumps(_doc(progress_reason(1, 4, pid=os.getpid()))))
    with pytest.raises(InputError, match=f"--out {out}: another InferCrane is writing it now, in progress"):
        _check_not_being_written(out)
    out.write_text(json.dumps(_doc(progress_reason(1, 4, pid=_gone_pid()))))
    _check_not_being_written(out)  # an interrupted one may be overwritten
    out.write_text("not json")
    _check_not_being_written(out)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_sigkilled_run_leaves_nothing_running_and_reads_as_interrupted(tmp_path, stand_in_dir, offline_env):
    import signal
    import time
    from pathlib import Path

    from infercrane.proc import group_alive

    recipe = tmp_path / "a.yaml"
    recipe.write_text("schema_version: infercrane.serving-recipe/v1\nname: one\nengine: testserver\n"
                      f'model: {stand_in_dir}\nengine_args: ["--ttft-ms", "20", "--itl-ms", "3"]\n')
    out = tmp_path / "bench.json"
    # one AIPerf invocation per point (request counts differ per concurrency), so it is killed mid-driver-run
    proc = subprocess.Popen([sys.executable, "-m", "infercrane", "serve", "bench", str(recipe), "--workload",
                             "seed-paired-counts", "--runs", "3", "--concurrency", "1,2", "--requests-per-slot", "6",
                             "--min-requests", "6", "--out", str(out)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and json.loads(out.read_text())["runs"]:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[0]
    doc = json.loads(out.read_text())
    pgid = doc["engines"][0]["pid"]
    time.sleep(3)  # the next point's AIPerf is up
    drivers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, str(out.parent / "bench-"))]
    assert drivers, "no driver process was running when InferCrane was killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (group_alive(pgid) or any(_cmdline_has(p, str(tmp_path)) for p in drivers)):
        time.sleep(0.2)
    assert not group_alive(pgid), "the engine outlived InferCrane's SIGKILL"
    assert not [p for p in drivers if _cmdline_has(p, str(tmp_path))], "a driver process outlived InferCrane's SIGKILL"
    state = serving_progress_state(json.loads(out.read_text()))
    assert state.startswith(f"interrupted (the writer, pid {proc.pid} on this host, is gone; "), state


def _cmdline_has(proc_dir, text: str) -> bool:
    try:
        return text in (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False

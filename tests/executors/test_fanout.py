"""``kernel screen --gpus`` through the local executor, end to end on the CPU, and the job a screen's options
become: the flags the user gave (defaults stay defaults there), the files they name shipped by content."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.executors.fanout import read_record
from infercrane.executors.jobs import Job, run_job
from infercrane.executors.jobs import job_argv
from infercrane.kernels.config import ScreenConfig
from infercrane.receipts.validate import load_receipt

REPO = Path(__file__).resolve().parents[2]
GOOD = REPO / "tests" / "kernels" / "fixtures" / "good_candidate.py"
SCREEN = ["kernel", "screen", "--device", "cpu", "--op", "rms_norm", "--rows", "1", "--impls", "eager,triton",
          "--modes", "launch"]


def test_job_argv_carries_the_options_given_and_ships_the_files_they_name(tmp_path):
    policy = tmp_path / "my-policy.yaml"
    policy.write_text("x: 1\n")
    cfg = ScreenConfig(op="fused_add_rmsnorm", rows=(1, 8), candidate=f"{GOOD}:fused_add_rmsnorm",
                       candidate_in_place=False, policy=policy, trials=3, executor="ray", gpus=("H100",),
                       out=tmp_path / "o.json")
    argv, files = job_argv(("kernel", "screen"), cfg)
    assert argv == ["kernel", "screen", "--op", "fused_add_rmsnorm", "--rows", "1,8", "--candidate",
                    "good_candidate.py:fused_add_rmsnorm", "--candidate-out-of-place", "--trials", "3",
                    "--policy", "my-policy.yaml"]
    assert files == {"good_candidate.py": GOOD.read_bytes(), "my-policy.yaml": b"x: 1\n"}
    assert not {"--executor", "--gpus", "--out"} & set(argv)


def test_a_job_runs_where_it_lands_from_its_shipped_files(tmp_path):
    argv, files = job_argv(("kernel", "screen"), ScreenConfig(
        device="cpu", op="fused_add_rmsnorm", rows=(1,), impls=("eager", "user"), modes=("launch",),
        candidate=f"{GOOD}:fused_add_rmsnorm"))
    res = run_job(Job(gpu="cpu", argv=tuple(argv), files=files, needs_gpu=False, timeout_s=300),
                  run_id="test-run-1", workdir=tmp_path / "job")
    assert res.state == "done", res.log_tail
    doc = json.loads(res.receipt_json)
    assert doc["app_id"] == "test-run-1" and doc["hardware"]["gpu_request"] == "cpu"
    user = next(i for i in doc["result"]["implementations"] if i["key"] == "user")
    assert user["status"] == "ok" and "good_candidate.py" in user["source"]


def test_a_job_past_its_time_limit_is_stopped_and_says_so(tmp_path):
    res = run_job(Job(gpu="cpu", argv=tuple(SCREEN), needs_gpu=False, timeout_s=0.5), workdir=tmp_path / "job")
    assert res.state == "timed-out" and res.error == "did not finish within 0.5 s" and res.receipt_json is None


def test_kernel_screen_on_this_machines_gpu_type_through_the_local_executor(tmp_path, capsys):
    out = tmp_path / "screen.json"
    assert main([*SCREEN, "--gpus", "cpu", "--out", str(out)]) == 0
    doc = load_receipt(out).document
    assert doc["hardware"]["gpu_request"] == "cpu" and doc["result"]["spec"]["op"] == "rms_norm"
    record = read_record(tmp_path / "screen.fanout.json")
    assert record.complete and record.result == str(out) and record.executor == "local"
    [job] = record.jobs
    assert job.state == "done" and job.measured_key == "cpu" and job.gpu_mismatch is None
    assert (tmp_path / "screen.cpu.json").read_bytes() == out.read_bytes()
    assert "result: " + str(out) in capsys.readouterr().out.replace("\n", "")


@pytest.mark.parametrize("args, message", [
    (["--gpus", "H100"], "not a GPU type the local executor can run"),
    (["--executor", "ray"], "give the GPU types to screen on with --gpus"),
    (["--gpus", "cpu", "--ray-address", "127.0.0.1:1"], "--ray-address is read by --executor ray only"),
    (["--ray-address", "127.0.0.1:1"], "--ray-address is read by --executor ray only"),
    (["--job-timeout-s", "60"], "--job-timeout-s limits the jobs of --gpus / --executor"),
    (["--gpus", "cpu", "--sign-key", "k.pem"], "the key stays on this machine"),
    (["--gpus", "cpu", "--model", str(REPO / "tests")], "does not travel with the jobs"),
])
def test_bad_fan_out_options_are_refused_before_any_job(tmp_path, capsys, args, message):
    out = tmp_path / "s.json"
    assert main([*SCREEN, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not out.exists() and not (tmp_path / "s.fanout.json").exists()


def test_a_gpu_type_given_twice_is_two_jobs_here_one_after_the_other(tmp_path, capsys):
    from datetime import datetime

    out = tmp_path / "screen.json"
    assert main([*SCREEN, "--gpus", "cpu,cpu", "--out", str(out)]) == 1
    record = read_record(tmp_path / "screen.fanout.json")
    first, second = record.jobs
    assert (first.label, second.label) == ("cpu", "cpu__2") and first.state == second.state == "done"
    assert (tmp_path / "screen.cpu.json").exists() and (tmp_path / "screen.cpu__2.json").exists()
    # the local executor runs them in turn on this machine
    assert datetime.fromisoformat(second.started_at) >= datetime.fromisoformat(first.finished_at)
    assert record.wall_s >= first.elapsed_s + second.elapsed_s - 1.0
    # a CPU records no device: the two cannot be told apart, so nothing is merged, and that is said
    assert not out.exists() and record.result is None and not record.complete
    assert any("does not say which device it ran on" in n for n in record.notes)
    [ag] = record.agreement
    assert (ag.a, ag.b, ag.gpu, ag.compared) == ("cpu", "cpu__2", "cpu", 0)
    text = capsys.readouterr().out.replace("\n", " ")
    assert "cpu vs cpu__2 (rms_norm, cpu): no timed cell to compare" in text and "wall: " in text


def test_job_labels_number_the_repeats_of_a_request():
    from infercrane.executors.fanout import job_labels

    assert job_labels(["H200", "H200", "H100!", "L40S", "H100!", "H200"]) == [
        "h200", "h200__2", "h100-pinned", "l40s", "h100-pinned__2", "h200__3"]


def _poc_config_with_gpus(tmp_path: Path, gpus: str) -> Path:
    from infercrane.poc.config import CONFIGS_DIR

    text = (CONFIGS_DIR / "functional.yaml").read_text()
    path = tmp_path / "my-poc.yaml"
    path.write_text(text.replace("gpu: none\n", f"gpu: none\ngpus: {gpus}\n", 1))
    return path


def test_a_poc_configs_gpus_fan_it_out_and_are_checked_before_anything_runs(tmp_path, capsys):
    config = _poc_config_with_gpus(tmp_path, "[H100, L40S]")
    assert main(["poc", str(config), "--out", str(tmp_path / "poc.json")]) == 2
    err = capsys.readouterr().err
    assert "--gpus H100,L40S: not a GPU type the local executor can run" in err and "known here: cpu" in err
    assert not (tmp_path / "poc.json").exists() and not (tmp_path / "poc.fanout.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--executor", "ray"], "give the GPU types to run the PoC on with --gpus"),
    (["--gpus", "cpu", "--resume", "runs/x"], "a PoC run per GPU type is not resumed"),
    (["--gpus", "cpu", "--sign-key", "k.pem"], "the key stays on this machine"),
])
def test_bad_poc_fan_out_options_are_refused(tmp_path, capsys, args, message):
    assert main(["poc", "functional", *args, "--out", str(tmp_path / "poc.json")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "poc.json").exists()


def test_a_poc_configs_gpus_may_name_a_type_twice(tmp_path):
    from infercrane.poc.config import load_config

    assert load_config(_poc_config_with_gpus(tmp_path, "[H100, H100]"))[0].gpus == ["H100", "H100"]


def test_a_job_that_ran_another_infercrane_is_flagged_and_left_out(tmp_path, capsys, monkeypatch):
    import infercrane.executors.fanout as fanout

    monkeypatch.setattr(fanout, "_caller_identity", lambda: ("0.0.0-caller", "0" * 40))
    out = tmp_path / "screen.json"
    assert main([*SCREEN, "--gpus", "cpu", "--out", str(out)]) == 1
    [job] = read_record(tmp_path / "screen.fanout.json").jobs
    assert job.state == "done" and job.receipt is not None
    assert job.version_mismatch.startswith("ran InferCrane ") and "the caller 0.0.0-caller" in job.version_mismatch
    assert "install the caller's version where the jobs run" in job.version_mismatch
    assert not out.exists()  # kept as screen.cpu.json, not taken as the result
    assert "left out of the result" in capsys.readouterr().out

"""Environment capture: versions without imports, a shipped tree's commit, provenance that validates."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from infercrane.env.capture import ABSENT, git_state, provenance, software_versions
from infercrane.receipts.models_v2 import Provenance


def test_software_versions_name_absent_packages() -> None:
    before = set(sys.modules)
    v = software_versions()
    assert v["python"] == sys.version.split()[0]
    assert set(v) >= {"torch", "triton", "cupy", "vllm", "aiperf", "transformers"}
    assert all(isinstance(x, str) and x for x in v.values())
    assert "vllm" not in set(sys.modules) - before  # read from metadata, not imported
    assert v["vllm"] == ABSENT or v["vllm"][0].isdigit()


def test_commit_of_a_tree_without_git(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("INFERCRANE_GIT_COMMIT", raising=False)
    assert git_state(tmp_path) == (None, None)
    monkeypatch.setenv("INFERCRANE_GIT_COMMIT", "0ff9ed1")
    assert git_state(tmp_path) == ("0ff9ed1", None)


def test_a_named_commit_wins_over_a_stale_git_beside_it(monkeypatch) -> None:
    """A tree copied to a GPU machine can carry an older .git; the commit named for it is the one that ran."""
    monkeypatch.setenv("INFERCRANE_GIT_COMMIT", "f919cd3")
    assert git_state(Path(__file__).resolve().parent) == ("f919cd3", None)


def test_provenance_validates_and_hashes_the_config() -> None:
    p = provenance(config={"b": 1, "a": [1, 2]}, command_line=["infercrane", "x"])
    model = Provenance.model_validate(p)
    assert model.recorded_at.tzinfo is not None
    assert p["config_sha256"] == provenance(config={"a": [1, 2], "b": 1})["config_sha256"]
    assert p["hardware"]["cpu_count"] >= 1 and p["run_id"].startswith("local-")


def test_the_device_is_named_by_uuid_and_index_when_nvidia_smi_answers(monkeypatch) -> None:
    import subprocess

    from infercrane.env import capture

    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="1, 1980, 3201\n", stderr="")

    monkeypatch.setattr(capture.subprocess, "run", fake_run)
    facts = capture._device_facts("5a1b2c3d-0000-0000-0000-000000000000")
    assert facts == {"gpu_uuid": "GPU-5a1b2c3d-0000-0000-0000-000000000000", "gpu_index": 1,
                     "sm_clock_max_mhz": 1980, "memory_clock_max_mhz": 3201}
    assert "--id=GPU-5a1b2c3d-0000-0000-0000-000000000000" in calls[0]


def test_without_nvidia_smi_the_uuid_stays_and_the_rest_is_unknown(monkeypatch) -> None:
    from infercrane.env import capture

    def missing(cmd, **kw):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(capture.subprocess, "run", missing)
    assert capture._device_facts("GPU-x") == {"gpu_uuid": "GPU-x", "gpu_index": None, "sm_clock_max_mhz": None,
                                              "memory_clock_max_mhz": None}
    assert capture._device_facts(None)["gpu_uuid"] is None


@pytest.mark.gpu
def test_a_gpu_machine_records_which_device_it_measured_on() -> None:
    from infercrane.env.capture import hardware

    hw = hardware()
    assert hw["gpu_uuid"].startswith(("GPU-", "MIG-")) and isinstance(hw["gpu_index"], int)

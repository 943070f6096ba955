"""Environment capture: versions without imports, a shipped tree's commit, provenance that validates."""
from __future__ import annotations

import sys
from pathlib import Path

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

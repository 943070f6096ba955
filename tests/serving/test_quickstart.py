"""The CPU quickstart of the README, exactly as printed there: two shipped test-server recipes, the quick workload,
real AIPerf; the receipt validates and carries a decision."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infercrane.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(importlib.util.find_spec("aiperf") is None, reason="aiperf is not installed")]

REPO = Path(__file__).resolve().parents[2]
COMMAND = ["serve", "ab", "testserver", "testserver-fast", "--workload", "quick"]


def test_the_readme_shows_this_command():
    assert f"infercrane {' '.join(COMMAND)}" in (REPO / "README.md").read_text()


def test_quickstart_runs_as_shipped(tmp_path, capsys):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE")}
    proc = subprocess.run([sys.executable, "-m", "infercrane", *COMMAND], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    [receipt] = list((tmp_path / "runs").glob("*/serve-ab.json"))
    assert main(["receipt", "validate", str(receipt)]) == 0
    capsys.readouterr()
    doc = json.loads(receipt.read_text())
    pa = doc["paired_aiperf"]
    assert doc["complete"] is True and pa["decision_code"] and pa["decision"]
    assert {m["recipe"] for m in pa["measurements"]} == {"testserver", "testserver-fast"}
    assert doc["model"]["weights"] == "dummy" and doc["model"]["tokenizer"] == "stand-in"
    assert len(doc["engines"]) == 3  # A B A
    for e in doc["engines"]:
        assert e["launched_by_infercrane"] is True and e["served_models"] and "PATH" in e["program_env"]
    assert "engine 00-testserver (testserver): " in proc.stdout  # each engine's command is printed

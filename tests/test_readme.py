"""The README's commands work as printed: every ``bash`` block is marked ``<!-- readme-test: run -->`` (run here, line
by line, in one shell, exactly as written) or ``<!-- readme-test: skip, REASON -->``; the runnable ones run on this
machine as a new user would type them after the set-up, in a fresh folder whose ``.venv`` is this one."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BLOCK = re.compile(r"(?:<!--\s*readme-test:\s*(?P<mark>[^>]*?)\s*-->\s*\n)?```bash\n(?P<body>.*?)```", re.S)


def blocks() -> list[tuple[str, str]]:
    return [(m["mark"] or "", m["body"]) for m in BLOCK.finditer(README.read_text())]


def commands(body: str) -> list[str]:
    """A block's commands: its lines without the trailing comments."""
    return [line.split("  #")[0].strip() for line in body.splitlines() if line.strip() and not line.startswith("#")]


def test_every_bash_block_says_whether_it_runs_here():
    found = blocks()
    assert len(found) >= 4
    for mark, body in found:
        assert mark == "run" or re.fullmatch(r"skip, \S.*", mark), f"unmarked or reasonless block:\n{body}"
    assert any(mark == "run" for mark, _ in found)


def test_the_set_up_commands_are_the_two_the_brief_names():
    first_mark, first = blocks()[0]
    assert commands(first) == ["bash scripts/run", "bash scripts/test"]
    assert first_mark.startswith("skip, ")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(importlib.util.find_spec("aiperf") is None, reason="aiperf is not installed")
def test_the_runnable_blocks_run_as_printed(tmp_path):
    if not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip("not running inside a virtual environment: the README's `source .venv/bin/activate` has no target")
    (tmp_path / ".venv").symlink_to(sys.prefix)
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(sys.prefix))  # `infercrane` comes from activating, not from here
    env["COLUMNS"] = "120"
    ran, out = [], ""
    for mark, body in blocks():
        if mark != "run":
            continue
        script = "set -euo pipefail\n" + "\n".join(f"echo '$ {c}'\n{c}" for c in commands(body))
        proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=840)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
        ran += commands(body)
        out += proc.stdout
    assert any(c.startswith("infercrane serve ab") for c in ran)
    # what the commands said they wrote is there, and says what the README says it says
    doc = json.loads((tmp_path / "runs/try/serve-ab.json").read_text())
    assert doc["complete"] is True and doc["paired_aiperf"]["decision"].startswith("accept recipe testserver-fast")
    pa = doc["paired_aiperf"]
    assert {m["recipe"] for m in pa["measurements"]} == {"testserver", "testserver-fast"}
    assert doc["model"]["weights"] == "dummy" and doc["model"]["tokenizer"] == "stand-in"
    assert len(doc["engines"]) == 3  # A B A
    for e in doc["engines"]:
        assert e["launched_by_infercrane"] is True and e["served_models"] and "PATH" in e["program_env"]
    assert "engine 00-testserver (testserver): " in out  # each engine's command is printed
    assert (tmp_path / "runs/try/report/index.html").is_file()
    with open(tmp_path / "runs/try/serve-ab.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(doc["runs"])
    kernel = json.loads((tmp_path / "runs/try/kernel.json").read_text())
    assert kernel["evidence_class"] == "cpu-functional-check"

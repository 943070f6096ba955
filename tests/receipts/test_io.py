"""Atomic writes, content hashes, and receipts InferCrane writes itself."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infercrane.errors import ReceiptInvalid
from infercrane.hashing import content_hash
from infercrane.receipts.io import write_atomic
from infercrane.receipts.validate import load_receipt, write_receipt


def test_kill_mid_write_never_leaves_a_torn_file(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_atomic(target, {"generation": -1, "blob": ""})
    # A writer that rewrites a ~4 MB document as fast as it can, killed at several points.
    code = (
        "import sys; from pathlib import Path; from infercrane.receipts.io import write_atomic\n"
        "i = 0\n"
        "while True:\n"
        "    write_atomic(Path(sys.argv[1]), {'generation': i, 'blob': 'x' * 4_000_000}); i += 1\n"
    )
    for delay in (0.05, 0.2, 0.5):
        proc = subprocess.Popen([sys.executable, "-c", code, str(target)])
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        doc = json.loads(target.read_text())  # whole: the old document or a new one
        assert doc["blob"] in ("", "x" * 4_000_000)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "r.json"]
    # A killed writer may leave its own temporary file, never a half-written r.json.
    assert all(name.startswith(".r.json.") and name.endswith(".tmp") for name in leftovers)


def _screening_doc(seed_screening: Path) -> dict:
    from infercrane.receipts.registry import MODELS  # noqa: F401  (keeps the import graph honest)

    return json.loads(seed_screening.read_text())


def test_hash_detects_one_changed_byte(tmp_path: Path, written_receipt: Path) -> None:
    r = load_receipt(written_receipt)
    assert r.document["content_sha256"] == content_hash(r.document)
    text = written_receipt.read_text()
    # Change one byte of the content (a digit of the evidence class's neighbour field) without breaking JSON or types.
    i = text.index('"reason": "') + len('"reason": "')
    changed = text[:i] + ("X" if text[i] != "X" else "Y") + text[i + 1:]
    tampered = tmp_path / "tampered.json"
    tampered.write_text(changed)
    with pytest.raises(ReceiptInvalid) as e:
        load_receipt(tampered)
    [(_, path, reason)] = e.value.problems
    assert path == "content_sha256" and "changed after it was written" in reason


def test_write_receipt_refuses_inconsistent_document_but_keeps_it(tmp_path: Path, screening_v2_doc: dict) -> None:
    bad = json.loads(json.dumps(screening_v2_doc))
    bad["measurements"][0]["speedup_vs_eager"] = 9.0
    target = tmp_path / "bad.json"
    with pytest.raises(ReceiptInvalid) as e:
        write_receipt(bad, target)
    assert not target.exists()
    kept = tmp_path / "bad.invalid.json"
    assert kept.exists() and json.loads(kept.read_text())["measurements"][0]["speedup_vs_eager"] == 9.0
    assert any(p == "measurements[0].speedup_vs_eager" for _, p, _ in e.value.problems)



def test_a_written_receipt_has_the_usual_file_mode(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "r.json", {"a": 1})
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600

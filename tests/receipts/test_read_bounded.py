"""Reading a receipt is bounded and never a traceback: deep nesting, duplicate keys, a lone surrogate, a FIFO, a
device, an oversized file each get one line naming the file, and the rest of a multi-file validate still runs."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.errors import InputError
from infercrane.datafiles import RECEIPT
from infercrane.receipts.io import read_json

GOOD = Path(__file__).parents[2] / "examples" / "receipts" / "cuda-kernel-screening-v1.seed.json"


@pytest.mark.parametrize("text, needle", [
    ("[" * 500 + "]" * 500, "nested more than"),
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ('{"a": "\\ud800"}', "lone surrogate"),
    ('{"a": "x", "b": {"c": "\\udfff"}}', "b.c"),
])
def test_hostile_json_is_one_clear_error(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "r.json"
    p.write_text(text)
    with pytest.raises(InputError, match=needle):
        read_json(p)


def test_a_deep_string_is_not_nesting(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_text('{"a": "' + "[" * 500 + '"}')
    assert read_json(p) == {"a": "[" * 500}


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_json(fifo)


def test_a_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a regular file"):
        read_json(Path("/dev/zero"))


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    with open(p, "wb") as f:
        f.truncate(RECEIPT.max_bytes + 1)
    with pytest.raises(InputError, match="more than"):
        read_json(p)


def test_validate_goes_on_past_a_bad_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "deep.json"
    bad.write_text("[" * 500 + "]" * 500)
    good = tmp_path / "good.json"
    shutil.copyfile(GOOD, good)
    assert main(["receipt", "validate", "--allow-legacy", str(bad), str(good)]) == 2  # GOOD: a legacy seed
    out = capsys.readouterr().out
    assert "deep.json" in out and f"legacy  {good}" in out and "Traceback" not in out

"""The bounded reader every file a user names goes through (``infercrane.datafiles.read_bytes``): only a regular
file, refused above its kind's limit before a byte is read, never more than limit + 1 bytes read, and bounded in
time; each refusal one InputError line naming the path."""
from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from infercrane import datafiles
from infercrane.datafiles import FileKind, read_bytes, read_text
from infercrane.errors import InputError

TINY = FileKind("thing", 16)


def _one_line(e: InputError) -> str:
    lines = e.value.lines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.timeout(60)  # a reader that waits on the FIFO fails here instead of hanging the suite
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as e:
        read_bytes(fifo, datafiles.RECEIPT)
    assert _one_line(e).startswith(f"{fifo}: is a FIFO (named pipe), not a regular file")


def test_a_device_is_refused_directly_and_through_a_link(tmp_path: Path) -> None:
    link = tmp_path / "r.json"
    link.symlink_to("/dev/zero")
    for path in (Path("/dev/zero"), link):
        with pytest.raises(InputError) as e:
            read_bytes(path, datafiles.ENVELOPE)
        assert _one_line(e) == (f"{path}: is a character device, not a regular file; a signature envelope is read "
                                "from a regular file")


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(InputError) as e:
            read_bytes(path, datafiles.KEY)
    assert "is a socket, not a regular file" in _one_line(e)


def test_a_directory_has_its_own_message_and_hint(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        read_bytes(tmp_path, datafiles.RECIPE)
    line = _one_line(e)
    assert line.startswith(f"{tmp_path}: is a directory, not a recipe file; give the path of a .yaml file")


def test_a_missing_file_and_a_path_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    for path in (tmp_path / "absent.pem", tmp_path / "f" / "x.pem"):
        with pytest.raises(InputError) as e:
            read_bytes(path, datafiles.KEY)
        assert _one_line(e) == f"{path}: no such file; make a key pair with `infercrane receipt keygen`"


def test_a_10_gb_sparse_file_is_refused_by_its_size_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        os.truncate(f.fileno(), 10 * 1024**3)
    real_read = os.read

    def no_read(fd: int, n: int) -> bytes:
        if threading.current_thread().name.startswith("infercrane-read"):
            raise AssertionError("the file was read")
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", no_read)
    with pytest.raises(InputError) as e:
        read_bytes(big, datafiles.RECEIPT)
    assert _one_line(e) == f"{big}: 10 GiB, more than the 64 MiB a receipt may have"


def test_a_file_larger_than_its_size_says_is_cut_at_the_limit() -> None:
    # /proc files say 0 bytes and hold more: the read stops after limit + 1 bytes
    maps = Path("/proc/self/maps")
    assert maps.stat().st_size == 0 and len(maps.read_bytes()) > TINY.max_bytes
    with pytest.raises(InputError) as e:
        read_bytes(maps, TINY)
    assert _one_line(e).startswith(f"{maps}: more than the 16 bytes a thing may have")


def test_at_the_limit_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    p = tmp_path / "t"
    p.write_bytes(b"x" * TINY.max_bytes)
    assert read_bytes(p, TINY) == b"x" * TINY.max_bytes
    p.write_bytes(b"x" * (TINY.max_bytes + 1))
    with pytest.raises(InputError, match="17 bytes, more than the 16 bytes a thing may have"):
        read_bytes(p, TINY)


def test_a_read_that_does_not_finish_in_time_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "slow.yaml"
    p.write_bytes(b"a: 1\n")
    real_read = os.read
    release = threading.Event()

    def stuck(fd: int, n: int) -> bytes:  # a filesystem that does not answer
        if threading.current_thread().name.startswith("infercrane-read"):
            release.wait(30)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", stuck)
    monkeypatch.setattr(datafiles, "READ_TIME_LIMIT_S", 0.2)
    try:
        with pytest.raises(InputError) as e:
            read_bytes(p, datafiles.POLICY)
    finally:
        release.set()
    assert _one_line(e).startswith(f"{p}: not read within 0.2 s")


def test_text_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    p = tmp_path / "w.yaml"
    p.write_bytes(b"name: \xff\n")
    with pytest.raises(InputError) as e:
        read_text(p, datafiles.WORKLOAD)
    assert _one_line(e) == f"{p}: not UTF-8 text (invalid start byte at byte 6)"


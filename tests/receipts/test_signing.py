"""Receipt signatures: ed25519 over the receipt's exact bytes in a DSSE envelope. A round trip verifies; a changed
byte, another key, another payload, a truncated envelope and a broken key each fail with one line. A FIFO, /dev/zero
or a 10 GB sparse file in place of the envelope or the key is one line and exit 2; a forged envelope is never reported
as signed by anyone without the key, and fails with it."""
from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest

from evidence import archived

from infercrane.cli import main
from infercrane.receipts import signing

pytest.importorskip("cryptography")
RECEIPT = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/rms_norm.json")


@pytest.fixture
def signed(tmp_path: Path) -> dict[str, Path]:
    key, pub = signing.keygen(tmp_path / "keys")
    receipt = tmp_path / "r.json"
    shutil.copyfile(RECEIPT, receipt)
    assert main(["receipt", "sign", str(receipt), "--key", str(key)]) == 0
    return {"key": key, "pub": pub, "receipt": receipt, "envelope": signing.envelope_path(receipt)}


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites(tmp_path: Path) -> None:
    key, pub = signing.keygen(tmp_path)
    assert key.stat().st_mode & 0o777 == 0o600 and pub.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert main(["receipt", "keygen", "--out", str(tmp_path)]) == 2  # both exist


def test_sign_verify_round_trip_and_validate_names_no_signer_without_a_key(signed: dict, capsys) -> None:
    assert main(["receipt", "verify", str(signed["receipt"]), "--pub", str(signed["pub"])]) == 0
    keyid = signing.keyid_of(signing.load_public(signed["pub"]))
    assert f"signed by {keyid}" in capsys.readouterr().out
    env = json.loads(signed["envelope"].read_text())
    assert env["payloadType"] == signing.PAYLOAD_TYPE
    assert base64.b64decode(env["payload"]) == signed["receipt"].read_bytes()
    assert main(["receipt", "validate", str(signed["receipt"])]) == 0
    out = capsys.readouterr().out  # a key id in an envelope is a claim: only a key the user names verifies it
    assert "signature present, not verified" in out and keyid not in out
    assert main(["receipt", "validate", str(signed["receipt"]), "--pub", str(signed["pub"])]) == 0
    assert f"signature verified: key {keyid}" in capsys.readouterr().out


def test_an_unsigned_receipt_validates_as_unsigned(tmp_path: Path, capsys) -> None:
    receipt = tmp_path / "r.json"
    shutil.copyfile(RECEIPT, receipt)
    assert main(["receipt", "validate", str(receipt)]) == 0
    assert "unsigned" in capsys.readouterr().out


def test_a_one_byte_change_fails_verify(signed: dict, capsys) -> None:
    data = bytearray(signed["receipt"].read_bytes())
    data[-1:] = b" \n"  # whitespace only: the content hash still holds, the signed bytes do not
    signed["receipt"].write_bytes(bytes(data))
    assert main(["receipt", "verify", str(signed["receipt"]), "--pub", str(signed["pub"])]) == 2
    assert "signs another payload" in capsys.readouterr().err


def test_another_key_fails_verify(signed: dict, tmp_path: Path, capsys) -> None:
    _, other = signing.keygen(tmp_path / "other")
    assert main(["receipt", "verify", str(signed["receipt"]), "--pub", str(other)]) == 2
    assert "not by" in capsys.readouterr().err


def test_a_forged_signature_fails_verify(signed: dict, capsys) -> None:
    env = json.loads(signed["envelope"].read_text())
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[0] ^= 1
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    signed["envelope"].write_text(json.dumps(env))
    assert main(["receipt", "verify", str(signed["receipt"]), "--pub", str(signed["pub"])]) == 2
    assert "does not hold" in capsys.readouterr().err


@pytest.mark.parametrize("damage", [lambda t: t[: len(t) // 2], lambda t: "{}", lambda t: "[1, 2]"])
def test_a_truncated_or_malformed_envelope_is_one_line(signed: dict, capsys, damage) -> None:
    signed["envelope"].write_text(damage(signed["envelope"].read_text()))
    assert main(["receipt", "verify", str(signed["receipt"]), "--pub", str(signed["pub"])]) == 2
    err = capsys.readouterr().err
    assert "envelope" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_bad_sign_key_is_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "not-a-key"
    bad.write_text("hello")
    out = tmp_path / "k.json"
    rc = main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager,triton", "--sign-key", str(bad),
               "--out", str(out)])
    assert rc == 2 and "--sign-key" in capsys.readouterr().err and not out.exists()


def test_a_screen_signs_as_it_writes(tmp_path: Path) -> None:
    key, pub = signing.keygen(tmp_path / "keys")
    out = tmp_path / "k.json"
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager", "--checks", "1",
                 "--candidate", f"{Path(__file__).parents[1] / 'kernels' / 'fixtures' / 'good_candidate.py'}:"
                 "fused_add_rmsnorm", "--sign-key", str(key), "--out", str(out)]) == 0
    assert signing.verify(out, pub).keyid == signing.keyid_of(signing.load_public(pub))


# -- hostile files in place of an envelope or a key: one line and exit 2, never a wait or a read without end --------
REPO = Path(__file__).parents[2]
SMALL = archived("2026-12-01-h200-kernel-in-vllm/evidence-compiled-triton.tar.xz/apply/kernel.json")  # a v3 receipt


def _cli(*args: str, timeout: float = 120) -> tuple[int, list[str], list[str]]:
    """``python -m infercrane ARGS`` in a process of its own (this checkout's package), with a time limit (a
    regression that waits on a FIFO fails instead of hanging the suite) and 4 GiB of address space (one that reads
    /dev/zero dies of MemoryError instead of taking the machine's memory); (exit code, stdout lines, stderr lines)."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * 1024**3, 4 * 1024**3))

    p = subprocess.run([sys.executable, "-m", "infercrane", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=timeout, preexec_fn=limit)
    return p.returncode, p.stdout.strip().splitlines(), p.stderr.strip().splitlines()


@pytest.fixture
def small(tmp_path: Path) -> dict[str, Path]:
    key, pub = signing.keygen(tmp_path / "keys")
    receipt = tmp_path / "r.json"
    shutil.copyfile(SMALL, receipt)
    return {"key": key, "pub": pub, "receipt": receipt, "envelope": signing.envelope_path(receipt)}


def _validate_refuses(out: list[str], needle: str) -> None:
    invalid = [line for line in out if line.startswith("INVALID ")]
    assert len(invalid) == 1 and needle in invalid[0] and out[-1] == "1 of 1 receipt(s) invalid", out


def test_a_fifo_as_envelope_is_one_line_for_validate_and_verify(small: dict) -> None:
    os.mkfifo(small["envelope"])
    rc, out, err = _cli("receipt", "validate", str(small["receipt"]))
    assert rc == 2 and not err
    _validate_refuses(out, f"{small['envelope']}: is a FIFO (named pipe), not a regular file")
    rc, out, err = _cli("receipt", "verify", str(small["receipt"]), "--pub", str(small["pub"]))
    assert rc == 2 and len(err) == 1 and "is a FIFO (named pipe), not a regular file" in err[0]


def test_a_fifo_as_pub_is_one_line(small: dict, tmp_path: Path) -> None:
    fifo = tmp_path / "key.pub"
    os.mkfifo(fifo)
    for command in ("verify", "validate"):
        rc, out, err = _cli("receipt", command, str(small["receipt"]), "--pub", str(fifo))
        assert rc == 2 and not out and err == [f"infercrane: error: --pub: {fifo}: is a FIFO (named pipe), not a "
                                               "regular file; a key is read from a regular file"], (command, err)


def test_dev_zero_as_envelope_through_a_link_is_one_line(small: dict) -> None:
    small["envelope"].symlink_to("/dev/zero")
    rc, out, err = _cli("receipt", "validate", str(small["receipt"]))
    assert rc == 2 and not err
    _validate_refuses(out, f"{small['envelope']}: is a character device, not a regular file")
    rc, out, err = _cli("receipt", "verify", str(small["receipt"]), "--pub", str(small["pub"]))
    assert rc == 2 and len(err) == 1 and "is a character device" in err[0]


def test_dev_zero_as_pub_is_one_line(small: dict) -> None:
    rc, out, err = _cli("receipt", "verify", str(small["receipt"]), "--pub", "/dev/zero")
    assert rc == 2 and err == ["infercrane: error: --pub: /dev/zero: is a character device, not a regular file; a key "
                               "is read from a regular file"]


def test_a_10_gb_sparse_envelope_is_refused_by_its_size(small: dict) -> None:
    with open(small["envelope"], "wb") as f:
        os.truncate(f.fileno(), 10 * 1024**3)
    rc, out, err = _cli("receipt", "validate", str(small["receipt"]))
    assert rc == 2 and not err
    _validate_refuses(out, f"{small['envelope']}: 10 GiB, more than the ")


# -- forged envelopes: with no key nothing is "verified" and no signer is named; with --pub each fails ---------------
def _sign_with(receipt: Path, key: Path, envelope: Path) -> None:
    made = signing.sign(receipt, key)
    if made != envelope:
        made.replace(envelope)


def _zero_signature(small: dict, tmp_path: Path) -> None:
    _sign_with(small["receipt"], small["key"], small["envelope"])
    env = json.loads(small["envelope"].read_text())
    env["signatures"][0]["sig"] = base64.b64encode(bytes(64)).decode()
    small["envelope"].write_text(json.dumps(env))


def _another_key(small: dict, tmp_path: Path) -> None:
    other, _ = signing.keygen(tmp_path / "other")
    _sign_with(small["receipt"], other, small["envelope"])


def _another_file(small: dict, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "r.json"
    elsewhere.parent.mkdir()
    shutil.copyfile(RECEIPT, elsewhere)  # a valid receipt, signed by the right key; not this receipt's bytes
    signing.sign(elsewhere, small["key"]).replace(small["envelope"])


def _bad_base64(small: dict, tmp_path: Path) -> None:
    _sign_with(small["receipt"], small["key"], small["envelope"])
    env = json.loads(small["envelope"].read_text())
    env["payload"] = "not base64!" + env["payload"]
    small["envelope"].write_text(json.dumps(env))


def _bad_signature_base64(small: dict, tmp_path: Path) -> None:
    _sign_with(small["receipt"], small["key"], small["envelope"])
    env = json.loads(small["envelope"].read_text())
    env["signatures"][0]["sig"] = "%%%"
    small["envelope"].write_text(json.dumps(env))


def _wrong_payload_type(small: dict, tmp_path: Path) -> None:
    _sign_with(small["receipt"], small["key"], small["envelope"])
    env = json.loads(small["envelope"].read_text())
    env["payloadType"] = "application/vnd.in-toto+json"
    small["envelope"].write_text(json.dumps(env))


# forgery, what validate says without a key (None: refused), what validate/verify with --pub say
FORGERIES = [
    pytest.param(_zero_signature, None, "does not hold", id="all-zero signature"),
    pytest.param(_another_key, None, "not by", id="signed by another key"),
    pytest.param(_another_file, "signs another payload", "signs another payload", id="payload of another file"),
    pytest.param(_bad_base64, "payload is not valid base64", "payload is not valid base64", id="bad base64 payload"),
    pytest.param(_bad_signature_base64, "signatures[0].sig is not valid base64",
                 "signatures[0].sig is not valid base64", id="bad base64 signature"),
    pytest.param(_wrong_payload_type, "payloadType 'application/vnd.in-toto+json'",
                 "payloadType 'application/vnd.in-toto+json'", id="wrong payloadType"),
]


@pytest.mark.parametrize("forge, without_key, with_key", FORGERIES)
def test_a_forged_envelope(small: dict, tmp_path: Path, capsys, forge, without_key: str | None, with_key: str) -> None:
    forge(small, tmp_path)
    claimed = [s["keyid"] for s in json.loads(small["envelope"].read_text())["signatures"]]
    receipt, pub = str(small["receipt"]), str(small["pub"])

    rc = main(["receipt", "validate", receipt])
    out = capsys.readouterr().out.strip().splitlines()
    if without_key is None:  # nothing tells a forgery from a signature without the key: so nothing is claimed
        # the receipt's line, then only what validation could not check of it (``not checked: …``)
        assert rc == 0 and out[0].endswith("signature present, not verified (receipt verify --pub KEY checks it)"), out
        assert all(line.lstrip().startswith("not checked: ") for line in out[1:]), out
        assert not any(k in line for k in claimed for line in out) and not any("signed by" in line for line in out)
    else:
        assert rc == 2
        _validate_refuses(out, without_key)

    assert main(["receipt", "validate", receipt, "--pub", pub]) == 2
    _validate_refuses(capsys.readouterr().out.strip().splitlines(), with_key)

    assert main(["receipt", "verify", receipt, "--pub", pub]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert not captured.out and len(err) == 1 and with_key in err[0], err


def test_validate_with_pub_refuses_an_unsigned_receipt(small: dict, capsys) -> None:
    assert main(["receipt", "validate", str(small["receipt"]), "--pub", str(small["pub"])]) == 2
    _validate_refuses(capsys.readouterr().out.strip().splitlines(),
                      f"{small['receipt']}: unsigned (no r.json.dsse.json beside it), and --pub asks for a signature")

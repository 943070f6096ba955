"""Receipt signatures: ed25519 over the receipt's exact bytes in a DSSE envelope. A round trip verifies; a changed
byte, another key, another payload, a truncated envelope and a broken key each fail with one line."""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.receipts import signing

pytest.importorskip("cryptography")
RECEIPT = Path(__file__).parents[2] / "docs" / "benchmarks" / "2026-12-01-h200-kernel-two-ops" / "rms_norm.json"


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

"""Signatures for what validation cannot catch: ed25519 over a receipt's exact bytes, in a DSSE envelope.

Validation re-derives every conclusion from a receipt's raw evidence, so an edited decision or interval is caught;
raw samples fabricated consistently are not. A signature says who wrote these bytes: ``keygen`` writes an ed25519
key pair (PEM, through the ``cryptography`` package), ``sign`` writes ``<receipt>.dsse.json`` beside the receipt, and
``verify`` checks it against a public key.

The envelope is DSSE (the in-toto attestation envelope, https://github.com/secure-systems-lab/dsse):
``{"payloadType": PAYLOAD_TYPE, "payload": base64(receipt file bytes), "signatures": [{"keyid", "sig"}]}``; the
signature is over DSSE's pre-authentication encoding ``PAE(payloadType, payload)``. The key id is the first 16 hex
digits of the sha256 of the raw 32-byte public key. ``verify`` refuses an envelope whose payload is not the receipt's
bytes (a signature over another payload), one whose key id or signature does not match the public key given, and a
truncated or malformed envelope, each with one line.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError

PAYLOAD_TYPE = "application/vnd.infercrane.receipt+json"
ENVELOPE_SUFFIX = ".dsse.json"
MAX_ENVELOPE_BYTES = 64 * 1024 * 1024 * 2  # base64 of the largest receipt read, and room for the signatures


class SignatureInvalid(InputError):
    """A signature that does not hold (exit code 2, like any invalid receipt)."""


@dataclass(frozen=True)
class Verified:
    keyid: str
    envelope: Path


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as e:
        raise InputError("signing needs the `cryptography` package", hint="pip install cryptography") from e
    return serialization, ed25519


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 SP len(type) SP type SP len(body) SP body``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def envelope_path(receipt: Path | str) -> Path:
    receipt = Path(receipt)
    return receipt.with_name(receipt.name + ENVELOPE_SUFFIX)


def _raw_public(public_key: Any) -> bytes:
    serialization, _ = _crypto()
    return public_key.public_bytes(encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw)


def keyid_of(public_key: Any) -> str:
    return hashlib.sha256(_raw_public(public_key)).hexdigest()[:16]


def keygen(folder: Path | str, name: str = "infercrane") -> tuple[Path, Path]:
    """Write ``NAME.key`` (private, PKCS8 PEM, mode 0600) and ``NAME.pub`` (SubjectPublicKeyInfo PEM) into
    ``folder``; refuse to overwrite either."""
    serialization, ed25519 = _crypto()
    if not name or Path(name).name != name or name.startswith("."):
        raise InputError(f"--name {name!r}: give a plain file name (no folder, not hidden)")
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{folder}: cannot be made a folder for the keys ({e.strerror})") from None
    private_path, public_path = folder / f"{name}.key", folder / f"{name}.pub"
    for p in (private_path, public_path):
        if p.exists():
            raise InputError(f"{p} exists; keygen does not overwrite a key", hint="choose another --out or --name")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(encoding=serialization.Encoding.PEM, format=serialization.PrivateFormat.PKCS8,
                            encryption_algorithm=serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public_path.write_bytes(key.public_key().public_bytes(encoding=serialization.Encoding.PEM,
                                                          format=serialization.PublicFormat.SubjectPublicKeyInfo))
    return private_path, public_path


def _load_private(path: Path | str) -> Any:
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise InputError(f"{path}: not an unencrypted PEM private key ({type(e).__name__}: {e})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputError(f"{path}: an {type(key).__name__}, not an ed25519 private key",
                         hint="make one with `infercrane receipt keygen`")
    return key


def load_public(path: Path | str) -> Any:
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, TypeError) as e:
        raise InputError(f"{path}: not a PEM public key ({type(e).__name__}: {e})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise InputError(f"{path}: an {type(key).__name__}, not an ed25519 public key")
    return key


def sign(receipt: Path | str, key_path: Path | str) -> Path:
    """Sign the receipt file's bytes; write (or replace) ``<receipt>.dsse.json`` and return its path."""
    from .io import write_atomic_bytes

    key = _load_private(key_path)
    payload = Path(receipt).read_bytes()
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": keyid_of(key.public_key()),
                        "sig": base64.b64encode(key.sign(pae(PAYLOAD_TYPE, payload))).decode("ascii")}],
    }
    out = envelope_path(receipt)
    write_atomic_bytes(out, (json.dumps(envelope, indent=1) + "\n").encode("utf-8"))
    return out


def read_envelope(path: Path | str) -> dict[str, Any]:
    """The envelope at ``path``, checked for shape: one line naming what is wrong otherwise."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_ENVELOPE_BYTES:
            raise SignatureInvalid(f"{path}: larger than {MAX_ENVELOPE_BYTES} bytes; not an InferCrane envelope")
        env = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SignatureInvalid(f"{path}: no signature envelope", hint="sign with `infercrane receipt sign`") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise SignatureInvalid(f"{path}: not a DSSE envelope (truncated or not JSON: {type(e).__name__})") from None
    sigs = env.get("signatures") if isinstance(env, dict) else None
    if (not isinstance(env, dict) or env.get("payloadType") != PAYLOAD_TYPE or not isinstance(env.get("payload"), str)
            or not isinstance(sigs, list) or not sigs
            or not all(isinstance(s, dict) and isinstance(s.get("keyid"), str) and isinstance(s.get("sig"), str)
                       for s in sigs)):
        raise SignatureInvalid(f"{path}: not an InferCrane DSSE envelope (payloadType {PAYLOAD_TYPE}, a payload and "
                               "signatures with keyid and sig)")
    return env


def signed_by(receipt: Path | str) -> list[str] | None:
    """The key ids an envelope beside the receipt claims, when its payload is exactly the receipt's bytes; None when
    there is no envelope. Claims only: ``verify`` with the public key checks them."""
    path = envelope_path(receipt)
    if not path.exists():
        return None
    env = read_envelope(path)
    _receipt_payload(env, path, Path(receipt))
    return [s["keyid"] for s in env["signatures"]]


def _receipt_payload(env: dict[str, Any], path: Path, receipt: Path) -> bytes:
    """The envelope's payload, which must be exactly the receipt's bytes as they are now."""
    try:
        payload = base64.b64decode(env["payload"], validate=True)
    except ValueError:
        raise SignatureInvalid(f"{path}: the payload is not valid base64 (truncated?)") from None
    if payload != receipt.read_bytes():
        raise SignatureInvalid(f"{path}: the envelope signs another payload, not {receipt} as it is now")
    return payload


def verify(receipt: Path | str, public_path: Path | str, envelope: Path | str | None = None) -> Verified:
    """Check that the envelope signs exactly the receipt's bytes with the key in ``public_path``."""
    from cryptography.exceptions import InvalidSignature

    receipt = Path(receipt)
    path = Path(envelope) if envelope is not None else envelope_path(receipt)
    env = read_envelope(path)
    key = load_public(public_path)
    keyid = keyid_of(key)
    payload = _receipt_payload(env, path, receipt)
    mine = [s for s in env["signatures"] if s["keyid"] == keyid]
    if not mine:
        claimed = ", ".join(s["keyid"] for s in env["signatures"])
        raise SignatureInvalid(f"{path}: signed by key {claimed}, not by {public_path} (key {keyid})")
    for s in mine:
        try:
            key.verify(base64.b64decode(s["sig"], validate=True), pae(env["payloadType"], payload))
        except (InvalidSignature, ValueError):
            raise SignatureInvalid(f"{path}: the signature of key {keyid} does not hold for {receipt}") from None
    return Verified(keyid=keyid, envelope=path)


def check_sign_key(key: Path | None, flag: str = "--sign-key") -> None:
    """Refuse a signing key that cannot sign, before anything runs."""
    if key is None:
        return
    from ..errors import about

    with about(flag):
        _load_private(key)


def sign_written(path: Path, key: Path | None, con: Any = None) -> None:
    """Sign a receipt just written, when a key was given (``<receipt>.dsse.json`` beside it)."""
    if key is None:
        return
    from ..options import plain

    out = sign(path, key)
    if con is not None:
        con.print(f"signed: {plain(out)}")

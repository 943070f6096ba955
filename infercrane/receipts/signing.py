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

A signature is verified only against a public key the user names: the key ids an envelope lists are claims anyone
can write (an envelope whose signature is all zeros lists one too). Without a key, ``signature_state`` says that a
signature is present and not verified, and names no signer; an envelope that cannot be read, is malformed, or signs
other bytes than the receipt's is an error either way. Envelopes and keys are read through ``datafiles.read_bytes``
(a regular file, a size limit, a time limit), so a FIFO or ``/dev/zero`` in their place is one line, not a hang.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..datafiles import ENVELOPE, KEY, RECEIPT, read_bytes
from ..errors import InputError

PAYLOAD_TYPE = "application/vnd.infercrane.receipt+json"
ENVELOPE_SUFFIX = ".dsse.json"


class SignatureInvalid(InputError):
    """A signature that does not hold, or an envelope that cannot be checked (exit code 2, like any invalid
    receipt)."""


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
    pem = read_bytes(path, KEY)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as e:
        raise InputError(f"{path}: not an unencrypted PEM private key ({type(e).__name__}: {e})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputError(f"{path}: an {type(key).__name__}, not an ed25519 private key",
                         hint="make one with `infercrane receipt keygen`")
    return key


def load_public(path: Path | str) -> Any:
    serialization, ed25519 = _crypto()
    pem = read_bytes(path, KEY)
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as e:
        raise InputError(f"{path}: not a PEM public key ({type(e).__name__}: {e})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise InputError(f"{path}: an {type(key).__name__}, not an ed25519 public key")
    return key


def sign(receipt: Path | str, key_path: Path | str) -> Path:
    """Sign the receipt file's bytes; write (or replace) ``<receipt>.dsse.json`` and return its path."""
    from .io import write_atomic_bytes

    key = _load_private(key_path)
    payload = read_bytes(receipt, RECEIPT)
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
    """The envelope at ``path``, checked for shape (payloadType, a base64 payload, signatures each with a key id
    and a base64 signature): one line naming what is wrong otherwise. Nothing is verified here."""
    path = Path(path)
    try:
        env = json.loads(read_bytes(path, ENVELOPE).decode("utf-8"))
    except InputError as e:  # not a regular file, too large, missing, unreadable: said by the reader
        raise SignatureInvalid(e.message, hint=e.hint) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise SignatureInvalid(f"{path}: not a DSSE envelope (truncated or not JSON: {type(e).__name__})") from None
    sigs = env.get("signatures") if isinstance(env, dict) else None
    if (not isinstance(env, dict) or not isinstance(env.get("payload"), str)
            or not isinstance(sigs, list) or not sigs
            or not all(isinstance(s, dict) and isinstance(s.get("keyid"), str) and isinstance(s.get("sig"), str)
                       for s in sigs)):
        raise SignatureInvalid(f"{path}: not an InferCrane DSSE envelope (payloadType {PAYLOAD_TYPE}, a payload and "
                               "signatures with keyid and sig)")
    if env.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureInvalid(f"{path}: payloadType {str(env.get('payloadType'))[:80]!r} is not {PAYLOAD_TYPE!r}; "
                               "not an InferCrane receipt envelope")
    for i, s in enumerate(sigs):
        try:
            base64.b64decode(s["sig"], validate=True)
        except ValueError:
            raise SignatureInvalid(f"{path}: signatures[{i}].sig is not valid base64") from None
    return env


def _receipt_payload(env: dict[str, Any], path: Path, receipt: Path) -> bytes:
    """The envelope's payload, which must be exactly the receipt's bytes as they are now."""
    try:
        payload = base64.b64decode(env["payload"], validate=True)
    except ValueError:
        raise SignatureInvalid(f"{path}: the payload is not valid base64 (truncated?)") from None
    if payload != read_bytes(receipt, RECEIPT):
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
        claimed = ", ".join(repr(s["keyid"][:64]) for s in env["signatures"])  # claims, shown quoted: any text
        raise SignatureInvalid(f"{path}: not by {public_path} (key {keyid}): its signatures claim key {claimed}")
    for s in mine:
        try:
            key.verify(base64.b64decode(s["sig"], validate=True), pae(env["payloadType"], payload))
        except (InvalidSignature, ValueError):
            raise SignatureInvalid(f"{path}: the signature of key {keyid} does not hold for {receipt}") from None
    return Verified(keyid=keyid, envelope=path)


def signature_state(receipt: Path | str, public_path: Path | str | None = None) -> str:
    """What can be said of the signature beside ``receipt`` (``<receipt>.dsse.json``), in a few words:

    - no envelope: "unsigned" (SignatureInvalid when ``public_path`` asks for a signature);
    - without ``public_path``: the envelope is read, checked for shape and for signing exactly the receipt's bytes,
      and the answer is "signature present, not verified", naming no signer (anyone can write a key id);
    - with ``public_path``: ``verify``; the answer names the key that verified.

    SignatureInvalid (one line) for an envelope that cannot be read, is malformed, signs other bytes, or does not
    verify."""
    receipt = Path(receipt)
    path = envelope_path(receipt)
    if not os.path.lexists(path):  # a dangling link is an envelope that cannot be read, not an absent one
        if public_path is not None:
            raise SignatureInvalid(f"{receipt}: unsigned (no {path.name} beside it), and --pub asks for a signature",
                                   hint="sign it with `infercrane receipt sign`, or leave out --pub")
        return "unsigned"
    if public_path is None:
        _receipt_payload(read_envelope(path), path, receipt)
        return "signature present, not verified (receipt verify --pub KEY checks it)"
    v = verify(receipt, public_path)
    return f"signature verified: key {v.keyid} ({public_path})"


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

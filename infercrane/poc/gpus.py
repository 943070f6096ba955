"""GPU type keys: the short lower-case names a PoC receipt keys its per-GPU sections by (``h100``, ``l40s``).

A key comes from the measured hardware (``hardware.gpu``, the device name PyTorch reports), never from what was asked
for: ``gpu_key("NVIDIA H100 80GB HBM3") == "h100"``. A machine without a GPU is ``cpu``. A device name that names no
known type keeps a slug of its name (``nvidia_some_new_part``), so nothing is ever filed under another GPU's key.

Several GPUs of one type (a fan-out over ``H200,H200``) are told apart by the device each was measured on
(``hardware.gpu_uuid``): the first keeps the type's key, the n-th is ``<key>__<n>`` (``h200__2``, an identifier like
every per-GPU section name of the seed format); ``type_of_key`` reads the type back. A type key never holds ``__`` (a
slug's runs of other characters are one ``_``), so the two cannot be confused.
"""
from __future__ import annotations

import re

# Known GPU types, matched as whole words of the lower-cased device name (so "gh200" is never "h200" and "l40s" is
# never "l40"). Order: the first match wins.
KNOWN_GPU_TYPES: tuple[str, ...] = (
    "gb200", "gh200", "b300", "b200", "b100", "h200", "h100", "h800", "h20", "a100", "a800", "a10g", "a10", "a30",
    "a40", "l40s", "l40", "l4", "v100", "t4", "a6000", "a5000", "a4000", "rtx6000", "rtx5090", "rtx4090", "rtx3090",
)
CPU_KEY = "cpu"
_RTX = re.compile(r"\brtx\s*(\d{4})\b")


def gpu_key(device_name: str) -> str:
    """The GPU type key of a measured device name; ``cpu`` for ``"none"`` (no GPU)."""
    name = " ".join(str(device_name).lower().split())
    if name in ("", "none"):
        return CPU_KEY
    name = _RTX.sub(lambda m: f"rtx{m.group(1)}", name)
    for key in KNOWN_GPU_TYPES:
        if re.search(rf"\b{re.escape(key)}\b", name):
            return key
    slug = re.sub(r"[^a-z0-9]+", "_", name).strip("_")
    return slug if slug and slug[0].isalpha() else f"gpu_{slug}"


def instance_key(key: str, n: int) -> str:
    """The key of the ``n``-th device (from 1) of GPU type ``key``: ``h200``, ``h200__2``, ``h200__3``…"""
    return key if n == 1 else f"{key}__{n}"


_INSTANCE = re.compile(r"^(?P<key>[a-z0-9]+(?:_[a-z0-9]+)*)__(?P<n>[2-9]|[1-9][0-9]+)$")


def type_of_key(key: str) -> str:
    """The GPU type of a section key: ``h200__2`` -> ``h200``; a type key is its own type."""
    m = _INSTANCE.match(key)
    return m.group("key") if m else key


def receipt_device(doc: dict) -> str | None:
    """The physical device a receipt was measured on (``hardware.gpu_uuid``), None where it was not recorded."""
    return receipt_hardware(doc).get("gpu_uuid")


def distinct_devices(a: str | None, b: str | None) -> bool:
    """Whether two receipts of one GPU type are two GPUs: both record their device and the devices differ."""
    return a is not None and b is not None and a != b


def receipt_hardware(doc: dict) -> dict:
    """The machine a receipt's numbers were measured on: a kernel receipt's ``hardware``, a serving receipt's
    ``provenance.hardware`` ({} when it names none)."""
    return doc.get("hardware") or (doc.get("provenance") or {}).get("hardware") or {}


def gpu_key_of_receipt(doc: dict) -> str:
    """The GPU type a receipt's numbers were measured on (``receipt_hardware``)."""
    return gpu_key(receipt_hardware(doc).get("gpu", "none"))

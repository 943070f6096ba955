"""schema_version -> receipt model, for every version InferCrane reads; and where each lab's re-derivation rules live.

``receipts/validate.py`` checks what any receipt must hold (types, the content hash, finite numbers, derived numbers
within their printed rounding); what a lab concluded is derived again by that lab's own rules, named in
``LAB_RULES`` and imported when a receipt needs them, the way ``kernels/registry.py`` finds ops."""
from __future__ import annotations

import importlib
from typing import Any, Callable

from pydantic import BaseModel

from ..errors import InputError
from .models_v1 import POC_V1, SCREENING_V1, CudaKernelScreeningReceiptV1, OptimizationPocReceiptV1
from .models_v2 import POC_V2, SCREENING_V2, CudaKernelScreeningReceiptV2, OptimizationPocReceiptV2
from .models_v3 import SCREENING_V3, CudaKernelScreeningReceiptV3

MODELS: dict[str, type[BaseModel]] = {
    POC_V1: OptimizationPocReceiptV1,
    SCREENING_V1: CudaKernelScreeningReceiptV1,
    POC_V2: OptimizationPocReceiptV2,
    SCREENING_V2: CudaKernelScreeningReceiptV2,
    SCREENING_V3: CudaKernelScreeningReceiptV3,
}
# Versions whose documents carry a content hash (every version InferCrane writes).
HASHED = frozenset({POC_V2, SCREENING_V2, SCREENING_V3})
# Versions InferCrane reads but no longer writes, and whose conclusions (decisions, verdicts, intervals, quartiles) no
# lab's rules derive again: their arithmetic (each derived number against the numbers it comes from) and their
# content hash are all that validation checks. Every command that reads one says so first (``legacy_note``), and
# ``receipt validate`` accepts one only with ``--allow-legacy``.
LEGACY = frozenset({POC_V1, SCREENING_V1, SCREENING_V2})


def family(schema_version: str) -> str:
    """``infercrane.cuda-kernel-screening-receipt/v2`` -> ``infercrane.cuda-kernel-screening-receipt``."""
    return schema_version.rsplit("/", 1)[0]


def _version_number(schema_version: str) -> int | None:
    tail = schema_version.rsplit("/v", 1)[-1]
    return int(tail) if "/v" in schema_version and tail.isdigit() else None


def legacy_note(schema_version: str) -> str | None:
    """The one line that says a receipt is of a legacy version and what was checked of it; None for a current one."""
    if schema_version not in LEGACY:
        return None
    checked = "its arithmetic and content hash" if schema_version in HASHED else "its arithmetic (it carries no hash)"
    return f"legacy format {schema_version}: its conclusions were not derived again; checked: {checked} only"


def model_for(schema_version: str) -> type[BaseModel]:
    try:
        return MODELS[schema_version]
    except KeyError:
        known = [v for v in MODELS if family(v) == family(schema_version)]
        newest = max((_version_number(v) or 0 for v in known), default=0)
        number = _version_number(schema_version)
        if known and number is not None and number > newest:
            raise InputError(
                f"{schema_version!r} was written by a newer InferCrane: this one reads {family(schema_version)} up "
                f"to v{newest}", hint="upgrade InferCrane (pip install -U infercrane) to read it") from None
        raise InputError(
            f"unknown schema_version {schema_version!r}; known: {', '.join(MODELS)}",
            hint="check the file's schema_version, or upgrade InferCrane",
        ) from None


# lab -> "module:function" taking a receipt model and returning its problems, (field path, message) each
LAB_RULES: dict[str, str] = {
    "kernel": "infercrane.kernels.receipt:rederived_problems",  # a v3 kernel screen: its result decided again
    "serving": "infercrane.serving.receipt:rederived_problems",  # a serve ab / serve bench receipt: from its runs
    "poc": "infercrane.poc.derive:rederived_problems",  # a PoC receipt: its sections from the embedded receipts
}


def lab_rules(lab: str) -> Callable[[Any], list[tuple[str, str]]]:
    """The re-derivation rules of ``lab`` (``LAB_RULES``)."""
    module, _, name = LAB_RULES[lab].partition(":")
    return getattr(importlib.import_module(module), name)

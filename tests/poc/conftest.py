"""Fixtures of the PoC tests (built by ``builders``): the committed H200 evidence, and a PoC receipt over it."""
from __future__ import annotations

import json
from typing import Any

import pytest

from builders import H200_KERNEL, H200_PAIRED, poc_of, synthetic_public_ab


@pytest.fixture(scope="session")
def h200_docs() -> dict[str, dict[str, Any]]:
    """The committed H200 kernel and paired receipts, and a synthetic public A/B on the same GPU."""
    kernel = json.loads(H200_KERNEL.read_text())
    paired = json.loads(H200_PAIRED.read_text())
    from infercrane.serving.receipt import receipt_policy

    # decided under the paired receipt's own policy: a PoC's serving sections share one policy
    public = synthetic_public_ab(paired["provenance"]["hardware"], paired["provenance"]["model"],
                                 receipt_policy(paired))
    return {"kernel": kernel, "paired": paired, "public": public}


@pytest.fixture(scope="session")
def h200_poc(h200_docs) -> dict[str, Any]:
    return poc_of(h200_docs)

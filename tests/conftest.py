"""Test-suite wide hooks: ``@pytest.mark.gpu`` tests are skipped where no CUDA device is visible."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "receipts"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def seed_poc() -> Path:
    return EXAMPLES / "optimization-poc-v1.seed.json"


@pytest.fixture
def seed_screening() -> Path:
    return EXAMPLES / "cuda-kernel-screening-v1.seed.json"

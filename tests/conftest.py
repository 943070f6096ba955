"""Test-suite wide hooks: ``@pytest.mark.gpu`` tests are skipped where no CUDA device is visible; the processes the
tests start see Ctrl-C as a terminal delivers it."""
from __future__ import annotations

import signal
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


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and so
    # would every process it starts: Python then installs no KeyboardInterrupt handler and the tests that press
    # Ctrl-C on an InferCrane process would see it ignored (as it should be, for a process started that way). Those
    # tests model a user at a terminal, so their processes start with SIGINT's default disposition.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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

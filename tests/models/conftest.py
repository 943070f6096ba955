"""One Qwen3-0.6B stand-in per test session: building it trains a BPE, so tests share it (read-only)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tokenizers")


@pytest.fixture(scope="session")
def qwen3_stand_in(tmp_path_factory: pytest.TempPathFactory):
    from infercrane.models import write_stand_in

    out = tmp_path_factory.mktemp("stand-in") / "Qwen3-0.6B"
    info = write_stand_in("Qwen/Qwen3-0.6B", out)
    return info


@pytest.fixture
def stand_in_dir(qwen3_stand_in) -> Path:
    return qwen3_stand_in.path

"""One Qwen3-0.6B stand-in per test session (building it trains a BPE): tests share it, read-only. (The conversion of
SmolLM2 from its package, which serving tests use too, is ``smollm2_converted`` in tests/conftest.py.)"""
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

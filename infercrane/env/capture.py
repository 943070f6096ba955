"""Hardware and software capture, and the provenance block every receipt InferCrane writes carries.

Package versions are read from installed distributions' metadata (``importlib.metadata``), so capturing them imports
nothing; a package that is not installed is recorded as ``"absent"``. The GPU is read through PyTorch and, for the
driver, NVML when it is there.
"""
from __future__ import annotations

import os
import platform
import secrets
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__

ABSENT = "absent"
NO_GPU = "none"  # hardware.gpu (and compute_capability) of a machine without a GPU
# Receipt key -> the distributions that provide it (first installed wins).
SOFTWARE_DISTS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "triton": ("triton", "pytorch-triton"),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "vllm": ("vllm",),
    "aiperf": ("aiperf",),
    "transformers": ("transformers",),
    "tokenizers": ("tokenizers",),
    "cuda_bindings": ("cuda-bindings",),
    "nvrtc": ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"),
    "pydantic": ("pydantic",),
}


def dist_version(*names: str) -> str:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return ABSENT


def software_versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "infercrane": __version__}
    out.update({key: dist_version(*dists) for key, dists in SOFTWARE_DISTS.items()})
    if out["cupy"] != ABSENT:
        out["cupy_dist"] = next(d for d in SOFTWARE_DISTS["cupy"] if dist_version(d) != ABSENT)
    # A vLLM ops library loaded from a wheel without the package installed records itself.
    if out["vllm"] == ABSENT and os.environ.get("INFERCRANE_VLLM_VERSION"):
        out["vllm"] = os.environ["INFERCRANE_VLLM_VERSION"] + " (ops library only)"
    return out


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else v
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


# Set by an executor on the machine a job lands on (infercrane.executors.jobs.run_job): the GPU string the job asked
# for, recorded beside the device that ran it, and the executor's run id (Ray's task, Modal's app and call).
GPU_REQUEST_ENV = "INFERCRANE_GPU_REQUEST"
RUN_ID_ENV = "INFERCRANE_RUN_ID"


def hardware(*, probe_gpu: bool = True, gpu_request: str | None = None) -> dict[str, Any]:
    """This machine's hardware. With ``probe_gpu`` (default) PyTorch is imported to read the GPU, if installed.
    ``gpu_request`` defaults to what the executor asked for (``INFERCRANE_GPU_REQUEST``), if anything."""
    hw: dict[str, Any] = {
        "gpu_request": gpu_request if gpu_request is not None else os.environ.get(GPU_REQUEST_ENV) or None,
        "gpu": NO_GPU,
        "compute_capability": NO_GPU,
        "gpu_count": 0,
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count() or 1,
        "host": socket.gethostname() or "unknown",
        "platform": platform.platform(),
    }
    if not probe_gpu:
        return hw
    try:
        import torch
    except ImportError:
        return hw
    if not torch.cuda.is_available():
        return hw
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    hw.update(
        gpu=props.name,
        compute_capability=f"sm{props.major}{props.minor}",
        gpu_count=torch.cuda.device_count(),
        gpu_memory_gib=round(props.total_memory / 2**30, 2),
        driver=_driver_version(),
        cuda_runtime=torch.version.cuda,
        sm_count=props.multi_processor_count,
        l2_cache_mib=round(getattr(props, "L2_cache_size", 0) / 2**20, 2) or None,
        **_device_facts(getattr(props, "uuid", None)),
    )
    return hw


def _device_facts(uuid: Any) -> dict[str, Any]:
    """Which physical device PyTorch uses (its UUID, and its index as nvidia-smi numbers the host's GPUs, whatever
    CUDA_VISIBLE_DEVICES renumbers) and its maximum SM and memory clocks; None where they cannot be read. Two jobs of
    one GPU type are told apart by the UUID."""
    facts: dict[str, Any] = {"gpu_uuid": None, "gpu_index": None, "sm_clock_max_mhz": None,
                             "memory_clock_max_mhz": None}
    if uuid is None:
        return facts
    target = str(uuid) if str(uuid).startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
    facts["gpu_uuid"] = target
    try:
        out = subprocess.run(["nvidia-smi", f"--id={target}", "--query-gpu=index,clocks.max.sm,clocks.max.mem",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        index, sm, mem = (int(v) for v in out.stdout.strip().splitlines()[0].split(","))
        facts.update(gpu_index=index, sm_clock_max_mhz=sm, memory_clock_max_mhz=mem)
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        pass
    return facts


def git_state(start: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout InferCrane runs from. A tree shipped to a GPU machine names its commit in
    ``INFERCRANE_GIT_COMMIT``, which then wins over any ``.git`` beside it; dirtiness is then unknown. (None, None)
    when neither is known."""
    where = start or Path(__file__).resolve().parent
    shipped = os.environ.get("INFERCRANE_GIT_COMMIT") or None
    if shipped:  # named explicitly: it wins over whatever .git a copied tree carries (seen: a stale one)
        return shipped, None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return shipped, None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                capture_output=True, text=True, timeout=10)
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return shipped, None


RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


def run_id_from_env() -> str | None:
    """``INFERCRANE_RUN_ID`` when set (a remote app's id); it names an output folder, so it must be one plain name."""
    import re

    from ..errors import InputError

    value = os.environ.get(RUN_ID_ENV)
    if not value:
        return None
    if not re.match(RUN_ID_PATTERN, value) or value in (".", ".."):
        raise InputError(f"INFERCRANE_RUN_ID {value!r}: give one plain name (letters, digits, '.', '_', '-'; "
                         "no '/' or '..'), it names the run's folder under runs/")
    return value


def run_id_kind(run_id: str) -> str:
    """What made a run id: a Modal app (``ap-…``), a Ray task (``ray-…``, executors.ray_cluster), or this machine."""
    if run_id.startswith("ap-"):
        return "remote-app"
    return "ray-task" if run_id.startswith("ray-") else "local"


def new_run_id() -> str:
    """A local run id: UTC time plus random bits. A remote GPU cloud's app id replaces it there."""
    return "local-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(4)


def now() -> datetime:
    return datetime.now(timezone.utc).astimezone()


def provenance(
    *,
    config: dict[str, Any],
    hardware_info: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    run_id: str | None = None,
    command_line: list[str] | None = None,
    recorded_at: datetime | None = None,
    software: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The provenance block (``receipts.models_v2.Provenance``) for a receipt written now. ``hardware_info`` and
    ``software`` default to this machine's; pass the measuring machine's when deciding on evidence measured elsewhere."""
    from ..hashing import config_hash

    commit, dirty = git_state()
    run_id = run_id or run_id_from_env() or new_run_id()
    return {
        "recorded_at": (recorded_at or now()).isoformat(),
        "infercrane_version": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "command_line": list(command_line or sys.argv),
        "config": config,
        "config_sha256": config_hash(config),
        "run_id": run_id,
        "run_id_kind": run_id_kind(run_id),
        "hardware": hardware_info if hardware_info is not None else hardware(),
        "software": software if software is not None else software_versions(),
        "model": model,
    }

"""What an engine is asked to run inside vLLM: one home for the names both sides use.

InferCrane's side (``serving/kernels.py``) writes the selection into the engine's environment; the plugin
(``infercrane.vllm_plugin``), loaded by vLLM in each of its processes, reads it back. Nothing here imports torch or
vLLM.

* ``VLLM_OPS``: the vLLM IR ops InferCrane can provide (``vllm/ir/ops/layernorm.py`` in vLLM 0.22.1) and the kernel
  lab's op of the same computation, as each op's folder names it (``VLLM_OP`` in its package; its signatures in
  ``vllm_adapter.py`` beside it).
* ``IMPLS``: what can provide one: InferCrane's Triton kernel, its handwritten CUDA kernel, or a user's candidate
  file (``path.py:function``, the kernel lab's contract).
* ``provider_name``: the provider an implementation registers as (vLLM wants ``[a-z_][a-z_0-9]*``).
* ``ENV_KERNELS`` (the selection, JSON), ``ENV_STATS`` (the folder each process writes its record into).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infercrane.kernels.registry import vllm_ops

ENV_KERNELS = "INFERCRANE_VLLM_KERNELS"
ENV_STATS = "INFERCRANE_KERNEL_STATS"

# vLLM IR op -> the kernel lab's op: each op folder names its vLLM op (``infercrane.kernels.registry.vllm_ops``)
VLLM_OPS: dict[str, str] = vllm_ops()
IMPLS: tuple[str, ...] = ("triton", "cuda", "user")
PROVIDER_PREFIX = "infercrane_"
INFERCRANE_ROOT = Path(__file__).resolve().parents[2]  # the folder ``import infercrane`` resolves from


def provider_name(impl: str) -> str:
    return PROVIDER_PREFIX + impl


def vllm_op_of(name: str) -> str:
    """The vLLM IR op for either spelling (vLLM's ``fused_add_rms_norm`` or the kernel lab's ``fused_add_rmsnorm``);
    ValueError listing the known ones otherwise."""
    if name in VLLM_OPS:
        return name
    for vllm_name, lab_name in VLLM_OPS.items():
        if name == lab_name:
            return vllm_name
    raise ValueError(f"no vLLM IR op {name!r} InferCrane can provide; known: {', '.join(VLLM_OPS)}")


@dataclass(frozen=True)
class KernelChoice:
    """One op provided by one implementation. ``candidate``: ``path.py:function`` for ``impl: user``;
    ``in_place``: the user's contract when the file does not declare it; ``source_sha256``: the sources the provider
    runs (recorded, and the compile cache's key)."""

    vllm_op: str
    impl: str
    candidate: str | None = None
    in_place: bool | None = None
    source_sha256: str = ""

    def __post_init__(self) -> None:
        if self.vllm_op not in VLLM_OPS:
            raise ValueError(f"no vLLM IR op {self.vllm_op!r} InferCrane can provide; known: {', '.join(VLLM_OPS)}")
        if self.impl not in IMPLS:
            raise ValueError(f"kernel {self.impl!r} for {self.vllm_op}: known: {', '.join(IMPLS)}")
        if (self.impl == "user") != (self.candidate is not None):
            raise ValueError(f"{self.vllm_op}: impl 'user' needs a candidate file (path.py:function), and only it")

    @property
    def provider(self) -> str:
        return provider_name(self.impl)

    @property
    def lab_op(self) -> str:
        return VLLM_OPS[self.vllm_op]


def encode(choices: list[KernelChoice]) -> str:
    return json.dumps([asdict(c) for c in choices], sort_keys=True)


def decode(text: str) -> list[KernelChoice]:
    data: Any = json.loads(text)
    if not isinstance(data, list):
        raise ValueError(f"{ENV_KERNELS} must be a JSON list of kernel choices")
    return [KernelChoice(**d) for d in data]


def kernel_sources_sha256(op: str, impl: str, candidate: str | None) -> str:
    """Hash of the files a provider runs: the op's kernel folder and the plumbing the op folders share beside it
    (``kernels/ops/*.py``, ``*.cuh``: InferCrane's kernels) or the user's file, and the plugin itself. Computed here,
    without importing torch."""
    if impl == "user":
        files = [Path((candidate or "").rsplit(":", 1)[0]).expanduser()]
    else:
        ops = INFERCRANE_ROOT / "infercrane" / "kernels" / "ops"
        kernel_files = (".py", ".cu", ".cuh")
        files = sorted(p for p in (ops / VLLM_OPS[op]).iterdir() if p.suffix in kernel_files)
        files += sorted(p for p in ops.iterdir() if p.is_file() and p.suffix in kernel_files)
    files += sorted((INFERCRANE_ROOT / "infercrane" / "vllm_plugin").glob("*.py"))
    from infercrane.datafiles import CANDIDATE, read_bytes
    from infercrane.errors import InputError

    h = hashlib.sha256()
    for p in files:
        try:
            data = read_bytes(p, CANDIDATE) if impl == "user" else p.read_bytes()  # the user's file: bounded
        except (OSError, InputError) as exc:
            raise ValueError(f"kernel source {p} cannot be read: {getattr(exc, 'message', exc)}; check the "
                             "candidate's PATH.py:FUNCTION") from None
        h.update(str(p.name).encode() + b"\0" + data + b"\0")
    return h.hexdigest()

"""InferCrane's vLLM plugin: candidate kernels as providers of vLLM IR ops, inside a serving engine.

vLLM calls ``register`` (entry point ``vllm.general_plugins``: ``infercrane = infercrane.vllm_plugin:register``) in
every process it starts. It does nothing unless the environment names kernels (``selection.ENV_KERNELS``, which
InferCrane sets for a recipe with ``kernels:``); then it registers one provider per named op
(``providers.register_choice``) and each process keeps a record of what its providers did under
``selection.ENV_STATS``. vLLM runs a provider only when ``--ir-op-priority`` puts it first (InferCrane derives that
flag from the same recipe). Safe to call more than once per process (a second call does nothing).
"""
from __future__ import annotations

import os

_registered: list[str] = []


def register() -> None:
    from infercrane.vllm_plugin.selection import ENV_KERNELS, ENV_STATS, decode

    text = os.environ.get(ENV_KERNELS)
    if not text or _registered:
        return
    from vllm import ir  # only in a vLLM process, and only when asked

    from infercrane.vllm_plugin.providers import register_choice

    folder = os.environ.get(ENV_STATS)
    for choice in decode(text):
        register_choice(choice, ir.ops, folder)
        _registered.append(choice.provider)
    if folder:
        _record_lowering(folder)


LOWERING_LOGGER = "vllm.compilation.passes.ir.lowering_pass"


def _record_lowering(folder: str) -> None:
    """vLLM logs which implementation it lowered each IR op node to (``Selected implementations: …``) at DEBUG only;
    keep those lines, and only those, in ``<folder>/lowering-<pid>.log`` (vLLM's own log is left as it is)."""
    import logging
    from pathlib import Path

    log = logging.getLogger(LOWERING_LOGGER)
    handler = logging.FileHandler(Path(folder) / f"lowering-{os.getpid()}.log", delay=True)
    handler.setLevel(logging.DEBUG)
    handler.addFilter(lambda record: record.getMessage().startswith("Selected implementations"))
    log.addHandler(handler)
    if log.getEffectiveLevel() > logging.DEBUG:
        log.setLevel(logging.DEBUG)  # DEBUG records reach vLLM's handlers too, which drop them at their INFO level

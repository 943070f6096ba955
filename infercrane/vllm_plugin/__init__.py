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

    for choice in decode(text):
        register_choice(choice, ir.ops, os.environ.get(ENV_STATS))
        _registered.append(choice.provider)

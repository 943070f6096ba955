"""Engine kinds: what differs between the engines InferCrane launches (vLLM, its own test server), in one ordered
registry: how to tell one is installed, its command line, its default environment, its ``--help``.

The engine lifecycle (start, readiness, stop) is ``engine.py``; recipes name a kind by its key (``recipes.py``).
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from infercrane.errors import InputError, RunFailed

STARTUP_TIMEOUT_S = 900.0  # how long an engine may take to answer its health check and a first completion


class Recipe(Protocol):
    """What a kind reads of a recipe (``recipes.Recipe``) to build its command line."""

    model: str
    engine_args: Sequence[str]

    def resolved_model(self) -> str: ...

    def model_is_local(self) -> bool: ...

HOST = "127.0.0.1"  # engines bind loopback only
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def needs_dummy_weights(model_dir: str | Path) -> bool:
    """True for a model stand-in (its marker says so), or any model directory without weight files:
    vLLM can serve those only with ``--load-format dummy``."""
    path = Path(model_dir)
    try:
        from infercrane.models.standin import read_stand_in_marker
    except ImportError:
        marker = None
    else:
        marker = read_stand_in_marker(path)
    if marker is not None:
        return marker.get("weights") == "dummy"
    if not (path / "config.json").is_file():
        return False
    return not any(p.suffix in WEIGHT_SUFFIXES for p in path.rglob("*") if p.is_file())


# -- engine kinds (ordered registry) -------------------------------------------------------------
@dataclass(frozen=True)
class EngineKind:
    """What differs between engines: how to tell it is installed, its command line, its defaults."""

    name: str
    display_name: str
    install_hint: str
    underscores_ok: bool  # the engine's parser accepts --max_model_len for --max-model-len
    needs_model_config: bool  # a local model dir must hold config.json
    short_aliases: tuple[tuple[str, str], ...] = ()  # rewritten by the engine before parsing; not in --help
    # (flag, value) pairs that say what the engine does without them: two launches differing only in these are the
    # same launch (``without_defaults``; an engine pool shares one engine between them)
    default_args: tuple[tuple[str, str], ...] = ()

    def without_defaults(self, args: list[str]) -> list[str]:
        """``args`` with every ``--flag value`` / ``--flag=value`` pair of ``default_args`` left out (underscores read
        as dashes where the engine accepts them); anything else as given."""
        defaults = set(self.default_args)
        out, i = [], 0
        while i < len(args):
            head, eq, tail = args[i].partition("=")
            flag = head.replace("_", "-") if self.underscores_ok and head.startswith("--") else head
            if eq and (flag, tail) in defaults:
                i += 1
                continue
            if not eq and i + 1 < len(args) and (flag, args[i + 1]) in defaults:
                i += 2
                continue
            out.append(args[i])
            i += 1
        return out

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def base_command(self) -> list[str]:
        raise NotImplementedError

    def command(self, recipe: Recipe, port: int, *, dummy_weights: bool | None = None) -> list[str]:
        """The engine's command line for ``recipe`` on ``port``. ``dummy_weights``: whether the engine is told to load
        dummy weights (None: as the model folder says, ``needs_dummy_weights``; an engine without the notion ignores
        it)."""
        raise NotImplementedError

    def default_env(self) -> dict[str, str]:
        return {}

    def help_text(self) -> str:
        raise NotImplementedError


class _VllmKind(EngineKind):
    def available(self) -> tuple[bool, str]:
        import importlib.util

        from infercrane.env.capture import ABSENT, dist_version

        if importlib.util.find_spec("vllm") is None:
            return False, f"the vllm package is not importable by {sys.executable}"
        found = dist_version("vllm")
        return True, f"vllm {found}" if found != ABSENT else "vllm (version unknown: no package metadata)"

    def base_command(self) -> list[str]:
        # `python -m` rather than the `vllm` console script: a site installed with `pip --target`
        # (the GPU machine's) has a console script whose shebang names the staging interpreter.
        return [sys.executable, "-m", "vllm.entrypoints.cli.main"]

    def command(self, recipe: Recipe, port: int, *, dummy_weights: bool | None = None) -> list[str]:
        model = recipe.resolved_model()
        cmd = [*self.base_command(), "serve", model, "--host", HOST, "--port", str(port)]
        has_load_format = any(a.split("=", 1)[0] in ("--load-format", "--load_format") for a in recipe.engine_args)
        if dummy_weights is None:
            dummy_weights = recipe.model_is_local() and needs_dummy_weights(model)
        if dummy_weights and not has_load_format:
            cmd += ["--load-format", "dummy"]
        return [*cmd, *recipe.engine_args]

    def default_env(self) -> dict[str, str]:
        return {"VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}

    def help_text(self) -> str:
        proc = subprocess.run([*self.base_command(), "serve", "--help=all"], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "COLUMNS": "200"})
        if proc.returncode != 0:
            raise RunFailed(f"`vllm serve --help=all` exited with {proc.returncode}: {proc.stderr[-2000:]}",
                            hint="make vllm importable (PYTHONPATH) and run it by hand to see the error")
        return proc.stdout


class _TestServerKind(EngineKind):
    def available(self) -> tuple[bool, str]:
        import importlib.util

        if importlib.util.find_spec("aiohttp") is None:
            return False, "aiohttp is not installed (pip install 'infercrane[serve]')"
        return True, "infercrane.serving.testserver (aiohttp)"

    def base_command(self) -> list[str]:
        return [sys.executable, "-m", "infercrane.serving.testserver"]

    def command(self, recipe: Recipe, port: int, *, dummy_weights: bool | None = None) -> list[str]:
        return [*self.base_command(), "--host", HOST, "--port", str(port), "--model", recipe.model,
                *recipe.engine_args]

    def help_text(self) -> str:
        from infercrane.serving.testserver import parser

        return parser().format_help()


ENGINE_KINDS: dict[str, EngineKind] = {
    "vllm": _VllmKind("vllm", "vllm serve", "install vllm==0.22.1 in the Python that runs InferCrane on the GPU machine "
                      "(pip install vllm==0.22.1), or put an installed vLLM on PYTHONPATH",
                      underscores_ok=True, needs_model_config=True,
                      short_aliases=(("-O", "--optimization-level"),),  # vllm/utils/argparse_utils.py
                      # vllm/config/vllm.py (0.22.1): VllmConfig.performance_mode defaults to "balanced"
                      default_args=(("--performance-mode", "balanced"),)),
    "testserver": _TestServerKind("testserver", "infercrane.serving.testserver", "pip install 'infercrane[serve]'",
                                  underscores_ok=False, needs_model_config=False),
}


def get_engine_kind(name: str) -> EngineKind:
    try:
        return ENGINE_KINDS[name]
    except KeyError:
        raise InputError(f"unknown engine {name!r}", hint=f"known engines: {', '.join(ENGINE_KINDS)}") from None

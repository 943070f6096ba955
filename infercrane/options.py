"""What every option model shares (a leaf: anything may import it): the list type, flag names, output-path
checks, how to call InferCrane again, escaping foreign text for rich, and where a command runs (``ExecutorOptions``:
``--executor``, ``--gpus``, ``--ray-address``, ``--job-timeout-s``, declared once; ``executors.fanout`` runs a
command with them as one job per GPU type, whose files travel by content, a signing key never).

Kept free of heavy imports: the option models import it, and ``infercrane --help`` imports those.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from cyclopts import Parameter
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

T = TypeVar("T")


def split_commas(value: object) -> object:
    """``--rows 1,8,32``, ``--rows 1 --rows 8 --rows 32`` and ``--rows 1 8 32`` all give ``(1, 8, 32)``.

    Cyclopts hands the option models the raw tokens (one string per token); each token is split at commas here,
    before pydantic converts and checks the items, so a bad item is reported as itself ("--rows x"), not as "1,x".
    """
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        parts = [p for v in value for p in (v.split(",") if isinstance(v, str) else [v])]
        return tuple(p.strip() if isinstance(p, str) else p for p in parts if not isinstance(p, str) or p.strip())
    return value


def _show_list(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


# The one list option type of the CLI: Many[int], Many[Literal[...]], Many[str] | None. Several values after one
# flag, repeated flags, or commas; no ``--empty-…`` negative flag (an empty list is never a valid choice here).
Many = Annotated[tuple[T, ...], Parameter(consume_multiple=True, negative=(), show_default=_show_list),
                 BeforeValidator(split_commas)]


def flag(field: str) -> str:
    """The CLI flag of an option field: ``serving_receipt`` -> ``--serving-receipt``."""
    return "--" + field.replace("_", "-")


def program() -> str:
    """How to call InferCrane again from here, as a user would type it: ``infercrane`` when that name on PATH is the
    installation running now; else the path of the script that ran (``.venv/bin/infercrane``, relative to the current
    folder when under it); else ``PYTHON -m infercrane`` with the interpreter running now; each path shell-quoted.
    Every "next, run …" line the commands print starts with it (``command_line``), so that it works when copied."""
    import shlex
    import shutil
    import sys

    def shown(path: str) -> str:
        rel = os.path.relpath(path)
        return shlex.quote(rel if not rel.startswith("..") else path)

    script = sys.argv[0] if sys.argv and Path(sys.argv[0]).name == "infercrane" else None
    on_path = shutil.which("infercrane")
    here = script or str(Path(sys.executable).with_name("infercrane"))
    if on_path and os.path.exists(here) and os.path.samefile(on_path, here):
        return "infercrane"
    if script and os.path.exists(script):
        return shown(os.path.abspath(script))
    if os.path.exists(here):
        return shown(here)
    return f"{shown(sys.executable)} -m infercrane"


def command_line(*args: Any) -> str:
    """An InferCrane command line to suggest: ``program()`` then each argument shell-quoted, so that a path with a
    space, a quote or a ``$`` in it stays one argument when the line is pasted into a shell."""
    import shlex

    return " ".join([program(), *(shlex.quote(str(a)) for a in args)])


def plain(text: Any) -> str:
    """``text`` made safe to print through rich: markup in it (``[/oops]``) is shown, not interpreted."""
    from rich.markup import escape

    return escape(str(text))


def check_output_file(path: Path, option: str, *, not_over: Path | None = None) -> None:
    """Refuse, before any work, an output file that could not be written: an existing directory, or a parent folder
    that cannot be created or written; and the measured receipt ``not_over`` (deciding again never overwrites the
    evidence it decides from). Creates nothing."""
    from .errors import InputError

    path = Path(path)
    if not_over is not None and path.exists() and Path(not_over).exists() and path.samefile(not_over):
        raise InputError(f"{option} {path}: is the receipt being decided again; write the new receipt elsewhere")
    if path.is_dir():
        raise InputError(f"{option} {path}: is an existing directory; give a file path, e.g. {path / 'receipt.json'}")
    _check_creatable(path.parent, option, f"{option} {path}")


def check_output_folder(path: Path, option: str) -> None:
    """As ``check_output_file`` for an output folder: an existing file in its place is refused."""
    from .errors import InputError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path}: is an existing file, not a folder; give a folder path")
    _check_creatable(path, option, f"{option} {path}")


def _check_creatable(folder: Path, option: str, what: str) -> None:
    from .errors import InputError

    probe = Path(os.path.abspath(folder))
    while not probe.exists():
        if probe.is_symlink():  # a dangling link: mkdir through it fails
            raise InputError(f"{what}: {probe} is a dangling link; give a path whose folders can be created")
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(f"{what}: cannot create its folder, {probe} is a file; give a path under a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{what}: {probe} is not writable; give a path you can write to")


class FailOnOption(BaseModel):
    """``--fail-on``: the exit code carries the decision (``decide.vocabulary.FAIL_ON``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fail_on: Literal["reject", "inconclusive"] | None = Field(
        None, description="Exit 1 when the decision is reject (reject), or reject or inconclusive (inconclusive), "
                          "after writing the receipt; without it the exit code says only whether the command ran.")


class PriceOptions(BaseModel):
    """``--gpu-price`` / ``--gpu-prices``: the GPU-hour prices a receipt's cost per token is read at
    (``decide/cost.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_price: Many[str] | None = Field(None, description="A GPU type's price in US dollars per GPU-hour, TYPE=USD "
                                                          "(e.g. H100=2.49), over the shipped table; repeatable.")
    gpu_prices: Path | None = Field(None, description="A GPU price table (the form of infercrane/decide/prices.yaml) "
                                                      "instead of the shipped one.")


EXECUTOR_FIELDS = ("executor", "gpus", "ray_address", "job_timeout_s")


class ExecutorOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    executor: Literal["local", "ray", "modal"] = Field(
        "local", description="Where it runs: here, one task per GPU type on a Ray cluster, or one Modal "
                             "function per GPU type.")
    gpus: Many[str] | None = Field(None, description="GPU types, one job each (e.g. H100!,L40S,H200; the executor's "
                                                     "spelling; a type given twice, H200,H200, is two jobs at once "
                                                     "on two GPUs of it); the receipts are merged per measured "
                                                     "GPU.")
    ray_address: str | None = Field(None, description="Ray cluster address (default: RAY_ADDRESS or a running "
                                                       "cluster); local starts one on this machine.")
    job_timeout_s: float = Field(3600.0, gt=0, description="Wall-clock limit of each job where it runs.")

    @model_validator(mode="after")
    def _executor_options_consistent(self) -> "ExecutorOptions":
        if self.ray_address is not None and self.executor != "ray":
            raise ValueError(f"--ray-address is read by --executor ray only (this is --executor {self.executor})")
        if "job_timeout_s" in self.model_fields_set and not self.fans_out():
            raise ValueError("--job-timeout-s limits the jobs of --gpus / --executor; without them the screen runs "
                             "here (its workers' limit is --timeout-s)")
        return self

    def fans_out(self) -> bool:
        return self.gpus is not None or self.executor != "local"

"""Where a command runs, declared once: ``--executor``, ``--gpus``, ``--ray-address``, ``--job-timeout-s``; and the
job a command's own options become on another machine.

A command with these options (``kernel screen``) runs as before when none is given. With ``--gpus`` (or an executor
other than ``local``) it becomes one job per GPU type (``executors.fanout``): the same command, with the options the
user gave, run where the executor places it. Files the options name (a candidate kernel, a policy, a serving receipt)
travel by content and are named by their file name there; a signing key never travels (sign the result here with
``infercrane receipt sign``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..options import Many, flag

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


def job_argv(command: tuple[str, ...], config: BaseModel, *, exclude: tuple[str, ...] = ()) -> tuple[list[str], dict[str, bytes]]:
    """(argv, files) of ``command`` with the options the user set on ``config`` (defaults stay defaults there),
    without the executor's own options, ``out`` and ``exclude``; a Path option's file travels by content."""
    argv, files = list(command), {}
    fields = type(config).model_fields
    for name in fields:
        if name in EXECUTOR_FIELDS or name in exclude or name == "out" or name not in config.model_fields_set:
            continue
        value = getattr(config, name)
        if value is None:
            continue
        if isinstance(value, Path):
            files[value.name] = value.read_bytes()
            value = value.name
        elif name == "candidate":  # path/to/file.py:function -> file.py:function, the file shipped
            path, _, fn = str(value).rpartition(":")
            files[Path(path).name] = Path(path).read_bytes()
            value = f"{Path(path).name}:{fn}"
        argv += _flag_value(name, value, fields[name])
    return argv, files


def _flag_value(name: str, value: Any, field: Any) -> list[str]:
    if isinstance(value, bool):
        negative = _negative_flag(field)
        return [flag(name)] if value else [negative or f"--no-{name.replace('_', '-')}"]
    if isinstance(value, (tuple, list)):
        return [flag(name), ",".join(map(str, value))]
    return [flag(name), str(value)]


def _negative_flag(field: Any) -> str | None:
    from cyclopts import Parameter

    for meta in getattr(field, "metadata", ()):
        if isinstance(meta, Parameter) and meta.negative:
            neg = meta.negative
            return neg if isinstance(neg, str) else neg[0]
    return None

"""Every option of ``infercrane kernel screen``, declared once: type, bounds, default and help on one field.

The CLI is generated from this model; the resolved, frozen object is what the receipt hashes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from cyclopts import Parameter

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from .ops.fused_add_rmsnorm.spec import BANDWIDTH_ROWS, DEFAULT_ROWS

Mode = Literal["launch", "graph", "cold"]
# Lists take several values after one flag: --rows 1 8 32.
Many = Parameter(consume_multiple=True)


class ScreenConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field("Qwen/Qwen3-0.6B", description="Catalog model id, or a config.json / model folder, whose "
                                                      "hidden size, eps and layer count set the shapes.")
    rows: Annotated[tuple[PositiveInt, ...], Many] = Field(DEFAULT_ROWS, description="Row counts (tokens in flight) to screen.")
    bandwidth_rows: bool = Field(False, description=f"Also screen {', '.join(map(str, BANDWIDTH_ROWS))} rows "
                                                    "(the memory-bandwidth regime).")
    impls: Annotated[tuple[str, ...] | None, Many] = Field(None, description="Implementations to screen (default: all; see "
                                                            "`infercrane kernel list`).")
    candidate: str | None = Field(None, description="Your kernel as path/to/file.py:function, screened as 'user'.")
    candidate_in_place: bool | None = Field(None, description="Override the candidate's declared contract "
                                                              "(in place like vLLM, or returning (out, residual)).")
    modes: Annotated[tuple[Mode, ...], Many] = Field(("launch", "graph", "cold"), description="Timing modes.")
    trials: int = Field(5, ge=1, le=100, description="Timing trials; implementations are interleaved in each.")
    samples: int = Field(20, ge=3, le=1000, description="Samples per implementation, row count and mode in a trial.")
    checks: int = Field(3, ge=1, le=20, description="Correctness checks per row count, each on fresh random inputs.")
    dtype: Literal["bfloat16", "float16"] = Field("bfloat16", description="Storage dtype.")
    decode_step_ms: float | None = Field(None, gt=0, description="Decode step wall time for the end-to-end (Amdahl) "
                                                                 "ceiling.")
    serving_receipt: Path | None = Field(None, description="Read the decode step time from a serving receipt "
                                                           "(median TPOT of --serving-recipe at --serving-concurrency).")
    serving_recipe: str = Field("compiled", description="Recipe whose TPOT is the decode step time.")
    serving_concurrency: int = Field(1, ge=1, description="Concurrency whose TPOT is the decode step time.")
    policy: Path | None = Field(None, description="A kernel policy file overriding the packaged thresholds.")
    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="auto: timed on a CUDA GPU, functional "
                                                                       "(correctness only) without one.")
    seed: int = Field(0, ge=0, description="Base seed of the random inputs.")
    timeout_s: float = Field(600.0, gt=0, description="Per-implementation worker timeout.")
    out: Path | None = Field(None, description="Receipt path (default: runs/RUN_ID/kernel-screen.json).")

    def all_rows(self) -> tuple[int, ...]:
        extra = tuple(r for r in BANDWIDTH_ROWS if r not in self.rows) if self.bandwidth_rows else ()
        return tuple(self.rows) + extra

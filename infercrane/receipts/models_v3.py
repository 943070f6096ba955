"""``infercrane.cuda-kernel-screening-receipt/v3``: the screen's result, whole, with what was decided from it.

v3 keeps every field of the seed format (``candidate``, ``measurements`` with ``<impl>_ms`` and
``speedup_vs_<impl>``, ``decision``, ``reason``, ``qualification_boundary``, …) and carries the screen's result as
measured (``result``: ``infercrane.receipts.screen_result.ScreenResult``, one model), the policy it was decided under and the
decode step time behind the end-to-end ceiling. Every derived field — the decision table, every timing cell's summary
and flags, every comparison, the decisions, the Amdahl ceilings — is recomputed from ``result`` by ``validate``, so a
receipt whose decision, verdict, interval or median was edited does not validate, whatever its hash says.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from infercrane.decide.policy import KernelPolicy
from .screen_result import ScreenResult

from .base import AwareDatetime, NonEmptyStr, Strict
from .models_v2 import (
    SHA256,
    AmdahlRecord,
    CandidateDecision,
    CandidateV2,
    DecisionCode,
    Hardware,
    Provenance,
    ScreeningMeasurementV2,
    TimingMode,
)

SCREENING_V3 = "infercrane.cuda-kernel-screening-receipt/v3"


class ModelShapeSourceV3(Strict):
    id: NonEmptyStr
    revision: str | None = None
    op: NonEmptyStr
    operator: NonEmptyStr
    hidden_size: PositiveInt
    rms_norm_eps: PositiveFloat
    num_hidden_layers: PositiveInt | None = None
    dtype: NonEmptyStr
    source: NonEmptyStr


class DecodeStep(Strict):
    """The decode step wall time the Amdahl ceiling divides by, and where it came from.

    Without ``rows`` the step stands for every decision row (``decode_step``); with ``rows`` it is the step of a
    decode batch of that many rows (``decode_steps``, one per row count): in decode each sequence in flight
    contributes one row, so the step at concurrency ``c`` is the step of ``rows = c``."""

    ms: PositiveFloat
    source: NonEmptyStr
    rows: PositiveInt | None = Field(default=None, description="the row count (decode batch) this step is for")


class DecidedFrom(Strict):
    """The receipt whose result this one decides again (``kernel decide``)."""

    receipt: NonEmptyStr
    content_sha256: str = SHA256


class CudaKernelScreeningReceiptV3(Strict):
    schema_version: Literal["infercrane.cuda-kernel-screening-receipt/v3"]
    recorded_at: AwareDatetime
    evidence_class: Literal["real-gpu-microbenchmark", "cpu-functional-check"]
    app_id: NonEmptyStr
    model_shape_source: ModelShapeSourceV3
    hardware: Hardware
    software: dict[str, NonEmptyStr]
    candidate: CandidateV2
    measurements_timing_mode: TimingMode | None
    measurements: list[ScreeningMeasurementV2]
    decision: NonEmptyStr
    decision_code: DecisionCode
    reason: NonEmptyStr
    qualification_boundary: NonEmptyStr
    other_candidates: list[CandidateDecision] = Field(default_factory=list)
    decode_step: DecodeStep | None = None
    decode_steps: list[DecodeStep] = Field(default_factory=list, description="one decode step per row count "
                                                                              "(instead of decode_step)")
    amdahl: list[AmdahlRecord] = Field(default_factory=list)
    policy: KernelPolicy
    policy_sha256: str | None = Field(default=None, description="sha256 of the policy's canonical JSON")
    result: ScreenResult
    decided_from: DecidedFrom | None = None
    provenance: Provenance
    content_sha256: str = SHA256

    @model_validator(mode="after")
    def _one_kind_of_step(self) -> "CudaKernelScreeningReceiptV3":
        if self.decode_step is not None and self.decode_steps:
            raise ValueError("decode_step (one step for every row) and decode_steps (one per row count) both given; "
                             "a receipt holds one or the other")
        if self.decode_step is not None and self.decode_step.rows is not None:
            raise ValueError("decode_step stands for every row and names none; a step for one row count goes in "
                             "decode_steps")
        rows = [s.rows for s in self.decode_steps]
        if any(r is None for r in rows):
            raise ValueError("each of decode_steps names the row count it is for (rows)")
        if len(set(rows)) != len(rows):
            raise ValueError(f"decode_steps names a row count more than once: {rows}")
        return self

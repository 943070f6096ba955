"""Shapes, byte model and calling contract for fused residual-add + RMSNorm.

Calling contract for every implementation (ours, the baselines', a user's):

* out-of-place: ``fn(x, residual, weight, eps) -> (out, residual_out)``; inputs untouched.
* in-place (vLLM's contract): ``fn(x, residual, weight, eps) -> None``; afterwards ``x`` holds ``out``
  and ``residual`` holds ``x + residual``.

``x`` and ``residual`` are ``[rows, hidden]`` contiguous tensors of ``dtype``; ``weight`` is ``[hidden]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OPERATOR = "fused residual-add + RMSNorm"
OP_NAME = "fused_add_rmsnorm"
DEFAULT_ROWS: tuple[int, ...] = (1, 8, 32, 128, 512)
BANDWIDTH_ROWS: tuple[int, ...] = (2048, 8192, 32768)
# Decode-step calls per transformer layer: the residual add before attention and before the MLP each go
# through one fused add+RMSNorm (the first layer's first norm has no residual yet, so this is "about 2").
CALLS_PER_LAYER = 2

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class FusedAddRMSNormSpec:
    """One resolved problem: a hidden size, an epsilon, a dtype and the rows to screen."""

    hidden_size: int
    eps: float
    dtype: str = "bfloat16"
    rows: tuple[int, ...] = DEFAULT_ROWS
    num_layers: int | None = None
    model_id: str | None = None
    model_revision: str | None = None
    config_fields: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.hidden_size <= 0:
            raise ValueError(f"hidden_size must be positive, got {self.hidden_size}")
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, got {self.eps}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if not self.rows or any(r <= 0 for r in self.rows):
            raise ValueError(f"rows must be positive integers, got {self.rows}")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def bytes_moved(self, rows: int) -> int:
        """Fewest bytes one call must move: read x and residual, write out and the new residual, read weight."""
        return rows * self.hidden_size * self.dtype_bytes * 4 + self.hidden_size * self.dtype_bytes

    @property
    def calls_per_decode_step(self) -> int | None:
        return None if self.num_layers is None else CALLS_PER_LAYER * self.num_layers

    @classmethod
    def from_model_config(
        cls,
        config: dict[str, Any],
        *,
        rows: tuple[int, ...] = DEFAULT_ROWS,
        dtype: str = "bfloat16",
        model_id: str | None = None,
        model_revision: str | None = None,
    ) -> "FusedAddRMSNormSpec":
        """Resolve the op's shapes from a Hugging Face style ``config.json`` dict."""
        try:
            hidden = int(config["hidden_size"])
        except KeyError as e:
            raise ValueError("model config has no 'hidden_size'") from e
        eps = config.get("rms_norm_eps", config.get("layer_norm_epsilon", config.get("layer_norm_eps")))
        if eps is None:
            raise ValueError("model config has no 'rms_norm_eps' (nor layer_norm_epsilon/layer_norm_eps)")
        layers = config.get("num_hidden_layers")
        used = {k: config[k] for k in ("hidden_size", "rms_norm_eps", "num_hidden_layers", "torch_dtype") if k in config}
        return cls(
            hidden_size=hidden,
            eps=float(eps),
            dtype=dtype,
            rows=tuple(rows),
            num_layers=int(layers) if layers is not None else None,
            model_id=model_id,
            model_revision=model_revision,
            config_fields=used,
        )


SPEC = FusedAddRMSNormSpec

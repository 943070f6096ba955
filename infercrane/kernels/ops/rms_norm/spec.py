"""RMSNorm (vLLM's ``rms_norm``): shapes, byte model, calling contracts, inputs, tolerances.

Calling contract for every implementation (ours, the baselines', a user's):

* out-of-place: ``fn(x, weight, eps) -> out``; inputs untouched.
* in-place (vLLM's contract, ``torch.ops._C.rms_norm(out, input, weight, epsilon)``): ``fn(out, x, weight, eps) ->
  None``; afterwards ``out`` holds the result (the harness hands it a NaN-filled buffer); ``x`` is untouched.

``x`` is a ``[rows, hidden]`` contiguous tensor of ``dtype``; ``weight`` is ``[hidden]``. The screened width is the
model's ``hidden_size`` (Qwen3's final norm); the q/k norms run the same op at ``head_dim`` over rows x heads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infercrane.kernels.op import Contract, OpSpec, generator, normal
from infercrane.kernels.ops.rowwise import BANDWIDTH_ROWS, DEFAULT_ROWS, norm_tolerances
from infercrane.receipts.screen_result import Tolerance

OPERATOR = "RMSNorm"
OP_NAME = "rms_norm"

# Tolerances are data, by the row-wise norms' rule (``rowwise.norm_tolerances``): the same as fused add+RMSNorm's.
# vLLM's kernel and the native path round the normalized value to the storage dtype before the weight multiply and
# round the product again: up to 2 roundings, <= ~2u + products of u (bf16 8e-3, fp16 1e-3 relative).
TOLERANCES: dict[str, Tolerance] = norm_tolerances(2, "8e-3", "1e-3")


@dataclass(frozen=True)
class RMSNormSpec(OpSpec):
    """One resolved problem: a width (the model's hidden size), an epsilon, a dtype and the rows to screen."""

    rows: tuple[int, ...] = DEFAULT_ROWS

    # The calling contract: the tensors, and how an implementation is called.
    INPUTS = ("x", "weight")
    ROW_TENSORS = ("x",)
    OUTPUTS = ("out",)
    RETURNS = Contract(args=("x", "weight", "eps"), returns=("out",))
    IN_PLACE = Contract(args=("out", "x", "weight", "eps"), writes={"out": "out"})
    # What the op is, what one call must move, how often a decode step calls it, how close is correct.
    OP_NAME = OP_NAME
    OPERATOR = OPERATOR
    SEMANTICS = "out = x * rsqrt(mean(x^2) + eps) * weight (float32 inside)"
    BYTE_MODEL = "rows * hidden * dtype_bytes * 2 + hidden * dtype_bytes (read x; write out; read weight)"
    CALLS_PER_LAYER = 0
    CALLS_NOTE = ("at hidden_size: 1 call per decode step (the final norm); the q/k norms are the same op at "
                  "head_dim, another shape")
    TOLERANCES = TOLERANCES

    def bytes_moved(self, rows: int) -> int:
        """Fewest bytes one call must move: read x, write out, read weight."""
        return rows * self.hidden_size * self.dtype_bytes * 2 + self.hidden_size * self.dtype_bytes

    @property
    def calls_per_decode_step(self) -> int | None:
        return None if self.num_layers is None else 1

    def make_inputs(self, rows: int, device: Any, seed: int, scale: float) -> dict[str, Any]:
        """``x ~ N(0, s^2)``, ``weight ~ N(1, 0.5^2)``, generated on ``device``."""
        gen = generator(device, seed)
        h = self.hidden_size
        return {"x": normal((rows, h), gen, device, self.dtype, 0.0, scale),
                "weight": normal((h,), gen, device, self.dtype, 1.0, 0.5)}

    def oracle(self, inputs: dict[str, Any]) -> dict[str, Any]:
        from infercrane.kernels.ops.rms_norm.oracle import rms_norm_ref

        return {"out": rms_norm_ref(inputs["x"], inputs["weight"], self.eps)}


SPEC = RMSNormSpec
__all__ = ["BANDWIDTH_ROWS", "DEFAULT_ROWS", "OPERATOR", "OP_NAME", "SPEC", "TOLERANCES", "RMSNormSpec"]

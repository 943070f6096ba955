"""Fused residual-add + RMSNorm (vLLM's ``fused_add_rms_norm``): shapes, byte model, calling contracts, inputs,
tolerances.

Calling contract for every implementation (ours, the baselines', a user's):

* out-of-place: ``fn(x, residual, weight, eps) -> (out, residual_out)``; inputs untouched.
* in-place (vLLM's contract): ``fn(x, residual, weight, eps) -> None``; afterwards ``x`` holds ``out``
  and ``residual`` holds ``x + residual``.

``x`` and ``residual`` are ``[rows, hidden]`` contiguous tensors of ``dtype``; ``weight`` is ``[hidden]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infercrane.kernels.op import DTYPE_BYTES, Contract, OpSpec, generator, normal
from infercrane.kernels.ops.rowwise import BANDWIDTH_ROWS, DEFAULT_ROWS, norm_tolerances
from infercrane.receipts.screen_result import Tolerance

OPERATOR = "fused residual-add + RMSNorm"
OP_NAME = "fused_add_rmsnorm"
# Decode-step calls per transformer layer: the residual add before attention and before the MLP each go
# through one fused add+RMSNorm (the first layer's first norm has no residual yet, so this is "about 2").
CALLS_PER_LAYER = 2

# Tolerances are data, by the row-wise norms' rule (``rowwise.norm_tolerances``). vLLM's CUDA kernel and its native
# path round the normalized value before multiplying by the weight and round the product again: with the stored
# output, up to 3 roundings, |err| <= ~3u (bf16 1.2e-2, fp16 1.5e-3 relative). The new residual is one rounded sum;
# the oracle rounds it the same way, so it normally matches exactly and is held to the same rule.
TOLERANCES: dict[str, Tolerance] = norm_tolerances(3, "1.2e-2", "1.5e-3")


@dataclass(frozen=True)
class FusedAddRMSNormSpec(OpSpec):
    """One resolved problem: a hidden size, an epsilon, a dtype and the rows to screen."""

    rows: tuple[int, ...] = DEFAULT_ROWS

    # The calling contract: the tensors, and how an implementation is called.
    INPUTS = ("x", "residual", "weight")
    ROW_TENSORS = ("x", "residual")
    OUTPUTS = ("out", "residual_out")
    RETURNS = Contract(args=("x", "residual", "weight", "eps"), returns=("out", "residual_out"))
    IN_PLACE = Contract(args=("x", "residual", "weight", "eps"), writes={"out": "x", "residual_out": "residual"})
    # What the op is, what one call must move, how often a decode step calls it, how close is correct.
    OP_NAME = OP_NAME
    OPERATOR = OPERATOR
    SEMANTICS = "residual_out = x + residual (rounded to dtype); out = rmsnorm(residual_out) * weight"
    BYTE_MODEL = ("rows * hidden * dtype_bytes * 4 + hidden * dtype_bytes (read x, residual; write out, new "
                  "residual; read weight)")
    CALLS_PER_LAYER = CALLS_PER_LAYER
    CALLS_NOTE = "2 per transformer layer per decode step (before attention and before the MLP)"
    TOLERANCES = TOLERANCES

    def bytes_moved(self, rows: int) -> int:
        """Fewest bytes one call must move: read x and residual, write out and the new residual, read weight."""
        return rows * self.hidden_size * self.dtype_bytes * 4 + self.hidden_size * self.dtype_bytes

    def make_inputs(self, rows: int, device: Any, seed: int, scale: float) -> dict[str, Any]:
        """``x ~ N(0, s^2)``, ``residual ~ N(0, (2s)^2)``, ``weight ~ N(1, 0.5^2)``, generated on ``device``."""
        gen = generator(device, seed)
        h = self.hidden_size
        return {
            "x": normal((rows, h), gen, device, self.dtype, 0.0, scale),
            "residual": normal((rows, h), gen, device, self.dtype, 0.0, 2.0 * scale),
            "weight": normal((h,), gen, device, self.dtype, 1.0, 0.5),
        }

    def oracle(self, inputs: dict[str, Any]) -> dict[str, Any]:
        from infercrane.kernels.ops.fused_add_rmsnorm.oracle import fused_add_rmsnorm_ref

        out, res = fused_add_rmsnorm_ref(inputs["x"], inputs["residual"], inputs["weight"], self.eps)
        return {"out": out, "residual_out": res}

    def repeated_reference(self, after: dict[str, Any]) -> dict[str, Any]:
        """After any number of in-place calls, ``x`` holds RMSNorm of the final residual times the weight (the last
        call normalized the residual it wrote): the oracle on ``x = 0`` and that residual gives it. The residual
        itself is the sum of every earlier call's output and follows from nothing observable."""
        import torch

        ref = self.oracle({"x": torch.zeros_like(after["residual"]), "residual": after["residual"],
                           "weight": after["weight"]})
        return {"out": ref["out"]}


SPEC = FusedAddRMSNormSpec
__all__ = ["BANDWIDTH_ROWS", "CALLS_PER_LAYER", "DEFAULT_ROWS", "DTYPE_BYTES", "OPERATOR", "OP_NAME", "SPEC",
           "TOLERANCES", "FusedAddRMSNormSpec"]

"""Fused residual-add + RMSNorm (vLLM's ``fused_add_rms_norm``).

Semantics: ``residual_out = x + residual``; ``out = rmsnorm(residual_out) * weight``.
"""

VLLM_OP = "fused_add_rms_norm"  # the vLLM IR op of the same computation; its adapter: vllm_adapter.py

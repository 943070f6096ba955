"""Fused residual-add + RMSNorm (vLLM's ``fused_add_rms_norm``).

Semantics: ``residual_out = x + residual``; ``out = rmsnorm(residual_out) * weight``.
"""

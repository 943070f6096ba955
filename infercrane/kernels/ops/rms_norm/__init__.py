"""RMSNorm (vLLM's ``rms_norm``): ``out = x * rsqrt(mean(x^2) + eps) * weight``, no residual.

Qwen3 uses it at hidden 1024 for the final norm and at head_dim 128 for the q/k norms.
"""

VLLM_OP = "rms_norm"  # the vLLM IR op of the same computation; its adapter: vllm_adapter.py

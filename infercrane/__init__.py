"""InferCrane: turns a proposed LLM-inference optimization into an auditable decision."""

__version__ = "0.1.0"

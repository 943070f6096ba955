"""Packaged default decision policies (``kernel.yaml``, ``serving.yaml``), read by ``infercrane.decide.policy``."""

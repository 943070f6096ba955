"""Kernel lab: screen candidate kernels for one operator against baselines and a float32 oracle."""

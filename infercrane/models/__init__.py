"""Models: the catalog of published model configs and the offline stand-in built from them.

``catalog``: exact public ``config.json`` / ``generation_config.json`` per model id and revision.
``standin``: a servable directory (real config, locally trained tokenizer, dummy weights) for machines
without hub access.
``real``: a servable directory with real weights, converted once from the package a packaged catalog entry names
(``infercrane model prepare``).
"""
from __future__ import annotations

from infercrane.models.catalog import CatalogEntry, ModelConfig, get, list_models, load_model_config
from infercrane.models.standin import (
    AIPERF_OFFLINE_TOKENIZER_FINDING,
    StandInInfo,
    aiperf_tokenizer_env,
    read_stand_in_marker,
    write_stand_in,
)

__all__ = [
    "AIPERF_OFFLINE_TOKENIZER_FINDING",
    "CatalogEntry",
    "ModelConfig",
    "StandInInfo",
    "aiperf_tokenizer_env",
    "get",
    "list_models",
    "load_model_config",
    "read_stand_in_marker",
    "write_stand_in",
]

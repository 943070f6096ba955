"""Receipts: schema-versioned JSON records of an optimization decision and the evidence behind it.

``models_v1`` holds the two formats InferCrane was specified from; ``models_v2`` InferCrane's own, which keep every
v1 field name and meaning and add provenance, raw evidence, statistics and a content hash. ``registry`` maps a
``schema_version`` to its model; ``io`` reads and writes (atomically); ``validate`` adds the consistency rules.
"""

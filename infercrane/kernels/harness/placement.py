"""Placement conditions of a graph-mode sample: drawn on purpose, the same way for every implementation.

On an H200 a ~1 us in-place kernel replayed in a CUDA graph reads one of two or three levels (1.09, 1.21 or 1.27-1.30
us per call at one row for InferCrane's Triton kernel), and which one depends on the graph's placement, not on the
kernel: the input buffers' address and whether the graph is the process's first (docs/benchmarks/
2026-12-02-h200-kernel-decides/). Neither is the
kernel's own time, and a serving engine that captures many graphs meets both. So graph mode treats placement as a
random effect: each graph a worker times is captured under a condition drawn from the screen's seed and the graph's
index (``draw``), the same draw for every implementation, recorded in the receipt; a trial times several graphs
(``GRAPHS_PER_TRIAL``) and its figure is their mean, so both levels enter every trial and the spread between levels
is part of the between-trial variance that the paired-trial interval already uses. Where the per-graph figures of a
cell separate into two levels (``split_levels``) the receipt reports each level.

A condition: ``pad_bytes`` (a device allocation made before the inputs and held while the graph is timed, which
shifts the inputs' addresses), ``freed`` (tiny unrelated graphs captured and freed right before the timed capture)
and ``kept`` (tiny graphs captured and kept alive while the timed graph is replayed).
"""
from __future__ import annotations

import random
import statistics

from infercrane.receipts.screen_result import Levels, PlacementCondition

GRAPHS_PER_TRIAL = 4
PAD_MAX_BYTES = 1 << 20  # pads under 1 MiB (the allocator's small-block pool, where the inputs go), 512-byte steps
PAD_STEP_BYTES = 512
MAX_FREED = 3
MAX_KEPT = 1
PAD_ZERO_CHANCE = 0.25  # a quarter of the graphs get no pad: their inputs sit where a fresh allocator puts them
LEVEL_GAP = 0.04  # two sorted per-graph figures further apart than this (relative) start a second level
DRAW_METHOD = (
    f"per graph: rng = random.Random(f'{{seed}}:{{index}}'); pad_bytes = 0 if rng.random() < {PAD_ZERO_CHANCE} "
    f"else {PAD_STEP_BYTES} * rng.randrange(1, {PAD_MAX_BYTES // PAD_STEP_BYTES}); freed = rng.randrange("
    f"{MAX_FREED + 1}); kept = rng.randrange({MAX_KEPT + 1}); index = trial * graphs_per_trial + graph, the same "
    "for every implementation; before each graph's buffers are made the allocator's cache is emptied, so the pad "
    "sets where they land"
)


def draw(seed: int, index: int) -> PlacementCondition:
    """The condition of graph ``index`` under the screen's ``seed`` (``DRAW_METHOD``)."""
    rng = random.Random(f"{int(seed)}:{int(index)}")
    pad = 0 if rng.random() < PAD_ZERO_CHANCE else PAD_STEP_BYTES * rng.randrange(1, PAD_MAX_BYTES // PAD_STEP_BYTES)
    return PlacementCondition(index=index, pad_bytes=pad, freed=rng.randrange(MAX_FREED + 1),
                              kept=rng.randrange(MAX_KEPT + 1))


def split_levels(values: list[float], gap: float = LEVEL_GAP) -> Levels:
    """One level, or two split at the widest relative gap between sorted values when it exceeds ``gap``."""
    ordered = sorted(values)
    if len(ordered) < 2:
        return Levels(levels=1)
    widest, at = max((b / a - 1.0, i) for i, (a, b) in enumerate(zip(ordered, ordered[1:])))
    if widest <= gap:
        return Levels(levels=1, widest_gap=widest)
    low, high = ordered[: at + 1], ordered[at + 1:]
    return Levels(levels=2, widest_gap=widest, low_n=len(low), low_median_us=statistics.median(low),
                  high_n=len(high), high_median_us=statistics.median(high))

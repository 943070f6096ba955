import pytest

from infercrane.decide import (
    change_percent,
    latency_p95_reduction_percent,
    throughput_speedup,
    ttft_p95_reduction_percent,
)

# paired_aiperf rows of seed receipt 000: (eager, compiled) tok/s, p95 TTFT ms, p95 latency ms, and its derived fields.
SEED = [
    ((88.9783, 573.1606), (35.2737, 15.5103), (779.8675, 116.1183), (6.4416, 56.03, 85.11)),
    ((659.8918, 3914.6829), (62.3547, 34.1316), (806.4452, 137.0689), (5.9323, 45.26, 83.00)),
    ((2375.5471, 10485.4782), (96.2253, 70.1075), (867.8393, 200.0858), (4.4139, 27.14, 76.94)),
]


@pytest.mark.parametrize("tok_s, ttft, latency, expected", SEED)
def test_reproduces_seed_compiled_vs_eager(tok_s, ttft, latency, expected):
    assert (
        throughput_speedup(*tok_s),
        ttft_p95_reduction_percent(*ttft),
        latency_p95_reduction_percent(*latency),
    ) == expected


def test_throughput_mode_change_matches_seed_sentence():
    # "it reduced output throughput by 0.54 percent"
    assert change_percent(12950.2671, 12880.3447) == -0.54


def test_rejects_zero_baseline():
    with pytest.raises(ValueError, match="a_tok_s"):
        throughput_speedup(0.0, 1.0)

"""Request traces (serving/trace.py): Mooncake's format read and checked line by line, summarized, and written by the
seeded generator from stated distributions."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from infercrane.errors import InputError
from infercrane.serving.trace import LengthDistribution, TraceSpec, generate, parse_trace, read_trace, summarize

MOONCAKE = ('{"timestamp": 0, "input_length": 512, "output_length": 128}\n'
            '{"timestamp": 150, "input_length": 256, "output_length": 64}\n'
            '{"timestamp": 155, "input_length": 1024, "output_length": 256, "hash_ids": [1, 2, 3]}\n')


def test_a_mooncake_trace_reads_and_summarizes(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    path.write_text(MOONCAKE)
    trace = read_trace(path)
    s = summarize(trace)
    assert s["requests"] == 3 and s["span_s"] == pytest.approx(0.155)
    assert s["mean_rate_per_s"] == pytest.approx(2 / 0.155)
    assert s["input_length"]["p50"] == 512 and s["input_length"]["max"] == 1024
    assert s["output_length"]["mean"] == pytest.approx(448 / 3)
    assert s["with_hash_ids"] == 1 and s["shared_blocks_share"] == 0.0
    assert len(s["sha256"]) == 64


@pytest.mark.parametrize("text,match", [
    ('{"timestamp": 0, "input_length": 5}\n', "line 1: output_length: Field required"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": -1, "input_length": 5, '
     '"output_length": 2}\n', "line 2: timestamp"),
    ('{"timestamp": 10, "input_length": 5, "output_length": 2}\n{"timestamp": 5, "input_length": 5, '
     '"output_length": 2}\n', "line 2: timestamp 5 is before the previous line's 10"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 2}\n', "line 1: input_length"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2, "colour": 1}\n', "line 1: colour"),
    ("not json\n", "line 1 is not JSON"),
    ("\n\n", "no request in it"),
])
def test_a_bad_line_is_named(text, match):
    with pytest.raises(InputError, match=match):
        parse_trace(text, "t.jsonl")


def test_shared_prefix_blocks_are_counted():
    text = ('{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}\n'
            '{"timestamp": 1, "input_length": 1024, "output_length": 8, "hash_ids": [1, 3]}\n')
    assert summarize(parse_trace(text, "t"))["shared_blocks_share"] == pytest.approx(0.25)


def _spec(**kw):
    base = {"requests": 4000, "rate_per_s": 20.0, "input_length": {"kind": "lognormal", "median": 512, "sigma": 0.5,
                                                                   "low": 16, "high": 4096},
            "output_length": {"kind": "uniform", "low": 32, "high": 256}, "seed": 7}
    return TraceSpec.model_validate(base | kw)


def test_the_generator_is_seeded_and_follows_its_distributions():
    text = generate(_spec())
    assert text == generate(_spec()) and text != generate(_spec(seed=8))
    trace = parse_trace(text, "generated")  # what it writes reads back
    s = summarize(trace)
    assert s["requests"] == 4000
    # Poisson arrivals at 20/s: mean gap 50 ms; 4000 gaps give a mean within a few percent
    assert s["mean_rate_per_s"] == pytest.approx(20.0, rel=0.05)
    gaps = [b.timestamp - a.timestamp for a, b in zip(trace.requests, trace.requests[1:])]
    cv = math.sqrt(sum((g - 50) ** 2 for g in gaps) / len(gaps)) / 50  # exponential gaps: coefficient of variation 1
    assert 0.9 < cv < 1.1
    assert s["input_length"]["p50"] == pytest.approx(512, rel=0.05)
    assert 16 <= s["input_length"]["min"] and s["input_length"]["max"] <= 4096
    assert s["output_length"]["min"] >= 32 and s["output_length"]["max"] <= 256
    assert s["output_length"]["mean"] == pytest.approx(144, rel=0.03)


def test_constant_arrivals_and_fixed_lengths():
    spec = _spec(requests=5, rate_per_s=4.0, arrival="constant", input_length={"kind": "fixed", "value": 128},
                 output_length={"kind": "fixed", "value": 64})
    lines = [json.loads(x) for x in generate(spec).splitlines()]
    assert [x["timestamp"] for x in lines] == [0, 250, 500, 750, 1000]
    assert {(x["input_length"], x["output_length"]) for x in lines} == {(128, 64)}


@pytest.mark.parametrize("dist,match", [
    ({"kind": "fixed"}, "needs value"),
    ({"kind": "lognormal", "median": 100}, "needs sigma"),
    ({"kind": "uniform", "low": 10, "high": 5}, "below low"),
])
def test_a_distribution_without_its_parameters_is_refused(dist, match):
    with pytest.raises(ValidationError, match=match):
        LengthDistribution.model_validate(dist)


def test_the_trace_commands_write_and_show_a_trace(tmp_path: Path, capsys):
    from infercrane.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text("requests: 50\nrate_per_s: 4\narrival: constant\ninput_length: {kind: fixed, value: 128}\n"
                    "output_length: {kind: fixed, value: 64}\nseed: 3\n")
    out = tmp_path / "t.jsonl"
    assert main(["serve", "trace", "generate", str(spec), "--out", str(out)]) == 0
    assert summarize(read_trace(out))["span_s"] == pytest.approx(49 / 4)
    assert main(["serve", "trace", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "50 requests over 12.250 s (mean arrival rate 4/s)" in text
    assert "input length (tokens): min 128, p50 128" in text
    assert main(["serve", "trace", "generate", str(spec), "--out", str(out)]) == 2  # never overwritten
    spec.write_text("requests: 50\nrate_per_s: 4\ninput_length: {kind: fixed}\noutput_length: {kind: fixed, "
                    "value: 64}\n")
    assert main(["serve", "trace", "generate", str(spec), "--out", str(tmp_path / "u.jsonl")]) == 2
    assert "needs value" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 5, "input_length": 1, "output_length": 1}\n{"timestamp": 1, "input_length": 1, '
                   '"output_length": 1}\n')
    assert main(["serve", "trace", "show", str(bad)]) == 2
    assert "line 2: timestamp 1 is before" in capsys.readouterr().err

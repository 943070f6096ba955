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


def _blocks_hold(req, block):
    n = len(req.hash_ids)
    return (n - 1) * block < req.input_length <= n * block


def test_the_shipped_trace_is_what_its_readme_says():
    import re

    from infercrane.serving.trace import TRACES_DIR, TraceReplay, read_trace, trace_presets

    assert "mooncake-conversation-180s" in trace_presets()
    path = TRACES_DIR / "mooncake-conversation-180s.jsonl"
    t = read_trace(path)
    readme = (TRACES_DIR / "README.md").read_text()
    assert t.sha256 in readme and (TRACES_DIR / "LICENSE-mooncake.txt").read_text().lstrip().startswith("Apache")
    assert f"{len(t.requests)} requests" in readme
    assert t.requests[-1].timestamp < 180_000 and max(r.input_length for r in t.requests) <= 3072
    assert max(r.output_length for r in t.requests) <= 1024
    assert all(_blocks_hold(r, 32) for r in t.requests if r.input_length < 3072)  # blocks of 512 / 16 tokens
    clipped = [r for r in t.requests if r.input_length == 3072]
    assert all(len(r.hash_ids) == 3072 // 32 for r in clipped)
    assert re.search(rf"{len(clipped)} inputs\s+still above 3072", readme)
    replay = TraceReplay.load("mooncake-conversation-180s", 6.0, 32)
    assert replay.requests == len(t.requests) and abs(replay.span_s - t.requests[-1].timestamp / 6000.0) < 1e-9


def test_cut_trace_keeps_the_span_and_each_requests_blocks(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("cut_trace", Path(__file__).parents[2] / "scripts" / "cut_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = [{"timestamp": 500, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]},
           {"timestamp": 1500, "input_length": 1025, "output_length": 3000, "hash_ids": [1, 2, 3]},
           {"timestamp": 2500, "input_length": 9000, "output_length": 5, "hash_ids": list(range(18))},
           {"timestamp": 4000, "input_length": 10, "output_length": 5, "hash_ids": [7]}]
    out = mod.cut(src, from_s=1.0, to_s=4.0, input_scale=16, max_input=256, max_output=1024, source_block_size=512)
    assert [r["timestamp"] for r in out] == [500, 1500]  # [1 s, 4 s), relative to 1 s
    assert out[0] == {"timestamp": 500, "input_length": 65, "output_length": 1024, "hash_ids": [1, 2, 3]}
    assert out[1]["input_length"] == 256 and out[1]["hash_ids"] == list(range(8))  # 9000 / 16 capped: 8 blocks of 32
    src_file, dest = tmp_path / "s.jsonl", tmp_path / "d.jsonl"
    src_file.write_text("".join(json.dumps(r) + "\n" for r in src))
    assert mod.main([str(src_file), str(dest), "--to-s", "5", "--max-input", "4096", "--max-output", "4096"]) == 0
    with pytest.raises(SystemExit, match="not overwritten"):
        mod.main([str(src_file), str(dest), "--to-s", "5", "--max-input", "4096", "--max-output", "4096"])

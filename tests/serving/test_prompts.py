"""Shared prompt files (serving/prompts.py) and the driver command lines that read them (no live run here; the live
AIPerf run on a shared file is in test_aiperf_live.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from infercrane.serving.drivers import RunSpec, get_driver
from infercrane.serving.prompts import (WINDOW_PROMPTS_PER_SLOT, load_tokenizer, prompt_count, read_prompts_file,
                                        write_point_prompts)
from infercrane.serving.recipes import RECIPE_SCHEMA_VERSION, Recipe
from infercrane.serving.workload import WORKLOAD_SCHEMA_VERSION, Workload, load_workload, resolve_tokenizer


def workload(**kw) -> Workload:
    data = dict(schema_version=WORKLOAD_SCHEMA_VERSION, name="w", concurrency=[1, 4], input_tokens=32,
                output_tokens=8, runs_per_arm=3, seed=5, prompts="shared")
    data.update(kw)
    return Workload(**data)


@pytest.fixture(scope="module")
def tok(stand_in_dir):
    recipe = Recipe(schema_version=RECIPE_SCHEMA_VERSION, name="ts", engine="testserver", model=str(stand_in_dir))
    return load_tokenizer(*resolve_tokenizer(recipe.resolved()))


def test_prompt_file_is_deterministic_distinct_per_point_and_counts_its_tokens(tmp_path, tok):
    w = workload()
    a = write_point_prompts(tmp_path / "a.jsonl", tok, w, 1, 4)
    b = write_point_prompts(tmp_path / "b.jsonl", tok, w, 1, 4)  # the other arm at the same point
    assert a.read_bytes() == b.read_bytes()
    prompts = read_prompts_file(a)
    assert len(prompts) == prompt_count(w, 4) == w.requests_at(4) + w.warmup_at(4)
    assert len({p.text for p in prompts}) == len(prompts)
    for p in prompts:  # the recorded count is the tokenizer's own count of the text
        assert p.input_tokens == len(tok.encode(p.text, add_special_tokens=False))
    assert sum(p.input_tokens == 32 for p in prompts) >= 0.9 * len(prompts)
    assert all(abs(p.input_tokens - 32) <= 2 for p in prompts)
    line = json.loads(a.read_text().splitlines()[0])
    assert set(line) == {"text", "prompt", "output_length", "input_tokens"}
    assert line["text"] == line["prompt"] and line["output_length"] == 8
    others = [read_prompts_file(write_point_prompts(tmp_path / f"{r}-{c}.jsonl", tok, w, r, c))
              for r, c in ((0, 4), (2, 4), (1, 1))]
    seen = {p.text for p in prompts}
    for other in others:  # no prompt of one point is sent at another
        assert not seen & {p.text for p in other}
    reseeded = read_prompts_file(write_point_prompts(tmp_path / "s.jsonl", tok, w.with_overrides(seed=6), 1, 4))
    assert not seen & {p.text for p in reseeded}


def test_time_window_points_get_prompts_per_slot():
    assert prompt_count(workload(window_s=10.0), 8) == WINDOW_PROMPTS_PER_SLOT * 8


def test_two_driver_preset_shares_prompts():
    w = load_workload("seed-paired-two-drivers")
    base = load_workload("seed-paired-counts")
    assert w.prompts == "shared" and base.prompts == "driver"
    assert w.model_dump(exclude={"name", "description", "prompts"}) == \
        base.model_dump(exclude={"name", "description", "prompts"})


def spec(tmp_path: Path, **kw) -> RunSpec:
    data = dict(base_url="http://127.0.0.1:8000", served_model="m", tokenizer="Qwen/Qwen3-0.6B",
                endpoint="completions", streaming=True, ignore_eos=True, input_tokens=16, output_tokens=8,
                concurrency=4, request_count=8, warmup_requests=4, seed=0, token_count_source="server",
                request_timeout_s=600.0, artifact_dir=tmp_path, timeout_s=60.0, arm="a", recipe_sha256="0" * 64,
                run_index=0, prompts_file=tmp_path / "p.jsonl")
    data.update(kw)
    return RunSpec(**data)


def test_aiperf_reads_the_prompt_file_instead_of_making_prompts(tmp_path):
    # flags checked against AIPerf 0.12's aiperf/config/flags/cli_config.py (and by test_drivers' --help check)
    cmd = get_driver("aiperf").command(spec(tmp_path))
    joined = " ".join(cmd)
    for part in (f"--input-file {tmp_path / 'p.jsonl'} --custom-dataset-type single_turn",
                 "--dataset-sampling-strategy sequential", "--osl 8 --osl-stddev 0", "--extra-inputs ignore_eos:true",
                 "--extra-inputs min_tokens:8", "--request-count 8", "--warmup-request-count 4"):
        assert part in joined, part
    assert "--isl" not in cmd and "--isl-stddev" not in cmd


def test_vllm_bench_reads_the_prompt_file_instead_of_making_prompts(tmp_path):
    # Command construction only: vLLM is not installed here, so this is not a live run. Flag names as vLLM's
    # vllm/benchmarks/datasets add_dataset_parser and CustomDataset define them (read from the source).
    drv = get_driver("vllm-bench")
    for endpoint in ("completions", "chat"):
        cmd = drv.command(spec(tmp_path, endpoint=endpoint))
        assert cmd[:5] == [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve"]
        joined = " ".join(cmd)
        for part in (f"--dataset-name custom --dataset-path {tmp_path / 'p.jsonl'}", "--custom-output-len 8",
                     "--disable-shuffle", "--no-oversample", "--skip-chat-template", "--num-prompts 8",
                     "--num-warmups 4", "--ignore-eos"):
            assert part in joined, part
        assert not {"--random-input-len", "--random-output-len", "--random-range-ratio"} & set(cmd)
        assert "--dataset-name random" not in joined


def test_a_tokenizer_that_cannot_load_names_the_flag_that_gives_one(tmp_path: Path) -> None:
    from infercrane.errors import InputError

    empty = tmp_path / "no-tokenizer-here"
    empty.mkdir()
    with pytest.raises(InputError) as e:
        load_tokenizer(str(empty))
    (line,) = e.value.lines()
    assert line.startswith(f"cannot load tokenizer {str(empty)!r} from local files") and "--tokenizer DIR" in line
    assert "serving.tokenizer" in line and "prompts: driver" in line

"""The sitting's engine pool: every engine started at once and warmed as it comes up (``EnginePool.start_ahead``),
each with a fixed KV cache sized from the model and the largest batch of its own workloads and a memory share that
holds it (``sitting_memory``), and the fallbacks when that cannot be done."""
from __future__ import annotations

import json

from infercrane.serving import ab
from infercrane.serving.ab import EnginePool, kv_cache_bytes_for, launch_key
from infercrane.serving.engine import Engine
from infercrane.serving.recipes import load_recipe
from infercrane.serving.workload import WORKLOAD_SCHEMA_VERSION, Workload


def workload(name: str, **kw) -> Workload:
    data = dict(schema_version=WORKLOAD_SCHEMA_VERSION, name=name, concurrency=[2, 1], input_tokens=16,
                output_tokens=5, runs_per_arm=3)
    return Workload(**(data | kw))


def test_the_fixed_kv_cache_holds_one_and_a_half_times_the_largest_batch_of_its_workloads(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 28, "num_key_value_heads": 8,
                                                      "num_attention_heads": 16, "head_dim": 128,
                                                      "hidden_size": 1024, "torch_dtype": "bfloat16"}))
    recipe = load_recipe("eager").with_overrides(model=str(tmp_path))
    small, big = workload("a", concurrency=[1, 8, 32], input_tokens=128, output_tokens=64), \
        workload("b", concurrency=[100], input_tokens=1000, output_tokens=500)
    per_token = 2 * 28 * 8 * 128 * 2  # K and V, layers, KV heads, head size, bf16
    assert kv_cache_bytes_for(recipe, [small, big]) == 1.5 * 100 * 1500 * per_token
    assert kv_cache_bytes_for(recipe, [small]) == 1.5 * 32 * 192 * per_token
    assert kv_cache_bytes_for(load_recipe("eager").with_overrides(model=str(tmp_path / "none")), [small]) is None
    eng = Engine(recipe, log_dir=tmp_path, gpu_memory_utilization=0.3, kv_cache_bytes=123)
    assert eng.command[-4:] == ["--gpu-memory-utilization", "0.3", "--kv-cache-memory-bytes", "123"]


def test_every_engine_of_the_sitting_starts_at_once_warmed_and_stays_for_its_ab(tmp_path, ts_recipe):
    a = ts_recipe("--ttft-ms", "1", "--itl-ms", "1").with_overrides(name="a")
    b = ts_recipe("--ttft-ms", "1", "--itl-ms", "2").with_overrides(name="b")
    w1, w2 = workload("w1"), workload("w2", concurrency=[3])
    pool = EnginePool([[a, b], [b, a]])
    lines: list[str] = []
    try:
        pool.start_ahead([([a, b], w1), ([b, a], w2)], out_dir=tmp_path, startup_timeout_s=60, say=lines.append)
        assert len(pool.live) == 2 and all(e.alive() for e in pool.live.values())
        assert any(line.startswith("engines: starting 2 at once") for line in lines), lines
        for engine in pool.live.values():
            assert engine.record.warmup and engine.record.warmup["workload"] == "w1"  # the first it serves
            assert list(engine.warmed_for) == ["w1", "w2"]  # and every workload it will serve, its record each
            assert all(r["workload"] == w and r["round_s"] for w, r in engine.warmed_for.items())
            assert engine.record.ready_after_s is not None  # every start's wall time is recorded
            assert engine.record.started_by_sitting  # ... outside the plans that use it
        ready = {launch_key(r): pool.live[launch_key(r)] for r in (a, b)}
        got = pool.engines_for([a, b], out_dir=tmp_path, startup_timeout_s=60, into=None, say=lines.append)
        assert got["a"] is ready[launch_key(a)] and got["b"] is ready[launch_key(b)]  # not started again
        assert sum("already up" in line for line in lines) == 2
    finally:
        pool.stop_all()
    assert not pool.live


def test_an_engine_that_fails_beside_the_others_is_stopped_and_started_alone_later(tmp_path, ts_recipe,
                                                                                     monkeypatch):
    a = ts_recipe("--ttft-ms", "1").with_overrides(name="a")
    b = ts_recipe("--ttft-ms", "1", "--itl-ms", "2").with_overrides(name="b")
    real_wait = Engine.wait_ready

    def wait_ready(self):
        if self.recipe.name == "b":
            raise RuntimeError("out of memory while the others started")
        return real_wait(self)

    monkeypatch.setattr(Engine, "wait_ready", wait_ready)
    pool = EnginePool([[a, b]])
    lines: list[str] = []
    try:
        pool.start_ahead([([a, b], workload("w"))], out_dir=tmp_path, startup_timeout_s=60, say=lines.append)
        assert list(pool.live) == [launch_key(a)]
        assert any("pool-b: did not start beside the others (out of memory" in line for line in lines), lines
        monkeypatch.setattr(Engine, "wait_ready", real_wait)
        got = pool.engines_for([a, b], out_dir=tmp_path, startup_timeout_s=60, into=None, say=lines.append)
        assert got["b"].alive() and any(line.startswith("engine pool-b: up in") for line in lines)
    finally:
        pool.stop_all()


QWEN3_06B = {"num_hidden_layers": 28, "num_key_value_heads": 8, "num_attention_heads": 16, "head_dim": 128,
             "hidden_size": 1024, "intermediate_size": 3072, "vocab_size": 151936, "tie_word_embeddings": True,
             "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}
PER_TOKEN = 2 * 28 * 8 * 128 * 2  # K and V, layers, KV heads, head size, bf16
GIB = 2**30


def seed_sitting(tmp_path):
    """The seed PoC's three engines as the pool sees them: eager serves the paired workload, compiled the paired and
    the public one (balanced is its launch), throughput the public one."""
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_06B))
    r = {n: load_recipe(n).with_overrides(model=str(tmp_path)) for n in ("eager", "compiled", "throughput")}
    paired = workload("paired", concurrency=[1, 8, 32], input_tokens=128, output_tokens=64)
    public = workload("public", concurrency=[100], input_tokens=1000, output_tokens=500)
    return r, {launch_key(r["eager"]): (r["eager"], [paired]), launch_key(r["compiled"]): (r["compiled"], [paired, public]),
               launch_key(r["throughput"]): (r["throughput"], [public])}


def test_a_fixed_cache_holds_one_sequence_of_the_engines_longest_length(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_06B))
    small = workload("a", concurrency=[1, 8, 32], input_tokens=128, output_tokens=64)
    eager = load_recipe("eager").with_overrides(model=str(tmp_path))
    # 1.5 x 32 x 192 tokens is 9216, under one 40960-token sequence (plus two 16-token blocks): vLLM would refuse it
    assert kv_cache_bytes_for(eager, [small]) == (40960 + 32) * PER_TOKEN
    shorter = eager.with_overrides(engine_args=[*eager.engine_args, "--max-model-len", "4096"])
    assert kv_cache_bytes_for(shorter, [small]) == 1.5 * 32 * 192 * PER_TOKEN
    for arg, tokens in (("--max-model-len=16K", 16384), ("--max-model-len=16k", 16000),  # vLLM's K and k
                        ("--max_model_len=16K", 16384)):
        assert kv_cache_bytes_for(eager.with_overrides(engine_args=[*eager.engine_args, arg]),
                                  [small]) == (tokens + 32) * PER_TOKEN


def test_weights_are_the_safetensors_files_else_counted_from_the_config(tmp_path):
    from infercrane.serving.ab import weight_bytes_for

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_06B))
    recipe = load_recipe("eager").with_overrides(model=str(tmp_path))
    per_layer = 1024 * 128 * (2 * 16 + 2 * 8) + 3 * 1024 * 3072
    assert weight_bytes_for(recipe) == (151936 * 1024 + 28 * per_layer) * 2  # tied embeddings: counted once
    assert 1.10 * GIB < weight_bytes_for(recipe) < 1.12 * GIB  # vLLM on the H100: "Model loading took 1.12 GiB"
    (tmp_path / "model-00001.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "model-00002.safetensors").write_bytes(b"x" * 24)
    assert weight_bytes_for(recipe) == 1024
    (tmp_path / "config.json").write_text("{}")
    assert weight_bytes_for(recipe.with_overrides(model=str(tmp_path / "none"))) == 0


def test_each_engine_gets_the_cache_of_its_own_workloads_and_a_share_that_holds_it(tmp_path):
    from infercrane.serving.ab import ENGINE_RUNTIME_BYTES, sitting_memory, weight_bytes_for

    r, serves = seed_sitting(tmp_path)
    h100 = 81559 * 2**20  # NVML's total on an H100 80GB HBM3
    got = sitting_memory(serves, h100)
    assert not isinstance(got, str), got
    eager, compiled, throughput = (got[launch_key(r[n])] for n in ("eager", "compiled", "throughput"))
    assert compiled.kv_cache_bytes == throughput.kv_cache_bytes == 1.5 * 100 * 1500 * PER_TOKEN  # 24.0 GiB
    assert eager.kv_cache_bytes == (40960 + 32) * PER_TOKEN  # its own workload's batch is far smaller
    for m in (eager, compiled, throughput):
        need = m.kv_cache_bytes + weight_bytes_for(r["eager"]) + ENGINE_RUNTIME_BYTES
        assert need <= m.share * h100 < need + 0.01 * h100  # held, rounded up to a hundredth
    assert (eager.share, compiled.share, throughput.share) == (0.12, 0.37, 0.37)
    assert eager.share + compiled.share + throughput.share <= 0.9  # three at once fit an 80 GB card
    # where the caches cannot be held together: why, with every engine's share
    small = sitting_memory(serves, 48 * GIB)
    assert isinstance(small, str) and "more than 0.9" in small and "compiled 0.6" in small
    # NVML cannot tell: even shares, nothing checked (vLLM refuses what does not fit)
    blind = sitting_memory(serves, None)
    assert not isinstance(blind, str) and {m.share for m in blind.values()} == {0.3}
    assert blind[launch_key(r["eager"])].kv_cache_bytes == eager.kv_cache_bytes
    (tmp_path / "config.json").write_text("{}")
    assert "no model config" in sitting_memory(serves, h100)


def test_engines_started_together_are_launched_with_their_own_cache_and_share(tmp_path, monkeypatch):
    from infercrane.serving.ab import sitting_memory

    r, serves = seed_sitting(tmp_path)
    total = 81559 * 2**20
    monkeypatch.setattr(ab, "gpu_memory_total", lambda: total)
    commands: dict[str, list[str]] = {}

    def launch(self):  # nothing is started: the command each engine would run is what is checked
        commands[self.recipe.name] = list(self.command)
        raise RuntimeError("not launched in this test")

    monkeypatch.setattr(Engine, "launch", launch)
    paired = next(w for w in serves[launch_key(r["compiled"])][1] if w.name == "paired")
    public = serves[launch_key(r["throughput"])][1][0]
    pool = EnginePool([[r["eager"], r["compiled"]], [r["compiled"], r["throughput"]]])
    lines: list[str] = []
    pool.start_ahead([([r["eager"], r["compiled"]], paired), ([r["compiled"], r["throughput"]], public)],
                     out_dir=tmp_path, startup_timeout_s=1, say=lines.append)
    want = sitting_memory(serves, total)
    assert set(commands) == {"eager", "compiled", "throughput"}
    for name, cmd in commands.items():
        m = want[launch_key(r[name])]
        assert cmd[cmd.index("--gpu-memory-utilization") + 1] == str(m.share)
        assert cmd[cmd.index("--kv-cache-memory-bytes") + 1] == str(m.kv_cache_bytes)
    assert any(line.startswith("engines: starting 3 at once: pool-eager (KV cache 4.4 GiB, 0.12 of GPU memory)")
               for line in lines), lines
    # none started: each is started alone when its A/B comes, with the share planned for it
    assert not pool.live and pool.shares == {k: m.share for k, m in want.items()}
    assert sum("did not start beside the others" in line for line in lines) == 3


def test_no_engine_starts_ahead_when_the_fixed_caches_do_not_fit(tmp_path, monkeypatch):
    r, serves = seed_sitting(tmp_path)
    monkeypatch.setattr(ab, "gpu_memory_total", lambda: 24 * GIB)
    pool = EnginePool([[r["eager"], r["compiled"]]])
    lines: list[str] = []
    pool.start_ahead([([r["eager"], r["compiled"]], serves[launch_key(r["compiled"])][1][1])], out_dir=tmp_path,
                     startup_timeout_s=1, say=lines.append)
    assert not pool.live and not pool.shares and lines
    assert lines[0].startswith("engines: started one after the other (their fixed KV caches, weights and runtime "
                               "need"), lines


def test_an_eager_engine_is_launched_after_the_compiling_ones_so_that_they_come_up_together(ts_recipe):
    from infercrane.serving.ab import EAGER_LAUNCH_DELAY_S, launch_delays

    eager, compiled, throughput = load_recipe("eager"), load_recipe("compiled"), load_recipe("throughput")
    got = launch_delays({"e": eager, "c": compiled, "t": throughput})
    assert got == {"e": EAGER_LAUNCH_DELAY_S, "c": 0.0, "t": 0.0}
    assert set(launch_delays({"e": eager, "x": load_recipe("eager-triton")}).values()) == {0.0}  # nothing compiles
    assert set(launch_delays({"c": compiled, "t": throughput}).values()) == {0.0}
    assert set(launch_delays({"a": ts_recipe("--ttft-ms", "1"), "b": ts_recipe("--itl-ms", "2")}).values()) == {0.0}


def test_an_engines_workloads_are_warmed_at_the_same_time_and_the_first_failure_is_raised_after_all():
    import threading
    import time

    import pytest

    from infercrane.serving.ab import warm_together

    both = threading.Barrier(2, timeout=5)  # broken (an error) unless the two warm-ups run at once
    ended: list[str] = []

    def warm(engine, w):
        both.wait()
        ended.append(w.name)
        return {"round_s": {"1": [0.1]}}

    got = warm_together(object(), [workload("w1"), workload("w2")], warm)
    assert [r["workload"] for r in got] == ["w1", "w2"] and all(r["round_s"] for r in got)
    assert [r["workload"] for r in warm_together(object(), [workload("w3")], lambda e, w: {})] == ["w3"]

    def fails_first(engine, w):
        if w.name == "w1":
            raise RuntimeError("answered 500 to every try")
        time.sleep(0.2)
        ended.append("slow " + w.name)
        return {}

    ended.clear()
    with pytest.raises(RuntimeError, match="every try"):
        warm_together(object(), [workload("w1"), workload("w2")], fails_first)
    assert ended == ["slow w2"]  # the other warm-up was let end before the failure was raised


def test_the_pool_stops_its_engines_at_the_same_time_and_says_a_failure_after_all_have_stopped():
    import threading

    import pytest

    from infercrane.serving.ab import stop_together

    both = threading.Barrier(2, timeout=5)
    stopped: list[str] = []

    class Eng:
        def __init__(self, name, fail=False):
            self.name, self.fail = name, fail

        def stop(self):
            both.wait()
            stopped.append(self.name)
            if self.fail:
                raise RuntimeError(f"engine {self.name!r}: process group survived SIGKILL")

    stop_together([Eng("a"), Eng("b")])
    assert sorted(stopped) == ["a", "b"]
    both.reset()
    stopped.clear()
    with pytest.raises(RuntimeError, match="'a': process group survived"):
        stop_together([Eng("a", fail=True), Eng("b")])
    assert sorted(stopped) == ["a", "b"]

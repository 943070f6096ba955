"""`infercrane serve ab` end to end: real AIPerf against two test-server "engines", a receipt with statistics;
and SIGINT mid-run leaves no engine process and a valid partial receipt marked incomplete."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.receipts.validate import load_receipt

pytestmark = pytest.mark.slow


def _recipe(path: Path, name: str, model: Path, itl_ms: int) -> Path:
    path.write_text(
        "schema_version: infercrane.serving-recipe/v1\n"
        f"name: {name}\nengine: testserver\nmodel: {model}\n"
        f'engine_args: ["--ttft-ms", "20", "--itl-ms", "{itl_ms}"]\nenv: {{}}\nworkarounds: []\n')
    return path


def _group_alive(pgid: int) -> bool:
    """Whether any process of the engine's process group (the engine runs in a session of its own) still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _communicate_or_dump(proc: subprocess.Popen, timeout_s: float) -> str:
    """The process's output once it ends; past ``timeout_s``, a failure that carries its signal masks, every thread's
    stack (SIGABRT with PYTHONFAULTHANDLER set) and all it printed."""
    try:
        return proc.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        try:
            masks = "".join(line for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines(True)
                            if line.startswith("Sig"))
        except OSError:
            masks = "(no /proc status)"
        proc.send_signal(signal.SIGABRT)
        output = proc.communicate(timeout=60)[0]
        pytest.fail(f"still running {timeout_s:g} s after SIGINT\n{masks}\n{output}", pytrace=False)


def test_serve_ab_with_aiperf(tmp_path: Path, stand_in_dir: Path, offline_env) -> None:
    a = _recipe(tmp_path / "a.yaml", "slow", stand_in_dir, 6)
    b = _recipe(tmp_path / "b.yaml", "fast", stand_in_dir, 3)
    out = tmp_path / "ab.json"
    rc = main(["serve", "ab", str(a), str(b), "--runs", "3", "--concurrency", "2", "--request-count", "12",
               "--order", "sequential", "--out", str(out), "--fail-on", "inconclusive"])
    assert rc == 1  # --fail-on inconclusive: the receipt is written, its decision (below) is inconclusive
    r = load_receipt(out)
    doc = r.document
    assert doc["complete"] is True and doc["model"]["weights"] == "dummy" and doc["model"]["tokenizer"] == "stand-in"
    prov_model = doc["provenance"]["model"]
    assert prov_model["id"] == "Qwen/Qwen3-0.6B" and prov_model["config_fields"]["num_key_value_heads"] == 8
    pa = doc["paired_aiperf"]
    m = {x["recipe"]: x for x in pa["measurements"]}
    # Programmed per-token delays 6 ms and 3 ms: measured TPOT p95 near them, B about twice A's throughput.
    assert 5.0 < m["slow"]["tpot_p95_ms"] < 8.0 and 2.5 < m["fast"]["tpot_p95_ms"] < 4.5
    [cmp] = pa["comparisons"]
    assert 1.5 < cmp["throughput_speedup"] < 2.3
    tput = next(s for s in pa["statistics"] if s["metric"] == "output_tok_s")
    assert tput["ci_low"] > 1.0 and tput["min_achievable_p"] == pytest.approx(0.1)
    # With 3 runs per arm the rank test cannot confirm anything: the verdict follows from the statistics.
    assert pa["decision_code"] == "inconclusive"
    assert len(doc["runs"]) == 6 and all(run["status"] == "ok" for run in doc["runs"])
    assert len(doc["engines"]) == 2 and all(e["exit_status"] for e in doc["engines"])
    assert any("AIPerf" in f["finding"] for f in doc["runtime_compatibility"])


def test_sigint_leaves_no_engine_and_a_partial_receipt(tmp_path: Path, stand_in_dir: Path, offline_env) -> None:
    a = _recipe(tmp_path / "a.yaml", "slow", stand_in_dir, 6)
    b = _recipe(tmp_path / "b.yaml", "fast", stand_in_dir, 3)
    out = tmp_path / "ab.json"
    # Request counts that differ per concurrency (6 at c=1, 12 at c=2): one AIPerf invocation per point, so the
    # receipt has its first run while the first engine still serves the second point (a whole-visit invocation would
    # land every run of the visit at once, as the engine stops).
    proc = subprocess.Popen(
        [sys.executable, "-m", "infercrane", "serve", "ab", str(a), str(b), "--workload", "seed-paired-counts",
         "--runs", "3", "--concurrency", "1,2", "--requests-per-slot", "6", "--min-requests", "6",
         "--order", "sequential", "--out", str(out)],
        cwd=tmp_path, env={**os.environ, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and json.loads(out.read_text())["runs"]:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[0]
    doc = json.loads(out.read_text())
    pgid = doc["engines"][0]["pid"]
    running = _group_alive(pgid)
    proc.send_signal(signal.SIGINT)
    output = _communicate_or_dump(proc, 120)
    assert running, f"the engine should be running mid-plan; runs so far: {doc['runs']}\n{output}"
    assert proc.returncode == 130, output
    r = load_receipt(out)
    assert r.document["complete"] is False
    assert "interrupted" in r.document["incomplete_reason"]
    assert r.document["runs"] and "paired_aiperf" not in r.document or r.document["paired_aiperf"] is None
    assert not _group_alive(pgid)


def test_serve_bench_sets_result_against_published_example(tmp_path: Path, stand_in_dir: Path, offline_env) -> None:
    a = _recipe(tmp_path / "a.yaml", "one", stand_in_dir, 1)  # 1 ms a token: 500-token outputs in half a second
    out = tmp_path / "bench.json"
    assert main(["serve", "bench", str(a), "--workload", "public-1000", "--concurrency", "2", "--request-count", "6",
                 "--runs", "3", "--out", str(out)]) == 0
    doc = load_receipt(out).document
    pw = doc["public_workload_reproduction"]
    [arm] = pw["arms"]
    assert arm["driver"] == "aiperf" and arm["runs"] == 3 and arm["failures"] == 0
    assert pw["published_example"]["output_tokens_per_second"] == 22521.42
    pct = arm["output_tokens_per_second"] / 22521.42 * 100
    assert f"{pct:.1f} percent of the published example" in pw["comparison_boundary"]
    assert "not an apples-to-apples" in pw["comparison_boundary"]


def test_a_recipe_error_is_printed_before_any_progress(tmp_path: Path, stand_in_dir: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: infercrane.serving-recipe/v1\nname: bad\nengine: testserver\n"
                   f'model: {stand_in_dir}\nengine_args: ["--no-such-flag"]\n')
    good = _recipe(tmp_path / "good.yaml", "good", stand_in_dir, 3)
    code = main(["serve", "ab", str(bad), str(good), "--runs", "4", "--out", str(tmp_path / "r.json")])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0 and "--no-such-flag" in text
    assert "run 1 c=" not in text  # the progress bar's label never appeared
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r-artifacts").exists()


class _Captured(Exception):
    pass


@pytest.mark.parametrize("tail", [["--concurrency", "1,8,32", "--drivers", "aiperf,vllm-bench"],
                                  ["--concurrency", "1", "--concurrency", "8", "--concurrency", "32",
                                   "--drivers", "aiperf", "--drivers", "vllm-bench"],
                                  ["--concurrency", "1", "8", "32", "--drivers", "aiperf", "vllm-bench"]])
def test_list_options_read_commas_repeats_and_spaces_alike(tmp_path: Path, monkeypatch, tail: list[str]) -> None:
    import infercrane.serving.workload as workload

    seen: dict = {}

    def run_plan(recs, wl, **kw):
        seen.update(concurrency=list(wl.concurrency), drivers=kw["drivers"])
        raise _Captured

    monkeypatch.setattr(workload, "run_plan", run_plan)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(_Captured):
        main(["serve", "ab", "eager", "compiled", "--out", str(tmp_path / "ab.json"), *tail])
    assert seen == {"concurrency": [1, 8, 32], "drivers": ["aiperf", "vllm-bench"]}


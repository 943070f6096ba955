"""The serving flags under AIPerf's names (--request-rate, --arrival-pattern, --isl, --osl, --tokenizer, --api-key,
--header, --extra-inputs): declared once (serving/config.py), taken by serve ab / serve bench and the PoC config, carried
to AIPerf (one run and a block), vllm bench and the warm-up, recorded in the receipt with the secrets redacted; and
--url finding the served model id by itself."""
from __future__ import annotations

import json
import shlex
import sys
import urllib.request
import pytest
import yaml

from infercrane.cli import main
from infercrane.errors import InputError
from infercrane.serving.config import ServeConfig, redact_argv
from infercrane.serving.drivers import get_driver
from infercrane.serving.drivers.aiperf import BLOCK_CONFIG_FILE, RunGrid, scrub_exports
from infercrane.serving.drivers.aiperf_env import substitute
from infercrane.serving.engine import Engine, ExternalEngine, ServerAccess
from infercrane.serving.warmup import warm_engine, warmup_body
from infercrane.serving.workload import (LATER_FIELDS, PlannedRun, check_tokenizer, load_workload,
                                         resolve_tokenizer, run_spec)

KEY = "sk-InferCraneTestKey-0042"
TENANT = "tenant,with-a-comma"  # AIPerf's KEY:VALUE form would split it at the comma
FLAGS = ["--request-rate", "12.5", "--arrival-pattern", "constant", "--isl", "24", "--osl", "6",
         "--extra-inputs", "temperature:0.25", "--extra-inputs", 'stop:["\\n"]', "--extra-inputs", 'user:"123"',
         "--api-key", KEY, "--header", f"X-Tenant:{TENANT}", "--header", "X-Priority:5"]


def stats(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as resp:
        return json.loads(resp.read())


def _planned(workload, recipe, tokenizer, tmp_path, access, c=4):
    p = PlannedRun(arm=recipe.name, run_index=0, concurrency=c, segment=0)
    return run_spec(workload, recipe.resolved(), tokenizer, p, "http://127.0.0.1:8000", "served-id", tmp_path,
                    access=access)


@pytest.fixture
def flagged(ts_recipe, stand_in_dir):
    """The workload, recipe, tokenizer and access that FLAGS give, through the CLI's own option model."""
    cfg = ServeConfig(**{k.lstrip("-").replace("-", "_"): v for k, v in zip(FLAGS[::2], FLAGS[1::2])
                         if k not in ("--extra-inputs", "--header")},
                      extra_inputs=("temperature:0.25", 'stop:["\\n"]', 'user:"123"'),
                      headers=(f"X-Tenant:{TENANT}", "X-Priority:5"), tokenizer=str(stand_in_dir))
    workload = load_workload("seed-paired-counts").with_overrides(**cfg.workload_overrides())
    recipe = ts_recipe()
    return workload, recipe, resolve_tokenizer(recipe.resolved(), cfg.tokenizer), cfg.access()


def test_the_flags_override_the_workload_and_leave_old_identities_alone():
    w = load_workload("seed-paired-counts")
    assert w.identity() == {k: v for k, v in w.model_dump(mode="json").items() if k not in LATER_FIELDS}
    cfg = ServeConfig(request_rate=2.0, isl=10, osl=4, extra_inputs=("temperature:0",))
    o = w.with_overrides(**cfg.workload_overrides())
    assert (o.input_tokens, o.output_tokens, o.request_rate, o.arrival_pattern) == (10, 4, 2.0, "poisson")
    assert o.extra_inputs == {"temperature": 0} and {"request_rate", "extra_inputs"} <= set(o.identity())
    assert o.requests_at(1) == o.requests_at(32) == 64  # open loop: from the rate (2/s x 10 s), floored at 64
    assert w.requests_at(32) == 48 * 32  # closed loop: per concurrency slot, as before
    public = load_workload("public-1000")
    assert public.published_example is not None
    assert public.with_overrides(runs_per_arm=6).published_example is not None
    assert public.with_overrides(request_rate=5.0).published_example is None  # measured closed loop: not this one


@pytest.mark.parametrize("args, says", [
    (["--request-rate", "0"], "--request-rate 0: give a number > 0"),
    (["--isl", "0"], "--isl 0: give a number >= 1"),
    (["--osl", "1"], "--osl 1: give a number >= 2"),
    (["--header", "no-colon-s3cr3t"], "--header: give NAME:VALUE"),
    (["--header", "X-A:1", "--header", "x-a:2"], "--header X-A, x-a: given more than once"),
    (["--extra-inputs", "max_tokens:5"], "'max_tokens' is set by InferCrane from output_tokens (--osl)"),
    (["--extra-inputs", "nocolon"], "--extra-inputs nocolon: give KEY:VALUE"),
    (["--api-key", "a b"], "--api-key: give the key as one word"),
    (["--api-key", "k", "--header", "Authorization:x"], "--api-key is sent as the Authorization header"),
    (["--arrival-pattern", "constant"], "--arrival-pattern constant spaces requests at a request rate"),
    (["--request-rate", "3", "--requests-per-slot", "2"], "--requests-per-slot sizes windows of a closed loop"),
    (["--header", "X-A:s3cr3t"], "--header X-A: headers go to servers given with --url"),
    (["--api-key", "s3cr3t"], "--api-key: the key goes to servers given with --url"),
    (["--tokenizer", "no-such/tokenizer"], "--tokenizer no-such/tokenizer: no such folder, and no tokenizer"),
])
def test_bad_values_are_one_line_exit_2(tmp_path, monkeypatch, capsys, args, says):
    import infercrane.serving.workload as workload

    monkeypatch.setattr(workload, "run_plan", lambda *a, **k: pytest.fail("a plan started"))
    monkeypatch.chdir(tmp_path)
    rc = main(["serve", "bench", "testserver", "--workload", "seed-paired-counts", *args, "--out", "b.json"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert says in err[0] and "s3cr3t" not in err[0], err[0]


def test_help_lists_the_new_flags(capsys):
    assert main(["serve", "bench", "--help"]) == 0
    out = capsys.readouterr().out
    for name in ("--request-rate", "--arrival-pattern", "--isl", "--osl", "--tokenizer", "--api-key", "--header",
                 "--extra-inputs"):
        assert name in out, name


def test_the_aiperf_command_carries_them_and_no_secret(tmp_path, flagged, monkeypatch):
    workload, recipe, tokenizer, access = flagged
    spec = _planned(workload, recipe, tokenizer, tmp_path, access)
    drv = get_driver("aiperf")
    cmd = drv.command(spec)
    line = shlex.join(cmd)
    assert cmd[:5] == [sys.executable, "-m", "infercrane.serving.drivers.aiperf_env", "--", "profile"]
    for part in ("--request-rate 12.5 --arrival-pattern constant", "--isl 24", "--osl 6", "--concurrency 4",
                 f"--tokenizer {tokenizer[0]}", "--api-key '${INFERCRANE_API_KEY}'",
                 """--header '{"X-Tenant": "${INFERCRANE_HEADER_0}"}'""",
                 """--header '{"X-Priority": "${INFERCRANE_HEADER_1}"}'"""):
        assert part in line, part
    extra = [json.loads(cmd[i + 1]) for i, t in enumerate(cmd) if t == "--extra-inputs" and cmd[i + 1][0] == "{"]
    assert extra == [{"temperature": 0.25, "stop": ["\n"], "user": "123"}]
    assert KEY not in line and TENANT not in line
    assert drv.secret_env(spec) == {"INFERCRANE_API_KEY": KEY, "INFERCRANE_HEADER_0": TENANT,
                                    "INFERCRANE_HEADER_1": "5"}
    assert KEY not in repr(spec) and TENANT not in repr(access)
    # what the installed AIPerf makes of it, once aiperf_env has put the values in and kept its pairs typed
    from aiperf.cli import app
    from aiperf.config.flags.resolver import resolve_config
    from aiperf.config.loader import parsing

    from infercrane.serving.drivers import aiperf_env

    monkeypatch.setattr(parsing, aiperf_env.PAIRS_FUNCTION,
                        aiperf_env.keep_pairs(getattr(parsing, aiperf_env.PAIRS_FUNCTION)))

    _, bound, _ = app.parse_args(substitute(cmd[4:], drv.secret_env(spec)), exit_on_error=False, print_error=False)
    got = resolve_config(bound.arguments["cli_config"]).benchmark
    assert got.endpoint.api_key == KEY and got.endpoint.headers == {"X-Tenant": TENANT, "X-Priority": "5"}
    assert got.endpoint.extra == {"ignore_eos": True, "min_tokens": 6, "temperature": 0.25, "stop": ["\n"],
                                  "user": "123"}
    profiling = [p for p in got.phases if p.name == "profiling"][0]
    assert (str(profiling.type), profiling.rate, profiling.concurrency) == ("constant", 12.5, 4)


def test_the_aiperf_block_config_carries_them_and_holds_no_secret(tmp_path, flagged, monkeypatch):
    workload, recipe, tokenizer, access = flagged
    workload = workload.with_overrides(window_s=3.0, warmup_s=1.0)
    spec = _planned(workload, recipe, tokenizer, tmp_path, access)
    drv = get_driver("aiperf")
    grid = RunGrid(spec=spec, run_indices=(0, 1), concurrencies=(4,), window_s=3.0, warmup_s=1.0, prompt_entries=500)
    path = drv.write_block_config(grid)
    text = path.read_text()
    assert path.name == BLOCK_CONFIG_FILE and KEY not in text and TENANT not in text
    doc = yaml.safe_load(text)["benchmark"]
    assert {p["name"]: (p["type"], p["rate"], p["concurrency"]) for p in doc["phases"]} == {
        "warmup": ("constant", 12.5, 4), "r00_c4": ("constant", 12.5, 4), "r01_c4": ("constant", 12.5, 4)}
    assert doc["endpoint"]["extra"] == {"temperature": 0.25, "stop": ["\n"], "user": "123", "ignore_eos": True,
                                        "min_tokens": 6}
    assert doc["tokenizer"] == {"name": tokenizer[0]}
    assert doc["datasets"][0]["prompts"]["isl"]["mean"] == 24 and doc["datasets"][0]["prompts"]["osl"]["mean"] == 6
    # AIPerf reads the secrets from its environment, as text (a numeric value stays a string)
    from aiperf.config.loader import load_config

    for var, value in drv.secret_env(spec).items():
        monkeypatch.setenv(var, value)
    got = load_config(path).benchmark
    assert got.endpoint.api_key == KEY and got.endpoint.headers == {"X-Tenant": TENANT, "X-Priority": "5"}


def test_aiperf_summaries_lose_the_header_values(tmp_path, flagged):
    workload, recipe, tokenizer, access = flagged
    spec = _planned(workload, recipe, tokenizer, tmp_path, access)
    summary = tmp_path / "phases" / "r00_c4" / "profile_export_aiperf.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"request_count": {"avg": 3}, "input_config": {"endpoint": {
        "api_key": "<redacted>", "headers": {"X-Tenant": TENANT, "X-Priority": "5"}}}}))
    scrub_exports(spec)
    doc = json.loads(summary.read_text())
    assert doc["input_config"]["endpoint"]["headers"] == {"X-Tenant": "<redacted>", "X-Priority": "<redacted>"}
    assert doc["request_count"] == {"avg": 3}


def test_aiperf_env_puts_the_values_in_and_refuses_a_missing_one():
    env = {"INFERCRANE_API_KEY": 'k"1', "INFERCRANE_HEADER_0": "a,b"}
    assert substitute(["--api-key", "${INFERCRANE_API_KEY}", '{"X": "${INFERCRANE_HEADER_0}"}', "${HOME}"], env) \
        == ["--api-key", 'k"1', '{"X": "a,b"}', "${HOME}"]
    assert json.loads(substitute(['{"X": "${INFERCRANE_API_KEY}"}'], env)[0]) == {"X": 'k"1'}
    with pytest.raises(KeyError, match="INFERCRANE_HEADER_3"):
        substitute(["${INFERCRANE_HEADER_3}"], env)


def test_vllm_bench_carries_rate_and_extras_and_refuses_headers(tmp_path, flagged):
    workload, recipe, tokenizer, access = flagged
    drv = get_driver("vllm-bench")
    spec = _planned(workload, recipe, tokenizer, tmp_path, ServerAccess(api_key=KEY))
    cmd = drv.command(spec)
    line = shlex.join(cmd)
    assert "--request-rate 12.5 --burstiness inf" in line and "--max-concurrency 4" in line and KEY not in line
    assert json.loads(cmd[cmd.index("--extra-body") + 1]) == {"min_tokens": 6, "temperature": 0.25, "stop": ["\n"],
                                                               "user": "123"}
    assert drv.secret_env(spec) == {"OPENAI_API_KEY": KEY}
    poisson = drv.command(_planned(workload.with_overrides(arrival_pattern="poisson"), recipe, tokenizer, tmp_path,
                                   None))
    assert "--burstiness 1" in shlex.join(poisson)
    closed = drv.command(_planned(load_workload("seed-paired-counts"), recipe, tokenizer, tmp_path, None))
    assert "--request-rate inf" in shlex.join(closed) and "--burstiness" not in closed
    with pytest.raises(InputError) as err:
        drv.check(_planned(workload, recipe, tokenizer, tmp_path, access))
    assert "--header X-Tenant, X-Priority: vllm bench serve takes headers only on its command line" in str(err.value)
    assert TENANT not in str(err.value)


def test_the_warm_up_sends_the_extras_and_the_access(raw_server, ts_recipe, tmp_path, flagged):
    workload, _, _, access = flagged
    path, body = warmup_body(workload, "m", 3)
    assert body["temperature"] == 0.25 and body["user"] == "123" and body["max_tokens"] == 6
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0", "--model", "m", "--api-key", KEY,
                     "--require-header", f"X-Tenant:{TENANT}", "--require-header", "X-Priority:5")
    recipe = ts_recipe(model="m")
    with pytest.raises(InputError) as err:  # without the key: one line naming the flag
        ExternalEngine(srv.url, recipe=recipe).connect()
    assert "GET /v1/models answered 401" in str(err.value) and "--api-key" in str(err.value)
    eng = ExternalEngine(srv.url, recipe=recipe, access=access).connect()
    warm_engine(eng, workload.with_overrides(concurrency=[2]))
    eng.reset_prefix_cache()
    s = stats(srv.url)
    assert s["unauthorized"] == {"/v1/models": 1} and s["prefix_cache_resets"] == 2
    assert s["body_keys"]["user"] == s["generation_requests"] - 1  # all but the connect probe's one completion


def test_an_engine_launched_with_a_key_is_asked_with_it(tmp_path, ts_recipe):
    recipe = ts_recipe("--ttft-ms", "0", "--api-key", KEY, "--require-header", "X-Tenant:t")
    access = ServerAccess(api_key=KEY, headers=(("X-Tenant", "t"),))
    with Engine(recipe, log_dir=tmp_path, startup_timeout_s=60, access=access) as eng:  # health, completion, models
        eng.reset_prefix_cache()
        s = stats(eng.base_url)
        assert s["unauthorized"] == {} and s["prefix_cache_resets"] == 1


def test_url_finds_the_served_model(raw_server, ts_recipe):
    one = raw_server("--ttft-ms", "0", "--model", "/models/served-id")
    eng = ExternalEngine(one.url, recipe=ts_recipe(model="Qwen/Qwen3-0.6B")).connect()
    assert eng.served_model == "/models/served-id" and eng.record.served_model == "/models/served-id"
    assert "serves one model, '/models/served-id', and requests name it" in eng.note
    same = ExternalEngine(one.url, recipe=ts_recipe(model="/models/served-id")).connect()
    assert same.record.served_model is None and same.note is None  # the recipe's model: nothing to say
    several = raw_server("--ttft-ms", "0", "--model", "other", "--also-serve", "/data/Qwen3-0.6B")
    eng = ExternalEngine(several.url, recipe=ts_recipe(model="Qwen/Qwen3-0.6B")).connect()
    assert eng.served_model == "/data/Qwen3-0.6B" and "the one named as the recipe's model" in eng.note


def test_the_tokenizer_flag_unblocks_a_test_server_recipe(ts_recipe, stand_in_dir):
    with pytest.raises(InputError) as err:
        resolve_tokenizer(ts_recipe(model="Qwen/Qwen3-0.6B").resolved())
    assert "--tokenizer NAME_OR_DIR" in err.value.hint
    tok, _ = resolve_tokenizer(ts_recipe(model="Qwen/Qwen3-0.6B").resolved(), str(stand_in_dir))
    assert tok  # a stand-in folder goes through its AIPerf tokenizer environment
    assert resolve_tokenizer(ts_recipe().resolved(), "some/hub-id") == ("some/hub-id", {})
    with pytest.raises(InputError, match="--tokenizer some/hub-id: no such folder"):  # what the commands check first
        check_tokenizer("some/hub-id")
    check_tokenizer(str(stand_in_dir))


def test_the_poc_config_takes_the_same_names_and_records_no_secret(tmp_path):
    from infercrane.poc.config import CONFIGS_DIR, load_config

    data = yaml.safe_load((CONFIGS_DIR / "functional.yaml").read_text())
    data["paired"] |= {"request_rate": 4, "arrival_pattern": "constant", "isl": 20, "osl": 5,
                       "extra_inputs": {"temperature": 0.5}}
    data["serving"] |= {"tokenizer": "some/tokenizer", "api_key": KEY, "headers": {"X-Tenant": TENANT}}
    path = tmp_path / "poc.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg, _ = load_config(path)
    assert cfg.paired.workload_overrides() | {"runs_per_arm": 0} == {
        "request_rate": 4.0, "arrival_pattern": "constant", "input_tokens": 20, "output_tokens": 5,
        "extra_inputs": {"temperature": 0.5}, "runs_per_arm": 0}
    assert cfg.serving.access().http_headers() == {"X-Tenant": TENANT, "Authorization": f"Bearer {KEY}"}
    dumped = json.dumps(cfg.model_dump(mode="json"))  # what the PoC receipt records as its config
    assert KEY not in dumped and TENANT not in dumped and '"X-Tenant:<redacted>"' in dumped
    data["public"]["isl"] = 0
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="public.isl"):
        load_config(path)


def test_the_command_line_a_receipt_records_is_redacted():
    argv = ["infercrane", "serve", "bench", "r", "--api-key", KEY, "--header", f"X-Tenant:{TENANT}", "X-B:2",
            "--url", "http://h:1", "--api-key=" + KEY, f"--header=X-C:{TENANT}"]
    out = redact_argv(argv)
    assert KEY not in " ".join(out) and TENANT not in " ".join(out) and ":2" not in " ".join(out)
    assert out[4:8] == ["--api-key", "<redacted>", "--header", "X-Tenant:<redacted>"] and "http://h:1" in out


@pytest.mark.timeout(300)
def test_serve_bench_at_a_rate_against_a_server_that_wants_a_key(tmp_path, raw_server, stand_in_dir, offline_env,
                                                                 monkeypatch, capsys):
    """One live AIPerf block: the test server serves its model under another id and wants the key and a header;
    --tokenizer makes the test-server recipe measurable; the receipt records the load flags, the served id and no
    secret, and no file written holds the key or the header's value."""
    from infercrane.receipts.validate import load_receipt

    srv = raw_server("--ttft-ms", "2", "--itl-ms", "1", "--model", "served-id", "--api-key", KEY,
                     "--require-header", f"X-Tenant:{TENANT}")
    args = ["serve", "bench", "testserver", "--url", srv.url, "--tokenizer", str(stand_in_dir), *FLAGS,
            "--workload", "quick", "--runs", "3", "--concurrency", "2", "--out", str(tmp_path / "run" / "b.json")]
    monkeypatch.setattr(sys, "argv", ["infercrane", *args])  # what the receipt records as the command line
    monkeypatch.chdir(tmp_path)
    assert main(args) == 0
    printed = capsys.readouterr()
    doc = load_receipt(tmp_path / "run" / "b.json").document
    w = doc["provenance"]["config"]["workload"]
    assert (w["request_rate"], w["arrival_pattern"], w["input_tokens"], w["output_tokens"]) == (12.5, "constant", 24, 6)
    assert w["extra_inputs"] == {"temperature": 0.25, "stop": ["\n"], "user": "123"}
    opts = doc["provenance"]["config"]["options"]
    assert opts["api_key"] == "<redacted>" and opts["headers"] == ["X-Tenant:<redacted>", "X-Priority:<redacted>"]
    assert opts["tokenizer"] == str(stand_in_dir)
    [eng] = doc["engines"]
    assert eng["served_model"] == "served-id" and eng["served_models"] == ["served-id"]
    assert len(doc["runs"]) == 3 and all(r["status"] == "ok" for r in doc["runs"])
    s = stats(srv.url)
    assert s["unauthorized"] == {} and s["header_names"]["x-tenant"] == s["generation_requests"]
    assert s["body_keys"]["user"] == s["generation_requests"] - 1  # all but the connect probe
    for f in [p for p in tmp_path.rglob("*") if p.is_file()]:
        data = f.read_bytes()
        assert KEY.encode() not in data and TENANT.encode() not in data, f
    assert KEY not in printed.out + printed.err and TENANT not in printed.out + printed.err


def test_a_poc_hands_them_to_its_a_b_plans(tmp_path, monkeypatch, stand_in_dir):
    from infercrane.poc.config import CONFIGS_DIR, load_config
    from infercrane.poc.runner import _serving_plans

    data = yaml.safe_load((CONFIGS_DIR / "functional.yaml").read_text())
    data["paired"] |= {"request_rate": 4, "isl": 20, "extra_inputs": ["user:bench"]}
    data["serving"] |= {"tokenizer": str(stand_in_dir), "api_key": KEY, "headers": [f"X-Tenant:{TENANT}"]}
    path = tmp_path / "poc.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    cfg, _ = load_config(path)
    plans, _ = _serving_plans(cfg, path, tmp_path / "sections")
    paired, public = plans["paired"], plans["public"]
    assert paired.access.api_key == KEY and paired.access.headers == (("X-Tenant", TENANT),)
    assert paired.tokenizer == public.tokenizer == str(stand_in_dir)
    assert (paired.workload.request_rate, paired.workload.input_tokens) == (4.0, 20)
    assert paired.workload.extra_inputs == {"user": "bench"} and public.workload.request_rate is None
    recorded = json.dumps(paired.options)  # what the section's receipt records as its options
    assert KEY not in recorded and TENANT not in recorded
    assert paired.options["api_key"] == "<redacted>" and paired.options["headers"] == ["X-Tenant:<redacted>"]
    data["paired"] = {k: v for k, v in data["paired"].items() if k not in ("request_rate", "isl", "extra_inputs")}
    path.write_text(yaml.safe_dump(data))
    plain, _ = _serving_plans(load_config(path)[0], path, tmp_path / "sections")
    assert plain["paired"].section_sha256 != paired.section_sha256  # the load flags are part of the section
    assert plain["public"].section_sha256 == public.section_sha256

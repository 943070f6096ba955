"""A server InferCrane did not start (``--url``): probed once, never started or stopped, its prefix cache reset only
when it offers the endpoint, recorded as not launched by InferCrane; anything else at the URL fails in one line."""
from __future__ import annotations

import http.server
import json
import threading
import urllib.request
from pathlib import Path

import pytest

from infercrane.cli import main
from infercrane.errors import InputError
from infercrane.receipts.models_v2 import EngineRecord as ReceiptEngineRecord
from infercrane.serving.workload import load_workload
from infercrane.serving.engine import ExternalEngine, parse_server_url
from infercrane.serving.receipt import engine_record


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stats(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as resp:
        return json.loads(resp.read())


def test_a_running_server_is_probed_and_recorded(raw_server, ts_recipe):
    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0", "--model", "served-model")
    ext = ExternalEngine(srv.url + "/v1/", recipe=ts_recipe(model="served-model"), label="a")
    with ext as eng:
        assert eng is ext and eng.base_url == srv.url and eng.served_model == "served-model" and eng.alive()
        assert stats(srv.url)["finished_requests"] == 1  # the one completion of the probe
        assert stats(srv.url)["prefix_cache_resets"] == 1  # the probe of the endpoint
        eng.reset_prefix_cache()
        eng.reset_prefix_cache()
        assert stats(srv.url)["prefix_cache_resets"] == 3
    rec = ext.record
    assert rec.launched_by_infercrane is False and rec.served_models == ["served-model"]
    assert rec.version.startswith("infercrane-testserver") and rec.prefix_cache_reset_offered is True
    assert rec.prefix_cache_resets == 2 and rec.command == [] and rec.pid is None and rec.stopped_at
    assert srv.proc.poll() is None  # leaving the context stopped nothing
    out = ReceiptEngineRecord.model_validate(engine_record(rec))  # what the receipt holds
    assert out.launched_by_infercrane is False and out.served_models == ["served-model"]
    assert srv.url in out.command_line[0] and "reset before every driver invocation (2 resets)" in out.exit_status


def test_a_server_without_the_reset_endpoint_is_never_reset(raw_server, ts_recipe):
    srv = raw_server("--ttft-ms", "0", "--no-prefix-cache-reset")
    ext = ExternalEngine(srv.url, recipe=ts_recipe()).connect()
    assert ext.record.prefix_cache_reset_offered is False
    ext.reset_prefix_cache()  # nothing to do, and no error
    assert ext.record.prefix_cache_resets == 0 and stats(srv.url)["prefix_cache_resets"] == 0
    assert "not reset (the server offers no POST /reset_prefix_cache)" in engine_record(ext.record)["exit_status"]


def test_a_server_of_several_models_none_the_recipes_is_refused_listing_them(raw_server, ts_recipe):
    srv = raw_server("--ttft-ms", "0", "--model", "other", "--also-serve", "another")
    with pytest.raises(InputError) as err:
        ExternalEngine(srv.url, recipe=ts_recipe(model="wanted")).connect()
    assert str(err.value).startswith(f"--url {srv.url}: serves 'other', 'another', none of them the recipe's model "
                                     "'wanted'")
    assert len(err.value.lines()) == 1


@pytest.fixture
def plain_http_server(tmp_path):
    """A web server that is not an OpenAI server (a file listing)."""
    (tmp_path / "index.html").write_text("<html>not an LLM</html>")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(tmp_path), **k)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_what_is_not_an_openai_server_fails_in_one_line(plain_http_server, ts_recipe):
    with pytest.raises(InputError) as err:
        ExternalEngine(plain_http_server, recipe=ts_recipe()).connect()
    assert f"--url {plain_http_server}: not an OpenAI-compatible server: GET /v1/models answered 404" in str(err.value)
    assert len(err.value.lines()) == 1
    with pytest.raises(InputError, match="nothing answers there"):
        ExternalEngine(f"http://127.0.0.1:{free_port()}", recipe=ts_recipe()).connect()


@pytest.mark.parametrize("bad", ["no/such-thing", "ftp://h:1", "http://h:99999", "http://h:1/v1/models", "http://h?x=1"])
def test_bad_urls_are_refused(bad):
    with pytest.raises(InputError, match="--url"):
        parse_server_url(bad)
    assert parse_server_url("http://h:8000/") == parse_server_url("http://h:8000/v1") == "http://h:8000"


def _recipe_file(path: Path, name: str) -> Path:
    path.write_text(f"schema_version: infercrane.serving-recipe/v1\nname: {name}\nengine: vllm\nmodel: Qwen/Qwen3-0.6B\n")
    return path


def test_cli_url_that_is_no_server_is_one_line_exit_2(tmp_path, plain_http_server, capsys, monkeypatch):
    import infercrane.serving.workload as workload

    monkeypatch.setattr(workload, "run_plan", lambda *a, **k: pytest.fail("a plan started"))
    monkeypatch.chdir(tmp_path)
    rc = main(["serve", "bench", "compiled", "--url", plain_http_server, "--out", str(tmp_path / "b.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"infercrane: error: --url {plain_http_server}: not an OpenAI-compatible server")
    rc = main(["serve", "ab", "eager", "compiled", "--url", plain_http_server, "--out", str(tmp_path / "a.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "serve ab takes 2 URLs, one per recipe in order (eager, compiled); got 1" \
        in err[0], err
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("a, b", [("http://127.0.0.1:{p}", "http://127.0.0.1:{p}/v1/"),
                                  ("http://localhost:{p}", "http://127.0.0.1:{p}"),
                                  ("http://LocalHost:{p}", "http://localhost:{p}")])
def test_cli_one_server_as_both_arms_is_one_line_exit_2(a, b, tmp_path, capsys, monkeypatch):
    """Refused before any server is asked anything (nothing listens on the port)."""
    import infercrane.serving.workload as workload

    monkeypatch.setattr(workload, "run_plan", lambda *a, **k: pytest.fail("a plan started"))
    monkeypatch.chdir(tmp_path)
    port = free_port()
    a, b = a.format(p=port), b.format(p=port)
    rc = main(["serve", "ab", "eager", "compiled", "--url", a, "--url", b, "--out", str(tmp_path / "a.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("infercrane: error: --url ") and "A (eager) and B (compiled) would be one server " \
        "measured twice" in err[0] and err[0].endswith("give each recipe's own server")
    assert not (tmp_path / "a.json").exists()


def test_two_servers_are_two_servers():
    from infercrane.serving.engine import same_server

    assert same_server("http://127.0.0.1:8000", "http://127.0.0.1:8001") is None
    assert same_server("http://no-such-host.invalid:8000", "http://127.0.0.1:8000") is None
    assert same_server("http://localhost:8000", "http://127.0.0.1:8000/v1") == \
        "localhost and 127.0.0.1 both resolve to 127.0.0.1, port 8000"


def test_cli_hands_running_servers_to_the_plan(tmp_path, raw_server, monkeypatch, capsys):
    import infercrane.serving.workload as workload

    a, b = (_recipe_file(tmp_path / f"{n}.yaml", n) for n in ("x", "y"))
    srv_a = raw_server("--ttft-ms", "0", "--model", "Qwen/Qwen3-0.6B")
    srv_b = raw_server("--ttft-ms", "0", "--model", "Qwen/Qwen3-0.6B", "--no-prefix-cache-reset")
    seen: dict = {}

    def run_plan(recs, wl, *, engines=None, **kw):
        seen.update({arm: (e.base_url, e.record.launched_by_infercrane, e.record.prefix_cache_reset_offered)
                     for arm, e in engines.items()})
        raise KeyboardInterrupt

    monkeypatch.setattr(workload, "run_plan", run_plan)
    monkeypatch.chdir(tmp_path)
    rc = main(["serve", "ab", str(a), str(b), "--url", srv_a.url, "--url", srv_b.url, "--out", str(tmp_path / "r.json")])
    assert rc == 130
    assert seen == {"x": (srv_a.url, False, True), "y": (srv_b.url, False, False)}
    out = capsys.readouterr().out
    assert f"server x: {srv_a.url} (not launched by InferCrane)" in out and "not offered" in out
    assert srv_a.proc.poll() is None and srv_b.proc.poll() is None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_serve_bench_measures_a_running_server(tmp_path, raw_server, stand_in_dir, offline_env, capsys):
    from infercrane.receipts.validate import load_receipt

    srv = raw_server("--ttft-ms", "10", "--itl-ms", "2", "--model", str(stand_in_dir))
    recipe = tmp_path / "ext.yaml"
    recipe.write_text(f"schema_version: infercrane.serving-recipe/v1\nname: ext\nengine: testserver\nmodel: {stand_in_dir}\n")
    out = tmp_path / "bench.json"
    assert main(["serve", "bench", str(recipe), "--url", srv.url, "--workload", "quick", "--runs", "3",
                 "--out", str(out)]) == 0
    doc = load_receipt(out).document
    [eng] = doc["engines"]
    assert eng["launched_by_infercrane"] is False and eng["served_models"] == [str(stand_in_dir)]
    assert eng["version"].startswith("infercrane-testserver") and eng["pid"] is None
    w = load_workload("quick")  # every run at every concurrency, one recipe
    assert len(doc["runs"]) == 3 * len(w.concurrency) and all(r["status"] == "ok" for r in doc["runs"])
    assert stats(srv.url)["prefix_cache_resets"] >= 2  # the probe, then before the runs
    assert srv.proc.poll() is None  # still running: InferCrane stops only what it started

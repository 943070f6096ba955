"""The engine that answers is the one InferCrane started: a free port, its own process holding it, the served model
listed; launch and wait_ready apart (parallel start); memory share and co-residents recorded; program-changing
environment recorded, printed, and refused in a recipe unless it says so."""
from __future__ import annotations

import logging
import sys

import pytest

import infercrane.serving.engine as engine_mod
from infercrane.errors import InputError, RunFailed
from infercrane.proc import group_alive, group_pids
from infercrane.serving.engine import Engine, listening_inodes, port_in_use
from infercrane.serving.engine_kinds import ENGINE_KINDS
from infercrane.serving.recipes import RECIPE_SCHEMA_VERSION, Recipe, load_recipe


def test_launch_returns_at_once_and_wait_ready_checks_identity(tmp_path, ts_recipe):
    a = Engine(ts_recipe("--ttft-ms", "0", name="a", model="model-a"), log_dir=tmp_path, startup_timeout_s=30)
    b = Engine(ts_recipe("--ttft-ms", "0", name="b", model="model-b"), log_dir=tmp_path, startup_timeout_s=30)
    try:
        a.launch()
        b.launch()  # both processes exist before either is waited on
        assert a.proc is not None and b.proc is not None and a.record.ready_after_s is None
        a.wait_ready()
        b.wait_ready()
        for eng, model in ((a, "model-a"), (b, "model-b")):
            rec = eng.record
            assert rec.served_models == [model] and rec.launched_by_infercrane
            assert rec.port_owner == f"pid {eng.proc.pid} (process group {eng.pgid})"
            assert rec.url == eng.base_url and rec.ready_after_s is not None
    finally:
        a.stop()
        b.stop()
    assert not group_alive(a.pgid) and not group_alive(b.pgid)


def test_start_is_launch_and_wait_ready(tmp_path, ts_recipe):
    with Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, startup_timeout_s=30) as eng:
        assert eng.record.served_models == ["infercrane-test-model"] and eng.alive()
    with pytest.raises(RunFailed, match="was not launched"):
        Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path).wait_ready()


def test_a_given_port_held_by_another_server_is_refused(tmp_path, ts_recipe, raw_server):
    srv = raw_server("--ttft-ms", "0")
    eng = Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, port=srv.port, startup_timeout_s=30)
    with pytest.raises(InputError) as err:
        eng.start()
    msg = str(err.value)
    assert f"port {srv.port} on 127.0.0.1 is already in use" in msg and "--url" in msg
    assert f"pid {srv.proc.pid}" in msg  # who holds it, when it can be seen
    assert eng.proc is None  # nothing was launched


def test_a_picked_port_taken_meanwhile_is_replaced(tmp_path, ts_recipe, raw_server, monkeypatch):
    srv = raw_server("--ttft-ms", "0")
    real = engine_mod._free_port
    picks = iter([srv.port])
    monkeypatch.setattr(engine_mod, "_free_port", lambda: next(picks, None) or real())
    with Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, startup_timeout_s=30) as eng:
        assert eng.port != srv.port and str(eng.port) in eng.command and eng.record.port == eng.port
        assert eng.record.port_owner.startswith(f"pid {eng.proc.pid}")


def test_answers_from_a_server_that_is_not_the_engine_are_refused(tmp_path, ts_recipe, raw_server, monkeypatch):
    # A foreign server takes the port after the check (a race): the engine "starts" (a process that never listens)
    # and health and completion are answered by the foreign server. The port's owner gives it away.
    srv = raw_server("--ttft-ms", "0")
    monkeypatch.setattr(engine_mod, "port_in_use", lambda port, host="127.0.0.1": False)
    monkeypatch.setattr(type(ENGINE_KINDS["testserver"]), "command",
                        lambda self, recipe, port, **_: [sys.executable, "-c", "import time; time.sleep(120)"])
    eng = Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, port=srv.port, startup_timeout_s=30)
    with pytest.raises(RunFailed) as err:
        eng.start()
    msg = str(err.value)
    assert f"no process of its group (pgid {eng.pgid}) holds that port's listening socket" in msg
    assert f"pid {srv.proc.pid}" in msg and "the answers came from another server" in msg
    assert not group_alive(eng.pgid)  # stopped on the way out


def test_the_served_model_must_be_listed(tmp_path, ts_recipe, monkeypatch):
    kind_cls = type(ENGINE_KINDS["testserver"])
    real = kind_cls.command
    monkeypatch.setattr(kind_cls, "command", lambda self, recipe, port, **_: [
        "other-model" if prev == "--model" else tok
        for prev, tok in zip(["", *real(self, recipe, port)], real(self, recipe, port))])
    eng = Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, startup_timeout_s=30)
    with pytest.raises(RunFailed, match=r"lists the models \['other-model'\] on GET /v1/models, not "
                                        r"'infercrane-test-model'"):
        eng.start()
    assert eng.record.served_models == ["other-model"] and not group_alive(eng.pgid)


def test_port_helpers_see_a_listener(raw_server):
    srv = raw_server("--ttft-ms", "0")
    assert port_in_use(srv.port)
    inodes = listening_inodes(srv.port)
    assert inodes and engine_mod.socket_holders(inodes, group_pids(srv.proc.pid)) == [srv.proc.pid]


def test_gpu_memory_share_goes_on_the_vllm_command_once(tmp_path, ts_recipe):
    eng = Engine(load_recipe("eager"), log_dir=tmp_path, gpu_memory_utilization=0.45, coresident_with=["compiled"])
    assert eng.command[-2:] == ["--gpu-memory-utilization", "0.45"]
    assert eng.record.gpu_memory_utilization == 0.45 and eng.record.coresident_with == ["compiled"]
    assert "--gpu-memory-utilization" not in Engine(load_recipe("eager"), log_dir=tmp_path).command
    for args in (["--gpu-memory-utilization", "0.5"], ["--gpu_memory_utilization=0.5"]):
        recipe = load_recipe("eager").with_overrides(engine_args=args)
        with pytest.raises(InputError, match="sets --gpu-memory-utilization in its engine_args"):
            Engine(recipe, log_dir=tmp_path, gpu_memory_utilization=0.45)
    ts = Engine(ts_recipe("--ttft-ms", "0"), log_dir=tmp_path, gpu_memory_utilization=0.45)
    assert "--gpu-memory-utilization" not in ts.command and ts.record.gpu_memory_utilization == 0.45
    for bad in (0, 1.5, -0.1):
        with pytest.raises(InputError, match="not a share of GPU memory"):
            Engine(load_recipe("eager"), log_dir=tmp_path, gpu_memory_utilization=bad)


def _recipe_with_env(env: dict, **extra) -> Recipe:
    return Recipe(schema_version=RECIPE_SCHEMA_VERSION, name="envy", engine="testserver", model="m",
                  engine_args=["--ttft-ms", "0"], env=env, **extra)


def test_a_recipe_that_changes_the_program_must_say_so(tmp_path):
    path = tmp_path / "envy.yaml"
    path.write_text("schema_version: infercrane.serving-recipe/v1\nname: envy\nengine: testserver\nmodel: m\n"
                    "env:\n  PYTHONPATH: /opt/other-vllm\n")
    with pytest.raises(InputError) as err:
        load_recipe(path)
    assert "PYTHONPATH" in str(err.value) and "allow_program_env: true" in str(err.value)
    path.write_text(path.read_text() + "allow_program_env: true\n")
    assert load_recipe(path).env == {"PYTHONPATH": "/opt/other-vllm"}


def test_recipes_without_program_env_keep_their_hash():
    r = load_recipe("eager")
    assert "allow_program_env" not in r.canonical()
    assert "allow_program_env" in _recipe_with_env({}, allow_program_env=True).canonical()
    assert Recipe.model_validate(r.model_dump(mode="json")).sha256 == r.sha256  # as a receipt carries it


def test_program_env_is_recorded_and_named(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/inherited-libs")
    recipe = _recipe_with_env({"PYTHONPATH": str(tmp_path / "nothing-here")}, allow_program_env=True)
    with caplog.at_level(logging.INFO, logger="infercrane.serving.engine"):
        with Engine(recipe, log_dir=tmp_path, startup_timeout_s=30) as eng:
            environ = open(f"/proc/{eng.proc.pid}/environ", "rb").read().split(b"\0")
    rec = eng.record
    assert f"PYTHONPATH={tmp_path / 'nothing-here'}".encode() in environ
    assert rec.program_env["PYTHONPATH"] == str(tmp_path / "nothing-here")
    assert rec.program_env["LD_LIBRARY_PATH"] == "/opt/inherited-libs" and "PATH" in rec.program_env
    assert rec.program_env_from_recipe == ["PYTHONPATH"]
    line = next(r.getMessage() for r in caplog.records if "program env" in r.getMessage())
    assert "PYTHONPATH (recipe)" in line and "LD_LIBRARY_PATH (inherited)" in line
    assert "# program env: " in eng.log_path.read_text()


def test_printed_commands_are_shell_quoted(tmp_path, caplog):
    recipe = Recipe(schema_version=RECIPE_SCHEMA_VERSION, name="quoted", engine="testserver", model="a model; rm",
                    engine_args=["--ttft-ms", "0"])
    with caplog.at_level(logging.INFO, logger="infercrane.serving.engine"):
        with Engine(recipe, log_dir=tmp_path, startup_timeout_s=30) as eng:
            pass
    assert "--model 'a model; rm'" in eng.log_path.read_text().splitlines()[0]
    assert any("--model 'a model; rm'" in r.getMessage() for r in caplog.records)
    assert "--model 'a model; rm'" in str(eng.failure("x"))

"""The Modal executor, offline: the app, image and per-GPU functions built with the real ``modal`` package and their
settings read back as Modal will send them; GPU strings, pinning and run ids; credentials; the remote function's body
run in-process on a real (CPU) screen; results and cancels through stand-ins for Modal's FunctionCall (the live
service cannot be reached from CI)."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("modal")

from modal.exception import FunctionTimeoutError, InputCancellation, RemoteError  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402

from infercrane.errors import InputError, UnavailableError  # noqa: E402
from infercrane.executors import Handle, check_gpus  # noqa: E402
from infercrane.executors import modal_app as ma  # noqa: E402
from infercrane.executors.jobs import Job, JobResult  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCREEN = ("kernel", "screen", "--device", "cpu", "--op", "rms_norm", "--rows", "1", "--impls", "eager,triton",
          "--modes", "launch")
CREDENTIAL_VARS = ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_OAUTH_REFRESH_TOKEN", "MODAL_OAUTH_CLIENT_ID",
                   "MODAL_OAUTH_CLIENT_SECRET", "MODAL_OAUTH_JWT_KEY", "MODAL_PROFILE", "MODAL_IS_REMOTE")


@pytest.fixture
def no_credentials(monkeypatch, tmp_path) -> Path:
    """No Modal token anywhere: the variables cleared, Modal's config file an empty one."""
    for var in CREDENTIAL_VARS:
        monkeypatch.delenv(var, raising=False)
    config = tmp_path / "modal.toml"
    config.write_text("")
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(config))
    return config


@pytest.fixture
def executor(no_credentials, monkeypatch) -> ma.ModalExecutor:
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    return ma.ModalExecutor()


def _impl(obj):
    """The implementation object behind a modal handle (modal wraps each class with synchronicity)."""
    from modal._utils.async_utils import synchronizer

    return synchronizer._translate_in(obj)


def _layers(image) -> list[tuple[str, object]]:
    """The layers of a lazy image, top first, as modal 1.6.4 holds them until the app starts: ("mount", Mount) for a
    local-source layer, ("dockerfile", commands) for a build layer (the commands Modal sends; builder 2025.06)."""
    out: list[tuple[str, object]] = []
    img = _impl(image)
    while img is not None:
        scope = inspect.getclosurevars(img._load).nonlocals
        if "mount" in scope:
            out.append(("mount", scope["mount"]))
            img = scope["base_image"]
        else:
            out.append(("dockerfile", scope["dockerfile_function"]("2025.06").commands))
            img = scope["base_images"].get("base")
    return out


def _pip_args(image) -> list[str]:
    import shlex

    runs = [c for kind, cmds in _layers(image) if kind == "dockerfile" for c in cmds
            if c.startswith("RUN python -m pip install ")]
    assert len(runs) == 1, runs
    return shlex.split(runs[0])[5:]


# --- the app, its functions and its image, as Modal will run them -------------------------------------------------

def test_one_function_per_gpu_request_with_a_fresh_container_and_the_job_timeout():
    built = ma.build_app(["H100", "L40S", "H200"], timeout_s=600)
    assert built.app.name == "infercrane"
    assert set(built.functions) == {"H100!", "L40S", "H200"}
    for request, fn in built.functions.items():
        info = fn.info()  # what the function's with_options variant asks Modal for
        assert info.gpus == [(request, 1)]
        assert info.timeout == 600 + ma.TIMEOUT_MARGIN_S
        assert info.single_use_containers is True  # max_inputs=1
        assert info.startup_timeout == ma.STARTUP_TIMEOUT_S
    base = built.base.info()
    assert base.gpus == [] and base.single_use_containers is True
    # The container imports the body by module and name: it must be this module's run_remote.
    source = _impl(built.base)._source_info
    assert (source.module_name, source.implementation_name) == ("infercrane.executors.modal_app", "run_remote")
    # One variant per (request, timeout); a functional job's has no GPU.
    assert built.function_for("H100!", 600) is built.functions["H100!"]
    longer = built.function_for("H100!", 7200)
    assert longer is not built.functions["H100!"] and longer.info().timeout == 7200 + ma.TIMEOUT_MARGIN_S
    assert built.function_for(None, 600).info().gpus == []


def test_pin_false_sends_the_gpu_string_as_given():
    built = ma.build_app(["H100", "H100!", "L40S"], pin=False)
    assert set(built.functions) == {"H100", "H100!", "L40S"}
    assert built.functions["H100"].info().gpus == [("H100", 1)]
    assert built.functions["H100!"].info().gpus == [("H100!", 1)]


def test_image_installs_infercrane_pins_for_the_kernels_and_gpu_extras():
    built = ma.build_app(["L40S"])
    installed = {}
    for arg in _pip_args(built.image):
        req = Requirement(arg)
        installed[req.name] = req.specifier
    assert tuple(sorted(_pip_args(built.image))) == tuple(sorted(built.requirements))
    wanted, elsewhere = {}, set()
    for line in metadata.requires("infercrane"):
        req = Requirement(line)
        if req.name == "infercrane":
            continue
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("kernels", "gpu")):
            wanted.setdefault(req.name, set()).update(str(s) for s in req.specifier)
        else:
            elsewhere.add(req.name)
    assert {"pydantic", "torch", "triton"} <= set(wanted)
    for name, specs in wanted.items():
        assert name in installed, name
        assert specs <= {str(s) for s in installed[name]}, (name, installed[name])
    assert not (elsewhere - set(wanted)) & set(installed)  # aiperf, matplotlib, …: other extras stay out
    base = [cmds for kind, cmds in _layers(built.image) if kind == "dockerfile"][-1]
    assert base[0].startswith(f"FROM python:{sys.version_info.major}.{sys.version_info.minor}")


def test_image_ships_this_checkouts_infercrane_source():
    built = ma.build_app(["L40S"])
    top_kind, mount = _layers(built.image)[0]
    assert top_kind == "mount"  # added last, on container start: a source edit rebuilds nothing
    assert "infercrane" in _impl(built.image)._added_python_source_set
    files = {str(remote): Path(local) for entry in mount.entries for local, remote in entry.get_files_to_upload()}
    here = "/root/infercrane/executors/modal_app.py"
    assert files[here] == Path(ma.__file__).resolve()
    assert "/root/infercrane/kernels/ops/rms_norm/rms_norm.cu" in files  # package data travels too
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]


def test_a_gpu_modal_does_not_know_is_refused_before_anything_is_built():
    with pytest.raises(InputError, match="X9000") as err:
        ma.build_app(["H100", "X9000"])
    assert "H100!" in str(err.value)


# --- GPU strings, pinning, run ids, timeouts ------------------------------------------------------------------------

def test_pinning_and_known_gpus(executor):
    assert ma.gpu_request("H100") == "H100!"
    assert ma.gpu_request("H100!") == "H100!"
    assert ma.gpu_request("H100", pin=False) == "H100"
    assert ma.gpu_request("L40S") == "L40S"
    known = executor.known_gpus()
    assert {"H100", "H100!", "L40S", "H200"} <= set(known)
    assert all(ma.gpu_request(g) in known for g in known)
    check_gpus(executor, ["H100", "L40S", "H200"])
    with pytest.raises(InputError) as err:
        check_gpus(executor, ["H100", "X9000"])
    assert "X9000" in err.value.message and "H100!" in err.value.hint and "L40S" in err.value.hint


def test_run_id_is_the_app_id_and_the_call_id():
    assert ma.modal_run_id("ap-AbC123", "fc-XyZ789") == "ap-AbC123-fc-XyZ789"
    for app_id, call_id in (("local-1", "fc-1"), ("ap-1", ""), ("ap-1", "fc/../x")):
        with pytest.raises(InputError):
            ma.modal_run_id(app_id, call_id)


def test_function_timeout_is_the_jobs_plus_a_margin_within_modals_limit():
    assert ma.function_timeout_s(600) == 600 + ma.TIMEOUT_MARGIN_S
    assert ma.function_timeout_s(0.5) == 121
    with pytest.raises(InputError, match="--job-timeout-s"):
        ma.function_timeout_s(ma.MAX_TIMEOUT_S)


def test_submit_refuses_bad_input_before_the_app_starts(executor):
    with pytest.raises(InputError, match="X9000"):
        executor.submit(Job(gpu="X9000", argv=SCREEN))
    with pytest.raises(InputError, match="--job-timeout-s"):
        executor.submit(Job(gpu="H100", argv=SCREEN, timeout_s=ma.MAX_TIMEOUT_S))
    assert executor._built is None and executor._stack is None


# --- credentials and the modal package ------------------------------------------------------------------------------

def test_no_credentials_is_unavailable_with_the_fix(no_credentials):
    assert ma.credentials_source() is None
    with pytest.raises(UnavailableError) as err:
        ma.ModalExecutor()
    text = str(err.value)
    assert "modal token new" in text and "MODAL_TOKEN_ID" in text and "MODAL_TOKEN_SECRET" in text


def test_credentials_from_the_environment_or_the_active_profile(no_credentials, monkeypatch):
    no_credentials.write_text('[default]\ntoken_id = "ak-1"\n\n[work]\nactive = true\n')
    assert ma.credentials_source() is None  # the active profile (work) holds no token
    no_credentials.write_text('[default]\nactive = true\ntoken_id = "ak-1"\ntoken_secret = "as-1"\n')
    assert "profile 'default'" in ma.credentials_source()
    monkeypatch.setenv("MODAL_PROFILE", "other")
    assert ma.credentials_source() is None
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-2")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-2")
    assert ma.credentials_source() == "MODAL_TOKEN_ID"
    no_credentials.write_text("[default\n")
    monkeypatch.delenv("MODAL_TOKEN_ID")
    with pytest.raises(UnavailableError, match="not readable TOML"):
        ma.credentials_source()


def test_modal_not_installed_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "modal", None)  # import modal -> ImportError
    for make in (ma.ModalExecutor, lambda: ma.build_app(["H100"])):
        with pytest.raises(UnavailableError) as err:
            make()
        assert "pip install 'infercrane[modal]'" in str(err.value)


def test_importing_infercrane_imports_no_modal():
    code = ("import sys, infercrane.cli, infercrane.executors.modal_app; "
            "sys.exit(1 if 'modal' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60).returncode == 0
    # `infercrane --help`: -X importtime names every module imported, one per line, the name last
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "infercrane", "--help"], cwd=REPO, timeout=60,
                         capture_output=True, text=True)
    assert run.returncode == 0 and "import time:" in run.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "infercrane" in imported and not {m for m in imported if m == "modal" or m.startswith("modal.")}


# --- the remote function's body, in-process ---------------------------------------------------------------------------

def test_remote_body_runs_the_job_under_the_modal_run_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = {k: os.environ.get(k) for k in ("PYTHONPATH", "INFERCRANE_GIT_COMMIT")}
    job = Job(gpu=ma.gpu_request("H100"), argv=SCREEN, needs_gpu=False, timeout_s=300)
    doc = ma.run_remote(job.model_dump(), "ap-Test123", "0123abcd", function_call_id="fc-Test456")
    res = JobResult.model_validate(doc)
    assert res.state == "done", (res.error, res.log_tail)
    assert res.run_id == "ap-Test123-fc-Test456" and res.gpu == "H100!"
    receipt = json.loads(res.receipt_json)
    assert receipt["app_id"] == receipt["provenance"]["run_id"] == "ap-Test123-fc-Test456"
    assert receipt["provenance"]["run_id_kind"] == "remote-app"
    assert receipt["hardware"]["gpu_request"] == "H100!"
    assert receipt["provenance"]["git_commit"] == "0123abcd"  # the caller's commit, named for the shipped tree
    assert {k: os.environ.get(k) for k in before} == before


def test_remote_body_turns_its_own_failure_into_a_result():
    res = JobResult.model_validate(ma.run_remote({"gpu": "L40S", "argv": ["x"], "bogus": 1}, "ap-1",
                                                 function_call_id="fc-1"))
    assert res.state == "failed" and "ValidationError" in res.error and res.run_id == "ap-1-fc-1"
    res = JobResult.model_validate(ma.run_remote(Job(gpu="L40S", argv=SCREEN).model_dump(), "local-1",
                                                 function_call_id="fc-1"))
    assert res.state == "failed" and "run id" in res.error and res.run_id is None


# --- results and cancels (stand-ins for modal.FunctionCall) ---------------------------------------------------------

class _Call:
    """Answers get() like a FunctionCall: with ``outcome`` (raised when an exception); while ``running``, a get with a
    timeout raises the builtin TimeoutError, and cancel() makes the next get raise InputCancellation."""

    def __init__(self, object_id: str, outcome=None, running: bool = False) -> None:
        self.object_id, self.outcome, self.running = object_id, outcome, running
        self.cancels: list[bool] = []

    def get(self, timeout=None):
        if self.running:
            if self.cancels:
                raise InputCancellation("cancelled")
            if timeout is None:
                raise AssertionError("a get without a timeout on a call that never finishes")
            raise TimeoutError()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def cancel(self, terminate_containers: bool = False) -> None:
        self.cancels.append(terminate_containers)


def _handle(executor, gpu: str, call: _Call, outstanding: bool = True) -> Handle:
    if outstanding:
        executor._outstanding.add(call.object_id)
    return Handle(job=Job(gpu=gpu, argv=SCREEN), submitted_at=time.monotonic(), ref=call,
                  run_id=f"ap-1-{call.object_id}", info={"function_call_id": call.object_id})


def test_submit_sends_the_pinned_request_and_records_it_as_the_jobs_gpu(executor, monkeypatch):
    built, spawned = ma.build_app(), []

    class _Function:  # stands in for the with_options variant: what submit asks for and spawns
        def __init__(self, request, timeout_s):
            self.request, self.timeout_s = request, timeout_s

        def spawn(self, *args):
            spawned.append((self.request, self.timeout_s, args))
            return _Call(f"fc-{len(spawned)}")

    monkeypatch.setattr(built, "function_for", _Function)
    executor._built, executor._app_id = built, "ap-Test"  # as if the app were running
    h = executor.submit(Job(gpu="H100", argv=SCREEN, timeout_s=600, files={"cand.py": b"def f(): pass\n"}))
    assert (h.job.gpu, h.run_id, h.info["gpu_asked"], h.info["modal_timeout_s"]) == ("H100!", "ap-Test-fc-1", "H100",
                                                                                     720)
    request, timeout_s, (doc, app_id, _commit) = spawned[0]
    assert (request, timeout_s, app_id) == ("H100!", 600, "ap-Test")
    assert Job.model_validate(doc) == h.job and doc["files"] == {"cand.py": b"def f(): pass\n"}
    executor.pin = False
    assert executor.submit(Job(gpu="H100", argv=SCREEN)).job.gpu == "H100"
    functional = executor.submit(Job(gpu="L40S", argv=SCREEN, needs_gpu=False))
    assert spawned[-1][0] is None and functional.job.gpu == "L40S"  # no GPU reserved for a functional job
    assert executor._outstanding == {"fc-1", "fc-2", "fc-3"}


def test_gather_gives_every_result_and_never_raises(executor):
    done = JobResult(gpu="H100!", state="done", run_id="ap-1-fc-1", receipt_json="{}").model_dump()
    handles = [_handle(executor, "H100!", _Call("fc-1", done)),
               _handle(executor, "L40S", _Call("fc-2", FunctionTimeoutError("Function timed out"))),
               _handle(executor, "H200", _Call("fc-3", RemoteError("container exited with code 137"))),
               _handle(executor, "A10", _Call("fc-4", {"not": "a result"}))]
    got = {h.info["function_call_id"]: res for h, res in executor.gather(handles)}
    assert set(got) == {"fc-1", "fc-2", "fc-3", "fc-4"}
    assert got["fc-1"].state == "done" and got["fc-1"].receipt_json == "{}"
    assert got["fc-2"].state == "timed-out" and "timed out" in got["fc-2"].error
    assert got["fc-3"].state == "failed" and "137" in got["fc-3"].error and got["fc-3"].run_id == "ap-1-fc-3"
    assert got["fc-4"].state == "failed" and "no JobResult" in got["fc-4"].error
    assert all(got[k].gpu == h.job.gpu for k, h in zip(sorted(got), handles))
    assert not executor._outstanding


def test_cancel_stops_the_unfinished_calls_only(executor):
    running = _Call("fc-1", running=True)
    finished = _Call("fc-2", JobResult(gpu="L40S", state="done").model_dump())
    h_running = _handle(executor, "H100!", running)
    h_finished = _handle(executor, "L40S", finished, outstanding=False)
    executor.cancel([h_running, h_finished])
    assert running.cancels == [True]  # terminate_containers: the job's process tree goes with its container
    assert finished.cancels == []
    assert not executor._outstanding
    [(h, res)] = list(executor.gather([h_running]))
    assert res.state == "cancelled" and "InputCancellation" in res.error


def test_result_from_error_states():
    job = Job(gpu="H100!", argv=SCREEN)
    cases = [(FunctionTimeoutError("timed out"), False, "timed-out"), (InputCancellation("x"), False, "cancelled"),
             (RemoteError("boom"), False, "failed"), (RemoteError("boom"), True, "cancelled"),
             (RuntimeError("crash"), False, "failed")]
    for exc, cancelled, state in cases:
        res = ma.result_from_error(job, exc, run_id="ap-1-fc-1", elapsed_s=1.23456, cancelled=cancelled)
        assert (res.state, res.gpu, res.run_id, res.elapsed_s) == (state, "H100!", "ap-1-fc-1", 1.235)
        assert type(exc).__name__ in res.error

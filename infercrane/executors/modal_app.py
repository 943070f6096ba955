"""The Modal executor: one Modal app, one function per GPU string, a fresh container per job.

How a job runs there:

* **The app** (``build_app``): one Modal app named ``infercrane`` with one base function, ``run_remote``, declared
  with ``single_use_containers=True`` (Modal 1.6's name for ``max_inputs=1``, which it deprecates: the container
  exits after its one input, so no engine, CUDA context or compiled kernel of an earlier job survives into the next),
  ``startup_timeout`` for the image pull and imports, and the image below. Each GPU string becomes its own function
  through ``Function.with_options(gpu=<request>, timeout=<job timeout + margin>)``; Modal runs and scales each such
  variant on its own container pool. A functional job (``needs_gpu=False``) gets a variant without a GPU.
* **The image** (``build_image``): ``modal.Image.debian_slim`` on the caller's Python series (the remote runs the
  caller's code, and arguments and results cross as pickles), then ``pip_install`` of InferCrane's own pins, read from
  the installed distribution's metadata (``image_requirements``: the base requirements plus those of the ``kernels``
  and ``gpu`` extras, markers evaluated with ``packaging`` for the container, Linux x86_64; a requirement on
  InferCrane's own extras is expanded; one line per package, specifiers intersected). No CUDA base image: the Linux
  wheels of torch on PyPI carry the CUDA runtime libraries they were built against, Triton carries its own compiler,
  and Modal's GPU hosts provide the driver, so a CUDA toolkit image would add gigabytes and nothing the screen uses.
  Last, this checkout's ``infercrane`` package is added as local Python source (``Image.add_local_python_source``,
  every file but caches and dot-files, so the ``.cu`` sources and data files travel too): the remote runs the
  caller's exact code, uncommitted edits included.
* **A job** (``ModalExecutor.submit``): the GPU string is checked against ``known_gpus`` (``executors.check_gpus``)
  and pinned when asked to (``gpu_request``: ``H100`` is sent as ``H100!`` unless the executor was built with
  ``pin=False``, so that Modal does not run an H100 request on an H200; a string already ending in ``!`` stays). The
  job, with the request actually sent as its GPU (it lands in the receipt's ``hardware.gpu_request`` through
  ``run_job``), its files by content and the app id go to ``Function.spawn``. Where it lands, ``run_remote`` takes the
  function-call id from ``modal.current_function_call_id()``, runs ``jobs.run_job`` under the run id
  ``<app id>-<function-call id>`` (``ap-…-fc-…``: provenance treats a run id starting ``ap-`` as a remote app's) and
  returns ``JobResult.model_dump()``.
* **Results** (``gather``): one blocking ``FunctionCall.get()`` per call, each in a thread, so results come back as
  they finish (``FunctionCall.gather`` waits for all and raises the first failure). A remote exception, a Modal
  timeout, a crashed container or a cancelled input is a ``JobResult`` (``failed``, ``timed-out``, ``cancelled``)
  with the error text (``result_from_error``), never an exception out of ``gather``. The Modal timeout is the job's
  own plus ``TIMEOUT_MARGIN_S``, so that ``run_job``'s limit fires first and returns the log tail.
* **Cancel**: ``FunctionCall.cancel(terminate_containers=True)`` for each unfinished call, then a wait (at most
  ``CANCEL_WAIT_S``) until each has resolved. The app (``App.run``, ephemeral) is started by the first ``submit``
  and stopped once no call is outstanding (after ``gather`` or ``cancel``), by ``close()``, or at exit.

Credentials are checked where Modal reads them, without the network (``credentials_source``): ``MODAL_TOKEN_ID`` and
``MODAL_TOKEN_SECRET`` (or Modal's OAuth variables), else the active profile of the TOML file at
``MODAL_CONFIG_PATH`` (default ``~/.modal.toml``); none is an UnavailableError from the constructor saying how to get
one. ``modal`` not installed is an UnavailableError saying ``pip install 'infercrane[modal]'``.

What CI checks: the app, the image and the per-GPU functions are built offline with the real ``modal`` package and
their settings read back; ``run_remote`` is called in-process. What it cannot check: running the app (it needs
Modal's service and an account), so the live path (``App.run``, ``spawn``, ``get``, ``cancel``) is exercised only
against Modal itself. Importing this module imports no ``modal``.
"""
from __future__ import annotations

import atexit
import math
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infercrane.errors import InputError, UnavailableError
from infercrane.executors import Handle, check_gpus
from infercrane.executors.jobs import LOG_TAIL_CHARS, Job, JobResult

APP_NAME = "infercrane"
# The GPU strings Modal documents for ``gpu=`` (modal.com/docs/guide/gpu, "Specifying GPU type"). The modal client
# does not list them: it upper-cases the string and sends it (modal/_utils/function_utils.py, parse_gpu_config), and
# Modal's service decides. ``B200+`` lets Modal run a B200 request on a B300; ``H100!`` is the pinned H100.
MODAL_GPUS: tuple[str, ...] = ("T4", "L4", "A10", "L40S", "A100", "A100-40GB", "A100-80GB", "RTX-PRO-6000", "H100",
                               "H200", "B200", "B200+")
# The types Modal may run on a faster one unless pinned with "!" (an H100 request may land on an H200).
PINNABLE_GPUS: tuple[str, ...] = ("H100",)
IMAGE_EXTRAS: tuple[str, ...] = ("kernels", "gpu")
# Added to a job's own limit for Modal's: run_job stops the command at the job's limit (then up to 20 s to end its
# process group) and returns the log tail; the margin lets that result come back before Modal ends the container.
TIMEOUT_MARGIN_S = 120.0
# Modal's limits on a function's timeout (modal.com/docs/guide/timeouts: between 1 second and 24 hours).
MAX_TIMEOUT_S = 24 * 3600
# Container start: pulling the image (torch and its CUDA libraries) and the imports, before the job's clock starts.
STARTUP_TIMEOUT_S = 1200
CANCEL_WAIT_S = 60.0
# Where the container runs, for the requirements' markers (Modal's containers are Linux x86_64 on CPython).
TARGET_MARKERS = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                  "implementation_name": "cpython", "platform_python_implementation": "CPython"}
# Left out of the shipped source: caches and dot-files (Modal's FilePatternMatcher syntax).
SOURCE_IGNORE: tuple[str, ...] = ("**/__pycache__", "**/*.pyc", "**/.*")
INSTALL_HINT = "pip install 'infercrane[modal]'"
TOKEN_HINT = ("run `modal token new` (it writes ~/.modal.toml), or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET "
              "(from modal.com/settings/tokens)")


def _modal() -> Any:
    try:
        import modal
    except ImportError:
        raise UnavailableError("the modal executor needs the modal package, which is not installed",
                               hint=INSTALL_HINT) from None
    return modal


def known_gpus() -> tuple[str, ...]:
    """The GPU strings Modal accepts, each pinnable one also with its ``!``."""
    out: list[str] = []
    for gpu in MODAL_GPUS:
        out.append(gpu)
        if gpu in PINNABLE_GPUS:
            out.append(f"{gpu}!")
    return tuple(out)


def gpu_request(gpu: str, *, pin: bool = True) -> str:
    """The string sent to Modal for ``gpu``: ``H100`` -> ``H100!`` when pinning; anything else unchanged."""
    return f"{gpu}!" if pin and gpu in PINNABLE_GPUS else gpu


def modal_run_id(app_id: str, function_call_id: str) -> str:
    """``<app id>-<function-call id>``; InputError unless it starts ``ap-`` and is one plain name."""
    from infercrane.env.capture import RUN_ID_PATTERN

    run_id = f"{app_id}-{function_call_id}"
    if not app_id.startswith("ap-") or not function_call_id or not re.match(RUN_ID_PATTERN, run_id):
        raise InputError(f"Modal run id {run_id!r}: expected <app id ap-…>-<function-call id>, one plain name")
    return run_id


def function_timeout_s(job_timeout_s: float) -> int:
    """Modal's timeout for a job of ``job_timeout_s``: the job's own plus ``TIMEOUT_MARGIN_S``, whole seconds."""
    timeout = math.ceil(job_timeout_s + TIMEOUT_MARGIN_S)
    if timeout > MAX_TIMEOUT_S:
        raise InputError(f"--job-timeout-s {job_timeout_s:g}: Modal runs a function for at most {MAX_TIMEOUT_S} s, "
                         f"and the job needs {TIMEOUT_MARGIN_S:g} s beyond its own limit",
                         hint=f"give at most {MAX_TIMEOUT_S - TIMEOUT_MARGIN_S:g}")
    return timeout


def image_requirements(extras: Iterable[str] = IMAGE_EXTRAS, *, dist: str = "infercrane") -> tuple[str, ...]:
    """The requirements the image installs (module docstring), sorted by name, read from ``dist``'s metadata."""
    from importlib import metadata

    try:
        from packaging.markers import default_environment
        from packaging.requirements import Requirement
        from packaging.specifiers import SpecifierSet
        from packaging.utils import canonicalize_name
    except ImportError:
        raise UnavailableError("the modal executor needs the packaging package to read InferCrane's pins",
                               hint=INSTALL_HINT) from None
    env = {**default_environment(), **TARGET_MARKERS}
    merged: dict[str, tuple[str, set[str], SpecifierSet, str | None]] = {}
    self_name = canonicalize_name(dist)
    todo, seen = [tuple(extras)], set(extras)
    while todo:
        wanted = todo.pop()
        for line in metadata.requires(dist) or []:
            req = Requirement(line)
            if req.marker is not None and not any(req.marker.evaluate({**env, "extra": e}) for e in ("", *wanted)):
                continue
            key = canonicalize_name(req.name)
            if key == self_name:  # infercrane[kernels] inside an extra: its extras' requirements, once each
                new = tuple(sorted(set(req.extras) - seen))
                seen.update(new)
                if new:
                    todo.append(new)
                continue
            name, req_extras, spec, url = merged.get(key, (req.name, set(), SpecifierSet(), None))
            merged[key] = (name, req_extras | set(req.extras), spec & req.specifier, url or req.url)
    out = []
    for name, req_extras, spec, url in merged.values():
        text = name + (f"[{','.join(sorted(req_extras))}]" if req_extras else "")
        out.append(f"{text} @ {url}" if url else f"{text}{spec}")
    return tuple(sorted(out, key=str.lower))


def build_image(requirements: Iterable[str] | None = None) -> Any:
    """The image a job runs in (module docstring): debian_slim, InferCrane's pins, this checkout's source."""
    modal = _modal()
    pins = list(image_requirements() if requirements is None else requirements)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (modal.Image.debian_slim(python_version=python)
            .pip_install(*pins)
            .add_local_python_source("infercrane", ignore=list(SOURCE_IGNORE)))


@dataclass
class ModalApp:
    """The built (not running) app: the app, its image, the base function, and the function per GPU request."""

    app: Any
    image: Any
    base: Any
    requirements: tuple[str, ...]
    functions: dict[str, Any] = field(default_factory=dict)
    _variants: dict[tuple[str | None, int], Any] = field(default_factory=dict, repr=False)

    def function_for(self, request: str | None, timeout_s: float) -> Any:
        """The base function with ``gpu=request`` (none for a functional job) and Modal's timeout for a job of
        ``timeout_s``; one per (request, timeout), reused."""
        timeout = function_timeout_s(timeout_s)
        key = (request, timeout)
        if key not in self._variants:
            options: dict[str, Any] = {"timeout": timeout}
            if request is not None:
                options["gpu"] = request
            self._variants[key] = self.base.with_options(**options)
        return self._variants[key]


def build_app(gpus: Iterable[str] = (), *, timeout_s: float = 3600.0, pin: bool = True, name: str = APP_NAME,
              requirements: Iterable[str] | None = None) -> ModalApp:
    """The app, offline (module docstring): its base function, and for each of ``gpus`` its function
    (``functions[request]``, the request pinned unless ``pin=False``) for jobs of ``timeout_s``. InputError for a GPU
    string Modal does not know."""
    modal = _modal()
    gpus = list(gpus)
    unknown = [g for g in gpus if g not in known_gpus()]
    if unknown:
        raise InputError(f"--gpus {','.join(unknown)}: not a GPU type Modal runs",
                         hint=f"known: {', '.join(known_gpus())}")
    pins = tuple(image_requirements() if requirements is None else requirements)
    image = build_image(pins)
    app = modal.App(name)
    base = app.function(image=image, single_use_containers=True, timeout=function_timeout_s(timeout_s),
                        startup_timeout=STARTUP_TIMEOUT_S, include_source=False)(run_remote)
    built = ModalApp(app=app, image=image, base=base, requirements=pins)
    for gpu in gpus:
        request = gpu_request(gpu, pin=pin)
        built.functions[request] = built.function_for(request, timeout_s)
    return built


def credentials_source() -> str | None:
    """Where Modal would take its credentials from, or None (module docstring). Read like ``modal.config`` (an env
    var ``MODAL_<KEY>`` first, then the active profile of the TOML file) but now, not at import; no network."""
    import tomllib

    if os.environ.get("MODAL_IS_REMOTE") == "1":
        return "the Modal container"
    path = Path(os.environ.get("MODAL_CONFIG_PATH") or os.path.expanduser("~/.modal.toml"))
    profiles: dict[str, Any] = {}
    if path.is_file():
        try:
            profiles = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UnavailableError(f"Modal's config file {path} is not readable TOML: {exc}",
                                   hint=f"fix or remove it, then {TOKEN_HINT}") from None
    active = [k for k, v in profiles.items() if isinstance(v, dict) and v.get("active") is True]
    profile = os.environ.get("MODAL_PROFILE") or (active[0] if active else "default")
    section = profiles.get(profile) if isinstance(profiles.get(profile), dict) else {}

    def get(key: str) -> tuple[Any, str]:
        var = f"MODAL_{key.upper()}"
        if var in os.environ:
            return os.environ[var], var
        return section.get(key), f"profile {profile!r} of {path}"

    (token_id, where), (token_secret, _) = get("token_id"), get("token_secret")
    if token_id and token_secret:
        return where
    refresh, where = get("oauth_refresh_token")
    client_id, secret, jwt = get("oauth_client_id")[0], get("oauth_client_secret")[0], get("oauth_jwt_key")[0]
    if refresh and client_id and bool(secret) != bool(jwt):
        return where
    return None


@contextmanager
def _job_environment(git_commit: str | None) -> Iterator[None]:
    """For the command ``run_job`` starts: this process's ``infercrane`` first on PYTHONPATH (in the container it is
    the shipped source under /root), and the caller's commit; restored afterwards."""
    import infercrane

    root = str(Path(infercrane.__file__).resolve().parent.parent)
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "INFERCRANE_GIT_COMMIT")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, saved["PYTHONPATH"]) if p)
    if git_commit:
        os.environ["INFERCRANE_GIT_COMMIT"] = git_commit
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_remote(job: dict[str, Any], app_id: str, git_commit: str | None = None,
               function_call_id: str | None = None) -> dict[str, Any]:
    """The Modal function's body: run ``job`` (a ``Job.model_dump()``) here under ``<app id>-<function-call id>``
    and return ``JobResult.model_dump()``. The call id is Modal's (``modal.current_function_call_id()``) unless given.
    Never raises: a failure here is a failed result with its traceback."""
    import socket
    import traceback

    from infercrane import __version__
    from infercrane.executors.jobs import run_job

    run_id = None
    try:
        if function_call_id is None:
            import modal

            function_call_id = modal.current_function_call_id() or ""
        run_id = modal_run_id(app_id, function_call_id)
        with _job_environment(git_commit):
            return run_job(Job.model_validate(job), run_id=run_id).model_dump()
    except Exception as exc:
        return JobResult(gpu=str(job.get("gpu")), state="failed", run_id=run_id,
                         error=f"the Modal function failed: {type(exc).__name__}: {exc}",
                         log_tail=traceback.format_exc()[-LOG_TAIL_CHARS:], host=socket.gethostname(),
                         infercrane_version=__version__).model_dump()


def result_from_error(job: Job, exc: BaseException, *, run_id: str | None, elapsed_s: float | None,
                      cancelled: bool = False) -> JobResult:
    """The result of a call whose ``get()`` raised: Modal's timeout -> timed-out; a cancelled input (or one this
    executor cancelled) -> cancelled; anything else (the remote raised, its container crashed, the result expired)
    -> failed; the error text kept."""
    from modal.exception import FunctionTimeoutError, InputCancellation

    text = f"{type(exc).__name__}: {exc}"[-LOG_TAIL_CHARS:]
    if cancelled or isinstance(exc, InputCancellation):
        state = "cancelled"
    elif isinstance(exc, FunctionTimeoutError):
        state = "timed-out"
    else:
        state = "failed"
    return JobResult(gpu=job.gpu, state=state, run_id=run_id, error=text,
                     elapsed_s=None if elapsed_s is None else round(elapsed_s, 3))


class ModalExecutor:
    """Jobs on Modal (module docstring). ``pin=False`` sends GPU strings as given (an ``H100`` may then run on an
    H200; the fan-out flags that)."""

    name = "modal"

    def __init__(self, *, pin: bool = True, app_name: str = APP_NAME) -> None:
        _modal()
        if credentials_source() is None:
            where = os.environ.get("MODAL_CONFIG_PATH") or "~/.modal.toml"
            raise UnavailableError(f"no Modal credentials: MODAL_TOKEN_ID / MODAL_TOKEN_SECRET are not set and {where} "
                                   "holds no token for the active profile", hint=TOKEN_HINT)
        self.pin = pin
        self.app_name = app_name
        self._built: ModalApp | None = None
        self._stack: ExitStack | None = None
        self._app_id: str | None = None
        self._git_commit: str | None = None
        self._outstanding: set[str] = set()
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()

    def known_gpus(self) -> tuple[str, ...]:
        return known_gpus()

    # The app: started by the first submit, stopped once nothing is outstanding.
    def _start(self) -> ModalApp:
        if self._built is not None:
            return self._built
        import modal.exception as mx

        from infercrane.env.capture import git_state

        built = build_app(name=self.app_name)
        stack = ExitStack()
        try:
            stack.enter_context(built.app.run())
        except mx.AuthError as exc:
            raise UnavailableError(f"Modal refused the credentials: {exc}", hint=TOKEN_HINT) from None
        except (mx.Error, OSError) as exc:
            raise UnavailableError(f"the Modal app did not start: {type(exc).__name__}: {exc}",
                                   hint="check the network and Modal's status (status.modal.com); an image that "
                                        "failed to build names its build log in the message") from None
        commit, dirty = git_state()
        self._git_commit = commit if dirty is False else None  # a dirty tree is not that commit: name none
        self._built, self._stack, self._app_id = built, stack, built.app.app_id
        atexit.register(self.close)
        return built

    def close(self) -> None:
        """Stop the app (its unfinished calls end with it)."""
        stack, self._stack, self._built = self._stack, None, None
        if stack is not None:
            atexit.unregister(self.close)
            try:
                stack.close()
            except Exception:  # the app is gone either way; stopping it is best effort
                pass

    def __enter__(self) -> ModalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, job: Job) -> Handle:
        import modal.exception as mx

        check_gpus(self, [job.gpu])
        timeout = function_timeout_s(job.timeout_s)  # a limit Modal cannot run fails here, before the app starts
        request = gpu_request(job.gpu, pin=self.pin) if job.needs_gpu else None
        sent = job.model_copy(update={"gpu": request}) if request is not None else job
        built = self._start()
        fn = built.function_for(request, job.timeout_s)
        try:
            try:
                call = fn.spawn(sent.model_dump(), self._app_id, self._git_commit)
            except mx.InvalidError as exc:
                raise InputError(f"Modal refused a job for GPU {request or 'none'}: {exc}",
                                 hint=f"known here: {', '.join(known_gpus())}") from None
            except (mx.Error, OSError) as exc:
                raise UnavailableError(f"Modal did not take the job: {type(exc).__name__}: {exc}",
                                       hint="check `modal app list` and Modal's status page, then run again") from None
        except BaseException:
            self._finished(())  # an app left with nothing outstanding is stopped
            raise
        call_id = call.object_id
        with self._lock:
            self._outstanding.add(call_id)
        return Handle(job=sent, submitted_at=time.monotonic(), ref=call, run_id=modal_run_id(self._app_id, call_id),
                      info={"app_id": self._app_id, "function_call_id": call_id, "gpu_asked": job.gpu,
                            "modal_gpu": request, "modal_timeout_s": timeout})

    def _result(self, h: Handle) -> JobResult:
        """Wait for ``h``'s call and turn what came back into a result; never raises."""
        from modal.exception import InputCancellation

        call_id = h.info.get("function_call_id")
        try:
            value = h.ref.get()
        except (Exception, InputCancellation) as exc:
            return result_from_error(h.job, exc, run_id=h.run_id, elapsed_s=time.monotonic() - h.submitted_at,
                                     cancelled=call_id in self._cancelled)
        try:
            res = JobResult.model_validate(value)
        except Exception as exc:
            return JobResult(gpu=h.job.gpu, state="failed", run_id=h.run_id,
                             error=f"the Modal function returned no JobResult: {type(exc).__name__}: {exc}"[:2000])
        if call_id in self._cancelled and res.state != "done":
            res.state = "cancelled"
        h.run_id = res.run_id or h.run_id
        return res

    def _finished(self, handles: Iterable[Handle]) -> None:
        with self._lock:
            for h in handles:
                self._outstanding.discard(h.info.get("function_call_id"))
            idle = not self._outstanding
        if idle:
            self.close()

    def gather(self, handles: Iterable[Handle]) -> Iterator[tuple[Handle, JobResult]]:
        handles = list(handles)
        results: queue.Queue = queue.Queue()
        for h in handles:
            threading.Thread(target=lambda h=h: results.put((h, self._result(h))), daemon=True,
                             name=f"infercrane-modal-{h.info.get('function_call_id')}").start()
        for _ in handles:
            while True:
                try:  # a timeout, so that Ctrl-C is seen while waiting
                    h, res = results.get(timeout=0.5)
                    break
                except queue.Empty:
                    continue
            self._finished([h])
            yield h, res

    def cancel(self, handles: Iterable[Handle]) -> None:
        from modal.exception import InputCancellation

        with self._lock:
            todo = [h for h in handles if h.ref is not None and h.info.get("function_call_id") in self._outstanding]
            self._cancelled.update(h.info.get("function_call_id") for h in todo)
        for h in todo:
            try:
                h.ref.cancel(terminate_containers=True)
            except Exception:  # already finished, or the app is gone: nothing runs
                pass
        deadline = time.monotonic() + CANCEL_WAIT_S
        for h in todo:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                h.ref.get(timeout=remaining)
            except TimeoutError:  # the builtin: no outcome within the wait; stopping the app ends it
                pass
            except (Exception, InputCancellation):
                pass
        self._finished(todo)

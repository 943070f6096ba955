"""Engine lifecycle: start an engine per recipe, wait until it serves, stop it, never leave one running.

An ``Engine`` is a context manager. ``start()``:
  1. picks a free port on 127.0.0.1 (unless given) and builds the command from the recipe's engine kind;
  2. starts it in its own session/process group (``start_new_session=True``) with stdout+stderr to a log
     file, the recipe's ``env`` added to the environment (and recorded: only the additions, never the
     whole environment); on Linux the child also gets SIGTERM if the starting thread dies
     (``PR_SET_PDEATHSIG``), which covers a SIGKILL'd InferCrane;
  3. waits for ``GET /health`` == 200 and then for one real completion (``POST /v1/completions``,
     4 tokens) to succeed, within ``startup_timeout_s``; on timeout or early exit it stops the engine and
     raises ``RunFailed`` with the log tail in the message;
  4. reads the engine's version from ``GET /version``.

``stop()`` sends SIGINT, then SIGTERM, then SIGKILL to the whole process group, waiting after each
until no process of the group remains. The context exit calls it on success, error, timeout and
KeyboardInterrupt. Engines still running at interpreter exit are killed by an ``atexit`` hook, and a
SIGTERM handler (installed on the first start, from the main thread, chaining any previous handler)
kills them and then exits with status 143, so a SIGTERM'd InferCrane leaves no engine behind.

vLLM's ``POST /reset_prefix_cache`` exists only with ``VLLM_SERVER_DEV_MODE=1`` (vLLM 0.22.1,
``vllm/entrypoints/serve/cache/api_router.py``); the vLLM engine kind sets it, and it is recorded
with the recipe's additions. The server binds 127.0.0.1 only.
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from infercrane.errors import InputError, RunFailed
from infercrane.serving.recipes import Recipe

HOST = "127.0.0.1"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def needs_dummy_weights(model_dir: str | Path) -> bool:
    """True for a model stand-in (its marker says so), or any model directory without weight files:
    vLLM can serve those only with ``--load-format dummy``."""
    path = Path(model_dir)
    try:
        from infercrane.models.standin import read_stand_in_marker
    except ImportError:
        marker = None
    else:
        marker = read_stand_in_marker(path)
    if marker is not None:
        return marker.get("weights") == "dummy"
    if not (path / "config.json").is_file():
        return False
    return not any(p.suffix in WEIGHT_SUFFIXES for p in path.rglob("*") if p.is_file())


# -- engine kinds (ordered registry) -------------------------------------------------------------
@dataclass(frozen=True)
class EngineKind:
    """What differs between engines: how to tell it is installed, its command line, its defaults."""

    name: str
    display_name: str
    install_hint: str
    underscores_ok: bool  # the engine's parser accepts --max_model_len for --max-model-len
    needs_model_config: bool  # a local model dir must hold config.json
    short_aliases: tuple[tuple[str, str], ...] = ()  # rewritten by the engine before parsing; not in --help

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def base_command(self) -> list[str]:
        raise NotImplementedError

    def command(self, recipe: Recipe, port: int) -> list[str]:
        raise NotImplementedError

    def default_env(self) -> dict[str, str]:
        return {}

    def help_text(self) -> str:
        raise NotImplementedError


class _VllmKind(EngineKind):
    def available(self) -> tuple[bool, str]:
        import importlib.util

        from infercrane.env.capture import ABSENT, dist_version

        if importlib.util.find_spec("vllm") is None:
            return False, f"the vllm package is not importable by {sys.executable}"
        found = dist_version("vllm")
        return True, f"vllm {found}" if found != ABSENT else "vllm (version unknown: no package metadata)"

    def base_command(self) -> list[str]:
        # `python -m` rather than the `vllm` console script: a site installed with `pip --target`
        # (the GPU machine's) has a console script whose shebang names the staging interpreter.
        return [sys.executable, "-m", "vllm.entrypoints.cli.main"]

    def command(self, recipe: Recipe, port: int) -> list[str]:
        model = recipe.resolved_model()
        cmd = [*self.base_command(), "serve", model, "--host", HOST, "--port", str(port)]
        has_load_format = any(a.split("=", 1)[0] in ("--load-format", "--load_format") for a in recipe.engine_args)
        if recipe.model_is_local() and needs_dummy_weights(model) and not has_load_format:
            cmd += ["--load-format", "dummy"]
        return [*cmd, *recipe.engine_args]

    def default_env(self) -> dict[str, str]:
        return {"VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}

    def help_text(self) -> str:
        proc = subprocess.run([*self.base_command(), "serve", "--help=all"], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "COLUMNS": "200"})
        if proc.returncode != 0:
            raise RunFailed(f"`vllm serve --help=all` exited with {proc.returncode}: {proc.stderr[-2000:]}",
                            hint="make vllm importable (PYTHONPATH) and run it by hand to see the error")
        return proc.stdout


class _TestServerKind(EngineKind):
    def available(self) -> tuple[bool, str]:
        import importlib.util

        if importlib.util.find_spec("aiohttp") is None:
            return False, "aiohttp is not installed (pip install 'infercrane[serve]')"
        return True, "infercrane.serving.testserver (aiohttp)"

    def base_command(self) -> list[str]:
        return [sys.executable, "-m", "infercrane.serving.testserver"]

    def command(self, recipe: Recipe, port: int) -> list[str]:
        return [*self.base_command(), "--host", HOST, "--port", str(port), "--model", recipe.model,
                *recipe.engine_args]

    def help_text(self) -> str:
        from infercrane.serving.testserver import parser

        return parser().format_help()


ENGINE_KINDS: dict[str, EngineKind] = {
    "vllm": _VllmKind("vllm", "vllm serve", "install vllm==0.22.1 in the Python that runs InferCrane on the GPU machine "
                      "(pip install vllm==0.22.1), or put an installed vLLM on PYTHONPATH",
                      underscores_ok=True, needs_model_config=True,
                      short_aliases=(("-O", "--optimization-level"),)),  # vllm/utils/argparse_utils.py
    "testserver": _TestServerKind("testserver", "infercrane.serving.testserver", "pip install 'infercrane[serve]'",
                                  underscores_ok=False, needs_model_config=False),
}


def get_engine_kind(name: str) -> EngineKind:
    try:
        return ENGINE_KINDS[name]
    except KeyError:
        raise InputError(f"unknown engine {name!r}", hint=f"known engines: {', '.join(ENGINE_KINDS)}") from None


# -- process-group helpers ----------------------------------------------------------------------
def group_alive(pgid: int) -> bool:
    """True while any process (zombies included) is in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_group(proc: subprocess.Popen, waits: tuple[float, ...] = (20.0, 10.0, 5.0)) -> list[str]:
    """SIGINT, SIGTERM, SIGKILL to the group led by ``proc`` (started with ``start_new_session``).

    After each signal, waits up to the matching entry of ``waits`` for the whole group to be gone
    (the leader is reaped on the way, so a zombie leader does not count). Returns the signals sent.
    """
    sent: list[str] = []
    for sig, wait_s in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), waits, strict=True):
        proc.poll()
        if not group_alive(proc.pid):
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        sent.append(signal.Signals(sig).name)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()
            if not group_alive(proc.pid):
                break
            time.sleep(0.05)
    proc.poll()
    return sent


def log_tail(path: str | Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file (read from its last 64 KiB), or "(no log)"."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _set_parent_death_signal() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _http(method: str, url: str, body: dict | None = None, timeout_s: float = 5.0) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""


# -- live-engine registry for atexit / SIGTERM ------------------------------------------------------
_LIVE: set[Engine] = set()
_LIVE_LOCK = threading.RLock()  # re-entrant: the SIGTERM handler may run inside a locked section
_HOOKS_INSTALLED = False
_PREVIOUS_SIGTERM = None


def _kill_live_engines() -> None:
    with _LIVE_LOCK:
        engines = list(_LIVE)
    for eng in engines:
        eng.stop(grace_s=(2.0, 2.0, 2.0))


def _on_sigterm(signum, frame) -> None:
    _kill_live_engines()
    prev = _PREVIOUS_SIGTERM
    if callable(prev):
        prev(signum, frame)
    raise SystemExit(128 + signal.SIGTERM)


def _install_exit_hooks() -> None:
    global _HOOKS_INSTALLED, _PREVIOUS_SIGTERM
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(_kill_live_engines)
    if threading.current_thread() is threading.main_thread():
        prev = signal.getsignal(signal.SIGTERM)
        if prev is not _on_sigterm and prev is not signal.SIG_IGN:
            _PREVIOUS_SIGTERM = prev if callable(prev) else None
            signal.signal(signal.SIGTERM, _on_sigterm)


# -- the record that goes into receipts --------------------------------------------------------------
class EngineRecord(BaseModel):
    """One engine lifetime: what was run, how, and how it ended."""

    model_config = ConfigDict(extra="forbid")

    recipe_name: str
    recipe_sha256: str
    engine: str
    command: list[str]
    env_added: dict[str, str] = Field(description="the variables added to InferCrane's environment, no others")
    host: str
    port: int
    pid: int | None = None
    version: str | None = Field(default=None, description="from the engine's GET /version")
    log_path: str
    started_at: str | None = None
    ready_after_s: float | None = None
    stopped_at: str | None = None
    returncode: int | None = None
    stop_signals: list[str] = Field(default_factory=list, description="signals it took to stop the group")


class Engine:
    """One running engine for one recipe; see the module docstring for the lifecycle."""

    def __init__(self, recipe: Recipe, *, log_dir: str | Path, label: str | None = None, port: int | None = None,
                 startup_timeout_s: float = 900.0, grace_s: tuple[float, float, float] = (20.0, 10.0, 5.0)) -> None:
        self.recipe = recipe.resolved() if recipe.sha256 is None else recipe
        self.kind = get_engine_kind(recipe.engine)
        self.port = port or _free_port()
        self.label = label or self.recipe.name
        self.log_path = Path(log_dir) / f"{self.label}.log"
        self.startup_timeout_s = startup_timeout_s
        self.grace_s = grace_s
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self.command = self.kind.command(self.recipe, self.port)
        self.env_added = {**self.kind.default_env(), **self.recipe.env}
        self.record = EngineRecord(recipe_name=self.recipe.name, recipe_sha256=self.recipe.sha256 or "",
                                   engine=self.recipe.engine, command=self.command, env_added=self.env_added,
                                   host=HOST, port=self.port, log_path=str(self.log_path))
        self._stop_lock = threading.RLock()

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def served_model(self) -> str:
        """The model name requests must carry (what ``/v1/models`` lists)."""
        return self.recipe.resolved_model() if self.recipe.engine == "vllm" else self.recipe.model

    # -- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Engine:
        if self.proc is not None:
            raise RunFailed(f"engine {self.label!r} was already started", hint="use a new Engine per lifetime")
        _install_exit_hooks()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env_added}
        t0 = time.monotonic()
        self.record.started_at = utc_now()
        with open(self.log_path, "ab") as log:
            log.write(f"# infercrane: {' '.join(self.command)}\n# env added: {self.env_added}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal if sys.platform.startswith("linux") else None)
        self.pgid = self.proc.pid  # session leader: its pid is the group id
        self.record.pid = self.proc.pid
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.record.ready_after_s = round(time.monotonic() - t0, 3)
        return self

    def failure(self, what: str) -> RunFailed:
        """A RunFailed naming this engine, its command and its log tail."""
        return RunFailed(f"engine {self.label!r} ({self.recipe.engine}) {what}\n"
                         f"command: {' '.join(self.command)}\nlog {self.log_path}, last lines:\n{self.log_tail()}",
                         hint="read the engine log; fix the recipe or raise startup_timeout_s if it was still loading")

    def _wait_ready(self, t0: float) -> None:
        deadline = t0 + self.startup_timeout_s
        last = "no answer yet"
        stage = "health"
        while True:
            if not self.alive():
                raise self.failure(f"exited with code {self.proc.returncode} before it was ready ({last})")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.failure(f"was not ready after {self.startup_timeout_s:g} s (waiting for {stage}: {last})")
            per_try = max(0.5, min(10.0, remaining))
            try:
                if stage == "health":
                    status, _ = _http("GET", f"{self.base_url}/health", timeout_s=per_try)
                    last = f"/health answered {status}"
                    if status == 200:
                        stage = "first completion"
                        continue
                else:
                    body = {"model": self.served_model, "prompt": "InferCrane readiness check", "max_tokens": 4,
                            "temperature": 0.0}
                    status, payload = _http("POST", f"{self.base_url}/v1/completions", body,
                                            timeout_s=max(per_try, min(60.0, remaining)))
                    last = f"/v1/completions answered {status}: {payload[:200]!r}"
                    if status == 200:
                        self.record.version = self._read_version()
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.25)

    def _read_version(self) -> str | None:
        try:
            status, payload = _http("GET", f"{self.base_url}/version", timeout_s=5.0)
            if status == 200:
                return str(json.loads(payload).get("version"))
        except (OSError, ValueError):
            pass
        return None

    def alive(self) -> bool:
        """True while the engine's main process runs."""
        return self.proc is not None and self.proc.poll() is None

    def reset_prefix_cache(self) -> None:
        """``POST /reset_prefix_cache``; raises RunFailed unless the engine answers 200."""
        try:
            status, payload = _http("POST", f"{self.base_url}/reset_prefix_cache", timeout_s=30.0)
        except OSError as exc:
            raise self.failure(f"did not answer POST /reset_prefix_cache: {exc}") from None
        if status != 200:
            raise self.failure(f"answered POST /reset_prefix_cache with {status}: {payload[:200]!r} "
                             "(vLLM serves it only with VLLM_SERVER_DEV_MODE=1)")

    def stop(self, *, grace_s: tuple[float, float, float] | None = None) -> int | None:
        """SIGINT -> SIGTERM -> SIGKILL to the process group, waiting after each; returns the exit code."""
        with self._stop_lock:
            if self.proc is None or self.pgid is None:
                return None
            if self.record.stopped_at is not None:
                return self.record.returncode
            self.record.stop_signals = stop_process_group(self.proc, grace_s or self.grace_s)
            if group_alive(self.pgid):  # after SIGKILL and its wait: report, never hang
                raise RunFailed(f"engine {self.label!r}: process group {self.pgid} survived SIGKILL",
                                hint=f"inspect with `ps -g {self.pgid}`")
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.record.returncode = self.proc.returncode
            self.record.stopped_at = utc_now()
            with _LIVE_LOCK:
                _LIVE.discard(self)
            return self.proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

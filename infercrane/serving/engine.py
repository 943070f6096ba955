"""Engine lifecycle: start an engine per recipe, wait until it serves, stop it, never leave one running.

An ``Engine`` is a context manager. ``start()`` is ``launch()`` then ``wait_ready()``. Co-resident arms (several
engines on one GPU) are started one after the other, each ready before the next launches: vLLM sizes its KV cache
from the memory its start-up profile sees taken, so overlapping start-ups take each other's memory for their own.

``launch()``:
  1. checks that the port is free on 127.0.0.1 (a server already listening there is not the engine InferCrane is
     about to start: an explicitly given port that is taken is refused, a port InferCrane picked itself is replaced
     by a fresh one) and builds the command from the recipe's engine kind;
  2. starts it in its own session/process group (``start_new_session=True``) with stdout+stderr to a log
     file, the recipe's ``env`` added to the environment (and recorded: only the additions, never the
     whole environment); on Linux the child also gets SIGTERM if the starting thread dies
     (``PR_SET_PDEATHSIG``), which covers a SIGKILL'd InferCrane. Variables that change which program or libraries
     run (``PROGRAM_ENV_VARS``: PYTHONPATH, PATH, LD_PRELOAD, ...) are recorded with their values in
     ``program_env``, whether the recipe set them or InferCrane's own environment passed them on, and named in the
     log line ``launch`` writes (logger ``infercrane.serving.engine``; ``serve`` prints it).

``wait_ready()``:
  3. waits for ``GET /health`` == 200 and then for one real completion (``POST /v1/completions``,
     4 tokens) to succeed, within ``startup_timeout_s``; on timeout or early exit it stops the engine and
     raises ``RunFailed`` with the log tail in the message;
  4. checks that what answered is the engine InferCrane started: its process still runs, a process of its process
     group holds the listening socket of the port (``/proc/net/tcp[6]`` inode -> ``/proc/<pid>/fd``, Linux; elsewhere
     recorded as not checked), and ``GET /v1/models`` lists the served model (recorded in ``served_models``);
  5. reads the engine's version from ``GET /version``.

``stop()`` sends SIGINT, then SIGTERM, then SIGKILL to the whole process group, waiting after each
until no process of the group remains. The context exit calls it on success, error, timeout and
KeyboardInterrupt. Engines still running at interpreter exit are killed by an ``atexit`` hook, and a
SIGTERM handler (installed on the first start, from the main thread, chaining any previous handler)
kills them and then exits with status 143, so a SIGTERM'd InferCrane leaves no engine behind.

An engine that dies or hangs while a driver runs is reported as the engine's failure (``failure_if_dead``; the
drivers' ``run_logged`` asks the engine its command line names), with its exit code or signal, or the probe it did not
answer, and its log tail. ``probe()`` tells the engine's state at a glance: ``dead`` (its process has exited), ``hung``
(its process runs but ``GET /health`` does not answer within ``PROBE_TIMEOUT_S``), ``unhealthy`` (``GET /health``
answers other than 200) or ``serving``; one request, so it is cheap enough for every failure report.

An answer that does not come whole (the connection refused or reset, a stream cut short: ``CutShort``, raised from
``http.client.IncompleteRead``) is the engine's failure (``post``, ``ask``), naming what was asked and what state
the engine is in after it, never a traceback.

``ExternalEngine`` is a server InferCrane did not start (``serve ... --url``): the same interface, no lifecycle; it
is probed (``GET /v1/models``, one completion, ``GET /version``, whether ``POST /reset_prefix_cache`` is offered) and
recorded with ``launched_by_infercrane: false``; the model id requests name is found in its ``/v1/models``
(``served_model_of``).

Every request to an engine or a server carries its ``access`` (``ServerAccess``: ``--api-key`` as ``Authorization:
Bearer``, ``--header``s): health, ``/v1/models``, the readiness completion, ``/version``, the prefix-cache reset, the
warm-up; the drivers get the same through their environment.

vLLM's ``POST /reset_prefix_cache`` exists only with ``VLLM_SERVER_DEV_MODE=1`` (vLLM 0.22.1,
``vllm/entrypoints/serve/cache/api_router.py``); the vLLM engine kind sets it, and it is recorded
with the recipe's additions. The server binds 127.0.0.1 only.
"""
from __future__ import annotations

import atexit
import http.client
import json
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from datetime import datetime, UTC
from pathlib import Path
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

from infercrane.errors import InputError, RunFailed
from infercrane.proc import describe_pid, popen_dying_with_parent, group_alive, group_pids, stop_process_group
from infercrane.serving.engine_kinds import HOST, STARTUP_TIMEOUT_S, get_engine_kind
from infercrane.serving.recipes import PROGRAM_ENV_VARS, Recipe

_log = logging.getLogger(__name__)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


# -- process-group helpers ----------------------------------------------------------------------
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


def exit_text(returncode: int | None) -> str:
    """How a process ended, in words: ``exited with code 17`` or ``was killed by SIGKILL (signal 9)``."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (signal {-returncode})"
    return f"exited with code {returncode}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = HOST) -> bool:
    """True when a socket is already bound (listening) on ``host:port``.

    Binds with SO_REUSEADDR, as servers do (aiohttp, uvicorn), so a connection in TIME_WAIT does not count; a listener
    on the wildcard address (0.0.0.0) does, as it does for the engine's own bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


PROBE_TIMEOUT_S = 5.0  # how long the liveness probe waits for GET /health before it calls the engine hung


class CutShort(ConnectionError):
    """The server began an answer and the connection ended before its end (``http.client.IncompleteRead``)."""


def _exc_text(exc: BaseException) -> str:
    """``TimeoutError: timed out``; an exception whose text already names its type (``IncompleteRead(0 bytes
    read)``) as is."""
    text = str(exc)
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}"


def _http(method: str, url: str, body: dict | None = None, timeout_s: float = 5.0,
          headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """(status, body) of one request, with ``headers`` added (``ServerAccess.http_headers``); OSError when there is no
    whole answer: refused, reset, timed out, or ``CutShort`` (the answer began and was cut off), or ConnectionError for
    an answer that is not HTTP."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={**({"Content-Type": "application/json"} if data else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, exc.read() if exc.fp else b""
        except http.client.IncompleteRead as cut:
            raise CutShort(f"the {exc.code} answer was cut short ({_exc_text(cut)})") from None
    except http.client.IncompleteRead as exc:
        raise CutShort(f"the answer was cut short ({_exc_text(exc)})") from None
    except http.client.HTTPException as exc:
        if isinstance(exc, OSError):  # RemoteDisconnected: closed before any answer
            raise
        raise ConnectionError(f"not an HTTP answer ({_exc_text(exc)})") from None


def _listed_models(payload: bytes) -> list[str] | None:
    """The model ids of an OpenAI ``GET /v1/models`` answer, or None when it is not one."""
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        return None
    return [m["id"] for m in data]


def _version_of(payload: bytes) -> str | None:
    """``GET /version``'s ``version`` field (vLLM: ``{"version": "0.22.1"}``), else its first 200 bytes as text."""
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict) and doc.get("version") is not None:
        return str(doc["version"])
    text = payload[:200].decode(errors="replace").strip()
    return text or None


# -- what every request to a server carries (--api-key, --header) ---------------------------------------------
REDACTED = "<redacted>"  # what a receipt or a log shows in place of a secret (AIPerf's word for it)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


@dataclass(frozen=True)
class ServerAccess:
    """The API key and extra HTTP headers every request InferCrane makes to a server carries: its probes (health,
    ``/v1/models``, the readiness completion, ``/version``, the prefix-cache reset), the engine warm-up and the
    drivers (``drivers.Driver.secret_env``). The key is sent as ``Authorization: Bearer KEY``, as AIPerf's
    ``--api-key`` and vLLM's ``--api-key`` check it. Secrets: neither is ever recorded; ``record()`` says only that a
    key was set and which header names were sent (``describe``; a receipt's recorded options show ``<redacted>`` in
    their place: ``serving.config.ServerOptions``), and ``repr`` shows no value."""

    api_key: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __bool__(self) -> bool:
        return self.api_key is not None or bool(self.headers)

    def __repr__(self) -> str:
        return f"ServerAccess({self.describe()})"

    def http_headers(self) -> dict[str, str]:
        out = dict(self.headers)
        if self.api_key is not None:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out

    def header_names(self) -> list[str]:
        return [name for name, _ in self.headers]

    def describe(self) -> str:
        """In words, without a secret: ``API key set; headers X-Tenant (values not shown)``."""
        parts = ["API key set"] if self.api_key is not None else []
        if self.headers:
            parts.append(f"header{'s' if len(self.headers) > 1 else ''} {', '.join(self.header_names())} "
                         "(values not shown)")
        return "; ".join(parts) or "no API key, no extra headers"

    @classmethod
    def parse_header(cls, text: str, flag: str = "--header") -> tuple[str, str]:
        """``NAME:VALUE`` (AIPerf's ``--header`` form) as (name, value), spaces around both stripped; ValueError
        naming ``flag`` and never the value (it may be a secret) otherwise."""
        name, colon, value = str(text).partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not name:
            raise ValueError(f"{flag}: give NAME:VALUE (AIPerf's Header:Value form, e.g. X-Request-Source:bench); "
                             "the value given has no NAME: before it")
        if not _HEADER_NAME.match(name):
            raise ValueError(f"{flag} {name}: not an HTTP header name (letters, digits and !#$%&'*+.^_`|~- only)")
        if not _printable(value):
            raise ValueError(f"{flag} {name}: its value holds a line break, a control or a non-ASCII character; give "
                             "printable ASCII")
        return name, value

    @classmethod
    def check_key(cls, key: str, flag: str = "--api-key") -> str:
        """An API key as given; ValueError (never showing it) when it is empty or not printable ASCII without spaces."""
        if not key or not _printable(key) or " " in key:
            raise ValueError(f"{flag}: give the key as one word of printable ASCII (it is sent as Authorization: "
                             "Bearer KEY)")
        return key


def _printable(text: str) -> bool:
    """Printable ASCII and spaces: what an HTTP header value may hold here (http.client sends latin-1, and names a
    value it refuses in its error: a secret must not reach that message)."""
    return all(" " <= c <= "~" for c in text)


NO_ACCESS = ServerAccess()


# -- who holds a port (Linux /proc) ---------------------------------------------------------------
_TCP_LISTEN = "0A"
# /proc/net/tcp[6] local addresses that accept a connection to 127.0.0.1 (hex, as the kernel prints them)
_LOOPBACK_REACHABLE = {"0100007F", "00000000", "0" * 32, "0000000000000000FFFF00000100007F"}


def listening_inodes(port: int) -> set[int] | None:
    """Inodes of the sockets listening on ``port`` that a connection to 127.0.0.1 could reach (IPv4 loopback or
    wildcard, IPv6 wildcard or v4-mapped loopback); None where ``/proc/net/tcp`` cannot be read (not Linux)."""
    found: set[int] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            addr, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and addr.upper() in _LOOPBACK_REACHABLE:
                found.add(int(fields[9]))
    return found if readable else None


def socket_holders(inodes: set[int], pids: list[int]) -> list[int]:
    """Those of ``pids`` that hold an open file descriptor on one of the socket ``inodes``."""
    wanted = {f"socket:[{i}]" for i in inodes}
    holders = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders


def port_holders(port: int) -> list[str]:
    """Best effort, for messages: the processes (of this user) listening on ``port``, described."""
    inodes = listening_inodes(port)
    if not inodes:
        return []
    pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    return [describe_pid(p) for p in socket_holders(inodes, pids)]


# -- live-engine registry for atexit / SIGTERM, and for drivers to find their engine ------------------
_LIVE: set[Engine] = set()
_LIVE_LOCK = threading.RLock()  # re-entrant: the SIGTERM handler may run inside a locked section
_EXTERNAL: weakref.WeakSet[ExternalEngine] = weakref.WeakSet()
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


def engine_serving(command: Sequence[str]) -> Engine | ExternalEngine | None:
    """The live engine (started and not stopped) or connected external server whose base URL is one of ``command``'s
    arguments: the engine a driver command is aimed at (AIPerf's ``--url``, vllm bench's ``--base-url``)."""
    tokens = {str(t).rstrip("/") for t in command}
    with _LIVE_LOCK:
        candidates: list[Engine | ExternalEngine] = [*_LIVE, *_EXTERNAL]
    for eng in candidates:
        if eng.base_url in tokens:
            return eng
    return None


# -- the record that goes into receipts --------------------------------------------------------------
class EngineLifetime(BaseModel):
    """One engine lifetime as it happens: what was run, how, and how it ended, with what only the run needs (host,
    port, start and stop times, signals). The receipt holds its record (``receipts.models_v2.EngineRecord``, the one
    engine record), made from it by ``serving.receipt.engine_record``."""

    model_config = ConfigDict(extra="forbid")

    recipe_name: str
    recipe_sha256: str
    engine: str
    command: list[str] = Field(description="empty for a server InferCrane did not launch")
    env_added: dict[str, str] = Field(description="the variables added to InferCrane's environment, no others")
    host: str
    port: int
    url: str | None = Field(default=None, description="the base URL requests went to")
    pid: int | None = None
    version: str | None = Field(default=None, description="from the engine's GET /version")
    log_path: str
    started_at: str | None = None
    ready_after_s: float | None = None
    stopped_at: str | None = None
    returncode: int | None = None
    stop_signals: list[str] = Field(default_factory=list, description="signals it took to stop the group")
    launched_by_infercrane: bool = Field(default=True, description="False for a server given with --url")
    started_by_sitting: bool = Field(default=False, description="started by a PoC sitting's engine pool before the "
                                                               "plan that uses it: its start-up is not in that plan's wall time")
    served_models: list[str] = Field(default_factory=list, description="the model ids its GET /v1/models listed")
    served_model: str | None = Field(default=None, description="the model id requests named, where it is not the "
                                                               "recipe's model (a --url server that serves its one "
                                                               "model under another id)")
    program_env: dict[str, str] = Field(default_factory=dict, description="variables in the engine's environment that "
                                        "change which program or libraries run (recipes.PROGRAM_ENV_VARS)")
    program_env_from_recipe: list[str] = Field(default_factory=list,
                                               description="which of program_env the recipe set (the rest inherited)")
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1,
                                                 description="the share of GPU memory the engine was given")
    coresident_with: list[str] = Field(default_factory=list,
                                       description="arms whose engines were up on the same GPU at the same time")
    port_owner: str | None = Field(default=None, description="who held the listening port once the engine was ready "
                                                             "(pid in the engine's group), or why it was not checked")
    prefix_cache_reset_offered: bool | None = Field(default=None, description="whether POST /reset_prefix_cache "
                                                                              "answered 200 (probed on --url servers)")
    prefix_cache_resets: int = Field(default=0, description="resets sent before runs")
    kernels: list[dict[str, Any]] = Field(default_factory=list, description="per kernel of the recipe: the proof "
                                          "that it ran and the in-engine gate (serving.kernels.proof)")
    token_gate: dict[str, Any] | None = Field(default=None, description="greedy outputs against the reference "
                                              "arm's (serving.kernels.token_gate)")
    quality_answers: dict[str, Any] | None = Field(default=None, description="its answers to the semantic-quality "
                                                   "gate's items (serving.quality.answer_items)")
    warmup: dict[str, Any] | None = Field(default=None, description="the unmeasured load it was given before its "
                                          "first measured point (serving.warmup.warm_engine)")
    jit_during_serving: list[dict[str, Any]] = Field(
        default_factory=list, description="Triton compiles the engine logged while serving, each with the measured runs "
                                          "whose window holds it (serving.jit)")


def program_env_of(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` that change which program or libraries run."""
    return {k: env[k] for k in PROGRAM_ENV_VARS if k in env}


def _has_flag(args: Sequence[str], flag: str) -> bool:
    spellings = {flag, "--" + flag[2:].replace("-", "_")}
    return any(a.split("=", 1)[0] in spellings for a in args)


class _Served:
    """What an engine InferCrane launched and a server it was given (``--url``) both answer: HTTP below
    ``base_url``."""

    base_url: str
    # workload name -> its warm-up record (serving.warmup), for the workloads it was warmed for ahead of its A/Bs
    # (serving.ab.EnginePool)
    warmed_for: Mapping[str, dict[str, Any]] = MappingProxyType({})

    access: ServerAccess = NO_ACCESS  # the API key and headers every request to it carries

    def request(self, method: str, path: str, body: dict | None = None, timeout_s: float = 5.0) -> tuple[int, bytes]:
        """One HTTP request to this engine (``path`` below its base URL), with its ``access``: (status, body)."""
        return _http(method, f"{self.base_url}{path}", body, timeout_s, headers=self.access.http_headers())

    def post(self, path: str, body: dict, *, timeout_s: float, what: str) -> bytes:
        """POST ``body`` to ``path`` and return the answer; the engine's failure (``failure``: RunFailed naming it,
        ``what`` was asked) when it does not answer, cuts its answer short, or answers other than 200."""
        status, payload = self.ask(path, body, timeout_s=timeout_s, what=what)
        if status != 200:
            raise self.refused(status, payload, what)
        return payload

    def ask(self, path: str, body: dict, *, timeout_s: float, what: str) -> tuple[int, bytes]:
        """POST ``body`` to ``path``: (status, body) of a whole answer, whatever its status. No whole answer is the
        engine's failure (``failed_answer``): it did not answer (refused, reset, timed out) or cut its answer short,
        with the engine's state after it."""
        try:
            return self.request("POST", path, body, timeout_s=timeout_s)
        except CutShort as exc:
            raise self.failed_answer(f"cut its answer to {what} short: {exc}") from None
        except OSError as exc:  # refused, reset, timed out, not HTTP
            raise self.failed_answer(f"did not answer {what}: {_exc_text(exc)}") from None

    def refused(self, status: int, payload: bytes, what: str, *, tries: int = 1) -> RunFailed:
        """The engine's failure for a whole answer other than 200 (the last of ``tries`` alike), with its words."""
        each = f" on each of {tries} tries" if tries > 1 else ""
        return self.failure(f"answered {status} to {what}{each}: {payload[:300]!r}")

    def failed_answer(self, what: str) -> RunFailed:
        """The engine's failure for an answer that did not come whole; engines add their state after it."""
        return self.failure(what)

    def failure_if_dead(self, what: str, *, grace_s: float = 2.0, probe: bool = True) -> RunFailed | None:
        """A RunFailed when the server is down (dead, or hung when ``probe``); None while it serves."""
        return None

    def failure(self, what: str) -> RunFailed:
        raise NotImplementedError


class Engine(_Served):
    """One running engine for one recipe; see the module docstring for the lifecycle.

    ``gpu_memory_utilization``: the share of GPU memory this engine may take (co-resident engines split one GPU);
    the vLLM kind passes it as ``--gpu-memory-utilization`` (a recipe that sets that flag itself is refused: two
    owners of one number), the test server uses no GPU and only records it. ``coresident_with``: the arms whose engines
    run beside this one, recorded. ``kv_cache_bytes``: a fixed KV cache (vLLM ``--kv-cache-memory-bytes``) for engines
    started at the same time, which would otherwise each count the others' allocations as their own while sizing it.
    """

    def __init__(self, recipe: Recipe, *, log_dir: str | Path, label: str | None = None, port: int | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S, grace_s: tuple[float, float, float] = (20.0, 10.0, 5.0),
                 gpu_memory_utilization: float | None = None, coresident_with: Sequence[str] = (),
                 kv_cache_bytes: int | None = None, access: ServerAccess | None = None) -> None:
        self.recipe = recipe.resolved() if recipe.sha256 is None else recipe
        self.access = access or NO_ACCESS  # an engine whose recipe sets --api-key checks it as a --url server does
        self.kind = get_engine_kind(recipe.engine)
        self.label = label or self.recipe.name
        if gpu_memory_utilization is not None:
            if isinstance(gpu_memory_utilization, bool) or not 0 < gpu_memory_utilization <= 1:
                raise InputError(f"engine {self.label!r}: gpu_memory_utilization {gpu_memory_utilization!r} is not a "
                                 "share of GPU memory", hint="give a number in (0, 1]")
            if self.recipe.engine == "vllm" and _has_flag(self.recipe.engine_args, "--gpu-memory-utilization"):
                raise InputError(
                    f"recipe {self.recipe.name!r} sets --gpu-memory-utilization in its engine_args, and InferCrane "
                    f"was asked to give its engine {gpu_memory_utilization:g} of GPU memory (engines sharing one GPU)",
                    hint="remove --gpu-memory-utilization from the recipe's engine_args, or run the arms one at a time")
        self.gpu_memory_utilization = gpu_memory_utilization
        self.kv_cache_bytes = kv_cache_bytes if self.recipe.engine == "vllm" else None
        self._port_given = port is not None
        self.port = port or _free_port()
        self.log_path = Path(log_dir) / f"{self.label}.log"
        self.startup_timeout_s = startup_timeout_s
        self.grace_s = grace_s
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self._t0: float | None = None
        self.kernel_stats_dir = self.log_path.with_name(self.log_path.stem + "-kernels")
        from infercrane.serving.kernels import engine_additions

        _, kernel_env = engine_additions(self.recipe, self.kernel_stats_dir)  # its arguments: engine_command
        self.command = self._build_command()
        self.env_added = {**self.kind.default_env(), **self.recipe.env, **kernel_env}
        self.record = EngineLifetime(recipe_name=self.recipe.name, recipe_sha256=self.recipe.sha256 or "",
                                   engine=self.recipe.engine, command=self.command, env_added=self.env_added,
                                   host=HOST, port=self.port, url=self.base_url, log_path=str(self.log_path),
                                   gpu_memory_utilization=gpu_memory_utilization,
                                   coresident_with=list(coresident_with))
        self._stop_lock = threading.RLock()

    def _build_command(self) -> list[str]:
        return engine_command(self.recipe, self.port, gpu_memory_utilization=self.gpu_memory_utilization,
                              kv_cache_bytes=self.kv_cache_bytes)

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
        """``launch()`` then ``wait_ready()``."""
        self.launch()
        return self.wait_ready()

    def _claim_port(self) -> None:
        """A free port, or refusal: a server already listening there would answer in the engine's place."""
        tries = 0
        while port_in_use(self.port):
            if self._port_given:
                holders = port_holders(self.port)
                raise InputError(
                    f"engine {self.label!r}: port {self.port} on {HOST} is already in use"
                    + (f" ({'; '.join(holders)})" if holders else "")
                    + ": a server InferCrane did not start would answer in the engine's place",
                    hint="stop that server or give another port; to measure a running server, pass it with --url")
            tries += 1
            if tries > 20:
                raise RunFailed(f"engine {self.label!r}: found no free port on {HOST} in 20 tries")
            self.port = _free_port()
        self.command = self._build_command()
        self.record.command, self.record.port, self.record.url = self.command, self.port, self.base_url

    def launch(self) -> Engine:
        """Start the engine's process and return at once (no waiting); ``wait_ready()`` waits for it."""
        if self.proc is not None:
            raise RunFailed(f"engine {self.label!r} was already started", hint="use a new Engine per lifetime")
        _install_exit_hooks()
        self._claim_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env_added}
        self.record.program_env = program_env_of(env)
        self.record.program_env_from_recipe = sorted(k for k in self.recipe.env if k in PROGRAM_ENV_VARS)
        self._t0 = time.monotonic()
        self.record.started_at = utc_now()
        with open(self.log_path, "ab") as log:
            log.write(f"# infercrane: {shlex.join(self.command)}\n# env added: {self.env_added}\n"
                      f"# program env: {self.record.program_env}\n".encode())
            log.flush()
            self.proc = popen_dying_with_parent(self.command, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.pgid = self.proc.pid  # session leader: its pid is the group id
        self.record.pid = self.proc.pid
        with _LIVE_LOCK:
            _LIVE.add(self)
        _log.info("engine %s (%s): %s%s", self.label, self.recipe.engine, shlex.join(self.command),
                  self.program_env_line())
        return self

    def program_env_line(self) -> str:
        """``; program env: PYTHONPATH (recipe), PATH (inherited)``, or "" when there is none."""
        rec = self.record
        if not rec.program_env:
            return ""
        names = [f"{k} ({'recipe' if k in rec.program_env_from_recipe else 'inherited'})" for k in rec.program_env]
        return "; program env: " + ", ".join(names)

    def wait_ready(self) -> Engine:
        """Wait for health and one completion, then check the engine's identity; stops the engine on failure."""
        if self.proc is None or self._t0 is None:
            raise RunFailed(f"engine {self.label!r} was not launched", hint="call launch() (or start()) first")
        try:
            self._wait_ready(self._t0)
            self._check_identity()
            self.record.version = self._read_version()
            if self.recipe.kernels:
                from infercrane.serving.kernels import prove

                prove(self)
        except BaseException:
            self.stop()
            raise
        self.record.ready_after_s = round(time.monotonic() - self._t0, 3)
        _log.info("engine %s ready after %.1f s on %s (pid %s)", self.label, self.record.ready_after_s, self.base_url,
                  self.record.pid)
        return self

    def failure(self, what: str, *, hint: str | None = None) -> RunFailed:
        """A RunFailed naming this engine, its command and its log tail (and, for a recipe with kernels, what their
        records say, also recorded on ``record.kernels``)."""
        if self.recipe.kernels:
            what += self._kernel_errors()
        return RunFailed(f"engine {self.label!r} ({self.recipe.engine}) {what}\n"
                         f"command: {shlex.join(self.command)}\nlog {self.log_path}, last lines:\n{self.log_tail()}",
                         hint=hint or "read the engine log; fix the recipe or raise startup_timeout_s if it was still "
                                      "loading")

    def failed_answer(self, what: str) -> RunFailed:
        """The engine's failure for an answer that did not come whole, with its state after it (``probe``): dead
        (how it ended), hung, unhealthy, or still serving."""
        state, detail = self.probe(grace_s=2.0)
        words = {"dead": f"the engine has died: {detail}", "hung": f"the engine stopped answering (hung): {detail}",
                 "unhealthy": f"the engine is unhealthy: {detail}", "serving": f"the engine is alive: {detail}"}
        return self.failure(f"{what}; {words[state]}", hint="read the engine log: the engine, not InferCrane, ended "
                                                            "the answer")

    def probe(self, *, grace_s: float = 0.0, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str, str]:
        """The engine's state, and in words: ``dead`` (its process has exited; a dying one is given up to ``grace_s``
        to be gone), ``hung`` (its process runs, but ``GET /health`` does not answer within ``timeout_s``, or its
        connection fails), ``unhealthy`` (``GET /health`` answers other than 200) or ``serving``. One request."""
        if self.proc is None:
            return "dead", "it was never launched"
        if self._exited(grace_s):
            return "dead", f"it {exit_text(self.proc.returncode)}"
        try:
            status, _ = self.request("GET", "/health", timeout_s=timeout_s)
        except TimeoutError:
            return "hung", f"its process runs, but GET /health did not answer within {timeout_s:g} s"
        except OSError as exc:
            if isinstance(getattr(exc, "reason", None), TimeoutError):  # urllib wraps a connect timeout
                return "hung", f"its process runs, but GET /health did not answer within {timeout_s:g} s"
            return "hung", f"its process runs, but GET /health failed ({_exc_text(getattr(exc, 'reason', exc))})"
        if status != 200:
            return "unhealthy", f"its process runs, but GET /health answered {status}"
        return "serving", "its process runs and GET /health answered 200"

    def _kernel_errors(self) -> str:
        from infercrane.serving.kernels import read_proofs

        try:
            docs = read_proofs(self)
        except Exception as exc:  # a failure report must not fail: say the records could not be read
            return f"; its kernel records could not be read ({type(exc).__name__}: {exc})"
        errors = [e for d in docs for e in d["errors"]]
        return f"; its kernel records say: {'; '.join(errors[:3])}" if errors else ""

    def failure_if_dead(self, what: str, *, grace_s: float = 2.0, probe: bool = True) -> RunFailed | None:
        """When the engine has died (waiting up to ``grace_s`` for a dying one to be gone), a RunFailed saying so —
        ``died <what>: it exited with code 17`` or ``was killed by SIGKILL`` — with its log tail; with ``probe``, also
        when its process runs but does not answer (``probe()``: ``stopped answering (hung) <what>: its process runs,
        but GET /health did not answer within 5 s``) or answers unhealthy; None while it serves.

        For a caller whose driver just failed: the engine's death or hang, not the driver's exit, is the cause to
        report. ``probe=False``: the process's death only, no request."""
        if self.proc is None:
            return None
        if probe:
            state, detail = self.probe(grace_s=grace_s)
        elif self._exited(grace_s):
            state, detail = "dead", f"it {exit_text(self.proc.returncode)}"
        else:
            return None
        if state == "dead":
            return self.failure(f"died {what}: {detail}",
                                hint="read the engine log: the engine stopped the run, not the driver")
        if state == "hung":
            return self.failure(f"stopped answering (hung) {what}: {detail}",
                                hint="read the engine log: its process runs but does not answer (a deadlock, a stuck "
                                     "device, a request it cannot finish); the engine stopped the run, not the driver")
        if state == "unhealthy":
            return self.failure(f"is unhealthy {what}: {detail}",
                                hint="read the engine log: the engine stopped the run, not the driver")
        return None

    def _wait_ready(self, t0: float) -> None:
        deadline = t0 + self.startup_timeout_s
        last = "no answer yet"
        stage = "health"
        while True:
            if not self.alive():
                raise self.failure(f"{exit_text(self.proc.returncode)} before it was ready ({last})")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.failure(f"was not ready after {self.startup_timeout_s:g} s (waiting for {stage}: {last})")
            per_try = max(0.5, min(10.0, remaining))
            try:
                if stage == "health":
                    status, _ = self.request("GET", "/health", timeout_s=per_try)
                    last = f"/health answered {status}"
                    if status == 200:
                        stage = "first completion"
                        continue
                else:
                    body = {"model": self.served_model, "prompt": "InferCrane readiness check", "max_tokens": 4,
                            "temperature": 0.0}
                    status, payload = self.request("POST", "/v1/completions", body,
                                            timeout_s=max(per_try, min(60.0, remaining)))
                    last = f"/v1/completions answered {status}: {payload[:200]!r}"
                    if status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.25)

    def _check_identity(self) -> None:
        """What answered is this engine: its process runs, its group holds the port, it lists the served model."""
        died = "right after answering the readiness check"
        if not self.alive():
            raise self._died(died)
        inodes = listening_inodes(self.port)
        if inodes is None:
            self.record.port_owner = "not checked (no /proc/net/tcp here)"
        else:
            holders = socket_holders(inodes, group_pids(self.pgid)) if inodes else []
            if not holders:
                if self._exited(grace_s=2.0):  # it closed its socket dying: no other server answered for it
                    raise self._died(died)
                others = port_holders(self.port)
                raise self.failure(
                    f"answered on port {self.port}, but no process of its group (pgid {self.pgid}) holds that port's "
                    f"listening socket ({'; '.join(others) if others else 'held by a process InferCrane cannot see'})"
                    ": the answers came from another server")
            self.record.port_owner = f"pid {holders[0]} (process group {self.pgid})"
        try:
            status, payload = self.request("GET", "/v1/models", timeout_s=30.0)
        except OSError as exc:
            if self._exited(grace_s=2.0):  # it died under the question: the death is the news, not the silence
                raise self._died(died) from None
            raise self.failure(f"did not answer GET /v1/models: {exc}") from None
        models = _listed_models(payload) if status == 200 else None
        if models is None:
            raise self.failure(f"answered GET /v1/models with {status}: {payload[:200]!r} (not an OpenAI model list)")
        self.record.served_models = models
        if self.served_model not in models:
            raise self.failure(f"lists the models {models} on GET /v1/models, not {self.served_model!r}, the model "
                               "requests will name")

    def _exited(self, grace_s: float) -> bool:
        """Whether the engine's process has exited, giving a dying one up to ``grace_s`` to be gone."""
        deadline = time.monotonic() + grace_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.alive()

    def _died(self, what: str) -> RunFailed:
        """The engine's death ``what`` (its process has exited): how it ended and its log tail; who holds its port now,
        if anyone does (an answer from another server would then be possible, not proven)."""
        others = port_holders(self.port)
        now = f" (port {self.port} is now held by {'; '.join(others)})" if others else ""
        return self.failure(f"died {what}: it {exit_text(self.proc.returncode)}{now}",
                            hint="read the engine log: the engine exited on its own")

    def _read_version(self) -> str | None:
        try:
            status, payload = self.request("GET", "/version", timeout_s=5.0)
            if status == 200:
                return _version_of(payload)
        except OSError:
            pass
        return None

    def alive(self) -> bool:
        """True while the engine's main process runs."""
        return self.proc is not None and self.proc.poll() is None

    def reset_prefix_cache(self) -> None:
        """``POST /reset_prefix_cache``; raises RunFailed unless the engine answers 200."""
        try:
            status, payload = self.request("POST", "/reset_prefix_cache", timeout_s=30.0)
        except OSError as exc:
            raise self.failure_if_dead("at POST /reset_prefix_cache", grace_s=0.5) or \
                self.failure(f"did not answer POST /reset_prefix_cache: {_exc_text(exc)}") from None
        if status != 200:
            raise self.failure(f"answered POST /reset_prefix_cache with {status}: {payload[:200]!r} "
                               "(vLLM serves it only with VLLM_SERVER_DEV_MODE=1)")
        self.record.prefix_cache_resets += 1

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


# -- a server InferCrane did not start (--url) --------------------------------------------------------------
def engine_command(recipe: Recipe, port: int, *, gpu_memory_utilization: float | None = None,
                   kv_cache_bytes: int | None = None, dummy_weights: bool | None = None) -> list[str]:
    """The command line an engine of ``recipe`` is launched with on ``port``: its engine kind's (``dummy_weights``:
    see ``EngineKind.command``), the priority argument of the recipe's kernels (``kernels.priority_arg``), then
    InferCrane's memory share (vLLM ``--gpu-memory-utilization``) and fixed KV cache (engines started at once: no
    engine sizes its cache from the others')."""
    from infercrane.serving.kernels import priority_arg

    cmd = get_engine_kind(recipe.engine).command(recipe, port, dummy_weights=dummy_weights)
    cmd += priority_arg(recipe.kernels) if recipe.kernels else []
    if gpu_memory_utilization is not None and recipe.engine == "vllm":
        cmd += ["--gpu-memory-utilization", f"{gpu_memory_utilization:g}"]
    if kv_cache_bytes is not None:
        cmd += ["--kv-cache-memory-bytes", str(int(kv_cache_bytes))]
    return cmd


def launched_as(command_line: Sequence[str], recipe: Recipe, *, gpu_memory_utilization: float | None = None) -> bool:
    """Whether ``command_line`` (an engine record's) launches ``recipe``: it is ``engine_command`` of the recipe on
    the port it names, with or without dummy weights, the engine kind's stated defaults aside (``EngineKind.
    without_defaults``: an engine shared by two recipes that differ only there serves both) and its fixed KV cache,
    if any, as recorded. The interpreter (the first word) is the machine's and is not compared."""
    got = [str(t) for t in command_line]

    def value_of(flag: str) -> str | None:
        i = got.index(flag) if flag in got else -1
        return got[i + 1] if 0 <= i < len(got) - 1 else None

    port, kv = value_of("--port"), value_of("--kv-cache-memory-bytes")
    if port is None or not port.isdigit() or (kv is not None and not kv.isdigit()):
        return False
    kind = get_engine_kind(recipe.engine)
    return any(kind.without_defaults(engine_command(recipe, int(port), gpu_memory_utilization=gpu_memory_utilization,
                                                    kv_cache_bytes=int(kv) if kv else None, dummy_weights=dummy)[1:])
               == kind.without_defaults(got[1:]) for dummy in (False, True))


def parse_server_url(url: str) -> str:
    """The base URL (``http[s]://host[:port]``) of a ``--url`` value; a trailing ``/`` or ``/v1`` is dropped.
    InputError for anything else (another scheme, no host, a query, another path)."""
    parsed = urllib.parse.urlsplit(url.strip())
    path = parsed.path.rstrip("/")
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.query or parsed.fragment \
            or path not in ("", "/v1"):
        raise InputError(f"--url {url}: not the base URL of an HTTP server",
                         hint="give http://HOST:PORT (the server's root, where /v1/models is)")
    try:
        parsed.port
    except ValueError:
        raise InputError(f"--url {url}: its port is not a number in 1..65535", hint="give http://HOST:PORT") from None
    return f"{parsed.scheme}://{parsed.netloc}"


def same_server(a: str, b: str) -> str | None:
    """Why two ``--url`` values name one server, or None: the same port, and the same host (its case aside) or two
    host names with an address in common (``localhost`` and ``127.0.0.1``). A name that does not resolve here is
    compared as written. Both values are parsed first (``parse_server_url``)."""
    ua, ub = urllib.parse.urlsplit(parse_server_url(a)), urllib.parse.urlsplit(parse_server_url(b))

    def port(u: urllib.parse.SplitResult) -> int:
        return u.port or (443 if u.scheme == "https" else 80)

    if port(ua) != port(ub):
        return None
    ha, hb = (ua.hostname or "").lower(), (ub.hostname or "").lower()
    if ha == hb:
        return f"both are {ha} port {port(ua)}"

    def addresses(host: str) -> set[str]:
        try:
            return {str(info[4][0]) for info in socket.getaddrinfo(host, port(ua), type=socket.SOCK_STREAM)}
        except (OSError, UnicodeError):
            return set()

    shared = addresses(ha) & addresses(hb)
    return f"{ha} and {hb} both resolve to {sorted(shared)[0]}, port {port(ua)}" if shared else None


def _last_part(model: str) -> str:
    return model.rstrip("/").rsplit("/", 1)[-1]


def served_model_of(models: Sequence[str], recipe: Recipe, requested: str | None = None) -> tuple[str | None, str]:
    """The model id requests to a server listing ``models`` (``GET /v1/models``) name, and a sentence saying how it
    was chosen when it is not the recipe's model ("" when it is): ``requested`` (an explicit model) when listed;
    else the recipe's model as written or as a folder made absolute; else the one model listed; else the one listed
    model whose last path part is the recipe model's (``Qwen/Qwen3-0.6B`` and ``/models/Qwen3-0.6B``). (None, why)
    when none fits, listing what the server serves."""
    listed = ", ".join(map(repr, models))
    if requested is not None:
        return (requested, "") if requested in models else (None, f"serves {listed}, not {requested!r}")
    wanted = [recipe.model, recipe.resolved_model()]
    exact = next((m for m in wanted if m in models), None)
    if exact is not None:
        return exact, ""
    said = f"recipe {recipe.name!r} names model {recipe.model!r}"
    if len(models) == 1:
        return models[0], f"serves one model, {models[0]!r}, and requests name it ({said}; both recorded)"
    same = [m for m in models if _last_part(m) == _last_part(recipe.model)]
    if len(same) == 1:
        return same[0], f"serves {listed}; requests name {same[0]!r}, the one named as the recipe's model ({said})"
    return None, (f"serves {listed}, none of them the recipe's model {recipe.model!r} (recipe {recipe.name!r})"
                  + (f"; {len(same)} end in {_last_part(recipe.model)!r}" if same else ""))


class ExternalEngine(_Served):
    """A server InferCrane did not launch (``--url``), with ``Engine``'s interface and no lifecycle.

    ``connect()`` (or entering the context) probes it: ``GET /v1/models`` must be an OpenAI model list, and the model
    requests will name is chosen from it (``served_model_of``): ``model`` when given, else the recipe's model (its id,
    or its folder made absolute), else the one model the server lists, else the one whose last path part is the
    recipe model's; a choice other than the recipe's model is said in one line and recorded
    (``EngineLifetime.served_model``). Then one real completion must succeed, ``GET /version`` is recorded as it
    answers, and ``POST /reset_prefix_cache`` is tried once: when it answers 200 the prefix cache is reset before every
    run (as for a launched engine), otherwise never, and the record says which. Every request carries ``access`` (the
    API key and headers). ``stop()`` and the context exit leave the server running. Every failure to connect is an
    InputError of one line naming ``--url``.
    """

    def __init__(self, url: str, *, recipe: Recipe, label: str | None = None, model: str | None = None,
                 timeout_s: float = 30.0, access: ServerAccess | None = None) -> None:
        self.base_url = parse_server_url(url)
        self.recipe = recipe.resolved() if recipe.sha256 is None else recipe
        self.label = label or self.recipe.name
        self.requested_model = model
        self.timeout_s = timeout_s
        self.access = access or NO_ACCESS
        self.note: str | None = None  # the line saying the server's model id is not the recipe's, when it is not
        self.served_model: str = model or self.recipe.model
        parsed = urllib.parse.urlsplit(self.base_url)
        self.record = EngineLifetime(recipe_name=self.recipe.name, recipe_sha256=self.recipe.sha256 or "",
                                   engine=self.recipe.engine, command=[], env_added={}, host=parsed.hostname or "",
                                   port=parsed.port or (443 if parsed.scheme == "https" else 80), url=self.base_url,
                                   log_path="", launched_by_infercrane=False)
        self.connected = False

    def __enter__(self) -> ExternalEngine:
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> ExternalEngine:
        return self.connect()

    def launch(self) -> ExternalEngine:  # nothing to launch: the interface of Engine for co-resident callers
        return self

    def wait_ready(self) -> ExternalEngine:
        return self.connect()

    def _bad(self, what: str, hint: str) -> InputError:
        return InputError(f"--url {self.base_url}: {what}", hint=hint)

    def connect(self) -> ExternalEngine:
        """Probe the server once (see the class docstring); idempotent."""
        if self.connected:
            return self
        not_openai = "give the root URL of an OpenAI-compatible server (vllm serve, …): GET /v1/models must list models"
        try:
            status, payload = self.request("GET", "/v1/models", timeout_s=self.timeout_s)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise self._bad(f"nothing answers there ({reason})", "start the server first, or check host and port"
                            ) from None
        models = _listed_models(payload) if status == 200 else None
        if status in (401, 403):
            raise self._bad(f"GET /v1/models answered {status}: the server wants credentials"
                            + (f" other than those given ({self.access.describe()})" if self.access else ""),
                            "give the server's API key with --api-key KEY (sent as Authorization: Bearer KEY), or "
                            "the headers it wants with --header NAME:VALUE")
        if models is None:
            shown = " ".join(payload[:120].decode(errors="replace").split())
            raise self._bad(f"not an OpenAI-compatible server: GET /v1/models answered {status} ({shown or 'empty'})",
                            not_openai)
        if not models:
            raise self._bad("GET /v1/models lists no model", "load a model into the server")
        chosen, how = served_model_of(models, self.recipe, self.requested_model)
        if chosen is None:
            raise self._bad(how, "give a recipe whose model is one the server serves (the receipt records the "
                                 "recipe's model and the id requests named)")
        self.served_model = chosen
        self.record.served_models = models
        if how:
            self.record.served_model = chosen
            self.note = f"server {self.label} at {self.base_url}: {how}"
            _log.info("%s", self.note)
        body = {"model": chosen, "prompt": "InferCrane readiness check", "max_tokens": 4, "temperature": 0.0}
        try:
            status, payload = self.request("POST", "/v1/completions", body, timeout_s=max(60.0, self.timeout_s))
        except OSError as exc:
            raise self._bad(f"POST /v1/completions failed: {exc}", not_openai) from None
        if status != 200:
            raise self._bad(f"POST /v1/completions for {chosen!r} answered {status}: "
                            f"{' '.join(payload[:120].decode(errors='replace').split())}", not_openai)
        try:
            status, payload = self.request("GET", "/version", timeout_s=self.timeout_s)
            self.record.version = _version_of(payload) if status == 200 else None
        except OSError:
            self.record.version = None
        try:
            status, _ = self.request("POST", "/reset_prefix_cache", timeout_s=self.timeout_s)
        except OSError:
            status = None
        self.record.prefix_cache_reset_offered = status == 200
        self._reset_probe_status = status
        self.record.started_at = utc_now()  # when InferCrane began using it
        self.connected = True
        _EXTERNAL.add(self)
        _log.info("server %s at %s (not launched by InferCrane): serves %s, version %s, prefix-cache reset %s",
                  self.label, self.base_url, ", ".join(models), self.record.version or "unknown",
                  "offered" if self.record.prefix_cache_reset_offered
                  else f"not offered (POST /reset_prefix_cache answered {status}): runs share the server's cache")
        return self

    def alive(self) -> bool:
        """True while the server answers ``GET /v1/models``."""
        try:
            status, _ = self.request("GET", "/v1/models", timeout_s=10.0)
        except OSError:
            return False
        return status == 200

    def reset_prefix_cache(self) -> None:
        """Reset the server's prefix cache when it offers ``POST /reset_prefix_cache``; nothing otherwise."""
        if not self.record.prefix_cache_reset_offered:
            return
        try:
            status, payload = self.request("POST", "/reset_prefix_cache", timeout_s=30.0)
        except OSError as exc:
            raise self.failure(f"did not answer POST /reset_prefix_cache: {exc}") from None
        if status != 200:
            raise self.failure(f"answered POST /reset_prefix_cache with {status}: {payload[:200]!r}, which it "
                               "accepted when InferCrane connected")
        self.record.prefix_cache_resets += 1

    def failure(self, what: str) -> RunFailed:
        return RunFailed(f"server {self.label!r} at {self.base_url} (not launched by InferCrane) {what}",
                         hint="check the server and its own log (InferCrane did not start it and holds no log of it)")

    def failure_if_dead(self, what: str, *, grace_s: float = 2.0, probe: bool = True) -> RunFailed | None:
        """A RunFailed when the server no longer answers ``GET /v1/models``; None while it does. It is always probed
        (``probe`` is the launched engine's option); whether it died or hangs cannot be told from here."""
        if not self.connected or self.alive():
            return None
        return self.failure(f"stopped answering {what}")

    def failed_answer(self, what: str) -> RunFailed:
        """The server's failure for an answer that did not come whole, with whether it still answers after it."""
        try:
            status, _ = self.request("GET", "/v1/models", timeout_s=PROBE_TIMEOUT_S)
            after = f"it still answers GET /v1/models ({status})"
        except OSError as exc:
            after = f"it no longer answers GET /v1/models within {PROBE_TIMEOUT_S:g} s ({_exc_text(exc)})"
        return self.failure(f"{what}; {after}")

    def stop(self, **_: object) -> None:
        """Nothing to stop: the server is not InferCrane's. Records when InferCrane last stopped using it."""
        if self.connected:
            self.record.stopped_at = utc_now()
        return None

    def log_tail(self, lines: int = 40) -> str:
        return "(no log: the server was not launched by InferCrane)"

"""Run each implementation in its own worker process, so a crash takes down only that implementation.

A worker is ``python -m infercrane.kernels.harness.isolation``: it reads one JSON job per line on stdin and writes
one JSON reply per line on a private copy of its stdout; anything else written to stdout (a kernel's printf, a user's
print) is redirected to stderr, which the parent keeps in a temporary file and quotes when the worker fails.
A worker holds one implementation for the whole screen (loaded once, compiled once), so the parent can interleave
implementations trial by trial while each stays in its own process.

Jobs: ``load`` (probe availability, load the implementation), ``correctness`` (one row count), ``time`` (one row
count x mode x trial), ``describe`` (provenance at the end of the run), ``calibrate`` (device calibration; no
implementation), ``ping``, ``exit``.

Failure handling in the parent (``SubprocessWorker``):

* the process dies (segfault, abort, illegal address that kills the context, ``os._exit``) -> ``WorkerFailure``
  with kind ``crashed``, the exit status or signal name and the tail of its stderr (faulthandler traceback);
* no reply within the job's timeout (a hang) -> the worker is killed with all it started (below), kind ``timeout``;
* the job raised (a kernel's exception, a CUDA error reported as an exception) -> kind ``error`` with the traceback;
  the parent stops using that worker (a CUDA error can leave its context unusable);
* the job raised InputError (e.g. the user's file declares no contract) -> re-raised as InputError in the parent.

Ending a worker (``reaper.py`` and ``infercrane/proc.py`` hold the mechanisms; ``reaper.py`` says what they cannot
catch): every worker runs in a session and process group of its own, carries a unique token in its environment
(inherited by all it starts), is a child subreaper (orphaned descendants stay in its tree) and has a parent-death
signal. Whenever the parent ends a worker (``close``, a timeout, a malformed reply, a crash) it freezes and kills the
worker's tree, its process group and every process holding its token. ``close`` asks an idle worker to exit first; a worker with a job in flight (the parent was
interrupted: Ctrl-C, SIGTERM through ``proc.raise_on_sigterm``) is killed at once, so ``finally`` blocks stay fast.
The worker ends its own descendants when it exits, and when InferCrane dies (even by SIGKILL) it gets SIGTERM, ends
its descendants and exits.

``InProcessWorker`` runs the same jobs in the calling process (no crash protection), for quick functional runs.
The user's candidate is passed to the worker as a path and function name, never as a function object.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Literal

from infercrane.errors import InputError
from infercrane.proc import end_processes
from infercrane.kernels.harness import reaper
from infercrane.kernels.harness.session import WorkerSession, spec_to_json  # noqa: F401  (spec_to_json: runner)

FailureKind = Literal["crashed", "timeout", "error", "harness"]
STDERR_TAIL_CHARS = 4000


class WorkerFailure(Exception):
    """An implementation's worker failed: crashed, timed out, or its job raised."""

    def __init__(self, kind: FailureKind, message: str, *, exit_signal: str | None = None,
                 exit_code: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.exit_signal = exit_signal
        self.exit_code = exit_code


# --------------------------------------------------------------------------------------------- worker entry

def main() -> int:
    """Worker entry point: JSON jobs on stdin, JSON replies on the original stdout."""
    reaper.arm_worker()  # first: parent-death signal, subreaper, watchdog (before any user code can run)
    import faulthandler

    faulthandler.enable(file=sys.stderr, all_threads=True)
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # stray prints (Python or C) go to stderr, never into the protocol stream
    sys.stdout = sys.stderr
    session = WorkerSession()
    try:
        for line in sys.stdin:  # EOF: the parent closed the pipe or died
            line = line.strip()
            if not line:
                continue
            job = json.loads(line)
            if job.get("op") == "exit":
                proto.write(json.dumps({"ok": True, "result": {}}) + "\n")
                proto.flush()
                break
            proto.write(json.dumps(session.handle(job)) + "\n")
            proto.flush()
    finally:
        reaper.end_own_descendants()  # whatever the implementation started dies with the worker
    return 0


# --------------------------------------------------------------------------------------------- parent side


def _unwrap(reply: dict[str, Any], what: str) -> dict[str, Any]:
    if reply.get("ok"):
        return reply["result"]
    if reply.get("error_type") == "InputError" and not reply.get("in_kernel"):
        raise InputError(reply.get("error", "bad input"), hint=reply.get("hint"))
    tb = reply.get("traceback") or ""
    if reply.get("harness"):  # the harness's own failure inside the worker: no verdict on the implementation
        raise WorkerFailure("harness", f"{what}: {reply.get('error')}\n{tb}".rstrip())
    raise WorkerFailure("error", f"{what} raised {reply.get('error')}\n{tb}".rstrip())


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


class InProcessWorker:
    """Runs jobs in this process: no protection from crashes or hangs. For quick functional runs and tests."""

    isolated = False

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._session = WorkerSession()
        self._pending: list[dict[str, Any]] = []
        self.dead = False

    def send(self, job: dict[str, Any]) -> None:
        self._pending.append(job)

    def receive(self, timeout_s: float, what: str = "job") -> dict[str, Any]:
        job = self._pending.pop(0)
        return _unwrap(self._session.handle(job), what)

    def request(self, job: dict[str, Any], timeout_s: float, what: str = "job") -> dict[str, Any]:
        self.send(job)
        return self.receive(timeout_s, what)

    def close(self) -> None:
        self.dead = True


class SubprocessWorker:
    """A worker process for one implementation (or for calibration). Start it, send jobs, close it."""

    isolated = True

    def __init__(self, name: str = "", *, env: dict[str, str] | None = None) -> None:
        import infercrane

        self.name = name
        self.dead = False
        self.token = reaper.new_token()
        self._in_flight = 0  # jobs sent whose reply has not arrived
        self._ended = False
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        child_env = reaper.worker_env(dict(os.environ if env is None else env), self.token)
        root = str(Path(infercrane.__file__).resolve().parent.parent)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, child_env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "infercrane.kernels.harness.isolation"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=child_env,
            start_new_session=True, text=True, encoding="utf-8", bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"worker-{name}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None  # created with stdout=PIPE
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def stderr_tail(self, chars: int = STDERR_TAIL_CHARS) -> str:
        try:
            self._stderr.flush()
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - chars))
            return self._stderr.read().decode("utf-8", errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def _exited_unreaped(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the worker to exit, without reaping it (its pid, hence its process group
        id, stays reserved until ``proc.wait``)."""
        if self.proc.returncode is not None:
            return True
        end = time.monotonic() + timeout_s
        while True:
            try:
                if os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:
                return True
            except AttributeError:  # no waitid (not Linux): fall back to Popen, which reaps
                try:
                    self.proc.wait(timeout=max(0.0, end - time.monotonic()))
                    return True
                except subprocess.TimeoutExpired:
                    return False
            if time.monotonic() >= end:
                return False
            time.sleep(0.02)

    def _end(self, grace_s: float) -> None:
        """Give the worker ``grace_s`` to exit by itself, then SIGKILL it with its tree, its process group and every
        process holding its token; reap it. Safe to call more than once."""
        if not self._ended:
            self._ended = True
            if self.proc.returncode is None:
                self._exited_unreaped(grace_s)
                end_processes(marker=reaper.marker(self.token), root=self.proc.pid, group=self.proc.pid)
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:  # unkillable (uninterruptible sleep in a driver): leave it
                    pass
            end_processes(marker=reaper.marker(self.token))  # stragglers that re-parented while the worker was reaped
        self.dead = True

    def _kill(self) -> None:
        self._end(0.0)

    def _died(self, what: str) -> WorkerFailure:
        self._end(30.0)
        rc = self.proc.returncode
        sig = _signal_name(rc)
        status = f"signal {sig}" if sig else f"exit status {rc}"
        tail = self.stderr_tail()
        msg = f"worker process died ({status}) during {what}"
        if tail:
            msg += f"; stderr tail:\n{tail}"
        return WorkerFailure("crashed", msg, exit_signal=sig, exit_code=rc)

    def send(self, job: dict[str, Any]) -> None:
        if self.dead:
            raise WorkerFailure("error", f"worker {self.name!r} is no longer usable")
        assert self.proc.stdin is not None  # created with stdin=PIPE
        self._in_flight += 1
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(f"sending {job.get('op')}") from None

    def receive(self, timeout_s: float, what: str = "job") -> dict[str, Any]:
        if self.dead:
            raise WorkerFailure("error", f"worker {self.name!r} is no longer usable")
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            self._kill()
            tail = self.stderr_tail()
            raise WorkerFailure(
                "timeout", f"no answer within {timeout_s:g} s during {what}; worker killed"
                + (f"; stderr tail:\n{tail}" if tail else ""),
            ) from None
        if line is None:
            raise self._died(what)
        self._in_flight -= 1
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            self._kill()
            raise WorkerFailure("error", f"worker wrote a malformed reply during {what}: {line[:500]!r}") from None
        try:
            return _unwrap(reply, what)
        except WorkerFailure:
            self.close()  # a raising kernel may have broken the CUDA context: never reuse this worker
            raise

    def request(self, job: dict[str, Any], timeout_s: float, what: str = "job") -> dict[str, Any]:
        self.send(job)
        return self.receive(timeout_s, what)

    def close(self, timeout_s: float = 30.0) -> None:
        """End the worker and everything it started. An idle worker is asked to exit and given ``timeout_s``; one
        with a job in flight (the caller gave up on it: an interrupt, an error elsewhere) is killed at once."""
        if not self._ended:
            grace = 0.0
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    if self._in_flight == 0 and not self.dead:
                        self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                        self.proc.stdin.flush()
                        grace = timeout_s
                    self.proc.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass
            self._end(grace)
        self.dead = True
        try:
            self._stderr.close()
        except OSError:
            pass

    def __enter__(self) -> "SubprocessWorker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())

"""The worker side of a kernel-lab worker process: the jobs one implementation answers.

A ``WorkerSession`` holds one implementation of one op for the whole screen (loaded once, compiled once) and answers
the jobs the parent sends (``isolation.py`` runs the process and carries the jobs): ``load`` (probe availability,
load the implementation), ``correctness`` (one row count), ``time`` (one row count x mode x trial), ``describe``
(provenance at the end of the run), ``calibrate`` (device calibration; no implementation), ``ping``.
"""
from __future__ import annotations

import os
import traceback
from typing import Any

from infercrane.errors import InputError
from infercrane.kernels.harness.execute import HarnessFault, attribute, guarded

def spec_to_json(spec: Any) -> dict[str, Any]:
    return spec.to_json()


def spec_from_json(op: str, data: dict[str, Any]) -> Any:
    from infercrane.kernels import registry

    return registry.op_module(op).SPEC.from_json(data)


class WorkerSession:
    """The state of one worker: the implementation it holds and the device it runs on."""

    def __init__(self) -> None:
        self.op: str | None = None
        self.spec: Any = None
        self.impl: Any = None
        self.fn: Any = None
        self.guarded: Any = None
        self.in_place: bool | None = None
        self.device: Any = None
        self._clock: Any = None
        self._flush: Any = None

    # Each handler returns JSON-able data; exceptions are turned into error replies by ``handle``.
    def handle(self, job: dict[str, Any]) -> dict[str, Any]:
        try:
            op = job.get("op")
            handler = getattr(self, f"_do_{op}", None)
            if handler is None:
                raise ValueError(f"unknown job {op!r}")
            # A fresh guard per job: once the implementation has run in this job, a failure is its own.
            self.guarded = guarded(self.fn) if self.fn is not None else None
            result = handler(job)
            if self.device is not None and getattr(self.device, "type", None) == "cuda":
                import torch

                torch.cuda.synchronize(self.device)  # a kernel's asynchronous CUDA error belongs to this job
            return {"ok": True, "result": result}
        except InputError as e:
            if job.get("op") == "load":  # bad input (e.g. the user's file) is the caller's to fix: fail the screen
                return {"ok": False, "error_type": "InputError", "error": e.message, "hint": e.hint,
                        "traceback": traceback.format_exc()}
            # raised by a kernel while running: that implementation failed, the screen goes on
            return {"ok": False, "error_type": "InputError", "error": f"InputError: {e}", "in_kernel": True,
                    "traceback": traceback.format_exc()}
        except HarnessFault as e:  # the harness's own failure (e.g. out of memory allocating inputs): no verdict
            return {"ok": False, "error_type": "HarnessFault", "error": str(e), "harness": True,
                    "traceback": traceback.format_exc()}
        except (Exception, SystemExit) as e:  # a kernel may raise anything (even exit); the parent decides
            return {"ok": False, "error_type": type(e).__name__, "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()}
        finally:
            self._release_cached_memory()

    def _release_cached_memory(self) -> None:
        """Give cached device memory back between jobs, so idle workers do not hold GPU memory others need."""
        if self.device is not None and getattr(self.device, "type", None) == "cuda":
            try:
                import torch

                torch.cuda.synchronize(self.device)
                torch.cuda.empty_cache()
            except Exception:
                pass

    def _device(self, name: str) -> Any:
        import torch

        if name == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device(name)

    def _do_load(self, job: dict[str, Any]) -> dict[str, Any]:
        from infercrane.kernels import registry
        from infercrane.kernels.user_candidate import CandidateRef

        self.op = job["op_name"]
        self.spec = spec_from_json(self.op, job["spec"])
        self.device = self._device(job["device"])
        candidate = CandidateRef.from_json(job["candidate"]) if job.get("candidate") else None
        from infercrane.kernels.user_candidate import infer_contract

        impl = registry.get(self.op, job["impl"], candidate=candidate,
                            infer=lambda fn: infer_contract(fn, self.spec, self.device, candidate.text))
        ok, reason = impl.probe()
        if ok and self.device.type == "cpu":
            ok, reason = impl.probe_cpu()
        from infercrane.env.capture import software_versions

        info: dict[str, Any] = {
            "key": impl.key, "label": impl.label, "kind": impl.kind, "in_place": impl.in_place,
            "source": impl.source, "notes": list(impl.notes), "available": ok, "reason": reason,
            "versions": software_versions(), "device": str(self.device), "provenance": {},
        }
        if not ok:
            return info
        self.impl = impl
        self.fn = impl.load(self.spec)
        self.in_place = impl.in_place
        info["provenance"] = self._describe()
        return info

    def _require_loaded(self) -> None:
        if self.fn is None:
            raise RuntimeError("no implementation loaded in this worker (send a 'load' job first)")

    def _do_check(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run the call on the inputs in the job's pack and hand back what it touched; the parent decides."""
        from infercrane.kernels.harness.execute import run_check
        from infercrane.kernels.harness.tensor_pack import TensorPack

        self._require_loaded()
        pack = TensorPack.open(job["pack"])
        try:
            errors = run_check(self.guarded, self.spec, bool(self.in_place), int(job["rows"]), self.device, pack,
                               list(job["phases"]))
        finally:
            pack.close()
        return {"errors": errors}

    def _timed_call(self, rows: int, seed: int) -> tuple[Any, Any, Any]:
        """``(call, restore, finite)`` on fresh inputs of ``rows``: the call under the implementation's contract;
        ``restore`` puts back inputs the call overwrites (None when it overwrites none); ``finite`` checks the
        buffers it writes (None out of place)."""
        import torch

        spec, fn, in_place = self.spec, self.guarded, bool(self.in_place)
        tensors = spec.make_inputs(rows, self.device, seed, 1.0)
        for name in spec.buffers(in_place):
            tensors[name] = torch.empty((rows, spec.hidden_size), dtype=tensors[spec.ROW_TENSORS[0]].dtype,
                                        device=self.device)
        args = spec.arguments(tensors, in_place)

        def call() -> Any:
            return fn(*args)

        restore = finite = None
        written = [tensors[b] for b in spec.IN_PLACE.writes.values()] if in_place else []
        mutated = [t for b, t in zip(spec.IN_PLACE.writes.values(), written) if b in spec.INPUTS]
        if mutated:
            pristine = [t.clone() for t in mutated]

            def restore() -> None:
                for t, t0 in zip(mutated, pristine):
                    t.copy_(t0)

        if written:
            def finite() -> bool:
                return all(bool(torch.isfinite(t).all().item()) for t in written)

        return call, restore, finite

    def _cuda_ready(self) -> None:
        import torch

        from infercrane.kernels.harness.timing import ClockReader, l2_flush_bytes

        self._require_loaded()
        if self.device.type != "cuda":
            raise RuntimeError("timing needs a CUDA device; a CPU run is functional only")
        if self._clock is None:
            self._clock = ClockReader(self.device)
        if self._flush is None:
            self._flush = torch.empty(l2_flush_bytes(self.device), dtype=torch.uint8, device=self.device)

    def _do_time(self, job: dict[str, Any]) -> dict[str, Any]:
        from infercrane.kernels.harness.timing import time_cell

        def work() -> Any:
            self._cuda_ready()
            call, restore, finite = self._timed_call(int(job["rows"]), int(job["seed"]))
            return time_cell(
                call, mode=str(job["mode"]), samples=int(job["samples"]), device=self.device, restore=restore,
                finite_check=finite, calls_per_sample=job.get("calls_per_sample"), trial=int(job.get("trial", 0)),
                clock=self._clock, flush=self._flush, second_timer=bool(job.get("second_timer", True)),
                graph_fixed_us=job.get("graph_fixed_us"),
            )

        self._require_loaded()
        return attribute(work, f"timing at rows={job['rows']} {job['mode']}", self.guarded).model_dump(mode="json")

    def _do_second_cold(self, job: dict[str, Any]) -> dict[str, Any]:
        """Cold mode's second timer (CUPTI), asked for after every trial of this worker."""
        from infercrane.kernels.harness.timing import SECOND_TIMER_METHODS, time_second, warm_up

        self._cuda_ready()
        call, restore, _ = self._timed_call(int(job["rows"]), int(job["seed"]))
        attribute(lambda: warm_up(call, restore), f"warm-up at rows={job['rows']} cold", self.guarded)
        value, error = time_second("cold", call, calls=1, restore=restore, flush=self._flush)
        return {"second_timer_us": value, "second_timer_error": error,
                "second_timer_method": SECOND_TIMER_METHODS["cold"] if value is not None else None}

    def _do_calibrate(self, job: dict[str, Any]) -> dict[str, Any]:
        from infercrane.kernels.harness.calibration import calibrate

        device = self._device(job["device"])
        return calibrate(device, list(job["modes"]), samples=int(job["samples"])).model_dump(mode="json")

    def _describe(self) -> dict[str, str]:
        try:
            return {str(k): str(v) for k, v in self.impl.describe().items()}
        except Exception as e:
            return {"describe_error": f"{type(e).__name__}: {e}"}

    def _do_describe(self, job: dict[str, Any]) -> dict[str, Any]:
        """What the implementation reports about itself now (e.g. the configurations it compiled during the run)."""
        self._require_loaded()
        return {"provenance": self._describe()}

    def _do_ping(self, job: dict[str, Any]) -> dict[str, Any]:
        return {"pid": os.getpid()}

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
        self._visit: Any = None

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

    def _timed_call(self, rows: int, seed: int) -> Any:
        """A ``timing.Placed`` on fresh inputs of ``rows``: the call under the implementation's contract;
        ``restore`` puts back inputs the call overwrites (None when it overwrites none); ``finite`` checks the
        buffers it writes (None out of place); ``tensors`` are the named argument tensors."""
        import torch

        from infercrane.kernels.harness.timing import Placed

        spec, fn, in_place = self.spec, self.guarded, bool(self.in_place)
        tensors = spec.make_inputs(rows, self.device, seed, 1.0)
        for name in spec.buffers(in_place):
            tensors[name] = torch.empty(spec.tensor_shape(name, rows), dtype=tensors[spec.ROW_TENSORS[0]].dtype,
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

        return Placed(call=call, restore=restore, finite=finite, tensors=tensors)

    def _cuda_ready(self, need_impl: bool = True) -> None:
        import torch

        from infercrane.kernels.harness.timing import ClockReader, l2_flush_bytes

        if need_impl:
            self._require_loaded()
        if self.device is None or self.device.type != "cuda":
            raise RuntimeError("timing needs a CUDA device; a CPU run is functional only")
        if self._clock is None:
            self._clock = ClockReader(self.device)
        if self._flush is None:
            self._flush = torch.empty(l2_flush_bytes(self.device), dtype=torch.uint8, device=self.device)

    # A visit of a timing cell is four jobs, so that InferCrane's clock can bracket the samples alone: ``time``
    # (warm up, size, capture: ``CellTimer.prepare``), ``sample`` (the timed samples), ``finish`` (second timer,
    # finiteness: the block) and ``verify`` (the timed object run once more on inputs the parent wrote; the parent
    # checks what it wrote back). ``empty: true`` times calibration's empty kernel instead of the implementation
    # (the handshake cost of the protocol, measured in a worker no candidate ran in).

    def _do_time(self, job: dict[str, Any]) -> dict[str, Any]:
        from infercrane.kernels.harness.placement import PlacementCondition
        from infercrane.kernels.harness.timing import CellTimer, Placed

        empty = bool(job.get("empty"))
        if empty and self.device is None:
            self.device = self._device(str(job.get("device", "cuda")))
        rows, seed = int(job["rows"]), int(job["seed"])
        if empty:
            import torch

            from infercrane.kernels.harness.calibration import _empty_kernel_call

            tiny = torch.zeros(1, dtype=torch.float32, device=self.device)
            empty_call = _empty_kernel_call(tiny)
            if empty_call is None:
                raise RuntimeError("no Triton: the handshake cost is measured with an empty Triton kernel")

            def make(i: int) -> Any:
                return Placed(call=empty_call, tensors={"buf": tiny})
        else:
            def make(i: int) -> Any:
                return self._timed_call(rows, seed + 7919 * i)

        def work() -> Any:
            self._cuda_ready(need_impl=not empty)
            self._visit = None
            timer = CellTimer(
                make, mode=str(job["mode"]), samples=int(job["samples"]), device=self.device,
                trial=int(job.get("trial", 0)), clock=self._clock, flush=self._flush,
                calls_per_sample=job.get("calls_per_sample"), graph_fixed_us=job.get("graph_fixed_us"),
                placements=[PlacementCondition.model_validate(c) for c in job.get("placements") or []],
                second_timer=bool(job.get("second_timer", True)) and not empty,
            )
            info = timer.prepare()
            self._visit = timer
            return info

        if empty:
            return work()
        self._require_loaded()
        return attribute(work, f"timing at rows={job['rows']} {job['mode']}", self.guarded)

    def _visit_of(self) -> Any:
        if getattr(self, "_visit", None) is None:
            raise RuntimeError("no timing visit prepared in this worker (send a 'time' job first)")
        return self._visit

    # From here on the implementation's graphs and calls run: a failure is the implementation's (kind "error").
    def _do_sample(self, job: dict[str, Any]) -> dict[str, Any]:
        return self._visit_of().sample()

    def _do_finish(self, job: dict[str, Any]) -> dict[str, Any]:
        visit = self._visit_of()
        try:
            return visit.finish().model_dump(mode="json")
        finally:
            if not job.get("keep"):
                self._visit = None

    def _do_verify(self, job: dict[str, Any]) -> dict[str, Any]:
        """Write the parent's inputs into the buffers the cell was timed on, run the timed object once as it was
        timed (graph: one replay of the last graph; launch: a burst of ``calls_per_sample`` calls; cold: one call),
        and hand back every byte of the buffers and the last call's outputs. The parent decides."""
        import torch

        from infercrane.kernels.harness.execute import _returned
        from infercrane.kernels.harness.tensor_pack import TensorPack

        visit = self._visit_of()
        spec, in_place = self.spec, bool(self.in_place)
        target = visit.target
        pack = TensorPack.open(job["pack"])
        rows = int(job["rows"])

        def work() -> dict[str, Any]:
            tensors = target.tensors
            for name in spec.INPUTS:
                tensors[name].copy_(pack.tensor(f"in.verify.{name}").to(self.device))
            for name in spec.buffers(in_place):
                tensors[name].fill_(float("nan"))
            calls = visit.n_calls
            if visit.mode == "graph":
                outputs = target.last
                if not in_place and outputs is not None:
                    for t in ([outputs] if isinstance(outputs, torch.Tensor) else list(outputs)):
                        if isinstance(t, torch.Tensor):
                            t.fill_(float("nan"))
                target.graph.replay()
            else:
                args = spec.arguments(tensors, in_place)
                outputs = None
                for _ in range(calls):
                    outputs = self.guarded(*args)
            torch.cuda.synchronize(self.device)
            error = None
            if not in_place:
                got, error = _returned(spec, outputs, tensors, rows)
                if got is not None:
                    for name, t in zip(spec.RETURNS.returns, got):
                        pack.tensor(f"ret.verify.{name}").copy_(t)
            for name in [*spec.INPUTS, *spec.buffers(in_place)]:
                pack.tensor(f"after.verify.{name}").copy_(tensors[name])
            return {"error": error, "calls": calls}

        try:
            return work()
        finally:
            pack.close()
            self._visit = None

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

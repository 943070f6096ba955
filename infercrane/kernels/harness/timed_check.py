"""The outputs of what was timed, checked by InferCrane's process: a candidate correct when checked but wrong when
timed is ``incorrect``.

After each timed block the parent writes fresh inputs (its own, from a seed it draws; made on the CPU here) into the
very buffers the cell was timed on, through a shared ``TensorPack``; the worker runs the timed object once as it was
timed (graph mode: one replay of the trial's last graph; launch: a burst of ``calls_per_sample`` calls; cold: one
call) and hands back every byte of the buffers and the last call's outputs; this process compares them with the
op's oracle (``correctness.compare``, the op's tolerance), exactly as the correctness check does:

* out of place: the last call's outputs against the oracle on the inputs; the inputs must be untouched;
* in place, one call, or writes that no later call reads (rms_norm's ``out``): the written buffers against the
  oracle; the inputs it does not write untouched;
* in place over several calls whose writes feed the next call's reads (fused add + RMSNorm: each call adds into the
  residual it then normalizes): the final state is the last of many calls, which no oracle of the first inputs
  gives; the op's ``repeated_reference`` says what must hold of it (fused: ``x`` is RMSNorm of the final residual
  times the weight), and that is checked.

A cache keyed on the buffers' addresses, a kernel that skips work once a graph holds many calls, or one that behaves
differently once timing started all leave outputs that fail here.
"""
from __future__ import annotations

from typing import Any, Callable

from infercrane.receipts.screen_result import TensorCheck, TimedCheck

VERIFY_SEED_SALT = 0x7173_D0E5


def verify_seed(timing_seed: int, trial: int, rows: int, mode: str) -> int:
    """The same for every implementation of a (trial, rows, mode) visit; differs from the timing inputs' seed."""
    return (int(timing_seed) * 1_000_003 + int(trial) * 10_007 + int(rows) * 101 + "lgc".index(mode[0])
            + VERIFY_SEED_SALT) % (2**63)


def _method(spec: Any, in_place: bool, calls: int) -> str:
    if not in_place:
        return "out of place: the last timed call's outputs against the oracle on fresh inputs; inputs untouched"
    feeds = bool(set(spec.IN_PLACE.writes.values()) & set(spec.INPUTS))
    if calls == 1 or not feeds:
        return "in place: the written buffers against the oracle on fresh inputs; other inputs untouched"
    return (f"in place, {calls} calls whose writes feed the next call: the final buffers against the op's "
            "repeated_reference (what must hold after any number of calls); other inputs untouched")


def verify(request: Callable[[dict[str, Any]], dict[str, Any]], spec: Any, *, in_place: bool, rows: int,
           seed: int, calls: int) -> TimedCheck:
    """Send the ``verify`` job through ``request`` and judge what comes back."""
    import torch

    from infercrane.kernels.harness.correctness import compare, pack_entries
    from infercrane.kernels.harness.tensor_pack import TensorPack

    inputs = spec.make_inputs(rows, "cpu", seed, 1.0)
    entries = {k: v for k, v in pack_entries(spec, rows, in_place, ["verify"]).items() if not k.startswith("guard.")}
    pack = TensorPack.create(entries)
    method = _method(spec, in_place, calls)

    def result(error: str | None = None, tensors: list[TensorCheck] | None = None) -> TimedCheck:
        tensors = tensors or []
        return TimedCheck(seed=seed, calls=calls, method=method, passed=error is None and bool(tensors)
                          and all(t.passed for t in tensors), contract_error=error, tensors=tensors)

    try:
        for name, t in inputs.items():
            pack.tensor(f"in.verify.{name}").copy_(t)
        reply = request({"op": "verify", "rows": rows, "pack": pack.to_json()})
        if not isinstance(reply, dict) or "error" not in reply:
            return result(f"the worker's reply is malformed: {str(reply)[:200]}")
        if reply["error"]:
            return result(str(reply["error"]))
        after = {n: pack.tensor(f"after.verify.{n}").clone() for n in [*spec.INPUTS, *spec.buffers(in_place)]}
        written = set(spec.IN_PLACE.writes.values()) if in_place else set()
        for name in spec.INPUTS:
            if name not in written and not torch.equal(after[name], inputs[name]):
                return result(f"the timed calls modified {name}")
        if not in_place:
            got = {o: pack.tensor(f"ret.verify.{o}") for o in spec.RETURNS.returns}
            ref = spec.oracle(inputs)
        else:
            got = {o: after[b] for o, b in spec.IN_PLACE.writes.items()}
            feeds = bool(written & set(spec.INPUTS))
            ref = spec.oracle(inputs) if calls == 1 or not feeds else spec.repeated_reference(after)
            if ref is None:
                return result(f"{spec.OP_NAME} declares no repeated_reference: the final state of {calls} in-place "
                              "calls cannot be checked")
        return result(None, [compare(o, got[o], ref[o], spec.tolerance) for o in spec.OUTPUTS if o in ref])
    finally:
        pack.close()

"""Isolation: a candidate that crashes, aborts, raises, exits or hangs fails alone; the others' results survive."""
from __future__ import annotations

from pathlib import Path

import pytest

from infercrane.kernels.harness.isolation import SubprocessWorker, WorkerFailure
from infercrane.kernels.harness.runner import screen
from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

FIXTURES = Path(__file__).parent / "fixtures"
SPEC = FusedAddRMSNormSpec(hidden_size=256, eps=1e-6, rows=(8,))


@pytest.mark.parametrize("fn,failure,signal", [
    ("segfault", "crashed", "SIGSEGV"),
    ("abort", "crashed", "SIGABRT"),
    ("exits", "crashed", None),
    ("raises", "error", None),
])
def test_crashing_candidate_fails_alone(fn, failure, signal):
    res = screen(SPEC, ["eager"], candidate=f"{FIXTURES / 'crashers.py'}:{fn}", checks=1, timeout_s=120,
                 device="cpu")
    eager, user = res.implementation("eager"), res.implementation("user")
    assert eager.status == "ok" and eager.correctness[0].passed
    assert user.status == "failed" and user.failure == failure and user.exit_signal == signal
    assert "correctness of user at rows=8" in user.error
    if fn == "raises":
        assert "candidate kernel failed on purpose" in user.error
    if signal:
        assert signal in user.error
        assert "crashers.py" in user.error  # faulthandler's traceback from the worker's stderr
    assert res.isolation == "subprocess"


def test_hanging_candidate_times_out_alone():
    res = screen(SPEC, ["eager"], candidate=f"{FIXTURES / 'crashers.py'}:hangs", checks=1, timeout_s=15,
                 device="cpu")
    assert res.implementation("eager").status == "ok"
    user = res.implementation("user")
    assert user.status == "failed" and user.failure == "timeout" and "15 s" in user.error


def test_stray_output_does_not_disturb_the_protocol():
    w = SubprocessWorker("noisy")
    try:
        assert w.request({"op": "ping"}, 60)["pid"] == w.proc.pid
        ref = {"path": str(FIXTURES / "good_candidate.py"), "function": "fused_add_rmsnorm",
               "in_place_override": None}
        spec = {"hidden_size": 64, "eps": 1e-6, "dtype": "bfloat16", "rows": [2], "num_layers": None,
                "model_id": None, "model_revision": None, "config_fields": {}}
        info = w.request({"op": "load", "op_name": "fused_add_rmsnorm", "impl": "user", "spec": spec,
                          "device": "cpu", "candidate": ref}, 120)
        assert info["available"] and info["in_place"] is False
        from infercrane.kernels.harness.correctness import check_in_worker
        from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

        res = check_in_worker(lambda job: w.request(job, 120), FusedAddRMSNormSpec.from_json(spec), in_place=False,
                              rows=2, device="cpu", checks=1)
        assert res.passed is True
        assert "candidate called" in w.stderr_tail()  # the prints went to stderr
    finally:
        w.close()
    assert w.proc.returncode == 0


def test_unknown_job_is_an_error_and_the_worker_is_retired():
    w = SubprocessWorker("bad-job")
    try:
        with pytest.raises(WorkerFailure) as e:
            w.request({"op": "dance"}, 60)
        assert e.value.kind == "error" and "unknown job" in e.value.message
        assert w.dead
        with pytest.raises(WorkerFailure, match="no longer usable"):
            w.request({"op": "ping"}, 60)
    finally:
        w.close()


@pytest.mark.gpu
def test_illegal_memory_access_fails_alone_on_gpu():
    res = screen(SPEC, ["eager"], modes=["launch"], trials=1, samples_per_trial=3,
                 candidate=f"{FIXTURES / 'illegal_access.py'}:illegal_address", checks=1, timeout_s=300)
    assert res.run_kind == "timed"
    eager, user = res.implementation("eager"), res.implementation("user")
    assert eager.status == "ok" and eager.timings and all(t > 0 for t in eager.timings[0].kept_samples_us)
    assert user.status == "failed" and user.failure in ("error", "crashed")
    assert "illegal" in user.error.lower() or user.exit_signal

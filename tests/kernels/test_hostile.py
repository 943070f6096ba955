"""Hostile candidates: code that attacks the checker from inside its worker must still be reported incorrect.

``hostile_patch_checker.py`` rewrites the harness's check functions in its process; ``hostile_forge_reply.py``
writes a forged reply ("no error") into the worker's reply pipe and drops the genuine one. Both compute zeros. Each
screen also runs ``eager`` as a control. Both attacks succeed against a checker that runs in the candidate's worker;
they fail because InferCrane judges the bytes the worker hands back, in its own process.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from infercrane.kernels.harness.runner import screen
from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec

FIXTURES = Path(__file__).parent / "fixtures"
SPEC = FusedAddRMSNormSpec(hidden_size=256, eps=1e-6, rows=(8,))


def _screen(fixture: str):
    res = screen(SPEC, ["eager"], candidate=f"{FIXTURES / fixture}:fused_add_rmsnorm", device="cpu", checks=1,
                 timeout_s=300)
    assert res.implementation("eager").status == "ok"
    return res.implementation("user")


def test_a_candidate_that_patches_the_checker_is_not_passed():
    user = _screen("hostile_patch_checker.py")
    assert user.status == "failed" and user.failure in ("incorrect", "error"), user.error
    assert not any(c.passed for c in user.correctness)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the attack reads /proc/self/fd")
def test_a_candidate_that_forges_its_reply_is_not_passed():
    user = _screen("hostile_forge_reply.py")
    assert user.status == "failed" and user.failure in ("incorrect", "error"), user.error
    assert not any(c.passed for c in user.correctness)

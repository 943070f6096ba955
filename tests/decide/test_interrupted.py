"""A screen stopped by Ctrl-C or SIGTERM keeps what finished (``ScreenResult.interrupted``); deciding on that partial
result never crashes: too few trials give INSUFFICIENT comparisons and an inconclusive decision, timings missing
where the decision reads them give an inconclusive one that says the screen stopped."""
from __future__ import annotations

import json

from evidence import archived

from infercrane.decide.policy import KernelPolicy
from infercrane.kernels.harness.compare import with_comparisons
from infercrane.kernels.receipt import derive
from infercrane.receipts.screen_result import ScreenResult
from infercrane.stats import Verdict

SCREEN = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")
WHY = "SIGINT during trial 3 of 5 (graph mode, rows 128): trials 3-4 and the cold mode did not run"


def _screen() -> tuple[ScreenResult, KernelPolicy]:
    doc = json.loads(SCREEN.read_text())
    return ScreenResult.model_validate(doc["result"]), KernelPolicy.model_validate(doc["policy"])


def _partial(res: ScreenResult, *, trials: int, drop: tuple[str, int] | None = None) -> ScreenResult:
    """``res`` as an interrupted screen would leave it: the first ``trials`` trials of every cell, and no cell of
    implementation ``drop[0]`` at rows ``drop[1]``."""
    impls = []
    for impl in res.implementations:
        cells = [c.model_copy(update={"blocks": [b for b in c.blocks if b.trial < trials]}) for c in impl.timings
                 if drop is None or (impl.key, c.rows) != drop]
        impls.append(impl.model_copy(update={"timings": cells}))
    out = ScreenResult.model_validate(res.model_copy(update={"implementations": impls, "interrupted": WHY})
                                      .model_dump())
    return with_comparisons(out, _screen()[1], flag_rule="widen")


def test_too_few_trials_are_insufficient_and_inconclusive_not_a_crash():
    res, pol = _screen()
    partial = _partial(res, trials=2)
    assert partial.comparisons and all(c.verdict is Verdict.INSUFFICIENT for c in partial.comparisons)
    d = derive(partial, pol, None)
    for code, reason in [(d["decision_code"], d["reason"])] + [(o["decision_code"], o["reason"])
                                                               for o in d["other_candidates"]]:
        assert code == "inconclusive"
        assert "2 paired trials; a between-trial interval needs at least 3" in reason
        assert reason.endswith(f"from a partial screen (interrupted: {WHY})")


def test_a_decision_row_left_untimed_is_inconclusive_and_says_the_screen_stopped():
    res, pol = _screen()
    partial = _partial(res, trials=5, drop=("torch_compile", 128))  # stopped before torch.compile at 128 rows
    d = derive(partial, pol, None)
    reasons = [(d["decision_code"], d["reason"])] + [(o["decision_code"], o["reason"]) for o in d["other_candidates"]]
    for code, reason in reasons:
        assert code == "inconclusive"
        assert reason.startswith("correct on every shape, but the screen stopped before the timings the decision "
                                 "reads were complete (rows=128: counted baseline 'torch_compile' has no 'graph' "
                                 "timing and is not listed as skipped)")

"""``--fail-on``: the exit code carries the decision, after the receipt is written (kernel screen, serve ab/bench),
read the same way for one receipt and for every section of a merged or PoC receipt."""
from __future__ import annotations

from pathlib import Path

import pytest

from evidence import archived

from infercrane.cli import main
from infercrane.decide.vocabulary import fails_on
from infercrane.report.gate import fail_on_exit

FIXTURES = Path(__file__).parents[1] / "kernels" / "fixtures"
POC = archived("2026-12-06-h100-poc-one-sitting-seventh-try/poc-evidence.tar.xz/poc.json")  # kernel retain,
# paired accept, public reject


@pytest.mark.parametrize("decisions,fail_on,failed", [
    (["accept", "retain"], "reject", []),
    (["accept", "reject"], "reject", ["reject"]),
    (["inconclusive"], "reject", []),
    (["inconclusive", None], "inconclusive", ["inconclusive", "inconclusive"]),
    (["reject", "retain"], "inconclusive", ["reject"]),
    (["reject"], None, []),
])
def test_which_decisions_fail(decisions, fail_on, failed):
    assert fails_on(decisions, fail_on) == failed


def test_a_poc_receipt_fails_on_its_rejected_section(capsys):
    assert fail_on_exit(POC, None) == 0
    assert fail_on_exit(POC, "reject") == 1
    assert capsys.readouterr().out.strip() == "--fail-on reject: public.h100 reject; exit 1"


def test_a_functional_screen_is_inconclusive_and_fails_only_on_inconclusive(tmp_path: Path, capsys):
    args = ["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager", "--checks", "1",
            "--candidate", f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm"]
    assert main([*args, "--out", str(tmp_path / "a.json"), "--fail-on", "reject"]) == 0
    assert main([*args, "--out", str(tmp_path / "b.json"), "--fail-on", "inconclusive"]) == 1
    assert (tmp_path / "b.json").is_file()  # written first
    assert "--fail-on inconclusive: " in capsys.readouterr().out

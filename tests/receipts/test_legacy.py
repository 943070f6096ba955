"""Legacy formats (v1 receipts, v2 kernel receipts) are read, never trusted: their rules check arithmetic only, so
every decision forgery a v3 receipt catches passes them once re-hashed. ``receipt validate`` therefore refuses a
legacy receipt unless ``--allow-legacy`` is given (and then says what it checked), and ``show``, ``diff``, ``report``
and ``merge`` say first, in one line, that its conclusions were not derived again."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from evidence import archived

from infercrane.cli import main
from infercrane.hashing import HASH_FIELD, content_hash
from infercrane.receipts.registry import LEGACY, MODELS
from infercrane.receipts.validate import check_document

REPO = Path(__file__).resolve().parents[2]
KERNEL_V2 = REPO / "docs" / "benchmarks" / "2026-12-01-h200-kernel" / "kernel-screen.json"
SEEDS = [REPO / "examples" / "receipts" / name
         for name in ("cuda-kernel-screening-v1.seed.json", "optimization-poc-v1.seed.json")]
V2 = "infercrane.cuda-kernel-screening-receipt/v2"
NOT_DERIVED = f"legacy format {V2}: its conclusions were not derived again"


def _rehashed(doc: dict[str, Any]) -> dict[str, Any]:
    doc = {k: v for k, v in doc.items() if k != HASH_FIELD}
    doc[HASH_FIELD] = content_hash(doc)
    return doc


def _first(doc: dict[str, Any], key: str, want: Any) -> dict[str, Any]:
    return next(x for x in doc[key] if all(x.get(k) == v for k, v in want.items()))


def _retain_to_accept(d: dict[str, Any]) -> None:
    assert d["decision_code"] == "retain"
    d["decision_code"] = "accept"
    d["decision"] = "accept the Triton candidate for serving integration"


def _rewritten_decision_and_reason(d: dict[str, Any]) -> None:
    d["decision"] = "integrate the Triton kernel now"
    d["reason"] = "faster than every baseline at every row"


def _ambiguous_to_faster(d: dict[str, Any]) -> None:
    _first(d, "comparisons", {"verdict": "AMBIGUOUS"})["verdict"] = "FASTER"


def _candidate_reject_to_accept(d: dict[str, Any]) -> None:
    other = d["other_candidates"][0]
    assert other["decision_code"] == "reject"
    other["decision_code"] = "accept"
    other["decision"] = "accept the handwritten CUDA candidate for serving integration"


def _narrowed_interval(d: dict[str, Any]) -> None:
    c = _first(d, "comparisons", {"verdict": "AMBIGUOUS"})
    c["ci_low"], c["ci_high"] = c["speedup"] * 0.999, c["speedup"] * 1.001


def _moved_quartiles(d: dict[str, Any]) -> None:
    t = d["timings"][0]
    t["q1_us"], t["q3_us"] = t["median_us"] * 0.999, t["median_us"] * 1.001


def _one_sample_times_100(d: dict[str, Any]) -> None:
    s = d["timings"][0]["samples_us"]
    i = s.index(max(s))  # the largest: the median stays where it was
    s[i] *= 100


FORGERIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "retain to accept": _retain_to_accept,
    "rewritten decision and reason": _rewritten_decision_and_reason,
    "AMBIGUOUS to FASTER": _ambiguous_to_faster,
    "a candidate's reject to accept": _candidate_reject_to_accept,
    "narrowed interval": _narrowed_interval,
    "moved quartiles": _moved_quartiles,
    "one raw sample x100": _one_sample_times_100,
}


@pytest.fixture(scope="module")
def kernel_v2() -> dict[str, Any]:
    return json.loads(KERNEL_V2.read_text())


def _lines(capsys) -> list[str]:
    captured = capsys.readouterr()
    return [line for line in (captured.out + captured.err).splitlines() if line.strip()]


def test_the_legacy_versions_are_the_ones_no_lab_derives_again() -> None:
    assert LEGACY == {"infercrane.optimization-poc-receipt/v1", "infercrane.cuda-kernel-screening-receipt/v1", V2}
    assert LEGACY < set(MODELS)


@pytest.mark.parametrize("forge", list(FORGERIES.values()), ids=list(FORGERIES))
def test_a_v2_forgery_passes_the_arithmetic_and_validate_refuses_it_as_legacy(forge, kernel_v2, tmp_path, capsys):
    doc = copy.deepcopy(kernel_v2)
    forge(doc)
    doc = _rehashed(doc)
    assert check_document(doc)[1] == []  # the v2 rules see nothing wrong: only arithmetic is checked
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(doc))
    assert main(["receipt", "validate", str(path)]) == 2
    lines = _lines(capsys)
    assert lines[0].startswith(f"LEGACY  {path}: {NOT_DERIVED}")
    assert lines[-1] == ("1 of 1 receipt(s) of a legacy format, whose conclusions were not derived again: not "
                         "accepted without --allow-legacy")


def test_allow_legacy_accepts_it_saying_what_was_checked(kernel_v2, tmp_path, capsys):
    assert main(["receipt", "validate", "--allow-legacy", str(KERNEL_V2), *map(str, SEEDS)]) == 0
    lines = _lines(capsys)
    assert len(lines) == 3
    assert lines[0].startswith(f"legacy  {KERNEL_V2}: {NOT_DERIVED}; checked: its arithmetic and content hash only; "
                               "accepted with --allow-legacy")
    for seed, line in zip(SEEDS, lines[1:]):
        assert line.startswith(f"legacy  {seed}: legacy format ") and "checked: its arithmetic (it carries no hash)" \
            in line
    # --allow-legacy accepts what the arithmetic allows, nothing more
    doc = copy.deepcopy(kernel_v2)
    doc["measurements"][0]["speedup_vs_eager"] *= 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_rehashed(doc)))
    assert main(["receipt", "validate", "--allow-legacy", str(bad)]) == 2
    lines = _lines(capsys)
    assert lines[0].startswith(f"INVALID {bad}: measurements[0].speedup_vs_eager") and \
        lines[-1] == "1 of 1 receipt(s) invalid"


def test_the_v1_seeds_are_refused_without_allow_legacy(capsys):
    assert main(["receipt", "validate", *map(str, SEEDS)]) == 2
    lines = _lines(capsys)
    assert [line.split()[0] for line in lines[:2]] == ["LEGACY", "LEGACY"]
    assert lines[-1].startswith("2 of 2 receipt(s) of a legacy format")


def test_show_says_it_first(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # one line however narrow the terminal: soft-wrapped, never folded
    assert main(["receipt", "show", str(KERNEL_V2)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{KERNEL_V2}  — {NOT_DERIVED}; checked: its arithmetic and content hash only")
    assert "valid" not in lines[0].split(" — ")[0]


def test_diff_says_it_first_for_each_side(capsys):
    a, b = SEEDS[0], SEEDS[0]
    assert main(["receipt", "diff", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{a}  — legacy format infercrane.cuda-kernel-screening-receipt/v1")
    assert lines[1].startswith(f"{b}  — legacy format")


def test_report_says_it_first_and_on_the_page(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    out = tmp_path / "report"
    assert main(["report", str(SEEDS[0]), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"LEGACY  {SEEDS[0]}: legacy format infercrane.cuda-kernel-screening-receipt/v1: its "
                               "conclusions were not derived again")
    assert lines[-1] == f"report: {out / 'index.html'}"
    page = (out / "index.html").read_text()
    assert page.index("LEGACY: legacy format") < page.index("Qualification boundary")


@pytest.mark.parametrize("legacy", [KERNEL_V2, SEEDS[1]], ids=["v2 kernel", "v1 PoC"])
def test_merge_refuses_it_saying_so_first(legacy, tmp_path, capsys):
    other = archived("2026-12-01-h200-poc/poc-evidence.tar.xz/poc.json")
    assert main(["receipt", "merge", str(legacy), str(other), "--out", str(tmp_path / "m.json")]) == 2
    [line] = _lines(capsys)
    assert line.startswith(f"infercrane: error: {legacy}: legacy format ") and "not derived again" in line
    assert not (tmp_path / "m.json").exists()

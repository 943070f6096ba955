"""``receipt validate`` decides a serving receipt again from its raw runs under the policy it embeds: an edit of a
conclusion, re-hashed so that the content hash agrees, is caught and named by its field path."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Callable

import pytest

from receipt_edits import problems as _problems

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "2026-12-01-h200-serving"
AB = DOCS / "seed-paired-eager-vs-compiled.json"        # serve ab, compiled vs eager, accepted
BENCH = DOCS / "public-1000-compiled.json"               # serve bench, two drivers on one engine


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", [AB, BENCH], ids=["ab", "bench"])
def test_committed_receipt_decides_again_to_itself(path: Path) -> None:
    assert _problems(_load(path)) == []


def _stat(doc: dict, metric: str = "output_tok_s", c: int = 1) -> dict:
    return next(s for s in doc["paired_aiperf"]["statistics"] if s["metric"] == metric and s["concurrency"] == c)


def _accept_to_reject(d: dict) -> None:
    d["paired_aiperf"]["decision_code"] = "reject"


def _code_without_text(d: dict) -> None:
    d["paired_aiperf"]["decision_code"] = "inconclusive"  # the text still says "accept ..."


def _better_to_worse(d: dict) -> None:
    s = _stat(d)
    s["verdict"], s["p_value"] = "WORSE", 0.5


def _narrowed_into_band(d: dict) -> None:
    s = _stat(d)
    s["ci_low"], s["ci_high"] = s["ratio_b_over_a"] * 0.999, s["ratio_b_over_a"] * 1.001


def _widened(d: dict) -> None:
    s = _stat(d, "tpot_p95_ms")
    s["ci_low"], s["ci_high"] = 0.01, 12.0


def _values_rewritten(d: dict) -> None:
    s = _stat(d)
    s["a_values"] = [v * 0.5 for v in s["a_values"]]
    s["a_median"] *= 0.5
    s["ratio_b_over_a"] = s["b_median"] / s["a_median"]


def _reason_rewritten(d: dict) -> None:
    d["paired_aiperf"]["reason"] = d["paired_aiperf"]["reason"].replace("BETTER", "EQUIVALENT", 1)


def _policy_margin(d: dict) -> None:
    d["policy"]["equivalence_margin"] = 0.2  # every statistic still says BETTER at the old margin


def _client_counts(d: dict) -> None:
    for run in d["runs"]:
        run["token_count_source"] = "client"


EDITS_AB: dict[str, tuple[Callable[[dict], None], str]] = {
    "accept->reject": (_accept_to_reject, "paired_aiperf.decision_code"),
    "code-without-text": (_code_without_text, "paired_aiperf.decision_code"),
    "BETTER->WORSE, p 0.0079->0.5": (_better_to_worse, "paired_aiperf.statistics"),
    "interval narrowed": (_narrowed_into_band, "paired_aiperf.statistics"),
    "interval widened": (_widened, "paired_aiperf.statistics"),
    "a_values rewritten": (_values_rewritten, "paired_aiperf.statistics"),
    "reason rewritten": (_reason_rewritten, "paired_aiperf.reason"),
    "policy margin": (_policy_margin, "paired_aiperf"),
    "token counts from the client": (_client_counts, "runs[0].token_count_source"),
}


def _agreement(d: dict, metric: str = "output_tokens_per_second") -> dict:
    return next(a for a in d["bench"]["driver_agreement"] if a["metric"] == metric)


def _says_agree(d: dict) -> None:
    _agreement(d)["verdict"] = "AGREE"


def _agreement_narrowed(d: dict) -> None:
    a = _agreement(d)
    a["ci_low"], a["ci_high"] = 1.004, 1.006


def _public_line(d: dict) -> None:
    lines = d["public_workload_reproduction"]["driver_agreement"]
    lines[0] = lines[0].replace("INSUFFICIENT runs to judge agreement", "AGREE within 2 percent")


def _run_numbers(d: dict) -> None:
    d["runs"][0]["output_tokens_per_second"] *= 1.5


def _finding_observed(d: dict) -> None:
    d["runtime_compatibility"][0]["status"] = "observed"
    d["runtime_compatibility"][0]["evidence"] = "engine log: DeepGEMM backend incomplete"


EDITS_BENCH: dict[str, tuple[Callable[[dict], None], str]] = {
    "agreement verdict": (_says_agree, "bench.driver_agreement"),
    "agreement interval": (_agreement_narrowed, "bench.driver_agreement"),
    "public agreement line": (_public_line, "public_workload_reproduction.driver_agreement"),
    "a run's throughput": (_run_numbers, "bench."),
    "a workaround turned into an observed finding": (_finding_observed, "runtime_compatibility"),
}


EDITS = [(AB, name, *e) for name, e in EDITS_AB.items()] + [(BENCH, name, *e) for name, e in EDITS_BENCH.items()]


@pytest.mark.parametrize(("path", "name", "edit", "field"), EDITS,
                         ids=[f"{p.stem}: {name}" for p, name, _, _ in EDITS])
def test_edited_receipt_is_caught(path: Path, name: str, edit: Callable[[dict], None], field: str) -> None:
    doc = copy.deepcopy(_load(path))
    edit(doc)
    problems = _problems(doc)
    assert any(p.startswith(field) for p, _ in problems), problems


def test_agreement_carries_an_interval_and_says_when_runs_cannot_support_it() -> None:
    doc = _load(BENCH)
    a = _agreement(doc)
    assert a["ci_low"] < a["ratio"] < a["ci_high"]
    assert "percentile bootstrap" in a["interval_method"] and "TOST" in a["verdict_rule"]
    assert a["runs"] == a["reference_runs"] == 3 < doc["policy"]["min_runs_per_arm"]
    assert a["verdict"] == "INSUFFICIENT"


def test_receipt_without_its_configuration_cannot_be_decided_again() -> None:
    doc = copy.deepcopy(_load(AB))
    del doc["provenance"]["config"]["recipes"]
    problems = _problems(doc)
    assert any(p == "provenance.config" and "cannot be derived again" in m for p, m in problems), problems


def test_policy_hash_names_a_changed_policy_and_validate_says_whose_policy(tmp_path: Path, capsys) -> None:
    from infercrane.cli import main

    out = tmp_path / "again.json"
    assert main(["serve", "decide", str(AB), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["receipt", "validate", str(out)]) == 0
    assert "packaged policy" in capsys.readouterr().out
    doc = _load(out)
    doc["policy"]["bootstrap_resamples"] = 5000
    problems = _problems(doc)
    assert any(p == "policy_sha256" and "changed after the receipt was decided" in m for p, m in problems), problems
    loose = tmp_path / "loose.yaml"
    loose.write_text("schema_version: infercrane.serving-policy/v1\nequivalence_margin: 0.05\n")
    custom = tmp_path / "custom.json"
    assert main(["serve", "decide", str(AB), "--out", str(custom), "--policy", str(loose)]) == 0
    capsys.readouterr()
    assert main(["receipt", "validate", str(custom)]) == 0
    assert "custom policy (sha256 " in capsys.readouterr().out


def test_a_receipt_from_a_newer_infercrane_asks_for_an_upgrade(tmp_path: Path, capsys) -> None:
    from infercrane.cli import main

    doc = _load(AB) | {"schema_version": "infercrane.optimization-poc-receipt/v9"}
    f = tmp_path / "new.json"
    f.write_text(json.dumps(doc))
    assert main(["receipt", "validate", str(f)]) == 2
    out = capsys.readouterr().out
    assert "written by a newer InferCrane" in out and "up to v2" in out

"""The semantic-quality gate among a receipt's decisions (receipt show, receipt diff, the HTML report)."""
from infercrane.report.console import verdicts

GATE = {"ran": True, "reference": "incumbent", "candidate": "candidate", "items": {"items": 200},
        "accuracy": {"verdict": "INFERIOR"}, "token_agreement": {"verdict": "FAIL"}, "logprob": {"verdict": "PASS"},
        "verdict": "FAIL", "reason": "accuracy 0.590 against 1.000", "rule": "pass: ..."}


def test_a_gate_that_ran_shows_its_verdict_criteria_and_reason() -> None:
    [v] = verdicts({"quality_gate": GATE})
    assert (v.section, v.label, v.code, v.reason) == ("quality_gate", "gate", "FAIL", "accuracy 0.590 against 1.000")
    assert v.decision == ("incumbent against candidate on 200 items: accuracy INFERIOR, near ties FAIL, "
                          "log-probabilities PASS")
    assert v.headline().startswith("FAIL — incumbent against candidate")


def test_a_gate_that_did_not_run_says_why() -> None:
    [v] = verdicts({"quality_gate": {"ran": False, "why_not": "the model's weights are dummy"}})
    assert v.headline() == "none — did not run: the model's weights are dummy"

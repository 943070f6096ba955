"""The semantic-quality gate's rule: accuracy non-inferiority (Newcombe, paired), token agreement, the largest
log-probability difference, and what the gate does to a serving decision."""
import pytest

from infercrane.decide.policy import load_policy
from infercrane.decide.quality import Answer, apply_to_decision, quality_gate
from infercrane.errors import InputError

POLICY = load_policy("serving").quality  # margin 0.05, level 0.95 one-sided, agreement 0.9, logprob bound 0.5


def _answers(n: int, *, wrong: set[int] = frozenset(), shift: dict[int, float] | None = None,
             diverge: set[int] = frozenset()) -> list[Answer]:
    out = []
    for i in range(n):
        tokens = (10 + i, 20, 30) if i not in diverge else (10 + i, 21, 30)
        lp = (-0.1, -0.2, -0.3)
        if shift and i in shift:
            lp = (-0.1, -0.2 - shift[i], -0.3)
        out.append(Answer(f"item-{i:03d}", i not in wrong, tokens, lp))
    return out


TASKS = {f"item-{i:03d}": ("arithmetic", "facts")[i % 2] for i in range(200)}


def test_identical_answers_pass() -> None:
    g = quality_gate(TASKS, _answers(200, wrong={1, 2}), _answers(200, wrong={1, 2}), POLICY)
    assert g["verdict"] == "PASS"
    acc = g["accuracy"]
    assert (acc["verdict"], acc["difference"], acc["table"]["reference_only"]) == ("NON-INFERIOR", 0.0, 0)
    assert acc["ci_low"] >= -POLICY.accuracy_margin and "Newcombe" in acc["interval_method"]
    assert g["token_agreement"]["identical_items"] == 200 and g["logprob"]["max_abs_difference"] == 0.0
    assert acc["by_task"]["arithmetic"] == {"items": 100, "reference_correct": 99, "candidate_correct": 99}  # item 2
    assert acc["by_task"]["facts"]["reference_correct"] == 99  # item 1


def test_a_candidate_that_loses_accuracy_fails() -> None:
    g = quality_gate(TASKS, _answers(200), _answers(200, wrong=set(range(0, 200, 5))), POLICY)  # 40 of 200 wrong
    assert g["accuracy"]["verdict"] == "INFERIOR" and g["verdict"] == "FAIL"
    assert g["accuracy"]["ci_high"] < -POLICY.accuracy_margin
    assert "lies below -0.05" in g["reason"]


def test_a_moved_log_probability_fails_even_with_the_same_tokens() -> None:
    g = quality_gate(TASKS, _answers(200), _answers(200, shift={17: 0.8}), POLICY)
    assert g["logprob"]["verdict"] == "FAIL" and g["verdict"] == "FAIL"
    assert g["logprob"]["at"] == {"item": "item-017", "token": 1}
    assert g["logprob"]["max_abs_difference"] == pytest.approx(0.8)
    assert g["token_agreement"]["verdict"] == "PASS"


def test_log_probabilities_after_a_divergence_are_not_compared() -> None:
    """After the outputs part, the arms condition on different text: only the shared prefix is compared."""
    ref = _answers(200)
    cand = [Answer(a.item_id, a.correct, (a.tokens[0], 99, 98), (a.logprobs[0], -5.0, -7.0)) if i < 5 else a
            for i, a in enumerate(_answers(200))]
    g = quality_gate(TASKS, ref, cand, POLICY)
    assert g["logprob"]["max_abs_difference"] == 0.0 and g["logprob"]["compared_tokens"] == 195 * 3 + 5
    assert g["token_agreement"]["identical_items"] == 195 and g["token_agreement"]["divergences"] == 5
    assert g["token_agreement"]["first_divergences"][0] == {"item": "item-000", "token": 1, "reference": 20,
                                                            "candidate": 99}
    assert g["verdict"] == "PASS"  # 97.5 % agreement >= 90 %


def test_too_many_divergent_outputs_fail() -> None:
    g = quality_gate(TASKS, _answers(200), _answers(200, diverge=set(range(0, 200, 4))), POLICY)  # 25 % differ
    assert g["token_agreement"]["verdict"] == "FAIL" and g["verdict"] == "FAIL"
    assert "150 of 200" in g["reason"]


def test_too_few_items_are_undecided_and_say_how_many_would_do() -> None:
    tasks = {k: v for k, v in list(TASKS.items())[:10]}
    g = quality_gate(tasks, _answers(10), _answers(10), POLICY)
    assert g["accuracy"]["verdict"] == "UNDECIDED" and g["verdict"] == "UNDECIDED"
    needed = g["accuracy"]["items_to_show_margin"]
    assert needed is not None and needed > 10
    assert f"10 items cannot show non-inferiority at this margin even with every answer unchanged ({needed} could)" \
        in g["reason"]


def test_answers_must_cover_the_same_items() -> None:
    with pytest.raises(InputError, match="candidate arm's answers are not the items'"):
        quality_gate(TASKS, _answers(200), _answers(199), POLICY)
    with pytest.raises(InputError, match="log-probabilities must be finite"):
        Answer("x", True, (1,), (float("nan"),))
    with pytest.raises(InputError, match="1 tokens but 2"):
        Answer("x", True, (1,), (-0.1, -0.2))


def test_the_gate_turns_the_decision() -> None:
    failed = {"verdict": "FAIL", "reason": "accuracy fell"}
    undecided = {"verdict": "UNDECIDED", "reason": "too few items"}
    passed = {"verdict": "PASS", "reason": "fine"}
    code, text, reason = apply_to_decision("accept", "accept B over A for w", "faster", failed)
    assert code == "reject" and "fails the semantic-quality gate" in text and "accept B over A" in text
    assert reason.startswith("quality gate failed: accuracy fell")
    assert apply_to_decision("accept", "t", "r", undecided)[0] == "inconclusive"
    assert apply_to_decision("reject", "t", "r", undecided) == ("reject", "t", "r; quality gate undecided: too few "
                                                                             "items")
    assert apply_to_decision("accept", "t", "r", passed) == ("accept", "t", "r")
    assert apply_to_decision("accept", "t", "r", None) == ("accept", "t", "r")


def test_the_plan_says_what_its_items_can_show_before_anything_runs() -> None:
    from infercrane.serving.quality import gate_design

    assert gate_design(POLICY) == ("200 items: with every answer unchanged, non-inferiority at -0.05 is shown at any "
                                   "incumbent accuracy (at most 57 items needed)")
    few = POLICY.model_copy(update={"items_per_task": 5})
    assert gate_design(few).startswith("20 items: with every answer unchanged, non-inferiority at -0.05 cannot be "
                                       "shown at every incumbent accuracy (57 needed)")

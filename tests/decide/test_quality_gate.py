"""The semantic-quality gate's rule: accuracy non-inferiority (Newcombe, paired), divergences only at near ties, the
largest log-probability difference, and what the gate does to a serving decision."""
import pytest

from infercrane.decide.policy import load_policy
from infercrane.decide.quality import Answer, apply_to_decision, quality_gate
from infercrane.errors import InputError

POLICY = load_policy("serving").quality  # margin 0.05, level 0.95 one-sided, top 5 within 1 nat, logprob bound 0.5


def _answers(n: int, *, wrong: set[int] = frozenset(), shift: dict[int, float] | None = None,
             diverge: set[int] = frozenset(), other_at: float | None = -0.5) -> list[Answer]:
    """Three tokens per item; at the second place token 20 or (``diverge``) 21, each arm's distribution there
    holding the other token at log-probability ``other_at`` (None: not among its best)."""
    out = []
    for i in range(n):
        second = 21 if i in diverge else 20
        tokens = (10 + i, second, 30)
        lp = (-0.1, -0.2, -0.3)
        if shift and i in shift:
            lp = (-0.1, -0.2 - shift[i], -0.3)
        alt = {} if other_at is None else {str(41 - second): other_at}
        top = ({str(10 + i): lp[0], "7": -3.0}, {str(second): lp[1], **alt, "8": -4.0}, {"30": lp[2]})
        out.append(Answer(f"item-{i:03d}", i not in wrong, tokens, lp, tuple(str(t) for t in tokens), top))
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
    cand = [Answer(a.item_id, a.correct, (a.tokens[0], 21, 98), (a.logprobs[0], -0.4, -7.0),
                   (a.texts[0], "21", "98"), (a.top[0], {"21": -0.4, "20": -0.5}, {"98": -7.0})) if i < 5 else a
            for i, a in enumerate(_answers(200))]
    g = quality_gate(TASKS, ref, cand, POLICY)
    assert g["logprob"]["max_abs_difference"] == 0.0 and g["logprob"]["compared_tokens"] == 195 * 3 + 5
    ta = g["token_agreement"]
    assert (ta["identical_items"], ta["divergences"], ta["near_ties"]) == (195, 5, 5)
    assert ta["first_divergences"][0] == {"item": "item-000", "token": 1, "reference": 20, "candidate": 21,
                                          "gap_reference": pytest.approx(0.3), "gap_candidate": pytest.approx(0.1),
                                          "near_tie": True}
    assert g["verdict"] == "PASS"


def test_divergences_at_near_ties_pass_however_many() -> None:
    """A quarter of the outputs part, each where the other arm's token was 0.3 nats behind in both distributions: a
    rounding flip, not a quality loss (a share-of-identical-outputs bound would fail it)."""
    g = quality_gate(TASKS, _answers(200), _answers(200, diverge=set(range(0, 200, 4)), other_at=-0.5), POLICY)
    ta = g["token_agreement"]
    assert (ta["identical_items"], ta["divergences"], ta["near_ties"], ta["verdict"]) == (150, 50, 50, "PASS")
    assert ta["largest_gap"] == pytest.approx(0.3) and ta["share"] == 0.75
    assert ta["first_divergences"][0] == {"item": "item-000", "token": 1, "reference": 20, "candidate": 21,
                                          "gap_reference": pytest.approx(0.3), "gap_candidate": pytest.approx(0.3),
                                          "near_tie": True}
    assert g["verdict"] == "PASS" and "every divergence a near tie (largest gap 0.3 nats)" in g["reason"]


def test_a_divergence_far_from_a_tie_fails() -> None:
    g = quality_gate(TASKS, _answers(200, other_at=-1.5), _answers(200, diverge={6}, other_at=-1.5), POLICY)
    ta = g["token_agreement"]
    assert (ta["divergences"], ta["near_ties"], ta["verdict"]) == (1, 0, "FAIL") and g["verdict"] == "FAIL"
    assert ta["first_divergences"][0]["gap_reference"] == pytest.approx(1.3)
    assert "1 of 1 divergent outputs part at no near tie (first: item item-006 token 1, gaps 1.3 / 1.3 nats; " \
           "bound 1 within the top 5)" in g["reason"]


def test_a_token_outside_the_other_arms_best_fails() -> None:
    g = quality_gate(TASKS, _answers(200, other_at=None), _answers(200, diverge={3, 9}, other_at=-0.3), POLICY)
    ta = g["token_agreement"]
    assert (ta["divergences"], ta["near_ties"], ta["verdict"]) == (2, 0, "FAIL")
    first = ta["first_divergences"][0]
    assert (first["gap_reference"], first["gap_candidate"]) == (None, pytest.approx(0.1))
    assert "gaps outside the top / 0.1 nats" in g["reason"]


def test_an_output_that_ends_where_the_other_goes_on_is_no_tie() -> None:
    ref = _answers(200)
    cand = list(ref)
    a = ref[4]
    cand[4] = Answer(a.item_id, a.correct, a.tokens[:2], a.logprobs[:2], a.texts[:2], a.top[:2])
    ta = quality_gate(TASKS, ref, cand, POLICY)["token_agreement"]
    assert ta["first_divergences"][0] == {"item": "item-004", "token": 2, "reference": 30, "candidate": "(end)",
                                          "gap_reference": None, "gap_candidate": None, "near_tie": False}
    assert ta["verdict"] == "FAIL"


def test_a_divergence_needs_the_top_log_probabilities_to_be_judged() -> None:
    bare = [Answer(a.item_id, a.correct, a.tokens, a.logprobs) for a in _answers(200, diverge={1})]
    with pytest.raises(InputError, match="no top log-probabilities"):
        quality_gate(TASKS, _answers(200), bare, POLICY)
    # without any divergence nothing needs them
    same = [Answer(a.item_id, a.correct, a.tokens, a.logprobs) for a in _answers(200)]
    assert quality_gate(TASKS, _answers(200), same, POLICY)["token_agreement"]["verdict"] == "PASS"


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
    with pytest.raises(InputError, match="1 tokens but 0 top log-probability maps"):
        Answer("x", True, (1,), (-0.1,), ("a",), ())


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

"""The semantic-quality items: the generator, solve, the scoring rules, the hash, and the request to an engine."""
from __future__ import annotations

import hashlib
import json
import urllib.request
from dataclasses import replace

import pytest

from infercrane.errors import InputError, RunFailed
from infercrane.hashing import canonical_json
from infercrane.serving.quality import (TASKS, QualityItem, ask, generate_items, items_sha256, make_prompt,
                                        quality_data, request_body, score, solve)


def item(task: str, answer: str, question: str = "What is 1 plus 1?") -> QualityItem:
    return QualityItem(id=f"{task}-000", task=task, prompt=make_prompt(task, question), answer=answer)


# --------------------------------------------------------------------------------------------- the generator


def test_generator_is_deterministic_seed_sensitive_and_interleaved():
    a = generate_items(0, 10)
    assert a == generate_items(0, 10)
    assert len(a) == 40
    assert [i.task for i in a[:8]] == [*TASKS, *TASKS]
    assert [i.id for i in a[:5]] == ["arithmetic-000", "copying-000", "counting-000", "facts-000", "arithmetic-001"]
    assert len({i.id for i in a}) == 40
    b = generate_items(1, 10)
    for task in TASKS:  # every task's items move with the seed
        assert [i for i in a if i.task == task] != [i for i in b if i.task == task]
    # a task's first items do not depend on how many are asked
    assert [i for i in generate_items(0, 4)] == [i for i in a if int(i.id[-3:]) < 4]


def test_no_question_repeats_within_a_task():
    items = generate_items(3, 60)
    for task in TASKS:
        prompts = [i.prompt for i in items if i.task == task]
        assert len(set(prompts)) == len(prompts) == 60


def test_prompts_are_short_one_shot_completions():
    for it in generate_items(2, 20):
        assert it.prompt.startswith("Question: ") and it.prompt.endswith("\nAnswer:")
        assert it.prompt.count("Question: ") == 2 and it.prompt.count("\nAnswer:") == 2  # one example, one question
        assert len(it.prompt.split()) < 60, it.prompt
        assert "\n" not in it.answer and it.answer == it.answer.strip()


def test_every_item_is_solvable_and_its_answer_scores():
    for seed in range(4):
        for it in generate_items(seed, 40):
            assert solve(it.prompt) == it.answer, it
            assert score(it, " " + it.answer) and score(it, it.answer), it


def test_arithmetic_and_counting_answers_are_small_and_right():
    for it in generate_items(9, 60):
        q = it.prompt.rsplit("Question: ", 1)[1]
        if it.task == "arithmetic":
            a, op, b = q.removeprefix("What is ").removesuffix("?\nAnswer:").split()
            expected = {"plus": int(a) + int(b), "minus": int(a) - int(b), "times": int(a) * int(b)}[op]
            assert it.answer == str(expected) and 0 <= expected < 100 and int(a) < 100 and int(b) < 100
        if it.task == "counting":
            head, seq = q.removesuffix("?\nAnswer:").split(": ", 1)
            target = head.split()[-3]
            assert it.answer == str(seq.split().count(target)) and 1 <= int(it.answer) <= 4


def test_solve_gives_none_for_anything_but_an_item_prompt():
    it = generate_items(0, 1)[0]
    facts_q = "What is the capital of France?"
    assert solve(make_prompt("facts", facts_q)) == "Paris"
    for prompt in ("", "hello world", it.prompt + " ", " " + it.prompt, it.prompt.replace("Answer: 7", "Answer: 8"),
                   make_prompt("facts", "What is the capital of Atlantis?"),  # not in the table
                   make_prompt("arithmetic", facts_q),  # a question of another task
                   make_prompt("copying", "Repeat exactly: Sun moon"),  # not lower-case words
                   make_prompt("counting", "How many times does the word cat appear in: cat  dog?")):
        assert solve(prompt) is None, prompt
    assert solve(["not", "text"]) is None


def test_bad_arguments_are_input_errors():
    with pytest.raises(InputError, match="per_task"):
        generate_items(0, 0)
    with pytest.raises(InputError, match="seed"):
        generate_items("0", 3)
    n = len(quality_data().facts)
    with pytest.raises(InputError, match=f"facts table has {n} facts"):
        generate_items(0, n + 1)


def test_shipped_facts_are_not_given_away_by_their_questions():
    """Echoing a question never scores: no fact's answer is a whole word of its own question."""
    for fact in quality_data().facts:
        it = item("facts", fact.answer, fact.question)
        assert not score(it, fact.question), fact


# --------------------------------------------------------------------------------------------- scoring

@pytest.mark.parametrize("task, answer, text, right", [
    ("arithmetic", "12", " 7 + 5 = 12", True),       # SmolLM2-135M-Instruct's form
    ("arithmetic", "12", " 12 + 1 = 13", False),      # the last integer is what counts
    ("arithmetic", "12", " 12.", True),
    ("arithmetic", "12", "12", True),
    ("arithmetic", "12", " twelve", False),           # digits only
    ("arithmetic", "12", " 112", False),
    ("arithmetic", "12", " -12", False),
    ("arithmetic", "2", " 7-5=2", True),
    ("arithmetic", "12", "", False),
    ("arithmetic", "12", " 12\n13", True),            # the first line only
    ("arithmetic", "12", "\n12", False),
    ("counting", "3", " 3", True),
    ("counting", "3", " The word appears 3 times.", True),
    ("counting", "3", " 3 of 7", False),
    ("counting", "3", " three", False),
    ("copying", "red blue green", " red blue green", True),
    ("copying", "red blue green", " red blue green.", True),
    ("copying", "red blue green", " Sure: red blue green", True),
    ("copying", "red blue green", " Red blue green", False),   # case-sensitive
    ("copying", "red blue green", " red blue greens", False),  # not inside a longer word
    ("copying", "red blue green", " red  blue green", False),
    ("copying", "red blue green", " red green blue", False),
    ("copying", "b k q", " b k q", True),
    ("copying", "b k q", " b k qu", False),
    ("facts", "Paris", " Paris", True),
    ("facts", "Paris", " The capital of France is paris.", True),  # case-insensitive
    ("facts", "Paris", " Parisian", False),                       # whole word
    ("facts", "Paris", " Lyon", False),
    ("facts", "7", " There are 7 days in a week.", True),
    ("facts", "7", " 17", False),
])
def test_score_rules(task, answer, text, right):
    assert score(item(task, answer), text) is right


def test_score_refuses_an_unknown_task():
    with pytest.raises(InputError, match="unknown quality task 'poetry'"):
        score(QualityItem("poetry-000", "poetry", "p", "a"), "a")


# --------------------------------------------------------------------------------------------- the hash


def test_items_sha256_is_the_canonical_hash_and_moves_with_the_items():
    items = generate_items(0, 5)
    expected = hashlib.sha256(canonical_json([{"id": i.id, "task": i.task, "prompt": i.prompt, "answer": i.answer}
                                              for i in items])).hexdigest()
    assert items_sha256(items) == expected == items_sha256(generate_items(0, 5))
    assert items_sha256(generate_items(1, 5)) != expected
    assert items_sha256(generate_items(0, 6)) != expected
    assert items_sha256([*items[:-1], replace(items[-1], answer="Nowhere")]) != expected


# --------------------------------------------------------------------------------------------- the request


def test_ask_sends_one_greedy_request_per_item_in_order():
    items = generate_items(4, 2)
    sent, seen = [], []

    def post(path, body, *, timeout_s, what):
        sent.append((path, body, timeout_s, what))
        it = next(i for i in items if i.prompt == body["prompt"])
        return json.dumps({"choices": [{"text": " " + it.answer, "token_ids": [5],
                                        "logprobs": {"tokens": [" " + it.answer], "token_logprobs": [-0.5],
                                                     "top_logprobs": [{" " + it.answer: -0.5}], "text_offset": [0]}}]
                           }).encode()

    outs = ask(post, "served", items, max_tokens=8, progress=lambda done, total: seen.append((done, total)))
    assert [o.item_id for o in outs] == [i.id for i in items] and all(o.correct for o in outs)
    assert seen == [(k, len(items)) for k in range(1, len(items) + 1)]
    assert [s[1]["prompt"] for s in sent] == [i.prompt for i in items]
    path, body, timeout_s, what = sent[0]
    assert path == "/v1/completions" and what == f"quality item {items[0].id}" and timeout_s > 0
    assert body == request_body("served", items[0], 8, 5) == {
        "model": "served", "prompt": items[0].prompt, "max_tokens": 8, "temperature": 0.0, "seed": 0, "logprobs": 5,
        "return_token_ids": True, "stop": ["\n"]}
    assert outs[0].top == [{" " + items[0].answer: -0.5}]


def test_ask_keeps_tokens_past_the_stop_string_and_scores_the_text():
    """As vLLM: the stop string's token is in tokens and logprobs, not in text."""
    it = item("arithmetic", "2")

    def post(path, body, *, timeout_s, what):
        return json.dumps({"choices": [{"text": " 2", "token_ids": [17, 198],
                                        "logprobs": {"tokens": [" 2", "\n"], "token_logprobs": [-0.1, -9999.0],
                                                     "top_logprobs": [{" 2": -0.1, " 3": -2.5}, {"\n": -9999.0}],
                                                     "text_offset": [0, 2]}}]})

    (out,) = ask(post, "m", [it])
    assert out.text == " 2" and out.tokens == [" 2", "\n"] and out.logprobs == [-0.1, -9999.0]
    assert out.token_ids == [17, 198] and out.correct and out.top == [{" 2": -0.1, " 3": -2.5}, {"\n": -9999.0}]


def _choice(**over):
    choice = {"text": " 7", "token_ids": [3], "logprobs": {"tokens": [" 7"], "token_logprobs": [-0.25],
                                                          "top_logprobs": [{" 7": -0.25}], "text_offset": [0]}}
    for key, value in over.items():
        if key in ("tokens", "token_logprobs", "top_logprobs"):
            choice["logprobs"][key] = value
        else:
            choice[key] = value
    return choice


@pytest.mark.parametrize("payload, says", [
    (b"<html>busy</html>", "is not JSON"),
    (json.dumps({"choices": []}), "no single choice"),
    (json.dumps({"error": "x"}), "no single choice"),
    (json.dumps({"choices": [_choice(text=None)]}), "has no text"),
    (json.dumps({"choices": [_choice(logprobs=None)]}), "no logprobs block"),
    (json.dumps({"choices": [_choice(tokens=[" 7", " 8"])]}), "1 logprobs.token_logprobs for 2 tokens"),
    (json.dumps({"choices": [_choice(tokens=[], token_logprobs=[])]}), "has no tokens"),
    (json.dumps({"choices": [_choice(tokens=[7])]}), "no list of token strings"),
    ('{"choices": [{"text": " 7", "logprobs": {"tokens": [" 7"], "token_logprobs": [NaN]}}]}', "not a finite number"),
    ('{"choices": [{"text": " 7", "logprobs": {"tokens": [" 7"], "token_logprobs": [-Infinity]}}]}',
     "not a finite number"),
    (json.dumps({"choices": [_choice(token_logprobs=[None])]}), "not a finite number"),
    (json.dumps({"choices": [_choice(token_logprobs=["-0.2"])]}), "not a finite number"),
    (json.dumps({"choices": [_choice(token_ids=[3, 4])]}), "2 token_ids for 1 logprobs.tokens"),
    (json.dumps({"choices": [_choice(token_ids=["3"])]}), "token_ids that are not a list of integers"),
    (json.dumps({"choices": [_choice(top_logprobs=None)]}), "None logprobs.top_logprobs for 1 tokens"),
    (json.dumps({"choices": [_choice(top_logprobs=[])]}), "0 logprobs.top_logprobs for 1 tokens"),
    (json.dumps({"choices": [_choice(top_logprobs=[{}])]}), "top_logprobs entry that is not a map"),
    (json.dumps({"choices": [_choice(top_logprobs=[{" 7": "x"}])]}), "top_logprobs entry that is not a map"),
    ('{"choices": [{"text": " 7", "logprobs": {"tokens": [" 7"], "token_logprobs": [-0.1], '
     '"top_logprobs": [{" 7": NaN}]}}]}', "top_logprobs entry that is not a map"),
])
def test_malformed_answers_are_run_failures_naming_the_item(payload, says):
    it = item("arithmetic", "7")
    with pytest.raises(RunFailed, match=f"quality item arithmetic-000: the engine's answer .*{says}"):
        ask(lambda *a, **k: payload, "m", [it])


def test_a_well_formed_answer_without_token_ids_is_accepted():
    (out,) = ask(lambda *a, **k: json.dumps({"choices": [_choice(token_ids=None)]}), "m", [item("arithmetic", "7")])
    assert out.token_ids is None and out.tokens == [" 7"] and out.correct


def test_ask_refuses_a_bad_max_tokens():
    with pytest.raises(InputError, match="max_tokens"):
        ask(lambda *a, **k: b"", "m", [], max_tokens=0)


def test_ask_against_the_test_server(raw_server, ts_recipe):
    pytest.importorskip("torch")
    from infercrane.serving.engine import ExternalEngine

    srv = raw_server("--ttft-ms", "0", "--itl-ms", "0")
    engine = ExternalEngine(srv.url, recipe=ts_recipe()).connect()
    items = generate_items(5, 3)
    outs = ask(engine.post, engine.served_model, items)
    assert [o.item_id for o in outs] == [i.id for i in items]
    for it, out in zip(items, outs):
        assert out.correct and out.text == " " + it.answer
        assert len(out.tokens) == len(out.logprobs) == len(out.token_ids) == len(it.answer.split())
        assert "".join(out.tokens) == out.text
        assert all(-10.0 < lp < 0.0 for lp in out.logprobs)
        assert all(top.get(tok) == lp and len(top) > 1 for tok, lp, top in zip(out.tokens, out.logprobs, out.top))
    with urllib.request.urlopen(f"{srv.url}/stats", timeout=10) as resp:
        body_keys = json.loads(resp.read())["body_keys"]
    assert all(body_keys.get(k) == len(items) for k in ("logprobs", "return_token_ids", "stop", "seed"))

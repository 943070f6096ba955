"""The test server answers quality items through its toy model: checkably, with log-probabilities, and a wrong norm
kernel (``--norm-kernel``) visibly degrades the answers while a correct one does not."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infercrane.serving.quality import ItemOutput, QualityItem, ask, generate_items

torch = pytest.importorskip("torch")

from test_testserver import post, sse_events  # noqa: E402  (the server tests' HTTP helpers)

KERNELS = Path(__file__).resolve().parent / "wrong_kernels.py"
FAST = ("--ttft-ms", "0", "--itl-ms", "0")
ITEMS = generate_items(11, 10)  # 40 items, 10 a task
# Log-probabilities of two correct kernels agree within this (the toy model's docstring: float32 rounding moves them
# by about 1e-6, bfloat16 rounding of the output by under 1e-3)...
SAME_LOGPROBS = 1e-3
# ...and an eps-ignoring kernel moves some position's by more than this (measured on ITEMS: 0.83).
MOVED_LOGPROBS = 0.1


def norm_kernel(function: str) -> tuple[str, ...]:
    return (*FAST, "--norm-kernel", f"{KERNELS}:{function}")


def ask_server(srv, items: list[QualityItem] = ITEMS) -> list[ItemOutput]:
    def post_to(path, body, *, timeout_s, what):
        status, raw = post(f"{srv.url}{path}", body, timeout=timeout_s)
        assert status == 200, (what, raw[:300])
        return raw

    return ask(post_to, "infercrane-test-model", items)


def max_logprob_difference(a: list[ItemOutput], b: list[ItemOutput]) -> float:
    return max(abs(x - y) for oa, ob in zip(a, b) for x, y in zip(oa.logprobs, ob.logprobs))


@pytest.fixture(scope="module")
def reference(module_raw_server) -> list[ItemOutput]:
    return ask_server(module_raw_server(*FAST))


def test_reference_server_answers_every_item_with_logprobs(reference):
    assert len(reference) == len(ITEMS)
    for it, out in zip(ITEMS, reference):
        assert out.correct and out.text == " " + it.answer, (it, out)
        assert out.tokens == [" " + w for w in it.answer.split()]
        assert len(out.token_ids) == len(out.logprobs) == len(out.tokens)
        assert all(-2.0 < lp < 0.0 for lp in out.logprobs)  # the answer wins at every position, by 0.65 nats or more


def test_outputs_and_token_ids_are_deterministic(module_raw_server, reference):
    again = ask_server(module_raw_server(*FAST))
    assert again == reference
    ids = {t: i for out in reference for t, i in zip(out.tokens, out.token_ids)}
    for out in reference:  # one id per token string, across items
        assert all(ids[t] == i for t, i in zip(out.tokens, out.token_ids))


@pytest.mark.parametrize("function", ["fused_add_rmsnorm_correct", "fused_add_rmsnorm_bf16_rounded"])
def test_a_correct_kernel_gives_the_reference_outputs(module_raw_server, reference, function):
    got = ask_server(module_raw_server(*norm_kernel(function)))
    assert [(o.text, o.tokens, o.token_ids) for o in got] == [(o.text, o.tokens, o.token_ids) for o in reference]
    assert max_logprob_difference(got, reference) <= SAME_LOGPROBS


def test_an_eps_ignoring_kernel_degrades_quality_deterministically(module_raw_server, reference):
    srv = module_raw_server(*norm_kernel("fused_add_rmsnorm_eps_ignored"))
    got = ask_server(srv)
    wrong = [o.item_id for o in got if not o.correct]
    assert 0 < len(wrong) < len(ITEMS)  # some items, not all: 18 of 40 here
    assert max_logprob_difference(got, reference) > MOVED_LOGPROBS
    assert ask_server(srv) == got  # the same wrong answers and log-probabilities every time
    for out, ref in zip(got, reference):  # a wrong answer is a wrong token in the answer's place, not garbage
        assert len(out.tokens) == len(ref.tokens)


def test_streaming_an_item_sends_one_token_a_chunk_with_its_logprobs(module_raw_server, reference):
    srv = module_raw_server(*FAST)
    it, ref = next((i, o) for i, o in zip(ITEMS, reference) if len(o.tokens) >= 3)
    status, raw = post(f"{srv.url}/v1/completions", {"prompt": it.prompt, "max_tokens": 16, "logprobs": 1,
                                                     "stream": True})
    assert status == 200
    chunks = [e["choices"][0] for e in sse_events(raw) if e != "[DONE]"]
    assert "".join(c["text"] for c in chunks) == ref.text
    assert [c["logprobs"]["tokens"] for c in chunks] == [[t] for t in ref.tokens]
    assert [c["logprobs"]["token_logprobs"][0] for c in chunks] == ref.logprobs
    offsets = [c["logprobs"]["text_offset"][0] for c in chunks]
    assert offsets == [sum(len(t) for t in ref.tokens[:k]) for k in range(len(ref.tokens))]
    assert [c["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]


def test_top_logprobs_hold_the_chosen_token_and_the_n_best(module_raw_server):
    srv = module_raw_server(*FAST)
    it = next(i for i in ITEMS if i.task == "arithmetic")
    status, raw = post(f"{srv.url}/v1/completions", {"prompt": it.prompt, "max_tokens": 16, "logprobs": 3})
    block = json.loads(raw)["choices"][0]["logprobs"]
    (top,) = block["top_logprobs"]
    assert status == 200 and len(top) == 3 and block["tokens"][0] in top
    assert top[block["tokens"][0]] == block["token_logprobs"][0] == max(top.values())
    assert block["text_offset"] == [0]


def test_max_tokens_cuts_an_answer_and_says_length(module_raw_server):
    srv = module_raw_server(*FAST)
    it = next(i for i in ITEMS if i.task == "copying" and len(i.answer.split()) >= 3)
    _, raw = post(f"{srv.url}/v1/completions", {"prompt": it.prompt, "max_tokens": 2, "logprobs": 1})
    choice = json.loads(raw)["choices"][0]
    assert choice["text"] == " " + " ".join(it.answer.split()[:2]) and choice["finish_reason"] == "length"
    assert len(choice["logprobs"]["tokens"]) == 2


def test_ignore_eos_on_an_item_prompt_gives_the_fixed_words_as_before(module_raw_server):
    srv = module_raw_server(*FAST)
    _, raw = post(f"{srv.url}/v1/completions", {"prompt": ITEMS[0].prompt, "max_tokens": 3, "ignore_eos": True})
    choice = json.loads(raw)["choices"][0]
    assert choice["text"] == " the of and" and choice["logprobs"] is None and choice["finish_reason"] == "length"


def test_other_prompts_get_the_fixed_words_with_logprobs_when_asked(module_raw_server):
    srv = module_raw_server(*norm_kernel("fused_add_rmsnorm_eps_ignored"))
    _, raw = post(f"{srv.url}/v1/completions", {"prompt": "one two", "max_tokens": 4, "logprobs": 0,
                                                "return_token_ids": True})
    choice = json.loads(raw)["choices"][0]
    assert choice["text"] == " the of and to" and choice["token_ids"] == [0, 1, 2, 3]  # no kernel changes them
    block = choice["logprobs"]
    assert block["tokens"] == [" the", " of", " and", " to"] and block["text_offset"] == [0, 4, 7, 11]
    assert [list(t) for t in block["top_logprobs"]] == [[t] for t in block["tokens"]]  # logprobs 0: the chosen only
    assert all(lp < 0.0 for lp in block["token_logprobs"])


def test_chat_prompts_are_never_items(module_raw_server):
    srv = module_raw_server(*FAST)
    _, raw = post(f"{srv.url}/v1/chat/completions", {"messages": [{"role": "user", "content": ITEMS[0].prompt}],
                                                     "max_tokens": 2})
    assert json.loads(raw)["choices"][0]["message"]["content"] == " the of"


def test_a_norm_kernel_that_cannot_be_loaded_stops_the_server_before_it_listens(tmp_path):
    for spec, says in ((f"{tmp_path}/absent.py:fn", "does not exist"),
                       (f"{KERNELS}:no_such_function", "has no function 'no_such_function'"),
                       ("reference.py", "must be written PATH.py:FUNCTION")):
        done = subprocess.run([sys.executable, "-m", "infercrane.serving.testserver", "--port", "1",
                               "--norm-kernel", spec], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "--norm-kernel" in done.stderr and says in done.stderr, done.stderr

"""The semantic-quality items: InferCrane's own generated questions with checkable answers, their scoring, and the
request that puts them to an engine.

**Items.** Four tasks (``TASKS``), each a completion prompt (no chat template) made of a fixed one-shot example of
the task and then the question::

    Question: What is 3 plus 4?
    Answer: 7

    Question: What is 23 minus 8?
    Answer:

* ``arithmetic``: ``a plus b`` (1..50 each), ``a minus b`` (10..60, 1 <= b < a: never negative), ``a times b``
  (2..9 each); the answer is the integer.
* ``copying``: "Repeat exactly: <3 to 5 words or letters>"; the answer is the sequence, one space between.
* ``counting``: "How many times does the word|letter X appear in: <4 to 7 words or letters>?"; X occurs 1 to 4
  times; the answer is the count.
* ``facts``: a question from the shipped table ``quality_data.yaml`` (capitals, the order of days and months,
  opposites, colours, ...), each with its one answer.

The words and facts are data (``quality_data.yaml``, validated on load); the generator is machinery: a seeded
``random.Random`` per task (the string ``infercrane-quality/<seed>/<task>``), so that a task's items depend on the
seed and ``per_task`` only, and the items come interleaved by task (``arithmetic-000, copying-000, counting-000,
facts-000, arithmetic-001, ...``). No item repeats a question within its task.

**Scoring** (``score``) is lenient about form and strict about the value. What is scored is the answer line: the
engine's text up to its first newline (the request stops there anyway). Rules, by task:

* ``arithmetic`` and ``counting``: the LAST integer on the line (digits, with a leading ``-`` when it does not
  follow a letter or digit) equals the answer: " 7 + 5 = 12" is right for 12, " 12 + 1 = 13" is wrong for 12, "twelve"
  is wrong (numbers must be written in digits), "12." is right.
* ``copying``: the answer sequence appears verbatim (case-sensitive, single spaces) on the line, not inside a
  longer word: " red blue green." is right for "red blue green", " red blue greens" and " Red blue green" are wrong.
* ``facts``: the answer appears on the line as a whole word (or phrase), case-insensitive: " The capital of France is
  Paris." is right for "Paris", " Parisian" is wrong.

``solve(prompt)`` gives the answer from an item prompt alone (None for any other text): the test server answers
items with it, as an engine that knows every answer.

**The request** (``ask``): one item at a time (greedy decoding at batch 1 is what makes an engine's outputs
reproducible), ``temperature: 0``, ``seed: 0``, ``logprobs: 1`` (the chosen token's log-probability and the top-1),
``return_token_ids: true``, ``stop: ["\\n"]``. See ``ask`` for what vLLM returns and what is checked.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from infercrane.errors import InputError, RunFailed
from infercrane.hashing import canonical_json

TASKS: tuple[str, ...] = ("arithmetic", "copying", "counting", "facts")
# Whether an A/B runs the semantic-quality gate (``plan_gate``): the option ``--quality-gate`` and its default.
QualityGateMode = Literal["auto", "on", "off"]
QUALITY_GATE_MODES: tuple[str, ...] = get_args(QualityGateMode)
QUALITY_GATE_DEFAULT: QualityGateMode = "auto"
DATA_FILE = Path(__file__).resolve().parent / "quality_data.yaml"
DATA_SCHEMA_VERSION = "infercrane.quality-data/v1"
COMPLETIONS_PATH = "/v1/completions"
REQUEST_TIMEOUT_S = 120.0  # one short greedy completion; the token gate's requests allow the same

# The one-shot example of each task but facts (whose example is data: quality_data.yaml's facts_example).
EXAMPLES: dict[str, tuple[str, str]] = {
    "arithmetic": ("What is 3 plus 4?", "7"),
    "copying": ("Repeat exactly: sun moon star", "sun moon star"),
    "counting": ("How many times does the word cat appear in: cat dog cat?", "2"),
}
LETTERS = "abcdefghijklmnopqrstuvwxyz"
_SEQ = r"[a-z]+(?: [a-z]+)*"  # words or letters, one space between
_ARITHMETIC_Q = re.compile(r"What is (\d+) (plus|minus|times) (\d+)\?")
_COPYING_Q = re.compile(rf"Repeat exactly: ({_SEQ})")
_COUNTING_Q = re.compile(rf"How many times does the (word|letter) ([a-z]+) appear in: ({_SEQ})\?")
_PROMPT = re.compile(r"Question: (?P<eq>[^\n]*)\nAnswer: (?P<ea>[^\n]*)\n\nQuestion: (?P<q>[^\n]*)\nAnswer:")
_INTEGER = re.compile(r"(?<![A-Za-z0-9])-?\d+|\d+")


# --------------------------------------------------------------------------------------------- data


class Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str = Field(min_length=1, pattern=r"^[^\n]+\?$", description="one line, ending with '?'")
    answer: str = Field(min_length=1, pattern=r"^[^\n]+$", description="the canonical answer, one line")


class QualityData(BaseModel):
    """``quality_data.yaml``: the words copying and counting draw from, the facts and the facts' one-shot example."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: str = Field(pattern=rf"^{re.escape(DATA_SCHEMA_VERSION)}$")
    words: tuple[str, ...] = Field(min_length=8, description="lower-case words, a-z only")
    facts_example: Fact
    facts: tuple[Fact, ...] = Field(min_length=1)


@lru_cache(maxsize=1)
def quality_data() -> QualityData:
    """The shipped data, validated (InputError naming every bad field, or a duplicate question)."""
    from infercrane.datafiles import read_mapping, validate

    data = validate(QualityData, read_mapping(DATA_FILE.read_text(encoding="utf-8"), what="quality data",
                                              source=str(DATA_FILE)),
                    what="quality data", source=str(DATA_FILE), hint="fix the shipped quality_data.yaml")
    questions = [f.question for f in data.facts]
    problems = [f"word {w!r} is not lower-case a-z" for w in data.words if not re.fullmatch(r"[a-z]+", w)]
    problems += [f"word {w!r} is listed twice" for w in sorted({w for w in data.words if data.words.count(w) > 1})]
    problems += [f"question {q!r} is listed twice" for q in sorted({q for q in questions if questions.count(q) > 1})]
    if data.facts_example.question in questions:
        problems.append(f"the example {data.facts_example.question!r} is also a fact")
    if problems:
        raise InputError(f"quality data {DATA_FILE} is invalid:\n  " + "\n  ".join(problems),
                         hint="fix the shipped quality_data.yaml")
    return data


@lru_cache(maxsize=1)
def _facts() -> dict[str, str]:
    return {f.question: f.answer for f in quality_data().facts}


# --------------------------------------------------------------------------------------------- items


@dataclass(frozen=True)
class QualityItem:
    id: str        # "<task>-<index, 3 digits>", e.g. "arithmetic-003"
    task: str      # one of TASKS
    prompt: str    # the task's one-shot example, then the question, ending "\nAnswer:"
    answer: str    # the expected answer, canonical


def example(task: str) -> tuple[str, str]:
    """The task's one-shot example: (question, answer)."""
    if task == "facts":
        ex = quality_data().facts_example
        return ex.question, ex.answer
    if task not in EXAMPLES:
        raise InputError(f"unknown quality task {task!r}", hint=f"known tasks: {', '.join(TASKS)}")
    return EXAMPLES[task]


def make_prompt(task: str, question: str) -> str:
    """An item's prompt: the task's one-shot example, a blank line, the question, ``\\nAnswer:``."""
    eq, ea = example(task)
    return f"Question: {eq}\nAnswer: {ea}\n\nQuestion: {question}\nAnswer:"


def _arithmetic(rng: random.Random) -> tuple[str, str]:
    op = rng.choice(("plus", "minus", "times"))
    if op == "plus":
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        return f"What is {a} plus {b}?", str(a + b)
    if op == "minus":
        a = rng.randint(10, 60)
        b = rng.randint(1, a - 1)
        return f"What is {a} minus {b}?", str(a - b)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return f"What is {a} times {b}?", str(a * b)


def _pool(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """Words or letters (half the time each): what copying and counting items are made of."""
    return ("word", quality_data().words) if rng.random() < 0.5 else ("letter", tuple(LETTERS))


def _copying(rng: random.Random) -> tuple[str, str]:
    _, pool = _pool(rng)
    seq = " ".join(rng.sample(pool, rng.randint(3, 5)))
    return f"Repeat exactly: {seq}", seq


def _counting(rng: random.Random) -> tuple[str, str]:
    kind, pool = _pool(rng)
    target = rng.choice(pool)
    length = rng.randint(4, 7)
    count = rng.randint(1, min(4, length - 1))
    others = [rng.choice([p for p in pool if p != target]) for _ in range(length - count)]
    seq = [target] * count + others
    rng.shuffle(seq)
    return f"How many times does the {kind} {target} appear in: {' '.join(seq)}?", str(count)


_MAKERS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "arithmetic": _arithmetic, "copying": _copying, "counting": _counting,
}
_MAX_TRIES_PER_ITEM = 200


def _task_items(task: str, seed: int, per_task: int) -> list[QualityItem]:
    if task == "facts":
        facts = quality_data().facts
        if per_task > len(facts):
            raise InputError(f"{per_task} items per task asked, but the facts table has {len(facts)} facts",
                             hint=f"ask at most {len(facts)} items per task, or add facts to {DATA_FILE.name}")
        chosen = random.Random(f"infercrane-quality/{seed}/facts").sample(facts, per_task)
        pairs = [(f.question, f.answer) for f in chosen]
    else:
        rng = random.Random(f"infercrane-quality/{seed}/{task}")
        pairs, seen = [], set()
        tries = 0
        while len(pairs) < per_task:
            tries += 1
            if tries > _MAX_TRIES_PER_ITEM * per_task:
                raise InputError(f"cannot make {per_task} distinct {task} items (made {len(pairs)})",
                                 hint="ask fewer items per task")
            q, a = _MAKERS[task](rng)
            if q not in seen:
                seen.add(q)
                pairs.append((q, a))
    return [QualityItem(id=f"{task}-{i:03d}", task=task, prompt=make_prompt(task, q), answer=a)
            for i, (q, a) in enumerate(pairs)]


def generate_items(seed: int, per_task: int) -> list[QualityItem]:
    """``per_task`` items of every task, interleaved by task; the same list for the same (seed, per_task), and a
    task's first k items are the same for any ``per_task >= k``."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"quality items: seed must be an integer, got {seed!r}")
    if isinstance(per_task, bool) or not isinstance(per_task, int) or not 1 <= per_task <= 999:
        raise InputError(f"quality items: per_task must be an integer from 1 to 999, got {per_task!r}")
    by_task = [_task_items(task, seed, per_task) for task in TASKS]
    return [items[i] for i in range(per_task) for items in by_task]


def items_sha256(items: list[QualityItem]) -> str:
    """sha256 of the canonical JSON (``infercrane.hashing``) of the items as a list of {id, task, prompt, answer}."""
    return hashlib.sha256(canonical_json([asdict(item) for item in items])).hexdigest()


# --------------------------------------------------------------------------------------------- solving, scoring


def solve(prompt: str) -> str | None:
    """The answer an item prompt asks for, from the prompt alone; None when ``prompt`` is not exactly an item prompt
    (one of the tasks' one-shot examples, a question of that task, the fixed layout)."""
    if not isinstance(prompt, str):
        return None
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        return None
    q = m["q"]
    for task in TASKS:
        if example(task) != (m["eq"], m["ea"]):
            continue
        answer = _answer(task, q)
        return answer if answer is not None and make_prompt(task, q) == prompt else None
    return None


def _answer(task: str, q: str) -> str | None:
    if task == "arithmetic":
        m = _ARITHMETIC_Q.fullmatch(q)
        if m is None:
            return None
        a, op, b = int(m[1]), m[2], int(m[3])
        return str(a + b if op == "plus" else a - b if op == "minus" else a * b)
    if task == "copying":
        m = _COPYING_Q.fullmatch(q)
        return None if m is None else m[1]
    if task == "counting":
        m = _COUNTING_Q.fullmatch(q)
        return None if m is None else str(m[3].split().count(m[2]))
    return _facts().get(q)


def answer_line(text: str) -> str:
    """What is scored: the text up to its first newline."""
    return text.split("\n", 1)[0]


def score(item: QualityItem, text: str) -> bool:
    """Whether the engine's answer line is right for ``item``, by the task's rule (the module docstring):
    arithmetic and counting, the last integer on the line equals the answer; copying, the answer sequence appears
    verbatim, not inside a longer word; facts, the answer appears as a whole word, case-insensitive."""
    line = answer_line(text)
    if item.task in ("arithmetic", "counting"):
        numbers = _INTEGER.findall(line)
        return bool(numbers) and int(numbers[-1]) == int(item.answer)
    if item.task == "copying":
        return re.search(rf"(?<![A-Za-z0-9]){re.escape(item.answer)}(?![A-Za-z0-9])", line) is not None
    if item.task == "facts":
        return re.search(rf"(?<![A-Za-z0-9]){re.escape(item.answer)}(?![A-Za-z0-9])", line, re.IGNORECASE) is not None
    raise InputError(f"item {item.id}: unknown quality task {item.task!r}", hint=f"known tasks: {', '.join(TASKS)}")


# --------------------------------------------------------------------------------------------- the request


@dataclass(frozen=True)
class ItemOutput:
    item_id: str
    text: str                      # the completion's text (vLLM: cut before the stop string)
    token_ids: list[int] | None    # when the server returns them (vLLM: "return_token_ids": true)
    tokens: list[str]              # logprobs.tokens: every generated token, the one holding the stop string included
    logprobs: list[float]          # the chosen tokens' log-probabilities (logprobs.token_logprobs)
    correct: bool                  # score(item, text)
    top: list[dict[str, float]]    # per place, the best tokens' texts -> log-probabilities (logprobs.top_logprobs)


def request_body(model: str, item: QualityItem, max_tokens: int, top_logprobs: int) -> dict[str, Any]:
    """The completion request of one item (greedy, one line; the chosen tokens' ids and log-probabilities, and the
    ``top_logprobs`` best at every place)."""
    return {"model": model, "prompt": item.prompt, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0,
            "logprobs": top_logprobs, "return_token_ids": True, "stop": ["\n"]}


def ask(post: Callable[..., Any], model: str, items: list[QualityItem], *, max_tokens: int = 16,
        top_logprobs: int = 5, progress: Callable[[int, int], None] | None = None) -> list[ItemOutput]:
    """Each item's greedy completion from the engine behind ``post``, one request at a time, in order.

    ``post(path, body, *, timeout_s, what)`` is an engine's POST (``Engine.post``: the answer's bytes, or RunFailed
    naming the engine); ``progress(done, total)`` is called after each item.

    What vLLM returns, read in its source (vllm-project/vllm: ``vllm/entrypoints/openai/completion/protocol.py`` and
    ``serving.py``, the 0.2x line's completions endpoint; ``vllm/v1/engine/detokenizer.py`` and
    ``output_processor.py``, whose stop-string handling is the same in every V1 release read): ``logprobs`` (an
    integer) and ``return_token_ids`` are independent fields of ``CompletionRequest``, and a non-streaming response
    carries both on ``choices[0]`` (``request_output_to_completion_response``): ``token_ids`` is
    ``output.token_ids`` and ``logprobs`` (``CompletionLogProbs``: ``tokens``, ``token_logprobs``, ``top_logprobs``,
    ``text_offset``) is built token by token over the same ``output.token_ids`` (``_create_completion_logprobs``),
    so their lengths agree. ``token_logprobs`` entries are floats clamped below at -9999.0
    (``-inf`` becomes -9999.0; an entry is None only where the engine computed no log-probability, which for
    generated tokens with ``logprobs`` set does not happen); ``top_logprobs[i]`` maps up to ``logprobs + 1``
    decoded tokens to their log-probabilities, the chosen one included. A ``stop`` string is matched in the
    detokenized text: the text is cut before it (``include_stop_str_in_output`` is false by default) and the request
    finishes with ``finish_reason: "stop"``, ``stop_reason: "\\n"``; the token ids and log-probabilities are NOT cut,
    so the last token (the one whose text holds the newline, e.g. ``"\\n"`` or ``".\\n"``) is in ``tokens``,
    ``token_logprobs`` and ``token_ids`` although its text is not (all) in ``text``. Hence ``tokens`` may join to
    more than ``text``, and the comparison of two arms is over tokens, not text.

    Checked here, each failure a RunFailed naming the item: the answer is JSON with one choice; it has a
    ``logprobs`` block whose ``tokens`` (strings), ``token_logprobs`` (finite numbers) and ``top_logprobs`` (maps
    of strings to finite numbers, none empty) have one entry per generated token and at least one; ``token_ids``,
    when present, are integers, as many as the tokens. Two token ids that decode to the same text share one entry
    of a ``top_logprobs`` map (vLLM keys it by text).
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InputError(f"quality items: max_tokens must be a positive integer, got {max_tokens!r}")
    out: list[ItemOutput] = []
    for done, item in enumerate(items, start=1):
        what = f"quality item {item.id}"
        payload = post(COMPLETIONS_PATH, request_body(model, item, max_tokens, top_logprobs),
                       timeout_s=REQUEST_TIMEOUT_S, what=what)
        out.append(parse_output(item, payload))
        if progress is not None:
            progress(done, len(items))
    return out


def _bad(item: QualityItem, why: str) -> RunFailed:
    return RunFailed(f"quality item {item.id}: the engine's answer {why}",
                     hint="the engine must be an OpenAI-compatible completions server that returns logprobs "
                          "(vLLM: any version with 'logprobs' on /v1/completions); see its log for the request")


def _finite_number(v: Any) -> bool:
    """A JSON number (not a boolean) that is finite: what a log-probability must be."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_output(item: QualityItem, payload: bytes | str) -> ItemOutput:
    """One completion answer (the bytes or text of its JSON) as the item's output; RunFailed naming the item when
    the answer is not a completion with a well-formed logprobs block (``ask``'s checks)."""
    try:
        doc = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _bad(item, f"is not JSON ({exc}): {payload[:200]!r}") from None
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise _bad(item, f"has no single choice (choices: {str(choices)[:200]})")
    choice = choices[0]
    text = choice.get("text")
    if not isinstance(text, str):
        raise _bad(item, f"has no text (text: {text!r})")
    block = choice.get("logprobs")
    if not isinstance(block, dict):
        raise _bad(item, f"has no logprobs block (logprobs: {block!r}); the request asked for log-probabilities")
    tokens, lps = block.get("tokens"), block.get("token_logprobs")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise _bad(item, f"has no list of token strings in logprobs.tokens ({str(tokens)[:200]})")
    if not isinstance(lps, list) or len(lps) != len(tokens):
        n = len(lps) if isinstance(lps, list) else lps
        raise _bad(item, f"has {n} logprobs.token_logprobs for {len(tokens)} tokens")
    if not tokens:
        raise _bad(item, "has no tokens (an engine generates at least one)")
    bad = [(i, v) for i, v in enumerate(lps) if not _finite_number(v)]
    if bad:
        i, v = bad[0]
        raise _bad(item, f"has a log-probability that is not a finite number: token {i} ({tokens[i]!r}): {v!r}")
    top = block.get("top_logprobs")
    if not isinstance(top, list) or len(top) != len(tokens):
        n = len(top) if isinstance(top, list) else top
        raise _bad(item, f"has {str(n)[:100]} logprobs.top_logprobs for {len(tokens)} tokens")
    for i, alt in enumerate(top):
        if not isinstance(alt, dict) or not alt or not all(
                isinstance(k, str) and _finite_number(v) for k, v in alt.items()):
            raise _bad(item, f"has a top_logprobs entry that is not a map of token texts to finite numbers: token "
                             f"{i}: {str(alt)[:200]}")
    ids = choice.get("token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise _bad(item, f"has token_ids that are not a list of integers ({str(ids)[:200]})")
        if len(ids) != len(tokens):
            raise _bad(item, f"has {len(ids)} token_ids for {len(tokens)} logprobs.tokens")
    return ItemOutput(item_id=item.id, text=text, token_ids=None if ids is None else list(ids), tokens=list(tokens),
                      logprobs=[float(v) for v in lps], correct=score(item, text),
                      top=[{k: float(v) for k, v in alt.items()} for alt in top])


# --------------------------------------------------------------------------------------------- the gate's run

GENERATOR = "infercrane.serving.quality"  # what a receipt names as the items' generator


def plan_gate(mode: str, recipes: list[Any], model_provenance: dict[str, Any], policy: Any) -> dict[str, Any]:
    """Whether an A/B runs the semantic-quality gate, and why (what its receipt records under
    ``provenance.config.options.quality_gate``). ``mode``: ``on``, ``off`` or ``auto`` (on where the model's weights
    are real and every arm is a vLLM engine: dummy weights answer noise, and the test server is no model)."""
    if mode not in QUALITY_GATE_MODES:
        raise InputError(f"quality gate must be one of {', '.join(QUALITY_GATE_MODES)}, got {mode!r}")
    weights = model_provenance.get("weights")
    engines = sorted({r.engine for r in recipes})
    if mode == "off":
        run, why = False, "turned off (--quality-gate off)"
    elif policy.quality is None:
        if mode == "on":
            raise InputError("--quality-gate on: the serving policy has no quality block",
                             hint="add one (see infercrane/decide/policies/serving.yaml) or leave the gate off")
        run, why = False, "the serving policy has no quality block"
    elif mode == "on":
        run, why = True, "asked (--quality-gate on)"
    elif weights != "real":
        run, why = False, (f"the model's weights are {weights}: their answers are noise (a real model: infercrane "
                           "model prepare)")
    elif engines != ["vllm"]:
        run, why = False, f"engine {', '.join(engines)} is not a model (--quality-gate on asks it anyway)"
    else:
        run, why = True, "real weights on vLLM"
    return {"mode": mode, "run": run, "why": why}


def gate_design(quality: Any) -> str:
    """What the gate's items can show, said before anything runs: the fewest items with which unchanged answers
    show non-inferiority at the policy's margin, at the worst incumbent accuracy (``stats.proportions``)."""
    from infercrane.stats.proportions import items_to_show_margin

    n = len(TASKS) * quality.items_per_task
    level = 2 * quality.confidence - 1
    needed = [items_to_show_margin(p / 20, quality.accuracy_margin, level) for p in range(1, 21)]
    worst = None if any(x is None for x in needed) else max(needed)
    if worst is None or worst > n:
        return (f"{n} items: with every answer unchanged, non-inferiority at -{quality.accuracy_margin:g} cannot be "
                f"shown at every incumbent accuracy ({'no count up to 100000' if worst is None else worst} needed): "
                "the gate may end UNDECIDED")
    return (f"{n} items: with every answer unchanged, non-inferiority at -{quality.accuracy_margin:g} is shown at any "
            f"incumbent accuracy (at most {worst} items needed)")


def items_record(quality: Any, items: list[QualityItem]) -> dict[str, Any]:
    """Which items the policy's ``quality`` block asks (``items``: ``generate_items`` of its seed and count), as a
    receipt records them (``receipts.models_v2.QualityItemsRecord``)."""
    return {"generator": GENERATOR, "seed": quality.seed, "per_task": quality.items_per_task, "items": len(items),
            "max_tokens": quality.max_tokens, "sha256": items_sha256(items)}


def answer_items(engine: Any, quality: Any, items: list[QualityItem]) -> dict[str, Any]:
    """An engine's answers to ``items`` (the policy's), as the receipt's engine record holds them
    (``receipts.models_v2.QualityAnswersRecord``)."""
    t0 = time.monotonic()
    outputs = ask(engine.post, engine.served_model, items, max_tokens=quality.max_tokens,
                  top_logprobs=quality.top_logprobs)
    return {"items": items_record(quality, items),
            "answers": [{"item": o.item_id, "text": o.text,
                         "tokens": list(o.token_ids) if o.token_ids is not None else list(o.tokens),
                         "logprobs": list(o.logprobs), "texts": list(o.tokens), "top": o.top} for o in outputs],
            "wall_s": round(time.monotonic() - t0, 3)}


class QualityAsker:
    """The hook ``workload.run_plan`` calls before every visit: an engine answers the items once (its first visit),
    kept on its record."""

    def __init__(self, quality: Any, say: Callable[[str], None]) -> None:
        self.quality, self.say = quality, say
        self.items = generate_items(quality.seed, quality.items_per_task)

    def __call__(self, arm: str, engine: Any) -> None:
        if engine.record.quality_answers is not None:
            return
        n = len(self.items)
        self.say(f"quality gate: {arm} answers {n} items greedily, one at a time")
        answers = answer_items(engine, self.quality, self.items)
        engine.record.quality_answers = answers
        right = sum(score(it, a["text"]) for it, a in zip(self.items, answers["answers"]))
        self.say(f"quality gate: {arm} answered {right} of {n} right ({answers['wall_s']:.1f} s)")

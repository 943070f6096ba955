"""One prompt set for every driver: the JSONL prompt file of a (run index, concurrency) point.

With ``Workload.prompts: shared`` InferCrane makes the prompts instead of each driver, so that AIPerf and
``vllm bench serve`` send the same text at a point and a difference between them is not a difference in prompts.

Method (``make_prompts``): random token ids drawn uniformly from the tokenizer's vocabulary (special and added
tokens excluded), decoded to text with the tokenizer the drivers use, re-encoded, then cut (or topped up with more random
ids) and decoded again until the text encodes to ``input_tokens`` tokens, at most ``FIT_ROUNDS`` rounds; a prompt
whose text cannot be made exactly that long keeps its closest length. Every prompt's own token count (the
tokenizer's encoding of the text, no special tokens) is written next to it (``input_tokens``).

Seeds: ``point_rng(seed, run_index, concurrency)``, a generator seeded with the string
``infercrane-prompts/<workload seed + run index>/<concurrency>``: both arms get the same prompts at one point, and
no two points of a plan share a seed.

File (``write_prompts_file``): one JSON object a line with ``text`` (AIPerf 0.12's ``single_turn`` custom dataset),
``prompt`` (vLLM's ``custom`` dataset), ``output_length`` (AIPerf's per-request output tokens) and ``input_tokens``.
One file serves both readers: AIPerf's ``SingleTurn`` model allows extra keys (``AIPerfBaseModel``:
``extra="allow"``) and vLLM's ``CustomDataset`` reads the JSONL into a table and only looks at ``prompt``.
"""
from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercrane.errors import InputError

FIT_ROUNDS = 8
WINDOW_PROMPTS_PER_SLOT = 64  # a time window has no request count: 64 prompts per concurrency slot, cycled


@dataclass(frozen=True)
class Prompt:
    text: str
    input_tokens: int


def prompt_count(workload: Any, concurrency: int) -> int:
    """Prompts in one point's file: every request and warm-up request of the point, or, for a time window,
    ``WINDOW_PROMPTS_PER_SLOT x c`` (the driver cycles through them)."""
    if workload.window_s is not None:
        return WINDOW_PROMPTS_PER_SLOT * concurrency
    return workload.requests_at(concurrency) + workload.warmup_at(concurrency)


def point_rng(seed: int, run_index: int, concurrency: int) -> random.Random:
    return random.Random(f"infercrane-prompts/{seed + run_index}/{concurrency}")


def load_tokenizer(tokenizer: str, env: Mapping[str, str] | None = None) -> Any:
    """The drivers' tokenizer (``resolve_tokenizer``'s pair), from local files only; a stand-in's hub cache is
    passed as ``cache_dir`` rather than through the process environment."""
    from transformers import AutoTokenizer

    cache_dir = (env or {}).get("HF_HUB_CACHE")
    try:
        return AutoTokenizer.from_pretrained(tokenizer, local_files_only=True, cache_dir=cache_dir)
    except (OSError, ValueError) as exc:
        why = " ".join(str(exc).split())  # transformers' messages run over several lines
        raise InputError(f"cannot load tokenizer {tokenizer!r} from local files to make the shared prompts: {why}",
                         hint="give a tokenizer folder with --tokenizer DIR (a PoC config: serving.tokenizer), put "
                              "the tokenizer in the local hub cache, or set the workload's prompts: driver") from None


def _encode(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def make_prompts(tok: Any, n: int, input_tokens: int, rng: random.Random) -> list[Prompt]:
    """``n`` prompts of ``input_tokens`` tokens as nearly as the tokenizer allows (see the module docstring)."""
    # ordinary vocabulary only: no special token, and no added token (control or reserved, e.g. <|reserved_N|>)
    special = set(getattr(tok, "all_special_ids", None) or []) | set(tok.get_added_vocab().values())
    vocab = [i for i in range(len(tok)) if i not in special]
    if not vocab:
        raise InputError("the tokenizer has no ordinary token to draw prompts from")
    out = []
    for _ in range(n):
        ids = [rng.choice(vocab) for _ in range(input_tokens)]
        best = Prompt(text="", input_tokens=0)
        for _round in range(FIT_ROUNDS):
            text = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            ids = _encode(tok, text)
            if abs(len(ids) - input_tokens) < abs(best.input_tokens - input_tokens):
                best = Prompt(text=text, input_tokens=len(ids))
            if len(ids) == input_tokens:
                break
            ids = ids[:input_tokens] + [rng.choice(vocab) for _ in range(input_tokens - len(ids))]
        out.append(best)
    return out


def write_prompts_file(path: str | Path, prompts: Sequence[Prompt], output_tokens: int) -> Path:
    """The point's JSONL (``text``, ``prompt``, ``output_length``, ``input_tokens`` a line), for both drivers."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps({"text": p.text, "prompt": p.text, "output_length": output_tokens,
                                "input_tokens": p.input_tokens}, ensure_ascii=False) + "\n")
    return path


def read_prompts_file(path: str | Path) -> list[Prompt]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [Prompt(text=d["text"], input_tokens=int(d["input_tokens"])) for d in map(json.loads, lines) if d]


def write_point_prompts(path: str | Path, tok: Any, workload: Any, run_index: int, concurrency: int) -> Path:
    """Make and write one point's prompts (``prompt_count`` of them, seeded by ``point_rng``)."""
    prompts = make_prompts(tok, prompt_count(workload, concurrency), workload.input_tokens,
                           point_rng(workload.seed, run_index, concurrency))
    return write_prompts_file(path, prompts, workload.output_tokens)

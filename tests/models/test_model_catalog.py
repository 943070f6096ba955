"""Model catalog: lookups, the published Qwen3-0.6B config, source checks, validation, load_model_config."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infercrane.errors import InputError
from infercrane.models import catalog
from infercrane.models.catalog import CatalogEntry, get, list_models, load_model_config

QWEN3_06B = "Qwen/Qwen3-0.6B"
QWEN3_06B_REV = "c1899de289a04d12100db370d81485cdf75e47ca"

# Key order of the published Qwen3-0.6B config.json.
QWEN3_06B_KEYS = [
    "architectures", "attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "head_dim",
    "hidden_act", "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings",
    "max_window_layers", "model_type", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
    "rms_norm_eps", "rope_scaling", "rope_theta", "sliding_window", "tie_word_embeddings", "torch_dtype",
    "transformers_version", "use_cache", "use_sliding_window", "vocab_size",
]


def test_list_models_is_sorted_and_has_the_sourced_models():
    ids = list_models()
    assert ids == sorted(ids)
    assert {QWEN3_06B, "Qwen/Qwen3-8B", "Qwen/Qwen2.5-0.5B-Instruct"} <= set(ids)


def test_qwen3_06b_published_config_values():
    entry = get(QWEN3_06B)
    c = entry.config
    assert entry.id == QWEN3_06B
    assert entry.revision == QWEN3_06B_REV
    assert list(c) == QWEN3_06B_KEYS
    assert c["architectures"] == ["Qwen3ForCausalLM"]
    assert c["model_type"] == "qwen3"
    assert (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"]) == (1024, 28, 16, 8)
    assert (c["head_dim"], c["intermediate_size"], c["vocab_size"]) == (128, 3072, 151936)
    assert c["rms_norm_eps"] == 1e-6
    assert c["tie_word_embeddings"] is True
    assert c["rope_theta"] == 1000000
    assert c["max_position_embeddings"] == 40960
    assert c["torch_dtype"] == "bfloat16"
    assert (c["bos_token_id"], c["eos_token_id"]) == (151643, 151645)
    g = entry.generation_config
    assert g["eos_token_id"] == [151645, 151643]
    assert (g["pad_token_id"], g["temperature"], g["top_k"], g["top_p"]) == (151643, 0.6, 20, 0.95)
    assert entry.source.config_url.endswith(f"/Qwen/Qwen3-0.6B/blob/{QWEN3_06B_REV}/config.json")


@pytest.mark.parametrize("model_id", [m for m in list_models() if get(m).package is None])
def test_published_byte_sizes_match_our_copy(model_id):
    """Re-serialising our copy in the publisher's formatting reproduces the published file size (a hub entry's; a
    packaged entry's config is its conversion's, tests/models/test_real.py)."""
    entry = get(model_id)
    checks = [
        ("config", entry.config, entry.source.config_json_bytes),
        ("generation_config", entry.generation_config, entry.source.generation_config_json_bytes),
    ]
    checked = 0
    for name, data, published in checks:
        if published is None:
            continue
        sizes = {len(json.dumps(data, indent=indent)) + newline for indent in (2, 4) for newline in (0, 1)}
        assert published in sizes, f"{model_id} {name}: published {published} bytes, ours {sorted(sizes)}"
        checked += 1
    assert checked >= 1


def test_unknown_model_lists_known_ids_and_does_not_fuzzy_match():
    with pytest.raises(InputError) as excinfo:
        get("Qwen/Qwen3-0.6b")  # case differs: no fuzzy matching
    message = str(excinfo.value)
    assert "unknown model 'Qwen/Qwen3-0.6b'" in message
    for known in list_models():
        assert known in message


def _entry_dict(**changes) -> dict:
    data = json.loads(get(QWEN3_06B).model_dump_json())
    for key, value in changes.items():
        data[key] = value
    return data


def test_catalog_entry_rejects_an_eos_id_outside_the_added_tokens():
    data = _entry_dict()
    data["generation_config"]["eos_token_id"] = [151645, 5]
    with pytest.raises(ValueError, match="generation_config.eos_token_id = 5"):
        CatalogEntry.model_validate(data)


def test_catalog_entry_rejects_a_non_sha_revision_and_unknown_keys():
    with pytest.raises(ValueError, match="40-hex"):
        CatalogEntry.model_validate(_entry_dict(revision="main"))
    with pytest.raises(ValueError, match="Extra inputs"):
        CatalogEntry.model_validate(_entry_dict(notes="not a field"))


def test_catalog_entry_rejects_non_contiguous_added_tokens():
    data = _entry_dict()
    data["tokenizer"]["added_tokens"][1]["id"] = 151700
    with pytest.raises(ValueError, match="contiguous"):
        CatalogEntry.model_validate(data)


def test_load_model_config_from_catalog_id_is_a_copy():
    config, model_id, revision, source = load_model_config(QWEN3_06B)
    assert (model_id, revision) == (QWEN3_06B, QWEN3_06B_REV)
    assert config == get(QWEN3_06B).config
    assert source.startswith("https://huggingface.co/Qwen/Qwen3-0.6B/")
    config["hidden_size"] = 1
    assert get(QWEN3_06B).config["hidden_size"] == 1024


def test_load_model_config_from_file_and_directory(tmp_path: Path):
    published = get("Qwen/Qwen3-8B").config
    (tmp_path / "config.json").write_text(json.dumps(published))
    for arg in (tmp_path / "config.json", tmp_path, str(tmp_path)):
        config, model_id, revision, source = load_model_config(arg)
        assert config == published
        assert model_id == str(Path(arg))
        assert revision is None
        assert source == f"file:{(tmp_path / 'config.json').resolve()}"


def test_load_model_config_reads_id_and_revision_from_a_hub_cache_snapshot(tmp_path: Path):
    rev = "b968826d9c46dd6066d109eabc6255188de91218"
    snap = tmp_path / "models--Qwen--Qwen3-8B" / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(get("Qwen/Qwen3-8B").config))
    _, model_id, revision, _ = load_model_config(snap)
    assert (model_id, revision) == ("Qwen/Qwen3-8B", rev)


def test_load_model_config_rejects_missing_paths_and_bad_files(tmp_path: Path):
    with pytest.raises(InputError, match="neither an existing path nor a known model"):
        load_model_config(tmp_path / "nope")
    with pytest.raises(InputError, match="without config.json"):
        load_model_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="not a JSON object"):
        load_model_config(tmp_path)


def test_catalog_files_hold_one_model_each_and_nothing_else():
    names = sorted(f.name for f in catalog._catalog_dir().iterdir() if f.name.endswith(".json"))
    assert len(names) == len(list_models())


def test_importing_the_package_loads_no_tokenizer_or_model_library():
    code = (
        "import sys, infercrane.models\n"
        "print(sorted(m for m in ('tokenizers', 'transformers', 'torch', 'vllm', 'aiperf') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"

"""AIPerf 0.12 offline tokenizer loading: the finding, and the hub-cache workaround, run through AIPerf's own loader.

Each case runs ``aiperf.common.tokenizer.Tokenizer.from_pretrained`` in a fresh interpreter, because
huggingface_hub reads HF_HUB_OFFLINE / HF_HUB_CACHE once, at import.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from infercrane.errors import InputError
from infercrane.models import AIPERF_OFFLINE_TOKENIZER_FINDING, aiperf_tokenizer_env

pytest.importorskip("aiperf")

_LOAD = """
import json, sys
from aiperf.common.tokenizer import Tokenizer
try:
    tok = Tokenizer.from_pretrained(sys.argv[1])
except Exception as e:
    cause = e.__cause__
    print(json.dumps({"ok": False, "error": type(e).__name__, "cause": type(cause).__name__ if cause else None,
                      "message": str(e)}))
else:
    hf = tok._tokenizer
    text = "Hello world, the model generates text."
    ids = tok.encode(text)
    print(json.dumps({"ok": True, "len": len(hf), "eos_token_id": hf.eos_token_id,
                      "im_start": hf.convert_tokens_to_ids("<|im_start|>"), "roundtrip": tok.decode(ids) == text}))
"""


def _run_aiperf_loader(name: str, env_overrides: dict[str, str], home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env["HF_HOME"] = str(home)  # an empty cache: nothing can come from a developer's own hub cache
    env.update(env_overrides)
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD, name], env=env, capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    metadata.version("aiperf") != AIPERF_OFFLINE_TOKENIZER_FINDING["affects"].split("==")[1],
    reason="the finding is pinned to the AIPerf version it was observed on",
)
def test_finding_local_directory_is_refused_offline(stand_in_dir: Path, tmp_path: Path):
    result = _run_aiperf_loader(str(stand_in_dir), {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert result["ok"] is False
    assert (result["error"], result["cause"]) == ("TokenizerError", "HFValidationError")
    assert "Repo id must be in the form" in result["message"]


def test_workaround_loads_the_stand_in_by_model_id_offline(stand_in_dir: Path, tmp_path: Path):
    tokenizer_arg, env = aiperf_tokenizer_env(stand_in_dir)
    assert tokenizer_arg == "Qwen/Qwen3-0.6B"
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert Path(env["HF_HUB_CACHE"]) == stand_in_dir / "hf_hub_cache"
    result = _run_aiperf_loader(tokenizer_arg, env, tmp_path)
    assert result == {"ok": True, "len": 151669, "eos_token_id": 151645, "im_start": 151644, "roundtrip": True}


def test_aiperf_tokenizer_env_rejects_dirs_without_a_usable_cache(tmp_path: Path, stand_in_dir: Path):
    with pytest.raises(InputError, match="not a stand-in directory"):
        aiperf_tokenizer_env(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "infercrane_stand_in.json").write_bytes((stand_in_dir / "infercrane_stand_in.json").read_bytes())
    with pytest.raises(InputError, match="hub-cache entry"):
        aiperf_tokenizer_env(broken)


def test_finding_is_written_down():
    assert set(AIPERF_OFFLINE_TOKENIZER_FINDING) >= {"finding", "workaround", "affects"}
    assert AIPERF_OFFLINE_TOKENIZER_FINDING["affects"] == "aiperf==0.12.0"
    assert "snapshot_download" in AIPERF_OFFLINE_TOKENIZER_FINDING["finding"]
    assert "HF_HUB_CACHE" in AIPERF_OFFLINE_TOKENIZER_FINDING["workaround"]


def test_a_converted_real_model_loads_by_model_id_offline(smollm2_converted, tmp_path: Path, monkeypatch):
    """The real model's converted folder gets the stand-in's treatment: a hub-cache entry of its tokenizer files
    (under InferCrane's cache, here a temporary one), which AIPerf's own loader reads offline by the model's id."""
    from infercrane import datafiles
    from infercrane.models import real
    from infercrane.serving.workload import _tokenizer_dir

    monkeypatch.setattr(datafiles, "CACHE_ROOT", str(tmp_path / "cache"))
    folder = smollm2_converted.path
    tokenizer_arg, env = _tokenizer_dir(str(folder))
    assert tokenizer_arg == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert Path(env["HF_HUB_CACHE"]).is_relative_to(tmp_path / "cache" / "hub")
    result = _run_aiperf_loader(tokenizer_arg, env, tmp_path / "home")
    assert result["ok"] is True, result
    assert result["roundtrip"] is True and result["len"] == 49152
    # made once: a second call finds the entry intact and returns the same
    assert real.aiperf_tokenizer_env(folder) == (tokenizer_arg, env)


def test_a_real_model_tokenizer_that_is_not_its_markers_is_refused(smollm2_converted, tmp_path: Path, monkeypatch):
    import shutil

    from infercrane import datafiles
    from infercrane.models import real

    monkeypatch.setattr(datafiles, "CACHE_ROOT", str(tmp_path / "cache"))
    copy = tmp_path / "copy"
    shutil.copytree(smollm2_converted.path, copy)
    (copy / "tokenizer_config.json").write_text("{}\n")
    with pytest.raises(InputError, match="sha256 differs"):
        real.aiperf_tokenizer_env(copy)
    with pytest.raises(InputError, match="not a converted model folder"):
        real.aiperf_tokenizer_env(tmp_path)

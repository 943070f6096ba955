"""Fixtures of the serving tests: a model stand-in (tokenizer for AIPerf), test-server recipes, a raw test server."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from infercrane.serving.recipes import RECIPE_SCHEMA_VERSION, Recipe

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def stand_in_dir(tmp_path_factory) -> Path:
    """A Qwen3-0.6B stand-in (config + locally trained tokenizer); a tiny byte-level BPE if that is unavailable."""
    out = tmp_path_factory.mktemp("standin") / "qwen3-0.6b"
    try:
        from infercrane.models.standin import write_stand_in
    except ImportError:
        return _tiny_tokenizer_dir(out)
    write_stand_in("Qwen/Qwen3-0.6B", out)
    return out


def _tiny_tokenizer_dir(out: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 20, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(out)
    (out / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 400}))
    return out


@pytest.fixture
def offline_env(monkeypatch):
    """No hub access from drivers: the stand-in's own env sets what AIPerf needs."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)


def _testserver_recipe(*args: str, name: str = "ts", model: str = "infercrane-test-model") -> Recipe:
    return Recipe(schema_version=RECIPE_SCHEMA_VERSION, name=name, engine="testserver", model=model,
                  engine_args=list(args))


@pytest.fixture
def ts_recipe():
    """Factory: a test-server recipe with the given server flags (``ts_recipe("--ttft-ms", "40")``)."""
    return _testserver_recipe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RawServer:
    """The test server as a plain subprocess (no Engine), for testing the server itself."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "infercrane.serving.testserver", "--port", str(self.port),
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"test server exited: {self.proc.stdout.read().decode()}") from None
                time.sleep(0.05)
        self.close()
        raise RuntimeError("test server did not start within 20 s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
        self.proc.wait(timeout=10)


@pytest.fixture
def raw_server():
    servers: list[RawServer] = []

    def start(*args: str) -> RawServer:
        servers.append(RawServer(*args))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture(scope="module")
def module_raw_server():
    """``raw_server`` for servers that a module's tests share: each distinct argument list is started once, on first
    use, and every one is stopped after the module's last test."""
    servers: dict[tuple[str, ...], RawServer] = {}

    def start(*args: str) -> RawServer:
        if args not in servers:
            servers[args] = RawServer(*args)
        return servers[args]

    yield start
    for s in servers.values():
        s.close()

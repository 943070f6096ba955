"""Recipes: the shipped ones load and hash stably; bad ones fail early, naming the field or flag."""
from __future__ import annotations

from pathlib import Path

import pytest

from infercrane.errors import InputError, UnavailableError
from infercrane.serving.engine_kinds import ENGINE_KINDS
from infercrane.serving.recipes import (ENGINE_NAMES, RECIPE_SCHEMA_VERSION, Recipe, check_recipe, load_recipe,
                                        parse_help_flags, shipped_recipes)

DATA = Path(__file__).resolve().parent / "data"
VLLM_HELP = (DATA / "vllm_serve_help_0.22.1_h200.txt").read_text()


def vllm_recipe(tmp_path: Path | None = None, **kw) -> Recipe:
    data = dict(schema_version=RECIPE_SCHEMA_VERSION, name="r", engine="vllm", model="Qwen/Qwen3-0.6B")
    data.update(kw)
    return Recipe(**data)


def test_seed_recipes_ship_and_load():
    assert {"eager", "compiled", "balanced", "throughput", "testserver"} <= set(shipped_recipes())
    eager = load_recipe("eager")
    assert eager.engine == "vllm" and eager.engine_args == ["--enforce-eager"]
    assert load_recipe("compiled").engine_args == []
    assert load_recipe("balanced").engine_args == ["--performance-mode", "balanced"]
    assert load_recipe("throughput").engine_args == ["--performance-mode", "throughput"]
    for name in ("eager", "compiled", "balanced", "throughput"):
        r = load_recipe(name)
        assert r.name == name
        assert r.env == {"VLLM_USE_DEEP_GEMM": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
        issues = [w.upstream_issue for w in r.workarounds]
        assert "https://github.com/vllm-project/vllm/issues/41849" in issues
        check_recipe(r, help_text=VLLM_HELP)  # every shipped vLLM flag is one vLLM lists


def test_hash_is_stable_and_content_addressed():
    a, b = load_recipe("eager"), load_recipe("eager")
    assert a.sha256 == b.sha256 == a.computed_sha256()
    assert len(a.sha256) == 64
    assert load_recipe("compiled").sha256 != a.sha256
    # the hash covers the content, not the file's formatting
    same = Recipe.model_validate({**a.model_dump(mode="json"), "sha256": None})
    assert same.computed_sha256() == a.sha256
    changed = a.with_overrides(env={"VLLM_USE_DEEP_GEMM": "1"})
    assert changed.sha256 != a.sha256 and changed.env["VLLM_USE_DEEP_GEMM"] == "1"


def test_recorded_hash_must_match(tmp_path):
    good = load_recipe("eager")
    data = {**good.model_dump(mode="json"), "engine_args": ["--enforce-eager", "--seed", "1"]}
    with pytest.raises(ValueError, match="was edited after its hash was recorded"):
        Recipe.model_validate(data)


def test_local_model_paths_resolve_to_absolute(tmp_path, monkeypatch):
    model = tmp_path / "m"
    model.mkdir()
    monkeypatch.chdir(tmp_path)
    r = vllm_recipe(model="./m").resolved()
    assert r.model == str(model.resolve())
    assert vllm_recipe(model="./m").computed_sha256() == r.sha256


def test_engine_args_mapping_form():
    r = vllm_recipe(engine_args={"enforce-eager": True, "performance-mode": "throughput",
                                 "gpu-memory-utilization": 0.8, "--seed": 3, "enable-prefix-caching": False})
    assert r.engine_args == ["--enforce-eager", "--performance-mode", "throughput", "--gpu-memory-utilization",
                             "0.8", "--seed", "3", "--no-enable-prefix-caching"]


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "recipe.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("body, field", [
    ("schema_version: infercrane.serving-recipe/v1\nname: x\nengine: sglang\nmodel: m\n", "engine"),
    ("schema_version: infercrane.serving-recipe/v2\nname: x\nengine: vllm\nmodel: m\n", "schema_version"),
    ("name: x\nengine: vllm\nmodel: m\n", "schema_version"),
    ("schema_version: infercrane.serving-recipe/v1\nname: x\nengine: vllm\nmodel: m\nflags: [1]\n", "flags"),
    ("schema_version: infercrane.serving-recipe/v1\nname: X Y\nengine: vllm\nmodel: m\n", "name"),
    ("schema_version: infercrane.serving-recipe/v1\nname: x\nengine: vllm\nmodel: m\nenv: {'1BAD': x}\n", "env"),
    ("schema_version: infercrane.serving-recipe/v1\nname: x\nengine: vllm\nmodel: m\n"
     "engine_args: ['--port', '9']\n", "engine_args"),
    ("schema_version: infercrane.serving-recipe/v1\nname: x\nengine: vllm\nmodel: m\n"
     "engine_args: ['--model=other']\n", "engine_args"),
    ("schema_version: infercrane.serving-recipe/v1\nname: x\nengine: vllm\nmodel: m\n"
     "workarounds: [{finding: f}]\n", "workarounds.0.workaround"),
])
def test_bad_recipe_names_the_field(tmp_path, body, field):
    with pytest.raises(InputError) as err:
        load_recipe(write(tmp_path, body))
    assert f"field '{field}'" in str(err.value)


def test_unknown_recipe_name_lists_shipped(tmp_path):
    with pytest.raises(InputError) as err:
        load_recipe("no-such-recipe")
    assert "eager" in str(err.value) and "compiled" in str(err.value)
    with pytest.raises(InputError, match="not valid YAML"):
        load_recipe(write(tmp_path, "name: [unclosed"))


def test_help_parser_reads_flags_and_choices():
    known = parse_help_flags(VLLM_HELP)
    assert {"--enforce-eager", "--no-enforce-eager", "--load-format", "--performance-mode", "-tp",
            "--tensor-parallel-size", "--max-model-len", "-h", "--api-server-count", "-asc"} <= known.flags
    assert known.choices["--performance-mode"] == ("balanced", "interactivity", "throughput")
    # help-text lines that merely start with a dash are not flags
    assert not any(f.startswith("- ") or f == "-" for f in known.flags)
    assert "--model" in known.flags and "-" not in known.flags


@pytest.mark.parametrize("args", [
    ["--enforce-eager"], ["--performance-mode", "throughput"], ["--performance-mode=interactivity"],
    ["--max_model_len", "4096"], ["-O3"], ["-O", "0"], ["--compilation-config.cudagraph_mode", "FULL"],
    ["-tp", "1", "--seed", "-1"],
])
def test_accepted_vllm_args(args):
    check_recipe(vllm_recipe(engine_args=args), help_text=VLLM_HELP)


@pytest.mark.parametrize("args, needle", [
    (["--enforce-eagre"], "--enforce-eagre"),
    (["--performance-mode", "fastest"], "'fastest' is not one of balanced, interactivity, throughput"),
    (["--use-deep-gemm"], "--use-deep-gemm"),
    (["4096"], "is not a flag"),
])
def test_rejected_vllm_args(args, needle):
    with pytest.raises(InputError) as err:
        check_recipe(vllm_recipe(engine_args=args), help_text=VLLM_HELP)
    assert needle in str(err.value)
    assert "recipe 'r'" in str(err.value)


def test_close_match_is_suggested_not_accepted():
    with pytest.raises(InputError) as err:
        check_recipe(vllm_recipe(engine_args=["--enforce-eagre"]), help_text=VLLM_HELP)
    assert "did you mean --enforce-eager" in str(err.value)


def test_missing_model_path(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        check_recipe(vllm_recipe(model=str(tmp_path / "absent")), help_text=VLLM_HELP)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no config.json"):
        check_recipe(vllm_recipe(model=str(empty)), help_text=VLLM_HELP)


def test_stand_in_model_passes_preflight(stand_in_dir):
    check_recipe(vllm_recipe(model=str(stand_in_dir)), help_text=VLLM_HELP)


def test_testserver_recipe_checked_against_its_real_help(ts_recipe):
    check_recipe(ts_recipe("--ttft-ms", "40", "--itl-ms", "5", "--fail-rate", "0.1"))
    with pytest.raises(InputError, match="--ttft"):
        check_recipe(ts_recipe("--ttft", "40"))


def test_vllm_not_installed_is_unavailable(monkeypatch):
    monkeypatch.setattr(type(ENGINE_KINDS["vllm"]), "available", lambda self: (False, "no vllm here"))
    with pytest.raises(UnavailableError, match="no vllm here"):
        check_recipe(load_recipe("eager"))


def test_engine_names_match_registry():
    assert tuple(ENGINE_KINDS) == ENGINE_NAMES


def test_help_parser_on_argparse_generated_help():
    import argparse

    p = argparse.ArgumentParser(prog="vllm serve")
    g = p.add_argument_group("ModelConfig", "Configuration for the model.\n- a bullet line in a description")
    g.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=False, help="eager " * 30)
    g.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    g.add_argument("--performance-mode", choices=["balanced", "interactivity", "throughput"], default="balanced")
    g.add_argument("--a-very-long-option-name-that-wraps-the-help", metavar="A_VERY_LONG_METAVAR_VALUE")
    g.add_argument("--served-model-name", nargs="+")
    known = parse_help_flags(p.format_help())
    assert known.flags == {"-h", "--help", "--enforce-eager", "--no-enforce-eager", "--tensor-parallel-size", "-tp",
                           "--performance-mode", "--a-very-long-option-name-that-wraps-the-help",
                           "--served-model-name"}
    assert known.choices == {"--performance-mode": ("balanced", "interactivity", "throughput")}


def test_help_parser_python313_layout():
    # Python 3.13 argparse prints the metavar (here: the choices) once, after the last alias
    known = parse_help_flags("options:\n  --performance-mode, -pm {balanced,throughput}\n                        help\n")
    assert known.choices == {"--performance-mode": ("balanced", "throughput"), "-pm": ("balanced", "throughput")}


def test_an_engines_flags_asked_ahead_are_asked_once_and_its_failure_is_raised_where_they_are_needed(monkeypatch):
    import threading

    from infercrane.errors import RunFailed
    from infercrane.serving import engine_kinds, recipes

    asked: list[str] = []
    released = threading.Event()

    class Kind:
        def __init__(self, name, fails=False):
            self.name, self.fails = name, fails

        def available(self):
            return (self.name != "absent", "not installed")

        def help_text(self):
            asked.append(self.name)
            released.wait(5)
            if self.fails:
                raise RunFailed("`fake serve --help=all` exited with 1")
            return VLLM_HELP

    monkeypatch.setattr(engine_kinds, "get_engine_kind", lambda name: Kind(name, fails=name == "broken"))
    monkeypatch.setattr(recipes, "_HELP_AHEAD", {})
    recipes._cached_help_flags.cache_clear()
    try:
        for name in ("fake", "broken", "absent"):
            recipes.ask_help_ahead(name)
        recipes.ask_help_ahead("fake")  # asked once however often it is asked ahead
        assert "absent" not in recipes._HELP_AHEAD  # not installed: left to check_recipe, which says so
        released.set()
        assert "--enforce-eager" in recipes._cached_help_flags("fake").flags  # the answer asked ahead, parsed
        assert recipes._cached_help_flags("fake") is recipes._cached_help_flags("fake")
        with pytest.raises(RunFailed, match="exited with 1"):
            recipes._cached_help_flags("broken")
        assert sorted(asked) == ["broken", "fake"]
    finally:
        recipes._cached_help_flags.cache_clear()

"""Every option of every command, fed a bad value of its type, exits 2 with one line naming the flag, before any work.

The commands and their options are read from the cyclopts app itself, so a new command or option is covered without
editing this file. The bad value follows from the option's type: a non-number for numbers (and a value past each
bound the option declares), an unknown choice for a closed set, an unknown name for a string (no model, workload,
recipe, schema version, operator or implementation is called ``no/such-thing``), and for a path one under a regular
file (it can neither be read nor created). Flags (booleans) have no bad value. Commands run in-process; the kernel
screen and the serving plan are replaced by tripwires, so no screening or engine can start.

Then the messages that must point the right way, each one line naming what to change: a directory where a recipe,
workload, PoC config or policy file goes; ``serve decide`` on a kernel receipt; a model config value that is not a
number; suggested command lines with their paths shell-quoted; a FIFO or a 10 GB sparse file as a receipt (in a
process of its own, with a time limit, so that a reader that waits fails instead of hanging the suite).
"""
from __future__ import annotations

import json
import os
import shlex
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest

from evidence import archived

from infercrane.cli import app, main

REPO = Path(__file__).resolve().parents[1]
SEED_SCREENING = REPO / "examples" / "receipts" / "cuda-kernel-screening-v1.seed.json"
FORBIDDEN = ("Traceback", "pydantic", "validation error", "errors.pydantic.dev", "input_value",
             "For further information")
BAD_NAME = "no/such-thing"
# Valid values for required positionals, by their name in the usage line (a new one must be added here).
POSITIONALS = {"RECIPE_A": "eager", "RECIPE_B": "compiled", "RECIPE": "eager", "MODEL": "Qwen/Qwen3-0.6B"}


def _commands(a: Any = app, chain: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name in a:
        if name.startswith("-"):  # --help, --version
            continue
        out.extend(_commands(a[name], (*chain, name)))
    if chain and a.default_command is not None:
        out.append(chain)
    return out


def _app_of(chain: tuple[str, ...]) -> Any:
    a = app
    for name in chain:
        a = a[name]
    return a


def _arguments(chain: tuple[str, ...]) -> list[Any]:
    """The command's leaf arguments (options and positionals), not the option models that hold them."""
    return [x for x in _app_of(chain).assemble_argument_collection()
            if not x.children and x.parameter.parse is not False]


def _shape(annotation: Any) -> tuple[Any, dict[str, float], bool]:
    """(base type, bounds, is_list) of an annotation: Optional, Annotated and tuple[...] unwrapped."""
    bounds: dict[str, float] = {}
    is_list = False
    hint = annotation
    while True:
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            base, *meta = typing.get_args(hint)
            for m in meta:
                for attr, key in (("gt", "gt"), ("ge", "ge"), ("gte", "ge"), ("lt", "lt"), ("le", "le"), ("lte", "le")):
                    v = getattr(m, attr, None)
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        bounds[key] = v
            hint = base
        elif origin in (typing.Union, types.UnionType):
            args = [x for x in typing.get_args(hint) if x is not type(None)]
            hint = args[0] if len(args) == 1 else hint
            if len(args) != 1:
                return hint, bounds, is_list
        elif origin in (tuple, list):
            is_list = True
            hint = typing.get_args(hint)[0]
        else:
            return hint, bounds, is_list


def _bad_values(argument: Any, a_file: Path) -> list[str]:
    base, bounds, is_list = _shape(argument.field_info.annotation)
    for v in argument.parameter.validator or ():  # cyclopts Number(gt=…) on a plain function parameter
        for attr, key in (("gt", "gt"), ("gte", "ge"), ("lt", "lt"), ("lte", "le")):
            if isinstance(getattr(v, attr, None), (int, float)):
                bounds[key] = getattr(v, attr)
    if base is bool:
        return []
    if typing.get_origin(base) is Literal:
        return ["no-such-choice"]
    if base in (int, float):
        bad = ["abc"]
        step = 1 if base is int else 0.5
        if "gt" in bounds:
            bad.append(str(bounds["gt"]))
        if "ge" in bounds:
            bad.append(str(bounds["ge"] - step))
        if "lt" in bounds:
            bad.append(str(bounds["lt"]))
        if "le" in bounds:
            bad.append(str(bounds["le"] + step))
        if is_list:
            bad.append(f"1,{bad[0]}")  # a bad item after a good one, comma form
        return bad
    if base is str:
        return [BAD_NAME]
    if isinstance(base, type) and issubclass(base, Path):
        return [str(a_file / "x.json")]
    raise AssertionError(f"{argument.name}: no bad value known for {base!r}; teach _bad_values this type")


def _is_positional(argument: Any) -> bool:
    return not argument.name.startswith("-")


def _base_args(chain: tuple[str, ...], tmp_path: Path, skip: str) -> list[str]:
    """Valid values for the command's required arguments other than ``skip``."""
    args: list[str] = []
    for x in _arguments(chain):
        if x.name == skip or not x.required:
            continue
        base, _, _ = _shape(x.field_info.annotation)
        if x.name in ("--key", "--pub"):  # a real signing key pair
            from infercrane.receipts.signing import keygen

            keys = tmp_path / "keys"
            if not (keys / "infercrane.key").exists():
                keygen(keys)
            value = str(keys / ("infercrane.key" if x.name == "--key" else "infercrane.pub"))
        elif x.name == "--rules":  # the gate's rules: the shipped example
            value = "release-example"
        elif isinstance(base, type) and issubclass(base, Path):
            value = str(tmp_path / "out" / "written.json") if x.name == "--out" else str(SEED_SCREENING)
        elif _is_positional(x):
            assert x.name in POSITIONALS, f"{' '.join(chain)}: add a valid value for {x.name} to POSITIONALS"
            value = POSITIONALS[x.name]
        else:
            raise AssertionError(f"{' '.join(chain)} {x.name}: required option of unknown kind")
        args += [value] if _is_positional(x) else [x.name, value]
    return args


def _cases() -> list[Any]:
    cases = []
    for chain in _commands():
        for x in _arguments(chain):
            base, _, _ = _shape(x.field_info.annotation)
            if base is bool:
                continue
            cases.append(pytest.param(chain, x.name, id=f"{' '.join(chain)} {x.name}"))
    return cases


@pytest.fixture
def tripwires(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input must be refused before any screening or serving: reaching either fails the test."""
    import infercrane.kernels.harness.runner as runner
    import infercrane.serving.workload as workload

    def screen(*a: Any, **k: Any) -> Any:
        raise AssertionError("a kernel screen started on bad input")

    def run_plan(*a: Any, **k: Any) -> Any:
        raise AssertionError("a serving plan started on bad input")

    monkeypatch.setattr(runner, "screen", screen)
    monkeypatch.setattr(workload, "run_plan", run_plan)


def test_every_command_is_walked() -> None:
    commands = {" ".join(c) for c in _commands()}
    assert {"kernel screen", "kernel list", "kernel decide", "serve ab", "serve bench", "receipt schema",
            "model stand-in"} <= commands


@pytest.mark.parametrize("chain, name", _cases())
def test_bad_value_exits_2_naming_the_flag(chain: tuple[str, ...], name: str, tmp_path: Path, capsys,
                                           tripwires: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # default output paths (runs/…) land here
    a_file = tmp_path / "a-file"
    a_file.write_text("a regular file\n")
    argument = next(x for x in _arguments(chain) if x.name == name)
    base = _base_args(chain, tmp_path, skip=name)
    for bad in _bad_values(argument, a_file):
        argv = [*chain, *base, *([bad] if _is_positional(argument) else [name, bad])]
        rc = main(argv)
        captured = capsys.readouterr()
        text = captured.out + captured.err
        assert rc == 2, f"{argv}: exit {rc}\n{text}"
        needle = bad if _is_positional(argument) else name
        assert needle in text, f"{argv}: the output does not name {needle}\n{text}"
        for word in FORBIDDEN:
            assert word not in text, f"{argv}: {word!r} in the output\n{text}"
        assert all(line.startswith("infercrane: error: ") or line.startswith("INVALID ") or " invalid" in line
                   for line in text.strip().splitlines()), f"{argv}: not one line per problem\n{text}"


def test_help_shows_no_negative_twins(capsys) -> None:
    for chain in _commands():
        assert main([*chain, "--help"]) == 0
        text = capsys.readouterr().out
        assert "--empty-" not in text and "--no-" not in text, f"{' '.join(chain)} --help:\n{text}"



# -- messages that point the right way: one line each, naming what the user can change ------------------------------
def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert not captured.out.strip() and len(lines) == 1 and lines[0].startswith("infercrane: error: "), captured
    for word in FORBIDDEN:
        assert word not in lines[0]
    return lines[0].removeprefix("infercrane: error: ")


@pytest.mark.parametrize("argv, what", [
    (["serve", "ab", "{dir}", "compiled", "--workload", "seed-paired"], "{dir}: is a directory, not a recipe file"),
    (["serve", "ab", "eager", "compiled", "--workload", "{dir}"], "--workload: {dir}: is a directory, not a workload "
                                                                  "file"),
    (["serve", "bench", "eager", "--workload", "{dir}.yaml"], "--workload: {dir}.yaml: is a directory, not a "
                                                              "workload file"),
    (["poc", "{dir}"], "{dir}: is a directory, not a PoC config file"),
    (["serve", "ab", "eager", "compiled", "--policy", "{dir}"], "--policy: {dir}: is a directory, not a policy file"),
])
def test_a_directory_where_a_file_goes_says_so(argv: list[str], what: str, tmp_path: Path, capsys,
                                               tripwires: None) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    (tmp_path / "recipes.yaml").mkdir()
    assert main([a.format(dir=folder) for a in argv]) == 2
    line = _one_error(capsys)
    assert line.startswith(what.format(dir=folder)) and "does not exist" not in line, line
    assert "give the path of a .yaml file" in line


def test_serve_decide_on_a_kernel_receipt_names_the_command_that_decides_it(tmp_path: Path, capsys) -> None:
    kernel = tmp_path / "my screens" / "kernel it's.json"  # a space and a quote: the suggested command quotes them
    kernel.parent.mkdir()
    committed = archived("2026-12-01-h200-kernel-in-vllm/evidence-compiled-triton.tar.xz/apply/kernel.json")
    kernel.write_bytes(committed.read_bytes())
    assert main(["serve", "decide", str(kernel), "--out", str(tmp_path / "new.json")]) == 2
    line = _one_error(capsys)
    assert line.startswith(f"{kernel}: a kernel screening receipt (infercrane.cuda-kernel-screening-receipt/v3), "
                           "not a serving receipt"), line
    assert "incomplete" not in line
    assert f" kernel decide {shlex.quote(str(kernel))} --out NEW.json`" in line, line


def test_a_bad_model_config_value_names_its_field(tmp_path: Path, capsys, tripwires: None) -> None:
    from infercrane.models.catalog import get

    model = tmp_path / "model"
    model.mkdir()
    config = dict(get("Qwen/Qwen3-0.6B").config, hidden_size="abc")
    (model / "config.json").write_text(json.dumps(config))
    assert main(["kernel", "screen", "--device", "cpu", "--model", str(model), "--rows", "1", "--impls",
                 "eager,triton", "--out", str(tmp_path / "k.json")]) == 2
    line = _one_error(capsys)
    assert line == f"--model {model}: model config field 'hidden_size' is 'abc'; give a positive whole number", line


def test_a_suggested_validate_command_quotes_the_path(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "two words" / "r.json"
    bad.parent.mkdir()
    bad.write_text('{"schema_version": 1}')
    assert main(["export", str(bad), "--format", "json"]) == 2
    line = _one_error(capsys)
    assert line.endswith(f" receipt validate {shlex.quote(str(bad))}` lists every problem"), line


@pytest.mark.slow
def test_the_suggested_receipt_show_quotes_the_path(tmp_path: Path, capsys) -> None:
    out = tmp_path / "a folder" / "it's here.json"
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager,triton", "--checks", "1",
                 "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the console may fold the line
    assert f" receipt show {shlex.quote(str(out))})" in text, text


def _cli(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """``python -m infercrane ARGS`` in a process of its own with a time limit: a regression that waits on a FIFO
    fails instead of hanging the suite."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "infercrane", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_a_fifo_or_a_10_gb_sparse_file_as_a_receipt_is_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    rc, out, err = _cli("receipt", "show", str(fifo))
    assert rc == 2 and err.strip() == f"infercrane: error: {fifo}: is a FIFO (named pipe), not a regular file; a " \
                                      "receipt is read from a regular file" and not out.strip()
    sparse = tmp_path / "big.json"
    with open(sparse, "wb") as f:
        os.truncate(f.fileno(), 10 * 1024**3)
    rc, out, err = _cli("receipt", "validate", str(fifo), str(sparse))
    assert rc == 2 and not err.strip()
    assert out.strip().splitlines() == [
        f"INVALID {fifo}: is a FIFO (named pipe), not a regular file; a receipt is read from a regular file",
        f"INVALID {sparse}: 10 GiB, more than the 64 MiB a receipt may have", "2 of 2 receipt(s) invalid"]

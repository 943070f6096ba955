"""Serving recipes: named, hashed files that say how to launch one engine.

A recipe is data (``recipes/*.yaml`` beside this file, or any YAML file): which engine, which model,
which engine CLI arguments and environment, and which workarounds it carries and why. Layering:
recipe file -> overrides (``Recipe.with_overrides``) -> a frozen, resolved ``Recipe`` whose
``sha256`` (of its canonical JSON form, local model paths made absolute) goes into the receipt.

``check_recipe`` is the preflight: it fails before any GPU time is spent when the engine is not
installed, when an engine argument is not one the installed engine accepts (parsed from the engine's
own ``--help`` output, once per process), or when a local model path does not exist.

Environment that changes *which* program or libraries the engine runs rather than how it runs (``PROGRAM_ENV_VARS``:
``PYTHONPATH``, ``PATH``, ``LD_PRELOAD``, ...) is refused in a recipe's ``env`` unless the recipe says
``allow_program_env: true``: a recipe that puts another vLLM on ``PYTHONPATH`` compares another program, and must say
so. Either way the engine records those variables with their values (``EngineLifetime.program_env``), whether the recipe
set them or InferCrane's own environment passed them on.
"""
from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from infercrane.errors import InputError, UnavailableError

RECIPE_SCHEMA_VERSION = "infercrane.serving-recipe/v1"
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"

EngineName = Literal["vllm", "testserver"]
ENGINE_NAMES: tuple[str, ...] = get_args(EngineName)

# Flags InferCrane sets itself on every engine command line (the model from the recipe's ``model``
# field); a recipe may not set them.
RESERVED_FLAGS = frozenset({"--host", "--port", "--model"})

# Variables that change which program or libraries run: which interpreter and packages (PATH, PYTHON*, VIRTUAL_ENV,
# CONDA_PREFIX) and which shared libraries the dynamic loader maps (LD_*, and macOS's DYLD_*).
PROGRAM_ENV_VARS: tuple[str, ...] = (
    "PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH",
    "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
    "DYLD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "DYLD_FRAMEWORK_PATH",
)

_NAME_RE = r"^[a-z0-9][a-z0-9._-]*$"
_ENV_KEY_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
_NUMBER_RE = re.compile(r"^-\d+(\.\d+)?$")
_FLAG_RE = re.compile(r"^--?[A-Za-z0-9][\w.-]*$")


def _scalar_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


class Workaround(BaseModel):
    """A known engine problem and what the recipe does about it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    finding: str = Field(min_length=1, description="what goes wrong without the workaround")
    workaround: str = Field(min_length=1, description="what the recipe sets to avoid it")
    upstream_issue: str | None = Field(default=None, pattern=r"^https://\S+$",
                                       description="link to the engine's issue, when there is one")


class Recipe(BaseModel):
    """How to launch one engine. Frozen; ``sha256`` identifies the resolved recipe in receipts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["infercrane.serving-recipe/v1"]
    name: str = Field(pattern=_NAME_RE, description="short name; shipped recipes are named after their file")
    description: str = Field(default="", description="one line on what this recipe is for")
    engine: EngineName = Field(description="engine kind: 'vllm', or 'testserver' (CI stand-in for vLLM)")
    model: str = Field(min_length=1, description="hub id (owner/name) or local directory (e.g. a stand-in)")
    engine_args: list[str] = Field(
        default_factory=list,
        description="extra engine CLI arguments: a list of tokens, or a mapping flag -> value "
                    "(true: bare flag; false: --no-<flag>)")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables added for the engine")
    allow_program_env: bool = Field(
        default=False, description="let env set variables that change which program or libraries run "
                                   "(PROGRAM_ENV_VARS: PYTHONPATH, PATH, LD_PRELOAD, ...); refused otherwise")
    workarounds: list[Workaround] = Field(default_factory=list)
    kernels: dict[str, Literal["triton", "cuda", "user"]] = Field(
        default_factory=dict,
        description="vLLM IR op -> the kernel that provides it inside the engine (InferCrane's triton or cuda, or "
                    "user: the candidate file); see serving/kernels.py")
    candidate: str | None = Field(default=None, description="PATH.py:FUNCTION, the user kernel of kernels: user")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$",
                               description="optional: if given, must equal the computed hash (a recipe copied "
                                           "from a receipt); computed otherwise")

    @field_validator("engine_args", mode="before")
    @classmethod
    def _args_to_list(cls, value: Any) -> Any:
        if isinstance(value, dict):
            out: list[str] = []
            for key, val in value.items():
                flag = key if str(key).startswith("-") else f"--{key}"
                if val is True:
                    out.append(flag)
                elif val is False:
                    out.append("--no-" + flag.lstrip("-"))
                elif val is None:
                    raise ValueError(f"engine_args.{key}: a value is required (true, false, a number or a string)")
                else:
                    out += [flag, str(_scalar_to_str(val))]
            return out
        if isinstance(value, list):
            return [_scalar_to_str(v) for v in value]
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_to_str(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _scalar_to_str(v) for k, v in value.items()}
        return value

    @field_validator("env")
    @classmethod
    def _env_keys(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not re.match(_ENV_KEY_RE, k)]
        if bad:
            raise ValueError(f"not environment variable names: {bad}")
        return value

    @field_validator("kernels", mode="before")
    @classmethod
    def _kernel_ops(cls, value: Any) -> Any:
        from infercrane.vllm_plugin.selection import vllm_op_of

        if isinstance(value, dict):
            return {vllm_op_of(str(k)): v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _kernels_said(self) -> Recipe:
        users = [op for op, impl in self.kernels.items() if impl == "user"]
        if users and not self.candidate:
            raise ValueError(f"kernels: {users[0]}: user needs candidate: PATH.py:FUNCTION")
        if self.candidate and not users:
            raise ValueError("candidate is the kernel of kernels: <op>: user; no op names user")
        if self.kernels and self.engine != "vllm":
            raise ValueError(f"kernels run inside vLLM (vLLM IR ops); this recipe's engine is {self.engine}")
        return self

    @model_validator(mode="after")
    def _program_env_said(self) -> Recipe:
        changing = [k for k in self.env if k in PROGRAM_ENV_VARS]
        if changing and not self.allow_program_env:
            raise ValueError(
                f"env sets {', '.join(changing)}, which changes which program or libraries the engine runs, not only "
                "how it runs; if that is the point of the recipe, say allow_program_env: true (the values are "
                "recorded in the receipt and printed at every engine start), otherwise remove "
                f"{'it' if len(changing) == 1 else 'them'}")
        return self

    @field_validator("engine_args")
    @classmethod
    def _no_reserved_flags(cls, value: list[str]) -> list[str]:
        for token in value:
            flag = token.split("=", 1)[0]
            if flag in RESERVED_FLAGS:
                raise ValueError(f"{flag} is set by InferCrane on every engine command line; remove it")
        return value

    @model_validator(mode="after")
    def _hash_matches(self) -> Recipe:
        if self.sha256 is not None and self.sha256 != self.computed_sha256():
            raise ValueError(
                f"sha256 {self.sha256} does not match the recipe's content ({self.computed_sha256()}); "
                "the recipe was edited after its hash was recorded: drop the sha256 key or restore the recipe")
        return self

    # -- identity -----------------------------------------------------------------------------
    def model_is_local(self) -> bool:
        """True when ``model`` names a local directory rather than a hub id.

        Rule: a path that starts with '/', '.', or '~', or that exists, is local; anything else is a hub id.
        """
        m = self.model
        return m.startswith(("/", ".", "~")) or Path(m).expanduser().exists()

    def resolved_model(self) -> str:
        """The model as the engine receives it: local paths absolute, hub ids unchanged."""
        if self.model_is_local():
            return str(Path(self.model).expanduser().resolve())
        return self.model

    def canonical(self) -> dict[str, Any]:
        """The resolved recipe as plain data (the hash input): everything but ``sha256``."""
        data = self.model_dump(mode="json", exclude={"sha256"})
        data["model"] = self.resolved_model()
        # absent when unused: recipes hashed before these fields existed keep their hash
        for key, unused in (("allow_program_env", False), ("kernels", {}), ("candidate", None)):
            if data[key] == unused:
                del data[key]
        if self.candidate:  # the file, not the spelling, is the recipe's: absolute
            path, fn = self.candidate.rsplit(":", 1)
            data["candidate"] = f"{Path(path).expanduser().resolve()}:{fn}"
        return data

    def computed_sha256(self) -> str:
        from infercrane.hashing import config_hash

        return config_hash(self.canonical())

    def resolved(self) -> Recipe:
        """This recipe with the model path made absolute and ``sha256`` filled in."""
        data = self.canonical()
        data["sha256"] = self.computed_sha256()
        return Recipe.model_validate(data)

    def with_overrides(self, *, model: str | None = None, engine_args: list[str] | None = None,
                       env: dict[str, str] | None = None, name: str | None = None) -> Recipe:
        """A new resolved recipe: ``model``/``name`` replace, ``engine_args`` append, ``env`` merges."""
        data = self.model_dump(mode="json", exclude={"sha256"})
        if model is not None:
            data["model"] = model
        if name is not None:
            data["name"] = name
        if engine_args:
            data["engine_args"] = [*data["engine_args"], *engine_args]
        if env:
            data["env"] = {**data["env"], **env}
        return _validate(data, source="overrides").resolved()


# -- loading ------------------------------------------------------------------------------------
def shipped_recipes() -> list[str]:
    """Names of the recipes that ship with InferCrane, sorted."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def _validate(data: Any, *, source: str) -> Recipe:
    from infercrane import datafiles

    if not isinstance(data, dict):
        raise InputError(f"recipe {source}: expected a mapping of fields, got {type(data).__name__}",
                         hint="see infercrane/serving/recipes/eager.yaml for the shape of a recipe")
    return datafiles.validate(Recipe, data, what="recipe", source=source,
                              hint=f"fix the named field(s); schema_version must be {RECIPE_SCHEMA_VERSION!r}")


def load_recipe(name_or_path: str | Path) -> Recipe:
    """Load a recipe from a YAML file path, or a shipped recipe by name; returns it resolved."""
    from infercrane import datafiles

    return datafiles.load(Recipe, name_or_path, RECIPES_DIR, kind=datafiles.RECIPE,
                          hint=f"fix the named field(s); schema_version must be {RECIPE_SCHEMA_VERSION!r}").resolved()


# -- preflight ----------------------------------------------------------------------------------
class EngineFlags(BaseModel):
    """Flags an engine's ``--help`` lists, with the allowed values of those that have choices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flags: frozenset[str]
    choices: dict[str, tuple[str, ...]]


_INVOCATION_RE = re.compile(r"^ {1,6}(-\S.*?)(?: {2,}\S.*)?$")


def parse_help_flags(help_text: str) -> EngineFlags:
    """Collect option strings (and ``{a,b}`` choices) from argparse-style ``--help`` output.

    Reads lines indented by at most 6 spaces that start with '-': argparse prints each option's
    invocation there (``  --enforce-eager, --no-enforce-eager`` or ``  -O OPT, --optimization-level OPT``
    or ``  --performance-mode {balanced,interactivity,throughput}``); help text is indented further.
    """
    flags: set[str] = set()
    choices: dict[str, tuple[str, ...]] = {}
    for line in help_text.splitlines():
        m = _INVOCATION_RE.match(line.rstrip())
        if not m:
            continue
        line_flags: list[str] = []
        line_choices: tuple[str, ...] | None = None
        for part in m.group(1).split(", "):
            tokens = part.split()
            if not tokens or not _FLAG_RE.match(tokens[0]):
                continue
            line_flags.append(tokens[0])
            cm = re.match(r"^\{([^{}]*)\}", " ".join(tokens[1:]))
            if cm:  # Python >= 3.13 prints the metavar once, after the last alias
                line_choices = tuple(c.strip() for c in cm.group(1).split(","))
        flags.update(line_flags)
        if line_choices is not None:
            choices.update({f: line_choices for f in line_flags})
    return EngineFlags(flags=frozenset(flags), choices=choices)


def check_engine_args(args: list[str], known: EngineFlags, *, engine: str, underscores_ok: bool = False,
                      short_aliases: dict[str, str] | None = None) -> None:
    """Raise InputError naming the first argument the engine's help does not list (or a bad choice).

    ``underscores_ok``: ``--max_model_len`` means ``--max-model-len``. ``short_aliases``: short options
    the engine rewrites before parsing, so its help does not list them (vLLM: ``-O3`` ->
    ``--optimization-level 3``).
    """
    i = 0
    args = list(args)
    while i < len(args):
        token = args[i]
        for short, long in (short_aliases or {}).items():
            if token == short:
                args[i] = token = long
            elif token.startswith(short) and not token.startswith("--"):
                args[i:i + 1] = [long, token[len(short):].lstrip("=")]
                token = long
        if not token.startswith("-") or _NUMBER_RE.match(token):
            raise InputError(
                f"engine_args: {token!r} is not a flag and does not follow one",
                hint="engine_args holds flags and their values, e.g. ['--max-model-len', '4096']")
        flag, eq, inline_value = token.partition("=")
        if underscores_ok and flag.startswith("--"):
            flag = "--" + flag[2:].replace("_", "-")
        lookup = flag
        if lookup not in known.flags and "." in lookup:  # vLLM's --config-arg.key=value form
            lookup = lookup.split(".", 1)[0]
        if lookup not in known.flags and not lookup.startswith("--") and len(lookup) > 2:
            lookup = lookup[:2]  # attached short-option value, e.g. -O3
        if lookup not in known.flags:
            close = difflib.get_close_matches(flag, sorted(known.flags), n=3)
            raise InputError(
                f"engine_args: {engine} does not accept the flag {flag!r}",
                hint=(f"did you mean {', '.join(close)}? " if close else "")
                + f"check `{engine} --help`; the installed version's flags are what counts")
        value = inline_value if eq else None
        if value is None and i + 1 < len(args) and (not args[i + 1].startswith("-") or _NUMBER_RE.match(args[i + 1])):
            value = args[i + 1]
            i += 1
        allowed = known.choices.get(lookup)
        if allowed is not None and value is not None and value not in allowed:
            raise InputError(f"engine_args: {flag} {value!r} is not one of {', '.join(allowed)}",
                             hint=f"pick one of the values {engine} lists for {flag}")
        i += 1


_HELP_AHEAD: dict[str, dict[str, Any]] = {}  # engine -> {"text": ...} or {"error": ...} once its thread has ended


def ask_help_ahead(engine: str) -> None:
    """Start asking ``engine`` for its flags (its ``--help``, what ``check_recipe`` reads) in a background thread, so
    that the answer overlaps the checks made before the first ``check_recipe`` of this process (vLLM imports itself to
    answer). Nothing is started for an engine unknown or not installed here: ``check_recipe`` says so in its turn.
    The thread is a daemon: a process that fails before it needs the answer does not wait for it."""
    import threading

    from infercrane.errors import InfercraneError
    from infercrane.serving.engine_kinds import get_engine_kind

    if engine in _HELP_AHEAD:
        return
    try:
        kind = get_engine_kind(engine)
        if not kind.available()[0]:
            return
    except InfercraneError:
        return
    slot: dict[str, Any] = {}

    def ask() -> None:
        try:
            slot["text"] = kind.help_text()
        except BaseException as exc:  # noqa: BLE001 - raised where the answer is needed (_cached_help_flags)
            slot["error"] = exc

    thread = threading.Thread(target=ask, name=f"infercrane-{engine}-help", daemon=True)
    slot["thread"] = thread
    _HELP_AHEAD[engine] = slot
    thread.start()


@functools.lru_cache(maxsize=8)
def _cached_help_flags(engine: str) -> EngineFlags:
    from infercrane.serving.engine_kinds import get_engine_kind

    ahead = _HELP_AHEAD.pop(engine, None)
    if ahead is None:
        return parse_help_flags(get_engine_kind(engine).help_text())
    ahead["thread"].join()
    if "error" in ahead:
        raise ahead["error"]
    return parse_help_flags(ahead["text"])


def check_recipe(recipe: Recipe, *, help_text: str | None = None, kernel_probe: str | None = None) -> None:
    """Preflight one recipe before any GPU time: engine known and installed, flags accepted (the ones its
    ``kernels`` add too), model present, kernels runnable (``serving.kernels.check_kernels``).

    ``help_text`` replaces the engine's own ``--help`` output (tests pass a recorded or fake one);
    without it the installed engine is asked once per process and the parsed result cached. ``kernel_probe``
    replaces the engine Python's answer about its IR ops.
    Raises InputError (bad recipe) or UnavailableError (engine not installed here).
    """
    from infercrane.serving.engine_kinds import get_engine_kind

    kind = get_engine_kind(recipe.engine)  # InputError listing the known engines
    if help_text is None:
        ok, reason = kind.available()
        if not ok:
            raise UnavailableError(f"recipe {recipe.name!r}: engine {recipe.engine!r} is not available here: {reason}",
                                   hint=kind.install_hint)
        known = _cached_help_flags(recipe.engine)
    else:
        known = parse_help_flags(help_text)
    if not known.flags:
        raise UnavailableError(f"recipe {recipe.name!r}: could not read any flag from {recipe.engine}'s --help output",
                               hint="run the engine's --help by hand to see what it prints")
    from infercrane.serving.kernels import check_kernels, priority_arg

    added = priority_arg(recipe.kernels) if recipe.kernels else []
    try:
        check_engine_args(list(recipe.engine_args), known, engine=kind.display_name,
                          underscores_ok=kind.underscores_ok, short_aliases=dict(kind.short_aliases))
        check_engine_args(added, known, engine=kind.display_name, underscores_ok=kind.underscores_ok)
    except InputError as exc:
        raise InputError(f"recipe {recipe.name!r}: {exc.message}" + (" (from its kernels:)" if added else ""),
                         hint=exc.hint) from None
    check_kernels(recipe, probe_output=kernel_probe)
    if recipe.model_is_local():
        path = Path(recipe.model).expanduser()
        if not path.is_dir():
            raise InputError(f"recipe {recipe.name!r}: model path {recipe.model!r} does not exist or is not a directory",
                             hint="give an existing model directory (e.g. one written by the model stand-in) or a hub id")
        if kind.needs_model_config and not (path / "config.json").is_file():
            raise InputError(f"recipe {recipe.name!r}: model directory {path} has no config.json",
                             hint="point at a Hugging Face style model directory")

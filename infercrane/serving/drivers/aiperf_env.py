"""AIPerf's command line with InferCrane's secrets read from its environment, not from its arguments; its pairs typed.

    python -m infercrane.serving.drivers.aiperf_env -- profile ... --api-key '${INFERCRANE_API_KEY}' \
        --header '{"X-Tenant": "${INFERCRANE_HEADER_0}"}'

A driver's command line is the first line of its log and is visible to ``ps``; an API key or a header value must be
in neither (``engine.ServerAccess``). So ``drivers.aiperf.AiperfDriver.command`` writes placeholders
``${INFERCRANE_...}`` where the secrets go, puts the values in the driver's environment
(``AiperfDriver.secret_env``), and runs AIPerf through this module, which replaces each placeholder with its variable's
value in the arguments it hands to AIPerf's CLI (``aiperf.cli.app``, what ``python -m aiperf`` runs). Inside an
argument that is a JSON object (``{...}``, AIPerf's JSON form of ``--header``) the value is JSON-escaped. ``sys.argv``
keeps the placeholders, so the command AIPerf records in its exports (``cli_command``) holds no secret either. A
placeholder whose variable is not set ends the run before AIPerf starts, naming the variable. A block run from a YAML
config (``--config FILE``) needs none of this: AIPerf substitutes ``${VAR}`` in its config file itself.

Typed pairs: AIPerf 0.12 reads a text value that looks like a number, ``true``/``false`` or ``null`` as that type
even where the value came typed: its command line hands a JSON ``--header`` / ``--extra-inputs`` token over already
decoded (a mapping), and ``aiperf/config/loader/parsing.py`` (``_parse_sequence_as_tuple_list`` and the mapping branch
it calls) reads each of its values again, as it does the (key, value) pairs it made itself when the converter validates
them a second time. A header ``X-Priority: 5`` then fails (a header value must be text) and an extra input ``"user":
"123"`` is sent as the number 123. This module wraps that function (``keep_pairs``) so that a mapping or a (key,
value) pair keeps its values as they are; ``KEY:VALUE`` text is read as before (``ignore_eos:true`` is still the
boolean). An AIPerf without that function runs unwrapped, after the line ``PAIRS_UNWRAPPED``.

Imports only the standard library at module level (AIPerf's spawned services import the main module again).
"""
from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

PLACEHOLDER = re.compile(r"\$\{(INFERCRANE_[A-Z0-9_]+)\}")
MISSING_EXIT = 64  # EX_USAGE: a placeholder without its variable
PARSING_MODULE = "aiperf.config.loader.parsing"
PAIRS_FUNCTION = "_parse_sequence_as_tuple_list"
PAIRS_UNWRAPPED = "infercrane aiperf_env: this AIPerf has no _parse_sequence_as_tuple_list; its pairs run unwrapped"


def keep_pairs(original: Callable[[Any], list]) -> Callable[[Any], list]:
    """``original`` (AIPerf's ``_parse_sequence_as_tuple_list``) leaving the values of a mapping (a decoded JSON
    token) and of a (key, value) pair as they are, instead of reading them again (module docstring)."""
    def parse(items: Any) -> list:
        out: list = []
        for item in items:
            if isinstance(item, dict):
                out.extend((str(k), v) for k, v in item.items())
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                out.append(item)
            else:
                out.extend(original([item]))
        return out

    return parse


def install_keep_pairs() -> bool:
    """Wrap AIPerf's pair parser with ``keep_pairs``; False (and ``PAIRS_UNWRAPPED``) when it has none."""
    import importlib

    try:
        parsing = importlib.import_module(PARSING_MODULE)
    except ImportError:
        parsing = None
    original = getattr(parsing, PAIRS_FUNCTION, None)
    if original is None:
        print(PAIRS_UNWRAPPED, flush=True)
        return False
    setattr(parsing, PAIRS_FUNCTION, keep_pairs(original))
    return True


def placeholder(name: str) -> str:
    return "${" + name + "}"


def substitute(args: list[str], env: Mapping[str, str]) -> list[str]:
    """``args`` with every ``${INFERCRANE_...}`` replaced by that variable of ``env`` (JSON-escaped inside a JSON
    object argument); KeyError naming the first variable that is not set."""
    out = []
    for arg in args:
        in_json = arg.lstrip().startswith("{")

        def value(m: re.Match) -> str:
            text = env[m.group(1)]
            return json.dumps(text)[1:-1] if in_json else text

        out.append(PLACEHOLDER.sub(value, arg))
    return out


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    try:
        real = substitute(args, os.environ)
    except KeyError as exc:
        print(f"infercrane aiperf_env: {exc.args[0]} is not set in the environment; nothing was sent", flush=True)
        raise SystemExit(MISSING_EXIT) from None
    sys.argv = ["aiperf", *args]  # what AIPerf records as its command line: the placeholders, not the secrets
    install_keep_pairs()
    from aiperf.cli import app

    app(real)


if __name__ == "__main__":
    main()

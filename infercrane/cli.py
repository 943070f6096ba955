"""The ``infercrane`` command line: a thin layer over the package.

Sub-commands are registered by import path and loaded only when run, so ``infercrane --help`` imports neither torch
nor vLLM nor AIPerf. Every InferCrane error maps to an exit code here, in one place:
0 ok · 1 a verdict asked to fail (``gate``, ``--fail-on``, ``kernel agree``) · 2 bad input (file, flag, recipe,
receipt) · 3 a needed tool is unavailable · 4 a run failed · 70 internal error (``run``: a bug) · 130 interrupted
(Ctrl-C) · 143 terminated (SIGTERM).

Bad input is printed as one line per bad value, naming the flag and what to give instead (``usage_error_lines``):
cyclopts' usage errors and the option models' validation errors alike, never a pydantic dump.
"""
from __future__ import annotations

import sys

from typing import Any, Iterator

from cyclopts import App, Parameter

from . import __version__

# No "--no-…" / "--empty-…" twins: a flag that is off by default needs none; an option that does (a tri-state such
# as --candidate-in-place) names its opposite itself.
# suppress_keyboard_interrupt=False: Ctrl-C and SIGTERM (``proc.Terminated``) reach ``main``, so that every
# ``finally`` that ends workers and engines runs and the exit code says which it was.
app = App(name="infercrane", version=__version__, default_parameter=Parameter(negative=()),
          suppress_keyboard_interrupt=False,
          help="Turn a proposed LLM-inference optimization into an auditable decision.")

receipt = App(name="receipt", version_flags=[], help="Validate, show, diff, sign and verify receipts; print their JSON Schemas.")
receipt.command("infercrane.commands.receipt:validate", name="validate",
                help="Validate receipt files (types, derived numbers, content hash, every conclusion derived again, the "
                     "signature envelope beside each; signatures verified with --pub; a legacy format only with "
                     "--allow-legacy).")
receipt.command("infercrane.commands.receipt:show", name="show", help="Show a receipt: decisions first, then conditions, then evidence in tables that fit the terminal.")
receipt.command("infercrane.commands.receipt:diff", name="diff", help="Compare two receipts of one kind: both decisions, then the changed fields with deltas and ratios.")
receipt.command("infercrane.commands.receipt:schema", name="schema", help="Print or write the JSON Schema of a receipt version.")
receipt.command("infercrane.commands.receipt:keygen", name="keygen", help="Write an ed25519 key pair for signing receipts.")
receipt.command("infercrane.commands.receipt:sign", name="sign", help="Sign a receipt (DSSE envelope beside it).")
receipt.command("infercrane.commands.receipt:verify", name="verify", help="Verify a receipt's signature against a public key.")
receipt.command("infercrane.commands.receipt:merge", name="merge",
                help="Join PoC or kernel receipts of different GPU types into one PoC receipt.")
app.command(receipt)

app.command("infercrane.commands.env:env", name="env", help="What this machine is, as receipts record it.")

model = App(name="model", help="The model catalog, the offline model stand-in, and real models made from packages.")
model.command("infercrane.commands.model:list_models", name="list", help="List the models in the catalog.")
model.command("infercrane.commands.model:stand_in", name="stand-in", help="Write an offline stand-in of a catalog model (config, local tokenizer).")
model.command("infercrane.commands.model:prepare", name="prepare",
              help="Make a servable folder of a catalog model whose real weights ship in a package (converted once, "
                   "checked, cached).")
app.command(model)

kernel = App(name="kernel", help="Kernel lab: screen candidate kernels of an op against baselines and a float32 oracle.")
kernel.command("infercrane.commands.kernel:screen", name="screen",
               help="Screen an op's candidate kernels (--op; default fused_add_rmsnorm) against its baselines and decide.")
kernel.command("infercrane.commands.kernel:decide", name="decide", help="Decide again on a finished screen (e.g. with a decode step time from a serving receipt).")
kernel.command("infercrane.commands.apply:apply", name="apply",
               help="Put a candidate kernel inside vLLM and A/B it end to end against the incumbent, compiled and eager, gated, prediction beside measurement.")
kernel.command("infercrane.commands.kernel:agree", name="agree", help="Do two screens of one op agree within their runs' spread (cell by cell, trial medians)?")
kernel.command("infercrane.commands.kernel:list_impls", name="list", help="List an op's implementations and what a screen here would do with each.")
app.command(kernel)

serve = App(name="serve", help="Serving lab: A/B of vLLM serving recipes driven by AIPerf, decided with statistics.")
serve.command("infercrane.commands.serve:ab", name="ab", help="Paired A/B of two recipes over a concurrency sweep.")
serve.command("infercrane.commands.serve:bench", name="bench", help="Benchmark one recipe on a workload preset.")
serve.command("infercrane.commands.serve:decide", name="decide",
              help="Decide again on a finished serving receipt (another policy), without re-measuring.")
serve.command("infercrane.commands.serve:recipes", name="recipes", help="List the shipped recipes and workload presets.")
trace = App(name="trace", help="Request traces (Mooncake's JSONL): what one holds, and one written from stated "
                                "distributions.")
trace.command("infercrane.commands.trace:show", name="show", help="What a trace holds: requests, span, rate, lengths, "
                                                                  "prefix blocks, sha256.")
trace.command("infercrane.commands.trace:generate", name="generate",
              help="Write a trace from a YAML spec of arrivals and length distributions, seeded.")
serve.command(trace)
app.command(serve)

app.command("infercrane.commands.report:report", name="report",
            help="Draw receipts as one self-contained HTML page plus its PNGs.")

app.command("infercrane.commands.export:export", name="export",
            help="Export a receipt as CSV (one row per measured unit, or per comparison with its verdicts, each with "
                 "its conditions) or a JSON summary.")

app.command("infercrane.commands.gate:gate", name="gate",
            help="The release gate: check receipts against rules (decisions, quality gate, evidence, signature, age, "
                 "model); exit 0 pass, 1 fail, 2 bad input.")

app.command("infercrane.commands.poc:poc", name="poc",
            help="Run a PoC config: kernel screen, paired A/B and public-workload A/B, joined in one receipt.")


def main(argv: list[str] | None = None) -> int:
    from .errors import InfercraneError
    from .proc import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():  # SIGTERM (timeout, systemd, Slurm) unwinds like Ctrl-C, exit code 143
            result = app(argv if argv is not None else sys.argv[1:], exit_on_error=False, print_error=False,
                         result_action="return_value")
    except InfercraneError as e:
        for line in e.lines():
            _print_error(line)
        return e.exit_code
    except KeyboardInterrupt as e:
        _print_error(str(e) or "interrupted")
        return getattr(e, "exit_code", 130)
    except Exception as e:  # cyclopts' own usage errors, the option models' validation errors among them
        from cyclopts.exceptions import CycloptsError

        if isinstance(e, CycloptsError):
            for line in usage_error_lines(e):
                _print_error(line)
            return 2
        raise
    return result if isinstance(result, int) else 0


def run(argv: list[str] | None = None) -> int:
    """The program (``infercrane``, ``python -m infercrane``): ``main``, and for an exception InferCrane did not raise
    on purpose (a bug) its traceback and exit ``INTERNAL_ERROR_EXIT``, never Python's 1, which a gate's FAIL and
    ``--fail-on`` use. ``main`` itself lets such an exception propagate to an in-process caller."""
    try:
        return main(argv)
    except Exception as e:
        import traceback

        from .errors import INTERNAL_ERROR_EXIT

        traceback.print_exc()
        _print_error(f"internal error ({type(e).__name__}); the traceback above is InferCrane's fault, not the "
                     f"input's: please report it (exit {INTERNAL_ERROR_EXIT})")
        return INTERNAL_ERROR_EXIT


def _print_error(message: str) -> None:
    print(f"infercrane: error: {message}", file=sys.stderr)


def usage_error_lines(e: Exception) -> Iterator[str]:
    """One line per bad value of a cyclopts usage error: the flag, the value, and what to give instead."""
    import pydantic

    cause = e.__cause__
    if isinstance(cause, pydantic.ValidationError):
        for err in cause.errors(include_url=False):
            yield _pydantic_line(err, getattr(e, "argument", None))
        return
    yield " ".join(str(e).split())


# pydantic error type -> what to give instead (ctx values filled in)
_FIXES = {
    "int_parsing": "give a whole number", "int_from_float": "give a whole number", "int_type": "give a whole number",
    "float_parsing": "give a number", "float_type": "give a number", "bool_parsing": "give true or false",
    "greater_than": "give a number > {gt}", "greater_than_equal": "give a number >= {ge}",
    "less_than": "give a number < {lt}", "less_than_equal": "give a number <= {le}",
    "literal_error": "give one of {expected}", "enum": "give one of {expected}",
    "too_short": "give at least {min_length}", "missing": "it is required",
}


def _pydantic_line(err: Any, argument: Any) -> str:
    loc = [p for p in err.get("loc", ()) if not isinstance(p, int)]
    name = _flag_of(loc[0], argument) if loc else None
    ctx = err.get("ctx") or {}
    if err["type"] == "value_error":  # the option models' own checks: the message says it all
        message = str(ctx.get("error", err["msg"]))
        return message if name is None or message.startswith("--") else f"{name}: {message}"
    if err["type"] == "extra_forbidden":
        return f"unknown option {name}; see --help"
    value = err.get("input")
    shown = f" {value}" if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    fix = _FIXES.get(err["type"])
    try:
        fix = fix.format(**ctx) if fix else err["msg"]
    except (KeyError, IndexError):
        fix = err["msg"]
    return f"{name or 'option'}{shown}: {fix}"


def _flag_of(field: str, argument: Any) -> str:
    """The flag cyclopts gave a model field (the argument's child with that key), else the default spelling."""
    for child in getattr(argument, "children_recursive", None) or ():
        if tuple(child.keys) == (field,) and child.name:
            return child.name
    return "--" + str(field).replace("_", "-")


if __name__ == "__main__":
    sys.exit(main())

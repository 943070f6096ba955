"""The ``infercrane`` command line: a thin layer over the package.

Sub-commands are registered by import path and loaded only when run, so ``infercrane --help`` imports neither torch
nor vLLM nor AIPerf. Every InferCrane error maps to an exit code here, in one place:
0 ok · 1 internal error · 2 bad input (file, flag, recipe, receipt) · 3 a needed tool is unavailable · 4 a run failed
· 130 interrupted.
"""
from __future__ import annotations

import sys

from cyclopts import App

from . import __version__

app = App(name="infercrane", version=__version__, help="Turn a proposed LLM-inference optimization into an auditable decision.")

receipt = App(name="receipt", version_flags=[], help="Validate, show, diff receipts; print their JSON Schemas.")
receipt.command("infercrane.commands.receipt:validate", name="validate", help="Validate receipt files (types, derived numbers, content hash).")
receipt.command("infercrane.commands.receipt:show", name="show", help="Show a receipt as readable tables.")
receipt.command("infercrane.commands.receipt:diff", name="diff", help="Compare two receipts of one kind: deltas and ratios.")
receipt.command("infercrane.commands.receipt:schema", name="schema", help="Print or write the JSON Schema of a receipt version.")
app.command(receipt)

app.command("infercrane.commands.env:env", name="env", help="What this machine is, as receipts record it.")

model = App(name="model", help="The model catalog and the offline model stand-in.")
model.command("infercrane.commands.model:list_models", name="list", help="List the models in the catalog.")
model.command("infercrane.commands.model:stand_in", name="stand-in", help="Write an offline stand-in of a catalog model (config, local tokenizer).")
app.command(model)

kernel = App(name="kernel", help="Kernel lab: screen candidate kernels against baselines and a float32 oracle.")
kernel.command("infercrane.commands.kernel:screen", name="screen", help="Screen fused residual-add + RMSNorm candidates and decide.")
kernel.command("infercrane.commands.kernel:decide", name="decide", help="Decide again on a finished screen (e.g. with a decode step time from a serving receipt).")
kernel.command("infercrane.commands.kernel:list_impls", name="list", help="List the implementations and whether each is available here.")
app.command(kernel)

serve = App(name="serve", help="Serving lab: A/B of vLLM serving recipes driven by AIPerf, decided with statistics.")
serve.command("infercrane.commands.serve:ab", name="ab", help="Paired A/B of two recipes over a concurrency sweep.")
serve.command("infercrane.commands.serve:bench", name="bench", help="Benchmark one recipe on a workload preset.")
serve.command("infercrane.commands.serve:decide", name="decide",
              help="Decide again on a finished serving receipt (another policy), without re-measuring.")
serve.command("infercrane.commands.serve:recipes", name="recipes", help="List the shipped recipes and workload presets.")
app.command(serve)


def main(argv: list[str] | None = None) -> int:
    from .errors import InfercraneError

    try:
        result = app(argv if argv is not None else sys.argv[1:], exit_on_error=False, result_action="return_value")
    except InfercraneError as e:
        _print_error(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        _print_error("interrupted")
        return 130
    except Exception as e:  # cyclopts' own usage errors
        from cyclopts.exceptions import CycloptsError

        if isinstance(e, CycloptsError):  # cyclopts has printed the usage error already
            return 2
        raise
    return result if isinstance(result, int) else 0


def _print_error(message: str) -> None:
    print(f"infercrane: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

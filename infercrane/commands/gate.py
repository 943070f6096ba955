"""``infercrane gate``: the release gate over receipts."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter


def gate(receipts: list[Path], /, *, rules: str, json_out: Annotated[bool, Parameter(name="--json")] = False,
         now: str | None = None) -> int:
    """Check receipts against release rules: one line per rule (PASS/FAIL, the value read, the bound). Exit 0 when
    every rule passes, 1 when one fails, 2 on bad input (a rules file or a receipt that cannot be read).

    Parameters
    ----------
    receipts
        Receipt JSON files (a PoC's, a merged one, a serving A/B's, a kernel screen's); each signature envelope
        beside its receipt (FILE.dsse.json) is read where a rule asks for a signature.
    rules
        A rules YAML file, or the name of shipped rules (release-example, release-strict, release-trace); see
        docs/gate.md.
    json_out
        Print the result as one JSON object (rules, results, passed) instead of lines.
    now
        Evaluate ages (max_age_days) as of this ISO 8601 time instead of the clock's (to gate again as of a release).
    """
    from ..decide.gate import evaluate, passed
    from ..errors import InputError, about
    from ..report.gate import gather, key_paths, load_rules

    with about("--rules"):
        rule_set, rules_path = load_rules(rules)
    at = datetime.now(timezone.utc)
    if now is not None:
        try:
            at = datetime.fromisoformat(now.replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"--now {now}: not an ISO 8601 time", hint="e.g. 2026-12-07T12:00:00Z") from None
        at = at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)
    if not receipts:
        raise InputError("no receipt given", hint="infercrane gate RECEIPT… --rules RULES")
    facts = gather(receipts, key_paths(rule_set, rules_path))
    results = evaluate(rule_set, facts, now=at)
    ok = passed(results)
    if json_out:
        print(json.dumps({"gate_schema": "infercrane.gate-result/v1", "rules": rule_set.name,
                          "rules_file": str(rules_path), "evaluated_at": at.isoformat(),
                          "receipts": [str(p) for p in receipts], "passed": ok,
                          "results": [r.as_json() for r in results]}, indent=2))
    else:
        for r in results:
            print(r.line())
        failed = sum(not r.passed for r in results)
        print(f"gate {rule_set.name}: {'PASS' if ok else 'FAIL'} ({len(results) - failed} of {len(results)} rules "
              f"passed)")
    return 0 if ok else 1

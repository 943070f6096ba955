"""What ``infercrane gate`` reads of receipt files (``decide/gate.py`` holds the rules and their evaluation).

For each file: whether it validates (``receipts.validate.load_receipt``: schema, content hash, every derived number
and conclusion; a legacy format is not accepted), its export summary (``report/export.py``, the keys of
``docs/exports.md``), and for each public key a rule names, whether its signature envelope verifies with it. A file
that is not JSON or not a receipt of a known kind is bad input (InputError, exit 2), not a failed rule.
"""
from __future__ import annotations

from pathlib import Path

from ..decide.gate import GateRules, ReceiptFacts
from ..errors import InputError, ReceiptInvalid


def load_rules(name_or_path: str | Path) -> tuple[GateRules, Path]:
    """A rules file (a path, or the name of rules shipped in ``infercrane/decide/gates/``), validated, and where it
    is; InputError naming every bad field."""
    from ..datafiles import GATE_RULES, find_file, load

    folder = Path(__file__).resolve().parents[1] / "decide" / "gates"
    path = find_file(name_or_path, folder, GATE_RULES)
    rules = load(GateRules, path, folder, kind=GATE_RULES, hint="see docs/gate.md for the rules a file may hold")
    return rules, path


def key_paths(rules: GateRules, rules_path: Path) -> dict[str, Path]:
    """Each ``signed_by`` key as written in the rules -> its file (relative to the rules file's folder)."""
    out = {}
    for rule in rules.rules:
        if rule.signed_by is not None:
            p = Path(rule.signed_by).expanduser()
            out[rule.signed_by] = p if p.is_absolute() else rules_path.parent / p
    return out


def gather(paths: list[Path], keys: dict[str, Path]) -> list[ReceiptFacts]:
    """The facts of each receipt file (module docstring)."""
    from ..receipts.io import read_json
    from ..receipts.signing import load_public, verify, envelope_path
    from ..receipts.validate import load_receipt
    from .export import export_summary

    for name, key in keys.items():  # a key that cannot be read is bad input, said once
        try:
            load_public(key)
        except InputError as e:
            raise InputError(f"signed_by {name}: {e.message}", hint=e.hint) from None
    out = []
    for path in paths:
        read_json(path)  # not JSON, or not there: bad input
        facts = ReceiptFacts(path=str(path), valid=False)
        try:
            receipt = load_receipt(path)
        except ReceiptInvalid as e:
            facts.problems = [f"{field}: {reason}" for _file, field, reason in e.problems]
        else:
            if receipt.legacy_note is not None:
                facts.problems = [f"a legacy format: {receipt.legacy_note}"]
            else:
                facts.valid, facts.summary = True, export_summary(receipt, label=str(path))
        for name, key in keys.items():
            if not envelope_path(path).exists():
                facts.signatures[name] = (False, "unsigned")
                continue
            try:
                v = verify(path, key)
            except InputError as e:  # SignatureInvalid among them
                facts.signatures[name] = (False, e.message)
            else:
                facts.signatures[name] = (True, f"verified: key {v.keyid}")
        out.append(facts)
    return out


def fail_on_exit(path: Path, fail_on: str | None, con: object | None = None) -> int:
    """``--fail-on``'s exit code for a written receipt: 1 (saying which sections' decisions) when ``fail_on`` fails a
    decision of it (``decide.vocabulary.fails_on``), 0 otherwise."""
    if fail_on is None:
        return 0
    from ..decide.vocabulary import fails_on
    from ..receipts.validate import load_receipt
    from .export import export_summary

    sections = export_summary(load_receipt(path))["sections"]
    failed = [s for s in sections if fails_on([s.get("decision_code")], fail_on)]
    if not failed:
        return 0
    line = (f"--fail-on {fail_on}: " + ", ".join(f"{s['section']} {s.get('decision_code') or 'no decision'}"
                                                 for s in failed) + "; exit 1")
    if con is not None:
        con.print(line, markup=False, highlight=False)  # type: ignore[attr-defined]
    else:
        print(line)
    return 1

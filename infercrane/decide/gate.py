"""The release gate (``infercrane gate``): rules over receipts, as data, and their evaluation.

A rules file (YAML, ``schema_version: infercrane.gate-rules/v1``) names the rules a release must keep; each rule has a
``name`` and one check:

* ``section`` + ``decision``: every section whose name matches the pattern (``fnmatch``: ``paired*``, ``kernel.h200``)
  has one of the listed decision codes, and at least one section matches (a missing section fails);
* ``quality_gate: PASS``: every section matching ``section`` (default: all) that ran the semantic-quality gate passed
  it, and at least one ran it;
* ``evidence: measured``: no receipt and no section is of a functional evidence class (a CPU or test-server check);
* ``complete: true``: every receipt is complete (none stopped part-way);
* ``signed_by: KEY.pub``: every receipt carries a signature that verifies with that public key (a path relative to the
  rules file);
* ``max_age_days: N``: every receipt, and every section in it, was recorded within N days of now;
* ``model`` (+ ``model_revision``): every receipt is of that model (and revision).
* ``slos_met: true``: in every section matching ``section`` (default: all) that recorded SLOs, every ok run of the
  section's subject (the candidate, B) met every SLO (``decide.slo``), and at least one section recorded them.

Before the file's rules, one rule is always evaluated: **the receipts validate** (``receipt validate``'s checks: schema,
content hash, every derived number and conclusion; a legacy format, whose conclusions cannot be derived again, fails).
A rule that reads a receipt which did not validate fails for it: nothing is read from a receipt that does not hold.

Evaluation is over facts (``ReceiptFacts``) that ``report/gate.py`` gathers from the files (validation, the export
summary of ``docs/exports.md``, signatures); each rule gives PASS or FAIL with the value it read and the bound it held
it to. The gate passes when every rule passes.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infercrane.decide.vocabulary import FUNCTIONAL_CLASSES

RULES_SCHEMA = "infercrane.gate-rules/v1"
DecisionCode = Literal["accept", "retain", "reject", "inconclusive"]
CHECKS = ("decision", "quality_gate", "evidence", "complete", "signed_by", "max_age_days", "model", "slos_met")


class Rule(BaseModel):
    """One rule of a rules file: its name and one check (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    section: str | None = Field(default=None, description="fnmatch pattern over section names (with decision, or "
                                                          "to narrow quality_gate)")
    decision: list[DecisionCode] | None = Field(default=None, min_length=1)
    quality_gate: Literal["PASS"] | None = None
    evidence: Literal["measured"] | None = None
    complete: Literal[True] | None = None
    signed_by: str | None = Field(default=None, min_length=1)
    max_age_days: float | None = Field(default=None, gt=0)
    model: str | None = Field(default=None, min_length=1)
    model_revision: str | None = Field(default=None, min_length=1)
    slos_met: Literal[True] | None = None

    @model_validator(mode="after")
    def _one_check(self) -> "Rule":
        present = [c for c in CHECKS if getattr(self, c) is not None]
        if len(present) != 1:
            raise ValueError(f"rule {self.name!r} must have exactly one check of {', '.join(CHECKS)}; it has "
                             f"{', '.join(present) or 'none'}")
        if self.decision is not None and self.section is None:
            raise ValueError(f"rule {self.name!r}: decision needs section (the pattern of the sections it reads)")
        if self.section is not None and present[0] not in ("decision", "quality_gate", "slos_met"):
            raise ValueError(f"rule {self.name!r}: section goes with decision, quality_gate or slos_met")
        if self.model_revision is not None and self.model is None:
            raise ValueError(f"rule {self.name!r}: model_revision needs model")
        return self

    @property
    def check(self) -> str:
        return next(c for c in CHECKS if getattr(self, c) is not None)


class GateRules(BaseModel):
    """A rules file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["infercrane.gate-rules/v1"]
    name: str = Field(min_length=1)
    description: str | None = None
    rules: list[Rule] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> "GateRules":
        names = [r.name for r in self.rules]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"rule names must be unique; repeated: {', '.join(dup)}")
        return self


@dataclass
class ReceiptFacts:
    """What the gate reads of one receipt file. ``summary`` is its export summary (None when it did not validate);
    ``signatures`` maps each key a rule names to ``(verified, what was found)``."""

    path: str
    valid: bool
    problems: list[str] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    signatures: dict[str, tuple[bool, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleResult:
    name: str
    check: str
    passed: bool
    value: str
    bound: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.value} (bound: {self.bound})"

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "check": self.check, "passed": self.passed, "value": self.value,
                "bound": self.bound}


VALID_RULE = "receipts validate"


def evaluate(rules: GateRules, facts: list[ReceiptFacts], *, now: datetime | None = None) -> list[RuleResult]:
    """The results of the always-evaluated validation rule, then of each rule in the file's order."""
    now = now or datetime.now(timezone.utc)
    bad = [f for f in facts if not f.valid]
    out = [RuleResult(VALID_RULE, "valid", not bad,
                      "; ".join(f"{f.path}: {f.problems[0] if f.problems else 'invalid'}" for f in bad)
                      or f"{len(facts)} of {len(facts)} valid", "every receipt validates")]
    for rule in rules.rules:
        out.append(_CHECKERS[rule.check](rule, facts, now))
    return out


def passed(results: list[RuleResult]) -> bool:
    return all(r.passed for r in results)


# --------------------------------------------------------------------------------------------- checks


def _unreadable(facts: list[ReceiptFacts]) -> list[str]:
    return [f"{f.path}: not valid" for f in facts if f.summary is None]


def _sections(facts: list[ReceiptFacts], pattern: str | None) -> list[tuple[str, dict[str, Any]]]:
    return [(f.path, s) for f in facts if f.summary is not None for s in f.summary["sections"]
            if pattern is None or fnmatch.fnmatchcase(s["section"], pattern)]


def _label(path: str, section: dict[str, Any], facts: list[ReceiptFacts]) -> str:
    """A section as a line names it: with its receipt's path where several receipts are gated (names repeat)."""
    return section["section"] if len(facts) == 1 else f"{path}:{section['section']}"


def _result(rule: Rule, ok: bool, value: str, bound: str) -> RuleResult:
    return RuleResult(rule.name, rule.check, ok, value, bound)


def _decision(rule: Rule, facts: list[ReceiptFacts], now: datetime) -> RuleResult:
    found = _sections(facts, rule.section)
    bound = f"sections {rule.section!r}: {' or '.join(rule.decision or [])}"
    if not found:
        return _result(rule, False, "; ".join(["no section matches", *_unreadable(facts)]), bound)
    wrong = [(p, s) for p, s in found if s.get("decision_code") not in (rule.decision or [])]
    value = ", ".join(f"{_label(p, s, facts)} {s.get('decision_code') or 'no decision'}" for p, s in found)
    return _result(rule, not wrong and not _unreadable(facts), "; ".join([value, *_unreadable(facts)]), bound)


def _quality(rule: Rule, facts: list[ReceiptFacts], now: datetime) -> RuleResult:
    ran = [(p, s) for p, s in _sections(facts, rule.section) if (s.get("quality_gate") or {}).get("ran")]
    bound = f"quality gate PASS in sections {rule.section or '*'!r} (at least one ran)"
    if not ran:
        return _result(rule, False, "; ".join(["no section ran the quality gate", *_unreadable(facts)]), bound)
    value = ", ".join(f"{_label(p, s, facts)} {s['quality_gate'].get('verdict')}" for p, s in ran)
    ok = all(s["quality_gate"].get("verdict") == "PASS" for _, s in ran) and not _unreadable(facts)
    return _result(rule, ok, "; ".join([value, *_unreadable(facts)]), bound)


def _slos(rule: Rule, facts: list[ReceiptFacts], now: datetime) -> RuleResult:
    found = [(p, s, (s.get("slo") or {}).get("by_recipe", {}).get(s.get("subject")))
             for p, s in _sections(facts, rule.section)]
    found = [(p, s, sub) for p, s, sub in found if sub]
    bound = f"every run of the candidate met every SLO in sections {rule.section or '*'!r} (at least one recorded SLOs)"
    if not found:
        return _result(rule, False, "; ".join(["no section's candidate recorded SLOs", *_unreadable(facts)]), bound)
    value = ", ".join(f"{_label(p, s, facts)} {sub['met']} of {sub['runs']} runs met" for p, s, sub in found)
    ok = all(sub["met"] == sub["runs"] for _, _, sub in found) and not _unreadable(facts)
    return _result(rule, ok, "; ".join([value, *_unreadable(facts)]), bound)


def _evidence(rule: Rule, facts: list[ReceiptFacts], now: datetime) -> RuleResult:
    functional = [f"{f.path} {f.summary.get('evidence_class')}" for f in facts if f.summary is not None
                  and f.summary.get("evidence_class") in FUNCTIONAL_CLASSES]
    functional += [f"{_label(p, s, facts)} {s.get('evidence_class')}" for p, s in _sections(facts, None)
                   if s.get("evidence_class") in FUNCTIONAL_CLASSES]
    bad = list(dict.fromkeys(functional)) + _unreadable(facts)
    classes = sorted({str(x) for f in facts if f.summary is not None
                      for x in [f.summary.get("evidence_class"), *(s.get("evidence_class") for s in f.summary["sections"])]
                      if x is not None})
    return _result(rule, not bad, "; ".join(bad) if bad else ", ".join(classes) or "no evidence class",
                   f"no functional evidence ({', '.join(FUNCTIONAL_CLASSES)})")


def _complete(rule: Rule, facts: list[ReceiptFacts], now: datetime) -> RuleResult:
    bad = [f"{f.path}: incomplete ({f.summary.get('incomplete_reason') or 'no reason given'})" for f in facts
           if f.summary is not None and f.summary.get("complete") is False] + _unreadable(facts)
    return _result(rule, not bad, "; ".join(bad) or f"{len(facts)} complete", "every receipt complete")


def _signed(rule: Rule, facts: list[ReceiptFacts], now: datetime) -> RuleResult:
    key = rule.signed_by or ""
    states = [(f.path, *f.signatures.get(key, (False, "not checked"))) for f in facts]
    bad = [f"{p}: {what}" for p, ok, what in states if not ok]
    value = "; ".join(bad) if bad else "; ".join(sorted({what for _, _, what in states}))
    return _result(rule, not bad, value, f"signed, verified with {key}")


def _recorded(summary: dict[str, Any]) -> list[datetime]:
    out = []
    for v in [summary.get("recorded_at"), *(s.get("recorded_at") for s in summary["sections"])]:
        if isinstance(v, str):
            t = datetime.fromisoformat(v.replace("Z", "+00:00"))
            out.append(t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc))
    return out


def _age(rule: Rule, facts: list[ReceiptFacts], now: datetime) -> RuleResult:
    limit = timedelta(days=rule.max_age_days or 0)
    bad, oldest = _unreadable(facts), None
    for f in facts:
        if f.summary is None:
            continue
        times = _recorded(f.summary)
        if not times:
            bad.append(f"{f.path}: no recorded_at")
            continue
        first = min(times)
        oldest = first if oldest is None or first < oldest else oldest
        if now - first > limit:
            bad.append(f"{f.path}: recorded {_days(now - first)} days ago")
    value = "; ".join(bad) if bad else (f"oldest recorded {_days(now - oldest)} days ago" if oldest else "none")
    return _result(rule, not bad, value, f"recorded within {rule.max_age_days:g} days of {now.isoformat()}")


def _days(d: timedelta) -> str:
    return f"{d.total_seconds() / 86400:.2f}"


def _model(rule: Rule, facts: list[ReceiptFacts], now: datetime) -> RuleResult:
    seen = [(f.path, f.summary.get("model"), f.summary.get("model_revision")) for f in facts if f.summary is not None]
    bad = [f"{p}: {m} {r or '(no revision)'}" for p, m, r in seen
           if m != rule.model or (rule.model_revision is not None and r != rule.model_revision)]
    bad += _unreadable(facts)
    value = "; ".join(bad) if bad else ", ".join(sorted({f"{m} {r or '(no revision)'}" for _, m, r in seen}))
    bound = rule.model + (f" at revision {rule.model_revision}" if rule.model_revision else "") if rule.model else ""
    return _result(rule, not bad, value, bound)


_CHECKERS = {"decision": _decision, "quality_gate": _quality, "evidence": _evidence, "complete": _complete,
             "signed_by": _signed, "max_age_days": _age, "model": _model, "slos_met": _slos}

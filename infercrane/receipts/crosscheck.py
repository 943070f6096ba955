"""Provenance checked against itself: the checks every receipt InferCrane writes gets, whatever its lab.

* ``provenance.config_sha256`` is the hash of ``provenance.config`` (``hashing.config_hash``);
* the receipt's ``recorded_at`` is its provenance's, and its ``hardware`` (a kernel receipt's) is its provenance's;
* every time stamp it holds (``recorded_at``, ``started_at``, ``finished_at``, … outside the receipts it embeds) lies
  between ``EARLIEST_RECORD`` (no receipt InferCrane wrote is older than InferCrane) and now, and none lies after the
  receipt's own ``recorded_at``: a receipt is written after everything it records;
* the model it names (``provenance.model``) is consistent with InferCrane's model catalog: a catalog model at the
  catalog's revision has the catalog's config fields and config fingerprint (``config_sha256``), a fingerprint of one
  catalog model is not recorded under another id, a stand-in (dummy weights, stand-in tokenizer) is of a catalog
  model at the catalog's revision, and weights converted from a package (``provenance.model.package``) are of a
  packaged catalog model, at its revision (the package pin), from its package file, with its weights' sha256 and
  licence.

Two clocks, or one writer stamping a receipt's parts one after the other, may disagree by ``CLOCK_SKEW_S``; every
comparison of time stamps here and in the labs' rules allows that much. Each lab's own window (a kernel screen's
``result.started_at`` .. ``finished_at``, a serving plan's runs within its wall time, a PoC's sections before the PoC)
is checked by that lab's rules, with ``not_after``. ``unchecked`` says what a receipt lacks for these checks (a
receipt written before InferCrane recorded the model config's fingerprint cannot show that its model id is the
model measured).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterator

from ..hashing import config_hash

Problem = tuple[str, str]

# The day of the first commit of InferCrane's repository (2026-12-01T01:24:51Z): no receipt InferCrane wrote, nor
# anything one records, can be older.
EARLIEST_RECORD = datetime(2026, 12, 1, tzinfo=timezone.utc)
# How far two time stamps of one receipt may disagree against their order (two machines' clocks; one writer stamping
# a receipt's parts one after the other, e.g. a PoC's kernel section decided again just after the PoC was stamped).
CLOCK_SKEW_S = 60.0
# Subtrees of a receipt that are other receipts, each checked on its own (``evidence`` of a PoC receipt).
EMBEDDED = ("evidence",)


def stamp(value: Any) -> datetime | None:
    """``value`` as a time-zone-aware time stamp; None when it is not an ISO 8601 string with an offset."""
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo is not None and t.utcoffset() is not None else None


def time_stamps(data: Any, path: str = "") -> Iterator[tuple[str, datetime]]:
    """(field path, time) of every ``*_at`` time stamp in ``data``, receipts it embeds (``EMBEDDED``) left out."""
    if isinstance(data, dict):
        for k, v in data.items():
            p = f"{path}.{k}" if path else str(k)
            if not path and k in EMBEDDED:
                continue
            t = stamp(v) if str(k).endswith("_at") else None
            if t is not None:
                yield p, t
            elif isinstance(v, (dict, list)):
                yield from time_stamps(v, p)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from time_stamps(v, f"{path}[{i}]")


def not_after(path: str, t: datetime, limit: datetime, limit_path: str, why: str) -> list[Problem]:
    """One problem when ``t`` (at ``path``) is later than ``limit`` (at ``limit_path``) by more than
    ``CLOCK_SKEW_S``; ``why`` says why it cannot be."""
    late = (t - limit).total_seconds()
    if late <= CLOCK_SKEW_S:
        return []
    return [(path, f"is {t.isoformat()}, {_span(late)} after {limit_path} ({limit.isoformat()}): {why}")]


def _span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 7200 else f"{seconds / 86400:.1f} days"


def timestamp_problems(doc: dict[str, Any], now: datetime | None = None) -> list[Problem]:
    """Every time stamp between InferCrane's first day and now, none after the receipt's ``recorded_at``, and
    ``recorded_at`` its provenance's."""
    now = now or datetime.now(timezone.utc)
    out: list[Problem] = []
    recorded = stamp(doc.get("recorded_at"))
    prov = stamp((doc.get("provenance") or {}).get("recorded_at"))
    if recorded is not None and prov is not None and recorded != prov:
        out.append(("recorded_at", f"is {recorded.isoformat()} but provenance.recorded_at is {prov.isoformat()}: a "
                                   "receipt is recorded once"))
    for path, t in time_stamps(doc):
        if t < EARLIEST_RECORD:
            out.append((path, f"is {t.isoformat()}, before InferCrane existed (its first day: "
                              f"{EARLIEST_RECORD.isoformat()}): no receipt InferCrane wrote records it"))
        elif (t - now).total_seconds() > CLOCK_SKEW_S:
            out.append((path, f"is {t.isoformat()}, {_span((t - now).total_seconds())} in the future"))
        elif recorded is not None and path not in ("recorded_at", "provenance.recorded_at"):
            out += not_after(path, t, recorded, "recorded_at", "a receipt is written after what it records")
    return out


def config_problems(doc: dict[str, Any]) -> list[Problem]:
    """``provenance.config_sha256`` is the hash of ``provenance.config``."""
    prov = doc.get("provenance") or {}
    if not isinstance(prov.get("config"), dict) or prov.get("config_sha256") is None:
        return []
    actual = config_hash(prov["config"])
    if actual == prov["config_sha256"]:
        return []
    return [("provenance.config_sha256", f"is {prov['config_sha256']} but provenance.config hashes to {actual}: the "
                                         "configuration was changed after it was recorded")]


def hardware_problems(doc: dict[str, Any]) -> list[Problem]:
    """A receipt that names its hardware twice (``hardware`` and ``provenance.hardware``) names one machine."""
    hw, prov = doc.get("hardware"), (doc.get("provenance") or {}).get("hardware")
    if not (isinstance(hw, dict) and isinstance(prov, dict)):
        return []
    return [(f"hardware.{k}", f"is {hw.get(k)!r} but provenance.hardware.{k} is {prov.get(k)!r}: one receipt, one "
                              "machine")
            for k in dict.fromkeys([*hw, *prov]) if hw.get(k) != prov.get(k)]


def _stand_in(m: dict[str, Any]) -> bool:
    return m.get("weights") == "dummy" or m.get("tokenizer") == "stand-in"


def model_problems(doc: dict[str, Any]) -> list[Problem]:
    """``provenance.model`` against InferCrane's model catalog (``models.catalog``)."""
    from ..models.catalog import config_fingerprint, entry_of_fingerprint, find

    m = (doc.get("provenance") or {}).get("model")
    if not isinstance(m, dict) or not isinstance(m.get("id"), str):
        return []
    p, name, rev, stated = "provenance.model", m["id"], m.get("revision"), m.get("config_sha256")
    entry = find(name)
    out: list[Problem] = []
    if stated is not None:
        owner = entry_of_fingerprint(stated)
        if owner is not None and owner.id != name:
            out.append((f"{p}.id", f"is {name!r} but its config fingerprint (config_sha256 {stated[:12]}…) is the "
                                   f"config of {owner.id}: the id does not name the model measured"))
    if entry is None:
        if _stand_in(m):
            out.append((f"{p}.id", f"is {name!r}, which InferCrane's model catalog does not hold, but the model is a "
                                   "stand-in (dummy weights / stand-in tokenizer), and stand-ins are made of catalog "
                                   "models only"))
        if isinstance(m.get("package"), dict):
            out.append((f"{p}.package", f"names a package, but {name!r} is not in InferCrane's model catalog, and "
                                        "only its packaged models are converted from packages"))
        return out
    out += _package_problems(m, entry)
    if rev != entry.revision:
        if _stand_in(m):
            out.append((f"{p}.revision", f"is {rev!r} but a stand-in of {name} is made of the catalog's revision "
                                         f"{entry.revision}"))
        return out  # another revision's config may differ: nothing to hold it to
    want = config_fingerprint(entry.config)
    if stated is not None and stated != want:
        out.append((f"{p}.config_sha256", f"is {stated} but {name} at revision {rev} has the config fingerprint "
                                          f"{want} (InferCrane's model catalog)"))
    for k, v in (m.get("config_fields") or {}).items():
        if k in entry.config and entry.config[k] != v:
            out.append((f"{p}.config_fields.{k}", f"is {v!r} but the config of {name} at revision {rev} says "
                                                  f"{entry.config[k]!r}"))
    return out


def _package_problems(m: dict[str, Any], entry: Any) -> list[Problem]:
    """Weights recorded as converted from a package are the catalog entry's package, file and converted weights."""
    pkg, p = m.get("package"), "provenance.model.package"
    if not isinstance(pkg, dict):
        return []
    want = entry.package
    if want is None:
        return [(p, f"names a package, but {entry.id} has no packaged weights in InferCrane's model catalog (config "
                    "only)")]
    out = [(f"{p}.{k}", f"is {pkg.get(k)!r} but {entry.id}'s package in InferCrane's model catalog has {v!r}")
           for k, v in (("registry", want.registry), ("name", want.name), ("version", want.version),
                        ("file", want.file), ("file_sha256", want.file_sha256),
                        ("weights_sha256", want.weights_sha256)) if pkg.get(k) != v]
    if m.get("license") is not None and m.get("license") != want.license:
        out.append(("provenance.model.license", f"is {m.get('license')!r} but {entry.id}'s package is licensed "
                                                f"{want.license!r} (InferCrane's model catalog)"))
    return out


def unchecked(doc: dict[str, Any]) -> list[str]:
    """What the checks above cannot show for this receipt, one line each (empty when nothing is missing)."""
    from ..models.catalog import find

    m = (doc.get("provenance") or {}).get("model")
    if not isinstance(m, dict):
        return ["provenance.model: not recorded: its model id is "
                "tied to no config, so a relabelled model cannot be told from the model measured"]
    if m.get("config_sha256") is None:
        return [f"provenance.model.config_sha256: not recorded (a receipt written before InferCrane recorded the "
                f"model config's fingerprint): the id {m.get('id')!r} is tied to its config_fields only, so a model "
                "relabelled with the same fields cannot be told from the model measured"]
    entry = find(m.get("id"))
    if entry is None:
        return [f"provenance.model.config_sha256: {m.get('id')!r} is not in InferCrane's model catalog, so nothing "
                "here says which config its fingerprint should be"]
    if m.get("revision") != entry.revision:
        return [f"provenance.model.config_sha256: the catalog holds {entry.id} at revision {entry.revision}, not "
                f"{m.get('revision')!r}, so its fingerprint is held to nothing"]
    return []


def crosscheck(doc: dict[str, Any]) -> list[Problem]:
    """Every check of this module (module docstring)."""
    return config_problems(doc) + hardware_problems(doc) + timestamp_problems(doc) + model_problems(doc)

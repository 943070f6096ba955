"""Every number a benchmark README prints must be found in the committed file it cites.

A README names its evidence with an HTML comment ``<!-- sources: a.json, ../b/c.log -->`` (paths relative to the
README's folder). The comment governs all text after it up to the next ``sources`` comment; a number before any
``sources`` comment is a problem, and so is a cited file that does not exist.

What counts as a printed number (``readme_numbers``): every numeric token of the prose and tables, after masking
fenced code blocks, inline code spans, HTML comments, link targets, bare URLs, ISO dates (2026-12-01) and
ordered-list markers. A token glued to a letter or an underscore (H200, sm90, Qwen3, 0.6B, bf16, x2, t128r1, 1.3µs)
is a name, not a number; ``×`` and ``%`` are not letters, so ``6.91×`` and ``2 ×`` are numbers. A leading ``-`` or
``−`` (not preceded by a word character) is a sign; an en dash or a hyphen between two numbers is a range
(``3.61–5.44`` is two numbers). A token with two or more dots (``2.11.0``, ``580.159.04``) is a version: it is
looked up as literal text. Thousand separators are not supported: ``1,000`` reads as two numbers.

The matching rule (``matches``): a number ``v`` printed with ``d`` decimals matches a number ``x`` of a source if
``|x - v| <= 0.5 * 10**-d`` (plus a relative epsilon for binary floating point); one printed without a decimal point
(an integer) must equal ``x`` exactly. A number followed by ``%`` or ``percent`` (directly, or as the last of a range
or ``/`` list) also matches a fraction ``x`` with ``100 * x``. A number printed without a sign may match ``x`` or
``-x`` ("2.0 % slower" against a stored ``-2.0``); one printed with a sign must match with that sign.

A source's numbers (``source_numbers``) are every numeric token of its text — JSON numbers, numbers inside JSON
strings, log text; the members of a ``.tar.xz`` / ``.tar.gz`` / ``.tgz`` source are read as text. Parsed sources are
cached by path, size and modification time.
"""
from __future__ import annotations

import bisect
import functools
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

SOURCES_COMMENT = re.compile(r"<!--\s*sources:(?P<paths>.*?)-->", re.DOTALL)
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
# A code span: a run of backticks closed by a run of the same length, inside one paragraph.
CODE_SPAN = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)(?:(?!\n[ \t]*\n).)+?(?<!`)(?P=ticks)(?!`)", re.DOTALL)
LINK_TARGET = re.compile(r"\]\([^)\n]*\)|^ {0,3}\[[^\]\n]+\]:[^\n]*", re.MULTILINE)
URL = re.compile(r"<?https?://[^\s)>]+>?")
ISO_DATE = re.compile(r"(?<![\w.])\d{4}-\d{2}-\d{2}(?!\d)")
LIST_MARKER = re.compile(r"^[ \t]*\d+[.)](?=[ \t])", re.MULTILINE)

# A README token: scientific notation first (its exponent's sign would otherwise split it), then a run of word
# characters and dots. Trailing dots are sentence punctuation.
README_TOKEN = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[eE][-+−]?\d+(?![\w.])|[\w.]+")
PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+−]?\d+)?")
VERSION = re.compile(r"\d+(?:\.\d+){2,}")
# What may follow a number so that ``%`` still applies to it: more numbers of a range or a ``/`` list.
PERCENT_AFTER = re.compile(r"(?:[ \t]*[–/-][ \t]*[-−]?\d+(?:\.\d+)?)*[ \t]*(?:%|percent\b)")

SOURCE_NUMBER = re.compile(r"(?<![\w.])[-−](?=\d)|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

EPS_REL = 1e-9


@dataclass(frozen=True)
class Printed:
    """One number as a README prints it."""

    offset: int
    line: int
    text: str  # as printed, sign included
    value: float
    half_unit: float  # 0 for an integer: exact match
    percent: bool
    signed: bool
    version: bool = False


@dataclass(frozen=True)
class Problem:
    readme: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.readme}:{self.line}: {self.message}"


def _mask(text: str, start: int, end: int) -> str:
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def _mask_all(text: str, pattern: re.Pattern[str]) -> str:
    for m in reversed(list(pattern.finditer(text))):
        text = _mask(text, m.start(), m.end())
    return text


def _mask_fences(text: str) -> str:
    lines = text.splitlines(keepends=True)
    out, open_fence = [], None
    for line in lines:
        m = FENCE.match(line)
        if open_fence is None and m:
            open_fence = m.group("fence")
            out.append(re.sub(r"[^\n]", " ", line))
        elif open_fence is not None:
            stripped = line.strip()
            if stripped.startswith(open_fence[0] * len(open_fence)) and set(stripped) == {open_fence[0]}:
                open_fence = None
            out.append(re.sub(r"[^\n]", " ", line))
        else:
            out.append(line)
    return "".join(out)


def _half_unit(digits: str) -> float:
    """Half a unit in the last printed digit; 0 (exact) for an integer."""
    mantissa, _, exponent = digits.replace("−", "-").lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    power = int(exponent or 0) - decimals
    return 0.0 if power >= 0 else 0.5 * 10.0 ** power


def _has_sign(text: str, start: int) -> bool:
    """A ``-`` or ``−`` right before ``start`` is a sign unless it follows a word character (then it is a range)."""
    if start < 1 or text[start - 1] not in "-−":
        return False
    return start < 2 or not (text[start - 2].isalnum() or text[start - 2] in "_.")


def readme_numbers(text: str) -> tuple[list[tuple[int, list[str]]], list[Printed]]:
    """The ``sources`` comments (offset, paths) and the printed numbers of a README, in order of appearance."""
    masked = _mask_all(_mask_fences(text), CODE_SPAN)  # a comment shown as code is not a comment
    sources = [(m.start(), [p.strip() for p in m.group("paths").split(",") if p.strip()])
               for m in SOURCES_COMMENT.finditer(masked)]
    for pattern in (HTML_COMMENT, LINK_TARGET, URL, ISO_DATE, LIST_MARKER):
        masked = _mask_all(masked, pattern)
    numbers: list[Printed] = []
    for m in README_TOKEN.finditer(masked):
        token = m.group().rstrip(".")
        if not token or not token[0].isdigit():
            continue
        line = masked.count("\n", 0, m.start()) + 1
        if VERSION.fullmatch(token):
            numbers.append(Printed(m.start(), line, token, 0.0, 0.0, False, False, version=True))
            continue
        if not PLAIN_NUMBER.fullmatch(token):
            continue  # glued to a letter: a name
        signed = _has_sign(masked, m.start())
        value = float(token.replace("−", "-")) * (-1.0 if signed else 1.0)
        percent = PERCENT_AFTER.match(masked, m.start() + len(token)) is not None
        shown = ("−" if signed else "") + token
        numbers.append(Printed(m.start(), line, shown, value, _half_unit(token), percent, signed))
    return sources, numbers


@dataclass(frozen=True)
class Source:
    text: str
    values: tuple[float, ...]  # sorted


def _read_text(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".tar.xz", ".tar.gz", ".tgz")):
        parts = []
        with tarfile.open(path) as tar:
            for member in tar:
                if member.isfile():
                    data = tar.extractfile(member)
                    if data is not None:
                        parts.append(data.read().decode("utf-8", errors="replace"))
        return "\n".join(parts)
    return path.read_text(encoding="utf-8", errors="replace")


@functools.lru_cache(maxsize=64)
def _load(path: Path, size: int, mtime_ns: int) -> Source:
    text = _read_text(path)
    values, sign = [], 1.0
    for m in SOURCE_NUMBER.finditer(text):
        if m.group() in "-−":
            sign = -1.0
            continue
        values.append(sign * float(m.group()))
        sign = 1.0
    return Source(text, tuple(sorted(values)))


def source_numbers(path: Path) -> Source:
    """A source file's text and its numbers, parsed once per version of the file."""
    st = path.stat()
    return _load(path.resolve(), st.st_size, st.st_mtime_ns)


def _within(values: tuple[float, ...], target: float, tol: float) -> bool:
    i = bisect.bisect_left(values, target - tol)
    return i < len(values) and values[i] <= target + tol


def _nearest(values: tuple[float, ...], target: float) -> float | None:
    i = bisect.bisect_left(values, target)
    near = [values[j] for j in (i - 1, i) if 0 <= j < len(values)]
    return min(near, key=lambda x: abs(x - target)) if near else None


def matches(n: Printed, source: Source) -> bool:
    """Whether ``n`` is held by ``source`` within its printed rounding (the rule in the module docstring)."""
    if n.version:
        return re.search(rf"(?<![\d.]){re.escape(n.text)}(?!\.?\d)", source.text) is not None
    targets = [n.value] if n.signed else [n.value, -n.value]
    for v in targets:
        tol = n.half_unit + EPS_REL * max(1.0, abs(v))
        if _within(source.values, v, tol):
            return True
        if n.percent and _within(source.values, v / 100.0, tol / 100.0):
            return True
    return False


def check_readme(readme: Path) -> list[Problem]:
    """Every problem with the printed numbers of one README: unsourced, cited file missing, or not found."""
    text = readme.read_text(encoding="utf-8")
    sources, numbers = readme_numbers(text)
    problems: list[Problem] = []
    cited: list[list[Path]] = []
    for offset, paths in sources:
        line = text.count("\n", 0, offset) + 1
        if not paths:
            problems.append(Problem(readme, line, "a sources comment names no file"))
        existing = []
        for p in paths:
            path = readme.parent / p
            if path.is_file():
                existing.append(path)
            else:
                problems.append(Problem(readme, line, f"cited source {p} does not exist (looked for {path})"))
        cited.append(existing)
    starts = [offset for offset, _ in sources]
    for n in numbers:
        i = bisect.bisect_right(starts, n.offset) - 1
        if i < 0:
            problems.append(Problem(readme, n.line, f"{n.text} appears before any <!-- sources: … --> comment"))
            continue
        loaded = [source_numbers(f) for f in cited[i]]
        if any(matches(n, s) for s in loaded):
            continue
        names = ", ".join(sources[i][1]) or "(none)"
        what = "version" if n.version else "number"
        hint = ""
        if not n.version and loaded:
            near = [x for x in (_nearest(s.values, n.value) for s in loaded) if x is not None]
            if near:
                hint = f"; nearest there: {min(near, key=lambda x: abs(x - n.value))!r}"
        unit = " % (nor as a fraction)" if n.percent else ""
        problems.append(Problem(readme, n.line, f"{what} {n.text}{unit} is not in its sources [{names}]{hint}"))
    return problems

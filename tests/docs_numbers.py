"""Every number a README prints is tied to the field of a committed file it claims, and equals it.

The checked files (``checked_files``): ``docs/benchmarks/**/README.md``, ``docs/benchmarks/kernel-tuning-notes.md``
and the top-level ``README.md``. ``docs/benchmarks/README.md`` explains the rules for a writer; this docstring is the
reference.

**Cite blocks.** A README cites its numbers in HTML comments that begin with ``cite`` and follow the text they cover::

    <!-- cite
    let S = compiled-cuda.json: paired_aiperf.statistics
    0.9832 = S[concurrency=1, metric=output_tok_s].ratio_b_over_a
    23.14 = percent(1 - S[concurrency=1, metric=output_tok_s].ratio_b_over_a)
    1, 8, 32 = compiled-cuda.json: paired_aiperf.workload.concurrency
    col "eager" = kernel-screen.json: result.cells[impl=eager, rows={rows}].median_us
    -->

A block covers every printed number between the previous cite block (or the start of the file) and itself. One line
is one of:

- ``let NAME = REF`` names a reference (``FILE: PATH``), a whole file (``let L = run.log``) or a folder
  (``let E = evidence.tar.xz/``, then ``E/poc.json: …``), for every block of the README; a name is defined once;
- ``KEY = EXPR``: the printed number ``KEY`` (as printed, sign included) equals ``EXPR``. A key written once covers
  every occurrence of that printed number in the block's text; written k times, the block's text must print it exactly
  k times, and the lines go to the occurrences in order. ``K1, K2, K3 = EXPR`` takes a list-valued ``EXPR`` element by
  element, ``K1, K2 = E1; E2`` one expression per key;
- ``col "HEADER" = EXPR; EXPR…`` (or ``col "H1", "H2" = …``): for every body row of a Markdown table in the block,
  the numbers of that column's cell, in order (one expression per number of the cell); ``row "LABEL" = …``: the same
  for each cell of the row whose first cell reads ``LABEL``; ``cell "LABEL", "HEADER" = …``: that one cell. In a
  template, ``{HEADER}`` stands for the text of that column's cell in the same row, ``{col}`` for the current cell's
  column header and ``{row}`` for the row's first cell. A keyed line takes precedence (and is the way to cite a
  header row); a template takes the cell's numbers that no key took. A number in a cell that a template reads through
  ``{HEADER}`` or ``{col}`` is checked by that template: its expressions must resolve, and their values match;
- ``# text``: a note for the reader, ignored.

**References** (``REF``): ``FILE: PATH``, with ``FILE`` relative to the README's folder (named by its extension:
``.json .jsonl .csv .tsv .yaml .yml .log .txt .md .py .toml .html``); a path through a committed archive
(``evidence.tar.xz/poc/paired.json``) reads that member. How a file is read, by its name: ``.json`` as JSON; ``.jsonl``
as a list of JSON lines; ``.csv`` / ``.tsv`` as a list of rows keyed by the header; ``.yaml`` / ``.yml`` as YAML;
anything else as text. ``NAME: PATH`` continues a ``let`` name as if it were a file, ``NAME.x`` / ``NAME[…]`` its
path.
``PATH`` is a sequence of steps:

- ``key`` / ``.key`` / ``."key with spaces"``: a field of a mapping;
- ``[3]``, ``[-1]``: an element of a list; ``[a:b]`` a slice; ``[*]``: every element (or a mapping's every value); what
  follows applies to each;
- ``[k=v, k2.sub=v2]``: the one element whose fields equal the values (numbers compare as numbers; ``!=``, ``<``,
  ``>``, ``<=``, ``>=`` too); none or several is a problem. ``[*k=v]``: every such element (none is a count of 0);
- on text: ``/REGEX/`` the value its one match captures (group ``v``, else group 1, else the whole match; a second
  match is a problem), ``/REGEX/*`` every match's (a list, maybe empty); ``~/REGEX/`` after any step reads the text of
  that field (or of each text of a list); ``table(FIRST)`` (or ``table(FIRST, n)``, the n-th from 1) the rows of the
  text table whose header line starts with the word ``FIRST``, as mappings from the header's words (columns split on
  ``│``, ``┃`` or ``|`` where the header has them, otherwise on whitespace; trailing cells may be empty). A regex or
  a table on a data file reads its text.

**Expressions** (``EXPR``): references, numbers, ``+ - * /`` (with spaces around ``-`` and ``+``; on lists element by
element), parentheses, and the functions ``min max median mean sum count abs percent`` (``percent(x)`` is ``100 * x``:
a percent printed from a stored fraction says so; ``count`` counts values of any kind). A function of a list reads
every element. Every expression must read a file: a number alone cites nothing.

**The rule** (``matches``): a number printed with ``d`` decimals matches the cited value ``x`` when
``|x - v| <= 0.5 * 10**-d`` (plus a relative ``1e-9`` for binary floating point); one printed without a decimal point
within ``0.5``; ``1e−6`` within half a unit of its last printed digit. The sign is part of the number: "2.0 % slower"
of a stored ``-2.0`` cites ``abs(…)``.

**What counts as a printed number** (``readme_numbers``): every numeric token of the prose and tables, after masking
fenced and indented code blocks, inline code spans, HTML comments, link targets and bare URLs. A token glued to a
letter or an underscore (H200, sm90, Qwen3, 0.6B, bf16, x2, t128r1, 1.3µs), or joined to a word by a hyphen
(public-1000), is a name, not a number; ``×`` and ``%`` are not letters, so ``6.91×`` and ``2 ×`` are numbers. A
leading ``-`` or ``−`` (not after a word character) is a sign; an en dash or a hyphen between two numbers is a range
(``3.61–5.44`` is two numbers). Thousand separators are not supported: ``10 240`` reads as two numbers.

**Exempt, by rule only** (``EXEMPT`` patterns and ``EXEMPT_COLUMNS`` table columns, each with its reason): the
numbers that are not measurements of a run. ``exempt_numbers`` lists every exempt number with its rule; nothing else
is skipped.
"""
from __future__ import annotations

import bisect
import csv
import functools
import io
import json
import math
import re
import statistics
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "docs" / "benchmarks"


def checked_files() -> list[Path]:
    """The Markdown files whose numbers must be cited."""
    return sorted(BENCHMARKS.glob("**/README.md")) + [BENCHMARKS / "kernel-tuning-notes.md", REPO / "README.md"]


CITE_BLOCK = re.compile(r"<!--\s*cite\b(?P<body>.*?)-->", re.DOTALL)
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
# A code span: a run of backticks closed by a run of the same length, inside one paragraph.
CODE_SPAN = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)(?:(?!\n[ \t]*\n).)+?(?<!`)(?P=ticks)(?!`)", re.DOTALL)
LINK_TARGET = re.compile(r"\]\([^)\n]*\)|^ {0,3}\[[^\]\n]+\]:[^\n]*", re.MULTILINE)
URL = re.compile(r"<?https?://[^\s)>]+>?")

# Numbers that are not measurements of a run: (name, pattern, why). The pattern's match is masked whole.
EXEMPT: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("date", re.compile(r"(?<![\w.])\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?(?![\w])"),
     "a calendar date (and time) says when, not what was measured"),
    ("commit", re.compile(r"(?<![\w.])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w.])"),
     "a commit hash names a version of the code (55e6969 reads like a number)"),
    ("clock time", re.compile(r"(?<![\w.:])\d{1,2}:\d{2}(?::\d{2})?(?![\w.:]?\d)"),
     "a time of day (17:37:21) says when, not what was measured"),
    ("version", re.compile(r"(?<![\w.])\d+(?:\.\d+){2,}(?:\+\w+)?(?![\w])"),
     "a token with two or more dots is a version (2.11.0, 580.159.04)"),
    ("list marker", re.compile(r"^[ \t]*\d+[.)](?=[ \t])", re.MULTILINE),
     "an ordered-list marker numbers the list, not a measurement"),
)

# Table columns whose cells are not measurements, by header: (rule name, why). Their header row is still checked.
EXEMPT_COLUMNS: dict[str, tuple[str, str]] = {
    "predicted": ("prediction", "a prediction is the note's own claim, made before the run; the measured column "
                                "beside it is cited"),
}

# A README token: scientific notation first (its exponent's sign would otherwise split it), then a run of word
# characters and dots. Trailing dots are sentence punctuation.
README_TOKEN = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[eE][-+−]?\d+(?![\w.])|[\w.]+")
PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+−]?\d+)?")
EPS_REL = 1e-9


class CiteError(Exception):
    """A reference or an expression that cannot be read or evaluated; the message says what and where."""


# --- the README side ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """Where a number sits in a Markdown table."""

    table: int
    row: int  # 0: the header row
    column: str  # the column's header text
    label: str  # the row's first cell
    texts: tuple[tuple[str, str], ...]  # (header, cell text) of every cell of the row
    index: int = 0  # the number's position among its cell's numbers


@dataclass(frozen=True)
class Printed:
    """One number as a README prints it."""

    offset: int
    line: int
    text: str  # as printed, sign included ("−" for a minus sign)
    value: float
    half_unit: float
    cell: Cell | None = None


@dataclass(frozen=True)
class Exempt:
    offset: int
    line: int
    text: str
    rule: str


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


LIST_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d+[.)])\s")


def _mask_indented_code(text: str) -> str:
    """Mask indented code blocks: lines indented by four spaces or a tab, after a blank line that follows a paragraph
    starting at the margin (not a list item, whose continuation lines are indented too)."""
    lines = text.splitlines(keepends=True)
    out, in_code, prev_blank, last_para_first = [], False, True, ""
    for line in lines:
        blank = not line.strip()
        indented = line.startswith(("    ", "\t"))
        if in_code and (indented or blank):
            out.append(re.sub(r"[^\n]", " ", line))
            prev_blank = blank
            continue
        in_code = False
        if indented and prev_blank and not blank and not LIST_ITEM.match(last_para_first) \
                and not last_para_first.startswith((" ", "\t")):
            in_code = True
            out.append(re.sub(r"[^\n]", " ", line))
            prev_blank = False
            continue
        if not blank and prev_blank:
            last_para_first = line
        out.append(line)
        prev_blank = blank
    return "".join(out)


def half_unit(digits: str) -> float:
    """Half a unit in the last printed digit (0.5 for an integer)."""
    mantissa, _, exponent = digits.replace("−", "-").lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def _has_sign(text: str, start: int) -> bool:
    """A ``-`` or ``−`` right before ``start`` is a sign unless it follows a word character (then it is a range)."""
    if start < 1 or text[start - 1] not in "-−":
        return False
    return start < 2 or not (text[start - 2].isalnum() or text[start - 2] in "_.")


def _plain(cell: str) -> str:
    """A table cell's text without Markdown emphasis and code ticks."""
    return re.sub(r"\*\*|`", "", cell).strip()


def _split_row(line: str) -> list[tuple[int, int]]:
    """The (start, end) offsets within ``line`` of a table row's cells, split on unescaped pipes."""
    bars = [m.start() for m in re.finditer(r"(?<!\\)\|", line)]
    if not bars:
        return []
    if line[:bars[0]].strip():  # a row without a leading pipe
        bars.insert(0, -1)
    if line[bars[-1] + 1:].strip():
        bars.append(len(line))
    return [(a + 1, b) for a, b in zip(bars, bars[1:])]


DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _tables(text: str, masked: str) -> dict[int, Cell]:
    """Every Markdown table cell of the text, by the offset of its first character (header and body rows)."""
    cells: dict[int, Cell] = {}
    lines = masked.splitlines(keepends=True)
    originals = text.splitlines(keepends=True)
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line)
    table, i = -1, 0
    while i < len(lines) - 1:
        if "|" in lines[i] and DELIMITER_ROW.match(lines[i + 1]) and _split_row(lines[i].rstrip("\n")):
            table += 1
            header = [_plain(originals[i][a:b]) for a, b in _split_row(originals[i].rstrip("\n"))]
            rows, j = [i], i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                rows.append(j)
                j += 1
            for r, k in enumerate(rows):
                spans = _split_row(originals[k].rstrip("\n"))
                texts = [_plain(originals[k][a:b]) for a, b in spans]
                pairs = tuple((header[c] if c < len(header) else f"#{c}", t) for c, t in enumerate(texts))
                for c, (a, _) in enumerate(spans):
                    cells[starts[k] + a] = Cell(table, 0 if r == 0 else r, pairs[c][0], texts[0] if texts else "",
                                                pairs)
            i = j
        else:
            i += 1
    return cells


def _masked(text: str) -> tuple[str, list[Exempt]]:
    masked = _mask_all(_mask_indented_code(_mask_fences(text)), CODE_SPAN)
    for pattern in (HTML_COMMENT, LINK_TARGET, URL):
        masked = _mask_all(masked, pattern)
    exempt: list[Exempt] = []
    for name, pattern, _ in EXEMPT:
        for m in pattern.finditer(masked):
            exempt.append(Exempt(m.start(), masked.count("\n", 0, m.start()) + 1, m.group().strip(), name))
        masked = _mask_all(masked, pattern)
    cells = _tables(text, masked)
    starts = sorted(cells)
    for k, start in enumerate(starts):
        cell = cells[start]
        if cell.row == 0 or cell.column.lower() not in EXEMPT_COLUMNS:
            continue
        end = min(masked.find("\n", start) % (len(masked) + 1), starts[k + 1] if k + 1 < len(starts) else len(masked))
        for m in re.finditer(r"\d+(?:\.\d+)?", masked[start:end]):
            exempt.append(Exempt(start + m.start(), masked.count("\n", 0, start) + 1, m.group(),
                                 EXEMPT_COLUMNS[cell.column.lower()][0]))
        masked = _mask(masked, start, end - 1)
    return masked, sorted(exempt, key=lambda e: e.offset)


def exempt_numbers(text: str) -> list[Exempt]:
    """The numbers of the text that ``EXEMPT`` leaves out, each with the rule that does."""
    return _masked(text)[1]


def readme_numbers(text: str) -> list[Printed]:
    """The printed numbers of a README, in order of appearance, each with its table cell if it is in one."""
    masked, _ = _masked(text)
    cells = _tables(text, masked)
    cell_starts = sorted(cells)
    numbers: list[Printed] = []
    per_cell: dict[int, int] = {}
    for m in README_TOKEN.finditer(masked):
        token = m.group().rstrip(".")
        if not token or not token[0].isdigit() or not PLAIN_NUMBER.fullmatch(token):
            continue  # a word, or glued to a letter: a name
        if m.start() >= 2 and masked[m.start() - 1] == "-" and masked[m.start() - 2].isalpha():
            continue  # hyphenated to a word: part of a name (public-1000, seed-paired-2)
        signed = _has_sign(masked, m.start())
        value = float(token.replace("−", "-")) * (-1.0 if signed else 1.0)
        cell = None
        k = bisect.bisect_right(cell_starts, m.start()) - 1
        if k >= 0:
            start = cell_starts[k]
            line_end = masked.find("\n", start)
            pipe = masked.find("|", start)
            if (line_end == -1 or m.start() < line_end) and (pipe == -1 or m.start() < pipe):
                index = per_cell.get(start, 0)
                per_cell[start] = index + 1
                base = cells[start]
                cell = Cell(base.table, base.row, base.column, base.label, base.texts, index)
        numbers.append(Printed(m.start(), masked.count("\n", 0, m.start()) + 1, ("−" if signed else "") + token,
                               value, half_unit(token), cell))
    return numbers


# --- the files a citation reads -----------------------------------------------------------------------------------

ARCHIVE = (".tar.xz", ".tar.gz", ".tgz")


@functools.lru_cache(maxsize=6)
def _archive(path: Path, size: int, mtime_ns: int) -> dict[str, bytes]:
    members = {}
    with tarfile.open(path) as tar:
        for member in tar:
            if member.isfile():
                data = tar.extractfile(member)
                if data is not None:
                    members[member.name.removeprefix("./")] = data.read()
    return members


def _read_bytes(base: Path, name: str) -> bytes:
    """The bytes of ``name`` (relative to ``base``), through a committed archive if a prefix of it is one."""
    parts = Path(name).parts
    for k in range(1, len(parts) + 1):
        prefix = base.joinpath(*parts[:k])
        if prefix.name.endswith(ARCHIVE) and prefix.is_file() and k < len(parts):
            st = prefix.stat()
            members = _archive(prefix.resolve(), st.st_size, st.st_mtime_ns)
            member = "/".join(parts[k:])
            if member not in members:
                near = [m for m in members if m.endswith(parts[-1])][:5]
                like = f" (like: {', '.join(near)})" if near else ""
                raise CiteError(f"{prefix.name} has no member {member}{like}")
            return members[member]
    path = base / name
    if not path.is_file():
        raise CiteError(f"cited file {name} does not exist (looked for {path})")
    return path.read_bytes()


@functools.lru_cache(maxsize=256)
def _parsed(base: Path, name: str, stamp: tuple[int, int]) -> Any:
    data = _read_bytes(base, name).decode("utf-8", errors="replace")
    lower = name.lower()
    try:
        if lower.endswith(".json"):
            return json.loads(data)
        if lower.endswith(".jsonl"):
            return [json.loads(line) for line in data.splitlines() if line.strip()]
        if lower.endswith((".csv", ".tsv")):
            return list(csv.DictReader(io.StringIO(data), delimiter="\t" if lower.endswith(".tsv") else ","))
        if lower.endswith((".yaml", ".yml")):
            import yaml

            return yaml.safe_load(data)
    except (ValueError, ImportError) as e:
        raise CiteError(f"{name} cannot be read as its kind: {e}") from None
    return data


def load(base: Path, name: str) -> Any:
    """A cited file's content, parsed by its name, cached while the file (or its archive) is unchanged."""
    parts = Path(name).parts
    stamp = (0, 0)
    for k in range(1, len(parts) + 1):
        prefix = base.joinpath(*parts[:k])
        if prefix.is_file():
            st = prefix.stat()
            stamp = (st.st_size, st.st_mtime_ns)
            break
    return _parsed(base.resolve(), name, stamp)


# --- references and expressions ---------------------------------------------------------------------------------

class Many(list):
    """The values of a step applied to every element (``[*]``, ``[*k=v]``)."""


@dataclass(frozen=True)
class Step:
    kind: str  # key | index | all | select | regex | table
    arg: Any = None
    many: bool = False


@dataclass(frozen=True)
class Ref:
    file: str | None  # None: a ``let`` name
    name: str | None
    steps: tuple[Step, ...]
    text: str


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Any
    right: Any


@dataclass(frozen=True)
class Neg:
    operand: Any


FUNCTIONS = ("min", "max", "median", "mean", "sum", "count", "abs", "percent")
KEY_CHARS = re.compile(r"[^\s.\[\](),;/=\"*~]+")
NUMBER_LITERAL = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
# A file is named by its extension (what a path through an archive ends in, too).
FILE_KINDS = r"(?:json|jsonl|csv|tsv|yaml|yml|log|txt|md|py|toml|html)"
FILE_PREFIX = re.compile(rf"(?P<file>[^\s:(),;=\[\]\"]+\.{FILE_KINDS}):")
IDENT = re.compile(r"[A-Za-z_]\w*")


class _Parser:
    """Recursive descent over one expression (the grammar is in the module docstring)."""

    def __init__(self, text: str, names: frozenset[str]):
        self.text, self.pos, self.names = text, 0, names

    def fail(self, why: str) -> CiteError:
        return CiteError(f"cannot read {self.text!r} at column {self.pos + 1}: {why}")

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else "\0"  # never in a set of characters

    def expr(self) -> Any:
        node = self.term()
        while True:
            self.ws()
            c = self.peek()
            if c in "+-" and self.pos + 1 < len(self.text) and self.text[self.pos + 1].isspace():
                self.pos += 1
                node = BinOp(c, node, self.term())
            else:
                return node

    def term(self) -> Any:
        node = self.unary()
        while True:
            self.ws()
            c = self.peek()
            if c in "*/":
                self.pos += 1
                node = BinOp(c, node, self.unary())
            else:
                return node

    def unary(self) -> Any:
        self.ws()
        if self.peek() in "-−":
            self.pos += 1
            return Neg(self.unary())
        return self.primary()

    def primary(self) -> Any:
        self.ws()
        start = self.pos
        if self.peek() == "(":
            self.pos += 1
            node = self.expr()
            self.ws()
            if self.peek() != ")":
                raise self.fail("a ')' is missing")
            self.pos += 1
            return node
        m = FILE_PREFIX.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            self.ws()
            steps = self.steps(first=True)
            return Ref(m.group("file"), None, steps, self.text[start:self.pos].strip())
        m = NUMBER_LITERAL.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return float(m.group())
        m = IDENT.match(self.text, self.pos)
        if m:
            name = m.group()
            self.pos = m.end()
            if name in FUNCTIONS and self.peek() == "(":
                self.pos += 1
                args = [self.expr()]
                self.ws()
                while self.peek() == ",":
                    self.pos += 1
                    args.append(self.expr())
                    self.ws()
                if self.peek() != ")":
                    raise self.fail(f"{name}( is not closed")
                self.pos += 1
                return Call(name, tuple(args))
            if name in self.names:
                named_file = self.peek() == ":"  # NAME: /regex/ or NAME: field, as after a file
                if named_file:
                    self.pos += 1
                    self.ws()
                steps = self.steps(first=named_file)
                return Ref(None, name, steps, self.text[start:self.pos])
            raise self.fail(f"{name!r} is neither a file (FILE: PATH), a let name, nor one of {', '.join(FUNCTIONS)}")
        raise self.fail("expected a reference, a number, a function or '('")

    def _quoted(self) -> str:
        end = self.text.find('"', self.pos + 1)
        if end < 0:
            raise self.fail("a quote is not closed")
        value = self.text[self.pos + 1:end]
        self.pos = end + 1
        return value

    def _value(self) -> str:
        self.ws()
        if self.peek() == '"':
            return self._quoted()
        m = re.compile(r"[^,\]]+").match(self.text, self.pos)
        if not m:
            raise self.fail("a selector needs a value")
        self.pos = m.end()
        return m.group().strip()

    def steps(self, first: bool) -> tuple[Step, ...]:
        steps: list[Step] = []
        while self.pos < len(self.text):
            c = self.peek()
            at_start = first and not steps
            if c == "~" and self.text.startswith("~/", self.pos):  # a regex on the text of a field
                self.pos += 1
                c = "/"
                at_start = True
            if c == "/" and at_start:
                end = self.pos + 1
                while end < len(self.text) and self.text[end] != "/":
                    end += 2 if self.text[end] == "\\" else 1
                if end >= len(self.text):
                    raise self.fail("a /regex/ is not closed")
                pattern = self.text[self.pos + 1:end].replace("\\/", "/")
                try:
                    compiled = re.compile(pattern, re.MULTILINE)
                except re.error as e:
                    raise self.fail(f"bad regex: {e}") from None
                self.pos = end + 1
                many = self.peek() == "*"
                self.pos += many
                steps.append(Step("regex", compiled, many))
            elif at_start and self.text.startswith("table(", self.pos):
                self.pos += len("table(")
                self.ws()
                head = self._quoted() if self.peek() == '"' else self._value_until(",)")
                self.ws()
                nth = 1
                if self.peek() == ",":
                    self.pos += 1
                    nth = int(self._value_until(")"))
                if self.peek() != ")":
                    raise self.fail("table( is not closed")
                self.pos += 1
                steps.append(Step("table", (head, nth)))
            elif c == "." or (at_start and (c == '"' or KEY_CHARS.match(self.text, self.pos))):
                self.pos += c == "."
                if self.peek() == '"':
                    steps.append(Step("key", self._quoted()))
                else:
                    m = KEY_CHARS.match(self.text, self.pos)
                    if not m:
                        raise self.fail("a field name is expected after '.'")
                    self.pos = m.end()
                    steps.append(Step("key", m.group()))
            elif c == "[":
                steps.append(self._bracket())
            else:
                break
        return tuple(steps)

    def _value_until(self, stops: str) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in stops:
            self.pos += 1
        return self.text[start:self.pos].strip()

    def _bracket(self) -> Step:
        self.pos += 1
        self.ws()
        m = re.compile(r"(-?\d+)\s*\]").match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return Step("index", int(m.group(1)))
        m = re.compile(r"(-?\d*):(-?\d*)\s*\]").match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return Step("slice", (int(m.group(1)) if m.group(1) else None, int(m.group(2)) if m.group(2) else None))
        many = self.peek() == "*"
        self.pos += many
        self.ws()
        if many and self.peek() == "]":
            self.pos += 1
            return Step("all", None, True)
        conditions = []
        while True:
            self.ws()
            m = re.compile(r"([^\s=!<>,\]]+)\s*(!=|<=|>=|=|<|>)").match(self.text, self.pos)
            if not m:
                raise self.fail("a selector is [k=v, …], [*k=v], [n] or [*] (k!=v, k<v, k>v, k<=v, k>=v too)")
            self.pos = m.end()
            conditions.append((m.group(1), m.group(2), self._value()))
            self.ws()
            if self.peek() == ",":
                self.pos += 1
                continue
            if self.peek() == "]":
                self.pos += 1
                return Step("select", tuple(conditions), many)
            raise self.fail("a selector is not closed")


def parse_expressions(text: str, names: frozenset[str] = frozenset()) -> list[Any]:
    """The ``;``-separated expressions of a citation's right-hand side; each must read a file (a number alone is no
    citation)."""
    p = _Parser(text, names)
    out = [p.expr()]
    p.ws()
    while p.peek() == ";":
        p.pos += 1
        out.append(p.expr())
        p.ws()
    if p.pos != len(text):
        raise p.fail("unexpected text")
    for node in out:
        if not _reads_a_file(node):
            raise CiteError(f"{text!r}: an expression that reads no file cites nothing")
    return out


def _reads_a_file(node: Any) -> bool:
    if isinstance(node, Ref):
        return True
    if isinstance(node, BinOp):
        return _reads_a_file(node.left) or _reads_a_file(node.right)
    if isinstance(node, Neg):
        return _reads_a_file(node.operand)
    if isinstance(node, Call):
        return any(_reads_a_file(a) for a in node.args)
    return False


def _same(value: Any, wanted: str) -> bool:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value] == wanted.lower()
    if isinstance(value, (int, float)):
        try:
            return float(value) == float(wanted)
        except ValueError:
            return False
    return str(value) == wanted


def _holds(value: Any, op: str, wanted: str) -> bool:
    """Whether a field's value stands in ``op`` to the selector's value (``<`` and ``>`` compare numbers)."""
    if op == "=":
        return _same(value, wanted)
    if op == "!=":
        return not _same(value, wanted)
    try:
        a, b = _number(value, ""), float(wanted)
    except (CiteError, ValueError):
        return False
    return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]


def _field(value: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


_MISSING = object()


def _text_table(text: str, head: str, nth: int) -> list[dict[str, str]]:
    lines = text.splitlines()
    found = 0
    for i, line in enumerate(lines):
        boxed = any(b in line for b in "│┃")
        cells = _text_cells(line, boxed)
        if cells and cells[0] == head:
            found += 1
            if found < nth:
                continue
            rows = []
            for row in lines[i + 1:]:
                if not row.strip():
                    break
                if re.fullmatch(r"[\s─━┡┩╇┼├┤└┘┗┛╰╯+=|:-]*", row):
                    continue
                values = _text_cells(row, boxed)
                if not 2 <= len(values) <= len(cells):  # trailing columns may be empty
                    break
                rows.append(dict(zip(cells, values)))
            return rows
    raise CiteError(f"no text table whose header starts with {head!r}" + (f" (found {found})" if found else ""))


def _text_cells(line: str, boxed: bool) -> list[str]:
    if boxed:
        return [c.strip() for c in re.split(r"[│┃]", line.strip().strip("│┃"))]
    return line.split()


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        keys = list(value)
        return f"its fields: {', '.join(map(str, keys[:12]))}" + (" …" if len(keys) > 12 else "")
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"the value {str(value)[:60]!r}"


def _step(value: Any, step: Step, where: str) -> Any:
    if isinstance(value, Many) and step.kind != "regex":
        out = Many()
        for v in value:
            r = _step(v, step, where)
            out.extend(r if isinstance(r, Many) else [r])
        return out
    if step.kind == "key":
        if isinstance(value, dict) and step.arg in value:
            return value[step.arg]
        raise CiteError(f"no field {step.arg!r} at {where or 'the top'} ({_describe(value)})")
    if step.kind in ("index", "select", "slice") and not isinstance(value, list) \
            or step.kind == "all" and not isinstance(value, (list, dict)):
        raise CiteError(f"{where or 'the top'} is not a list ({_describe(value)})")
    if step.kind == "index":
        if -len(value) <= step.arg < len(value):
            return value[step.arg]
        raise CiteError(f"no element [{step.arg}] at {where} (a list of {len(value)})")
    if step.kind == "all":
        return Many(value.values() if isinstance(value, dict) else value)
    if step.kind == "slice":
        return value[step.arg[0]:step.arg[1]]
    if step.kind == "select":
        hits = [v for v in value
                if all((f := _field(v, k)) is not _MISSING and _holds(f, op, want) for k, op, want in step.arg)]
        shown = ", ".join(f"{k}{op}{w}" for k, op, w in step.arg)
        if step.many:
            return Many(hits)  # none is a count of 0 (a min or a median of nothing is an error)
        if len(hits) != 1:
            raise CiteError(f"{len(hits)} elements of {where} have {shown}; a selector must pick exactly one")
        return hits[0]
    if step.kind == "regex" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        out = []  # a regex on every text of a list (what /…/* gave): the values it captures in each, in order
        for v in value:
            r = _step(v, step, where)
            out.extend(r if isinstance(r, list) else [r])
        return out
    if not isinstance(value, str):
        raise CiteError(f"{where or 'the file'} is not text: a /regex/ or table() reads text files")
    if step.kind == "table":
        return _text_table(value, *step.arg)
    matches = list(step.arg.finditer(value))
    if not matches and not step.many:  # /re/* of nothing is no values (a count of 0)
        raise CiteError(f"/{step.arg.pattern}/ matches nothing in {where}")
    if not step.many and len(matches) > 1:
        raise CiteError(f"/{step.arg.pattern}/ matches {len(matches)} times in {where}; it must match once "
                        "(or end in * for every match)")
    captured = [m.group("v") if "v" in m.re.groupindex else m.group(1) if m.re.groups else m.group() for m in matches]
    return captured if step.many else captured[0]


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or value is None:
        raise CiteError(f"{where} is {value!r}, not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().replace("−", "-"))
        except ValueError:
            pass
    raise CiteError(f"{where} is {str(value)[:60]!r}, not a number")


@dataclass
class Context:
    """What evaluating one README's citations needs: its folder and its ``let`` names."""

    base: Path
    names: dict[str, Ref] = field(default_factory=dict)
    folders: dict[str, str] = field(default_factory=dict)  # let NAME = a/folder/: FILE may start NAME/

    def resolve(self, ref: Ref) -> Any:
        reads_text = bool(ref.steps) and ref.steps[0].kind in ("regex", "table")
        if ref.file is None:
            let = self.names[ref.name]
            if reads_text and let.file is not None and not let.steps:  # NAME: /regex/ on a whole-file name
                value = self._text(let.file)
            else:
                value = self.resolve(let)
            where = let.text
        else:
            value = self._text(ref.file) if reads_text else load(self.base, self._path(ref.file))
            where = ref.file + ":"
        for step in ref.steps:
            value = _step(value, step, where)
            where += _step_text(step)
        return value

    def _path(self, name: str) -> str:
        """``name`` with a leading folder name (``let NAME = a/folder/``) spelled out."""
        for _ in range(len(self.folders)):  # a folder name may start with another
            head, sep, rest = name.partition("/")
            if not (sep and head in self.folders):
                break
            name = self.folders[head] + rest
        return name

    def _text(self, name: str) -> str:
        """A file's text, whatever its kind: what a regex or a text table reads."""
        value = load(self.base, self._path(name))
        if isinstance(value, str):
            return value
        return _read_bytes(self.base, self._path(name)).decode("utf-8", errors="replace")

    def evaluate(self, node: Any) -> Any:
        if isinstance(node, float):
            return node
        if isinstance(node, Ref):
            value = self.resolve(node)
            if isinstance(value, (list, Many)):
                return [_number(v, node.text) for v in value]
            return _number(value, node.text)
        if isinstance(node, Neg):
            v = self.evaluate(node.operand)
            return [-x for x in v] if isinstance(v, list) else -v
        if isinstance(node, BinOp):
            a, b = self.evaluate(node.left), self.evaluate(node.right)
            if isinstance(a, list) or isinstance(b, list):  # element by element, or each element with a number
                if isinstance(a, list) and isinstance(b, list) and len(a) != len(b):
                    raise CiteError(f"{node.op} of lists of {len(a)} and {len(b)} values")
                pairs = zip(a if isinstance(a, list) else [a] * len(b), b if isinstance(b, list) else [b] * len(a))
                return [_arithmetic(node.op, x, y) for x, y in pairs]
            return _arithmetic(node.op, a, b)
        if isinstance(node, Call):
            if node.fn == "count":  # how many values a reference gives, numbers or not
                counted = [self.resolve(a) if isinstance(a, Ref) else self.evaluate(a) for a in node.args]
                return float(sum(len(v) if isinstance(v, list) else 1 for v in counted))
            args = [self.evaluate(a) for a in node.args]
            flat = [x for a in args for x in (a if isinstance(a, list) else [a])]
            if node.fn in ("abs", "percent"):
                if len(args) != 1:
                    raise CiteError(f"{node.fn}() takes one argument")
                one = abs if node.fn == "abs" else (lambda x: 100.0 * x)
                return [one(x) for x in args[0]] if isinstance(args[0], list) else one(args[0])
            if not flat:
                raise CiteError(f"{node.fn}() of nothing")
            return {"min": min, "max": max, "median": statistics.median, "mean": statistics.fmean,
                    "sum": math.fsum}[node.fn](flat)
        raise CiteError(f"cannot evaluate {node!r}")


def _arithmetic(op: str, a: float, b: float) -> float:
    if op == "/" and b == 0:
        raise CiteError("division by zero")
    return {"+": a + b, "-": a - b, "*": a * b}[op] if op != "/" else a / b


def _step_text(step: Step) -> str:
    if step.kind == "key":
        return "." + str(step.arg)
    if step.kind == "index":
        return f"[{step.arg}]"
    if step.kind == "slice":
        return "[" + ":".join("" if x is None else str(x) for x in step.arg) + "]"
    if step.kind == "all":
        return "[*]"
    if step.kind == "select":
        return "[" + ("*" if step.many else "") + ", ".join(f"{k}{op}{v}" for k, op, v in step.arg) + "]"
    if step.kind == "table":
        return f"table({step.arg[0]})"
    return f"/{step.arg.pattern}/" + ("*" if step.many else "")


def matches(printed: Printed, value: float) -> bool:
    """Whether ``printed`` is ``value`` within its printed rounding (the rule in the module docstring)."""
    return abs(value - printed.value) <= printed.half_unit + EPS_REL * max(1.0, abs(value))


# --- cite blocks --------------------------------------------------------------------------------------------------

@dataclass
class Line:
    line: int
    text: str
    keys: tuple[str, ...] = ()
    rhs: str = ""
    columns: tuple[str, ...] = ()
    rows: tuple[str, ...] = ()
    cells: tuple[tuple[str, str], ...] = ()  # cell "ROW", "COLUMN": one cell


@dataclass
class Block:
    start: int
    end: int
    line: int
    keyed: list[Line]
    templates: list[Line]


KEYS = re.compile(r"^\s*(?P<keys>[-−]?\d[\d.eE+−-]*(?:\s*,\s*[-−]?\d[\d.eE+−-]*)*)\s+=\s+(?P<rhs>.+)$")
TEMPLATE = re.compile(r'^\s*(?P<kind>col|row|cell)\s+(?P<names>"[^"]*"(?:\s*,\s*"[^"]*")*)\s+=\s+(?P<rhs>.+)$')
LET = re.compile(r"^\s*let\s+(?P<name>[A-Za-z_]\w*)\s+=\s+(?P<rhs>.+)$")


def _norm(key: str) -> str:
    return key.replace("−", "-")


def parse_blocks(text: str, readme: Path) -> tuple[list[Block], dict[str, tuple[int, str]], list[Problem]]:
    """The cite blocks of a README (outside code), its ``let`` lines (name -> (line, text)) and the lines not
    understood."""
    masked = _mask_all(_mask_fences(text), CODE_SPAN)
    blocks, lets, problems = [], {}, []
    for m in CITE_BLOCK.finditer(masked):
        first = text.count("\n", 0, m.start()) + 1
        body_start = m.start("body")
        keyed, templates = [], []
        for k, raw in enumerate(text[body_start:m.end("body")].split("\n")):
            line_no = text.count("\n", 0, body_start) + 1 + k
            stripped = raw.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if (lm := LET.match(stripped)):
                if lm["name"] in lets:
                    problems.append(Problem(readme, line_no, f"let {lm['name']} is defined twice"))
                lets[lm["name"]] = (line_no, lm["rhs"].strip())
            elif (km := KEYS.match(stripped)):
                keys = tuple(_norm(k.strip()) for k in km["keys"].split(","))
                keyed.append(Line(line_no, stripped, keys=keys, rhs=km["rhs"].strip()))
            elif (tm := TEMPLATE.match(stripped)):
                names = tuple(n.strip().strip('"') for n in re.findall(r'"([^"]*)"', tm["names"]))
                line = Line(line_no, stripped, rhs=tm["rhs"].strip())
                if tm["kind"] == "col":
                    line.columns = names
                elif tm["kind"] == "row":
                    line.rows = names
                elif len(names) == 2:
                    line.cells = (names,)
                else:
                    problems.append(Problem(readme, line_no, f'a cell template names one row and one column: '
                                                             f'cell "ROW", "COLUMN" = …: {stripped!r}'))
                    continue
                templates.append(line)
            else:
                problems.append(Problem(readme, line_no, f"a cite line is `KEY = EXPR`, `let NAME = REF`, "
                                                         f"`col \"H\" = EXPR`, `row \"L\" = EXPR` or "
                                                         f"`cell \"L\", \"H\" = EXPR`: {stripped!r}"))
        blocks.append(Block(m.start(), m.end(), first, keyed, templates))
    return blocks, lets, problems


def _fill(template: str, cell: Cell) -> str:
    """The template with ``{col}``, ``{row}`` and ``{HEADER}`` filled from the cell's row."""
    texts = dict(cell.texts)

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == "col":
            return cell.column
        if name == "row":
            return cell.label
        if name not in texts:
            raise CiteError(f"{{{name}}}: the table has no column {name!r} (columns: {', '.join(texts)})")
        return texts[name]

    return re.sub(r"\{([^{}]+)\}", sub, template)


@dataclass(frozen=True)
class Outcome:
    """What one printed number cites and what the check found."""

    number: Printed
    citation: str  # the cite line, or the filled template
    value: float | None
    problem: str | None


def check_readme(readme: Path) -> list[Problem]:
    """Every problem with the printed numbers of one README: not cited, a citation that cannot be read, or a printed
    number that is not its cited value within its printed rounding."""
    return _check(readme)[0]


def describe(readme: Path) -> list[str]:
    """Each printed number with its citation and the cited value, then the exempt numbers (for a writer)."""
    problems, outcomes, exempt = _check(readme)
    out = []
    for o in outcomes:
        where = f" [{o.number.cell.column}]" if o.number.cell else ""
        value = "" if o.value is None else f" = {o.value!r}"
        out.append(f"{readme}:{o.number.line}: {o.number.text}{where} <- {o.citation}{value}"
                   + (f"  PROBLEM: {o.problem}" if o.problem else ""))
    out += [f"{readme}:{e.line}: {e.text}  exempt ({e.rule})" for e in exempt]
    out += [f"{p}" for p in problems if p.line not in {o.number.line for o in outcomes}]
    return out


def _check(readme: Path) -> tuple[list[Problem], list[Outcome], list[Exempt]]:
    text = readme.read_text(encoding="utf-8")
    blocks, lets, problems = parse_blocks(text, readme)
    numbers = readme_numbers(text)
    ctx = Context(readme.parent)
    for name, (line, rhs) in lets.items():
        if rhs.endswith("/") and not any(c.isspace() for c in rhs):  # let NAME = a/folder/
            ctx.folders[name] = rhs
            continue
        try:
            if FILE_PREFIX.fullmatch(rhs + ":"):  # let NAME = FILE: the whole file
                rhs += ":"
            parsed = parse_expressions(rhs, frozenset(lets))
            if len(parsed) != 1 or not isinstance(parsed[0], Ref):
                raise CiteError("a let names one reference (FILE: PATH)")
            ctx.names[name] = parsed[0]
        except CiteError as e:
            problems.append(Problem(readme, line, f"let {name}: {e}"))
    names = frozenset(ctx.names)
    starts = [b.start for b in blocks]
    scopes: list[list[Printed]] = [[] for _ in blocks]
    outcomes: list[Outcome] = []
    for n in numbers:
        i = bisect.bisect_left(starts, n.offset)
        if i == len(blocks):
            why = f"{n.text} is not cited: no cite block follows it"
            problems.append(Problem(readme, n.line, why))
            outcomes.append(Outcome(n, "-", None, why))
        else:
            scopes[i].append(n)
    for block, scope in zip(blocks, scopes):
        block_problems, block_outcomes = _check_block(readme, block, scope, ctx, names)
        problems += block_problems
        outcomes += block_outcomes
    outcomes.sort(key=lambda o: o.number.offset)
    return sorted(problems, key=lambda p: p.line), outcomes, exempt_numbers(text)


def _evaluate_line(ctx: Context, line: Line, names: frozenset[str]) -> Any:
    exprs = parse_expressions(line.rhs, names)
    if len(exprs) > 1 and len(exprs) == len(line.keys):  # K1, K2 = E1; E2: one expression per key
        values = [ctx.evaluate(e) for e in exprs]
        if any(isinstance(v, list) for v in values):
            raise CiteError("each expression of `K1, K2 = E1; E2` gives one number")
        return values
    if len(exprs) != 1:
        raise CiteError(f"{len(line.keys)} keys take one list-valued expression or {len(line.keys)} expressions; "
                        f"got {len(exprs)}")
    value = ctx.evaluate(exprs[0])
    if len(line.keys) > 1:
        if not isinstance(value, list) or len(value) != len(line.keys):
            got = f"a list of {len(value)}" if isinstance(value, list) else "one number"
            raise CiteError(f"{len(line.keys)} keys need a list of {len(line.keys)} values; got {got}")
    elif isinstance(value, list):
        raise CiteError(f"the expression gives a list of {len(value)} values: select one, or apply a function")
    return value


def _read_cells(template: str, cell: Cell) -> set[tuple[int, str]]:
    """The cells (row, column) a template reads through its placeholders: ``{col}`` the header cell of the cell's
    column, ``{row}`` the row's first cell, ``{HEADER}`` that column's cell in the same row."""
    first = cell.texts[0][0] if cell.texts else ""
    return {(0, cell.column) if n == "col" else (cell.row, first) if n == "row" else (cell.row, n)
            for n in re.findall(r"\{([^{}]+)\}", template)}


def _check_block(readme: Path, block: Block, scope: list[Printed], ctx: Context,
                 names: frozenset[str]) -> tuple[list[Problem], list[Outcome]]:
    problems: list[Problem] = []
    outcomes: list[Outcome] = []

    def outcome(n: Printed, citation: str, value: float | None, problem: str | None) -> None:
        outcomes.append(Outcome(n, citation, value, problem))
        if problem:
            problems.append(Problem(readme, n.line, problem))

    # keyed lines: each printed number to its line (and element, for a line of several keys)
    by_key: dict[str, list[tuple[Line, int]]] = {}
    for line in block.keyed:
        for k, key in enumerate(line.keys):
            by_key.setdefault(key, []).append((line, k if len(line.keys) > 1 else -1))
    occurrences: dict[str, list[Printed]] = {}
    for n in scope:
        occurrences.setdefault(_norm(n.text), []).append(n)
    cited: dict[int, tuple[Line, int]] = {}
    miscounted: set[int] = set()
    for key, lines in by_key.items():
        found = occurrences.get(key, [])
        if not found:
            for line, _ in lines:
                problems.append(Problem(readme, line.line, f"cites {key} but the text it covers (up to the cite "
                                                           f"block of line {block.line}) prints no {key}"))
            continue
        if len(lines) > 1 and len(lines) != len(found):
            problems.append(Problem(readme, lines[0][0].line,
                                    f"{key} is cited {len(lines)} times but printed {len(found)} times "
                                    f"(lines {', '.join(str(n.line) for n in found)}): cite it once, or once per "
                                    "occurrence"))
            miscounted.update(n.offset for n in found)
            continue
        for j, n in enumerate(found):
            cited[n.offset] = lines[0] if len(lines) == 1 else lines[j]
    values: dict[int, Any] = {}
    for line in block.keyed:
        try:
            values[id(line)] = _evaluate_line(ctx, line, names)
        except CiteError as e:
            problems.append(Problem(readme, line.line, f"{line.text}: {e}"))
    # templates, over the cell numbers no key took
    cells_left: dict[tuple[int, int, str], list[Printed]] = {}
    for n in scope:
        if n.cell is not None and n.offset not in cited and n.offset not in miscounted:
            cells_left.setdefault((n.cell.table, n.cell.row, n.cell.column), []).append(n)
    templated: dict[int, tuple[str, float | None, str | None]] = {}
    selection: dict[tuple[int, int, str], bool] = {}  # (table, row, column) read by a placeholder: all resolved?
    for line in block.templates:
        applied = False
        for (table, row, column), cell_numbers in sorted(cells_left.items()):
            cell = cell_numbers[0].cell
            if row == 0 or not (column in line.columns or cell.label in line.rows  # a header takes keyed lines
                                or (cell.label, column) in line.cells):
                continue
            applied = True
            read = _read_cells(line.rhs, cell)
            filled = line.rhs
            try:
                filled = _fill(line.rhs, cell)
                exprs = parse_expressions(filled, names)
                if len(exprs) != len(cell_numbers):
                    raise CiteError(f"the cell prints {len(cell_numbers)} numbers "
                                    f"({', '.join(n.text for n in cell_numbers)}) but the template has "
                                    f"{len(exprs)} expressions")
                results = []
                for e in exprs:
                    v = ctx.evaluate(e)
                    if isinstance(v, list):
                        raise CiteError(f"gives a list of {len(v)} values")
                    results.append(v)
                for n, v in zip(cell_numbers, results):
                    templated[n.offset] = (filled, v, None)
                for r, header in read:
                    selection.setdefault((table, r, header), True)
            except CiteError as e:
                for r, header in read:
                    selection[(table, r, header)] = False
                for n in cell_numbers:
                    templated[n.offset] = (filled, None, f"{n.text} in column {column!r}: {filled}: {e}")
        if not applied:
            where = (f"in the columns {', '.join(line.columns)}" if line.columns else
                     f"in the rows {', '.join(line.rows)}" if line.rows else
                     f"at row {line.cells[0][0]!r}, column {line.cells[0][1]!r}")
            problems.append(Problem(readme, line.line, f"{line.text}: no table cell before it {where} prints a "
                                                       "number left to cite"))
    for n in scope:
        if n.offset in miscounted:
            outcomes.append(Outcome(n, "-", None, "cited a number of times other than printed (reported at the line)"))
        elif n.offset in cited:
            line, k = cited[n.offset]
            if id(line) not in values:
                outcomes.append(Outcome(n, line.text, None, "its cite line fails (reported at the line)"))
                continue
            value = values[id(line)][k] if k >= 0 else values[id(line)]
            bad = None if matches(n, value) else (f"{n.text} does not round to its cited value {value!r} "
                                                  f"({line.text}; half a unit: {n.half_unit:g})")
            outcome(n, line.text, value, bad)
        elif n.offset in templated:
            filled, value, failed = templated[n.offset]
            if failed:
                outcome(n, filled, None, failed)
            else:
                bad = None if matches(n, value) else (f"{n.text} does not round to its cited value {value!r} "
                                                      f"({filled}; half a unit: {n.half_unit:g})")
                outcome(n, filled, value, bad)
        elif n.cell is not None and (n.cell.table, n.cell.row, n.cell.column) in selection:
            ok = selection[(n.cell.table, n.cell.row, n.cell.column)]
            outcome(n, f"selects the row of its table (column {n.cell.column!r})", None,
                    None if ok else f"{n.text} in column {n.cell.column!r} selects nothing: the template that "
                                    "reads it failed")
        else:
            outcome(n, "-", None, f"{n.text} is not cited in the cite block of line {block.line}")
    return problems, outcomes


if __name__ == "__main__":
    # python tests/docs_numbers.py [--show] [FILE.md …]: the problems (or, with --show, every number's citation)
    args = sys.argv[1:]
    show = "--show" in args
    paths = [Path(a) for a in args if a != "--show"] or checked_files()
    if show:
        print("\n".join(line for path in paths for line in describe(path)))
        sys.exit(0)
    found = [p for path in paths for p in check_readme(path)]
    print("\n".join(map(str, found)) or f"{len(paths)} files: every number cited and equal to its source")
    sys.exit(1 if found else 0)

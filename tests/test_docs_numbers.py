"""The READMEs cannot drift from their evidence.

Every number printed in ``docs/benchmarks/**/README.md``, ``docs/benchmarks/kernel-tuning-notes.md`` and the top-level
``README.md`` cites the field of a committed file it claims, and equals it within its printed rounding (the rules are in
``tests/docs_numbers.py`` and ``docs/benchmarks/README.md``); every JSON file committed under ``docs/benchmarks/`` is a
receipt that ``infercrane receipt validate`` accepts, or a fan-out record or a kernel-agreement record that its model
reads.
A receipt of a legacy format (its conclusions not derived again) is accepted only where ``LEGACY_RECEIPTS`` names
it, as ``receipt validate --allow-legacy`` accepts it, and its folder's README says it is superseded.
"""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from docs_numbers import check_readme, checked_files, exempt_numbers, readme_numbers
from infercrane.receipts.validate import load_receipt

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "docs" / "benchmarks"
CHECKED = checked_files()
RECEIPTS = sorted(BENCHMARKS.glob("**/*.json"))
# Superseded receipts of a legacy format kept as the record of the version that wrote them (their raw blocks carry no
# screen result, so ``kernel decide`` cannot make v3 receipts of them): validated with --allow-legacy only.
LEGACY_RECEIPTS = frozenset({"2026-12-01-h200-kernel/kernel-screen.json",
                             "2026-12-01-h200-kernel/kernel-screen-decided-with-serving-tpot.json"})


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_the_checked_files_are_found() -> None:
    assert BENCHMARKS / "README.md" in CHECKED and REPO / "README.md" in CHECKED
    assert BENCHMARKS / "kernel-tuning-notes.md" in CHECKED and len(CHECKED) > 3
    assert all(path.is_file() for path in CHECKED)
    assert RECEIPTS


@pytest.mark.parametrize("readme", CHECKED, ids=_id)
def test_every_number_cites_its_field_and_equals_it(readme: Path) -> None:
    problems = check_readme(readme)
    assert not problems, "\n".join(map(str, problems))


@pytest.mark.parametrize("receipt", RECEIPTS, ids=_id)
def test_every_json_file_is_a_valid_receipt_or_record(receipt: Path) -> None:
    """A receipt validates fully; a fan-out record (``NAME.fanout.json``) or a ``kernel agree --json-out`` file is read
    by its own model."""
    from infercrane.executors.fanout import FANOUT_SCHEMA, FanoutRecord
    from infercrane.kernels.agreement import AGREEMENT_SCHEMA, Agreement

    records = {FANOUT_SCHEMA: FanoutRecord, AGREEMENT_SCHEMA: Agreement}
    doc = json.loads(receipt.read_text())
    if isinstance(doc, dict) and doc.get("schema_version") in records:
        records[doc["schema_version"]].model_validate(doc)
    else:
        r = load_receipt(receipt)  # raises ReceiptInvalid / InputError naming the file, field and reason
        name = str(receipt.relative_to(BENCHMARKS))
        assert r.legacy_note is None or name in LEGACY_RECEIPTS, (
            f"{name}: {r.legacy_note}; make it a v3 receipt (kernel decide) or name it in LEGACY_RECEIPTS "
            "with a note in its folder's README")


@pytest.mark.parametrize("name", sorted(LEGACY_RECEIPTS))
def test_each_legacy_receipt_allowed_is_one_and_its_readme_says_it_is_superseded(name: str) -> None:
    path = BENCHMARKS / name
    assert load_receipt(path).legacy_note is not None, f"{name} is not of a legacy format: drop it from LEGACY_RECEIPTS"
    readme = (path.parent / "README.md").read_text()
    assert "superseded legacy receipts" in readme.lower() and "--allow-legacy" in readme and path.name in readme


# Receipts kept inside committed archives that the current InferCrane does not validate, each with why; the folder's
# README says so. Every other receipt in an archive (a JSON document whose schema_version InferCrane reads) validates.
ARCHIVED_NOT_VALID = {
    "2026-12-01-h200-serving/superseded-receipts.tar.xz/public-1000-compiled.json":
        "measured by an older InferCrane (no bench block, driver agreement as point estimates); decided again beside it",
    "2026-12-01-h200-serving/superseded-receipts.tar.xz/seed-paired-compiled-two-drivers.json":
        "measured by an older InferCrane (no bench block, driver agreement as point estimates); decided again beside it",
    "2026-12-03-h200-kernel-decides/evidence-e98ec16.tar.xz/run-e98ec16/fused_add_rmsnorm.json":
        "the flags of two cells as the harness of e98ec16 recorded them, not as its raw blocks give them now",
    "2026-12-03-h200-kernel-decides/evidence-e98ec16.tar.xz/run-e98ec16/rms_norm.json":
        "the flags of a cell as the harness of e98ec16 recorded them, not as its raw blocks give them now",
    "2026-12-07-h100-real-model/apply-509a92a/apply-evidence.tar.xz/apply/eager.json":
        "decided under the quality gate's earlier rule (a share of identical outputs), its answers without the best "
        "log-probabilities per place the rule now reads",
    "2026-12-07-h100-real-model/apply-509a92a/apply-evidence.tar.xz/apply/compiled.json":
        "a partial receipt written under the quality gate's earlier rule, its answers without the best "
        "log-probabilities per place the rule now reads",
}
ARCHIVES = sorted(BENCHMARKS.glob("**/*.tar.xz"))


def _archived_receipts(archive: Path) -> list[tuple[str, bytes]]:
    from infercrane.receipts.registry import MODELS

    out = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if not (member.isfile() and member.name.endswith(".json")):
                continue
            raw = tar.extractfile(member).read()  # type: ignore[union-attr]
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("schema_version") in MODELS:
                out.append((member.name.removeprefix("./"), raw))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("archive", ARCHIVES, ids=_id)
def test_every_receipt_in_an_archive_validates_or_is_named_with_why(archive: Path, tmp_path: Path) -> None:
    from infercrane.errors import InfercraneError

    for name, raw in _archived_receipts(archive):
        where = f"{archive.relative_to(BENCHMARKS)}/{name}"
        path = tmp_path / Path(name).name
        path.write_bytes(raw)
        try:
            r = load_receipt(path)
        except InfercraneError as e:
            assert where in ARCHIVED_NOT_VALID, f"{where}: {e}"
            continue
        assert where not in ARCHIVED_NOT_VALID, f"{where} validates now: drop it from ARCHIVED_NOT_VALID"
        assert r.legacy_note is None or where in LEGACY_RECEIPTS, f"{where}: {r.legacy_note}"


@pytest.mark.parametrize("where", sorted(ARCHIVED_NOT_VALID))
def test_each_archived_receipt_that_does_not_validate_is_said_so_in_its_readme(where: str) -> None:
    folder = BENCHMARKS / where.split("/", 1)[0]
    archive = where.split(".tar.xz/")[0].split("/", 1)[1] + ".tar.xz"
    readme = (folder / "README.md").read_text()
    assert archive in readme and "no longer" in readme and "validate" in readme, (
        f"{folder.name}/README.md must say that {archive} holds receipts that no longer validate, and why")


# --- the checker itself, on small READMEs made here ---------------------------------------------------------------

RECEIPT = {
    "plan_wall_s": 1396.302,
    "workload": {"concurrency": [1, 8, 32], "runs_per_arm": 5},
    "statistics": [
        {"concurrency": 1, "metric": "output_tok_s", "ratio_b_over_a": 0.8806, "ci_low": 0.8375, "p_value": 1.0},
        {"concurrency": 8, "metric": "output_tok_s", "ratio_b_over_a": 1.0341, "ci_low": 0.8566, "p_value": 0.42},
        {"concurrency": 8, "metric": "ttft_p95_ms", "ratio_b_over_a": 1.1332, "ci_low": 1.0519, "p_value": 0.0079},
    ],
    "cells": [{"impl": "eager", "rows": 1, "median_us": 16.801}, {"impl": "eager", "rows": 8, "median_us": 19.6},
              {"impl": "compiled", "rows": 1, "median_us": 1.541}, {"impl": "compiled", "rows": 8, "median_us": 1.392}],
}
LOG = "variant        1      8\ntriton/auto  1.30   1.34\ncuda/auto    1.53   1.56\n\n106 passed in 93.49s\n"


def _readme(folder: Path, text: str) -> Path:
    (folder / "r.json").write_text(json.dumps(RECEIPT))
    (folder / "t.log").write_text(LOG)
    path = folder / "README.md"
    path.write_text(text)
    return path


def _messages(folder: Path, text: str) -> list[str]:
    readme = _readme(folder, text)
    return [str(p).removeprefix(f"{readme}:") for p in check_readme(readme)]


def test_a_right_citation_passes(tmp_path: Path) -> None:
    text = r"""# T

Plan wall time 1396.302 s; throughput B/A 0.88 (0.8375–?), p = 0.42 at c = 8; 5 runs per arm at c = 1, 8, 32.
<!-- cite
let S = r.json: statistics
1396.302 = r.json: plan_wall_s
0.88 = S[concurrency=1, metric=output_tok_s].ratio_b_over_a
0.8375 = S[concurrency=1].ci_low
0.42 = S[concurrency=8, metric=output_tok_s].p_value
5 = r.json: workload.runs_per_arm
1, 8, 32 = r.json: workload.concurrency
-->
12 % lower at c = 1, 106 tests passed in 93.49 s, the median of 1.30 and 1.53 is 1.415.
<!-- cite
12 = percent(1 - S[concurrency=1, metric=output_tok_s].ratio_b_over_a)
1 = r.json: workload.concurrency[0]
106 = t.log: /(\d+) passed/
93.49 = t.log: /passed in ([\d.]+)s/
1.30 = t.log: table(variant)[variant=triton/auto]."1"
1.53 = t.log: table(variant)[1]."1"
1.415 = median(t.log: table(variant)[*]."1")
-->
"""
    assert _messages(tmp_path, text) == []


def test_a_wrong_value_fails_naming_the_number_and_the_value(tmp_path: Path) -> None:
    text = "B/A 0.9832 at c = 1.\n<!-- cite\n0.9832 = r.json: statistics[concurrency=1].ratio_b_over_a\n" \
           "1 = r.json: workload.concurrency[0]\n-->\n"
    messages = _messages(tmp_path, text)
    assert len(messages) == 1 and messages[0].startswith("1: 0.9832 does not round to its cited value 0.8806")


def test_a_number_is_checked_within_its_printed_rounding_only(tmp_path: Path) -> None:
    cite = "\n<!-- cite\n{} = r.json: statistics[concurrency=1].ratio_b_over_a\n-->\n"
    assert _messages(tmp_path, "0.88" + cite.format("0.88")) == []  # 0.8806 printed to two decimals
    assert _messages(tmp_path, "0.881" + cite.format("0.881")) == []
    assert _messages(tmp_path, "0.8806" + cite.format("0.8806")) == []
    assert len(_messages(tmp_path, "0.8810" + cite.format("0.8810"))) == 1  # four decimals claim 0.8806 ± 0.00005
    assert len(_messages(tmp_path, "0.89" + cite.format("0.89"))) == 1
    assert len(_messages(tmp_path, "1" + cite.format("1"))) == 0  # an integer: within half a unit
    assert len(_messages(tmp_path, "2" + cite.format("2"))) == 1
    assert len(_messages(tmp_path, "−0.88" + cite.format("−0.88"))) == 1  # the sign is part of the number


def test_a_missing_field_path_fails_naming_the_field(tmp_path: Path) -> None:
    messages = _messages(tmp_path, "1396.302 s\n<!-- cite\n1396.302 = r.json: plan.wall_s\n-->\n")
    assert any("no field 'plan'" in m and "plan_wall_s" in m for m in messages)
    assert any(m.startswith("3: 1396.302 = r.json: plan.wall_s: ") for m in messages) and len(messages) == 1
    cite = "1.1332\n<!-- cite\n1.1332 = r.json: statistics[concurrency={}].ratio_b_over_a\n-->\n"
    messages = _messages(tmp_path, cite.format(8))
    assert any("2 elements of r.json:.statistics have concurrency=8" in m for m in messages)
    messages = _messages(tmp_path, cite.format(4))
    assert any("0 elements" in m for m in messages)
    messages = _messages(tmp_path, r"1.30" "\n<!-- cite\n" r"1.30 = t.log: /(1\.\d+)/" "\n-->\n")
    assert any("matches 4 times" in m for m in messages)
    messages = _messages(tmp_path, r"1.30" "\n<!-- cite\n" r"1.30 = gone.log: /(1\.\d+)/" "\n-->\n")
    assert any("cited file gone.log does not exist" in m for m in messages)


def test_a_number_without_a_citation_fails(tmp_path: Path) -> None:
    text = "B/A 0.8806 and 1.0341.\n<!-- cite\n0.8806 = r.json: statistics[concurrency=1].ratio_b_over_a\n-->\n" \
           "then 5 runs\n"
    assert _messages(tmp_path, text) == ["1: 1.0341 is not cited in the cite block of line 2",
                                         "5: 5 is not cited: no cite block follows it"]


def test_a_citation_of_a_number_not_printed_fails(tmp_path: Path) -> None:
    messages = _messages(tmp_path, "5 runs\n<!-- cite\n5 = r.json: workload.runs_per_arm\n"
                                   "0.8806 = r.json: statistics[0].ratio_b_over_a\n-->\n")
    assert messages == ["4: cites 0.8806 but the text it covers (up to the cite block of line 2) prints no 0.8806"]


def test_a_number_printed_twice_is_cited_once_or_once_per_occurrence(tmp_path: Path) -> None:
    text = "at 1 row and c = 1; 8\n<!-- cite\n1 = r.json: cells[0].rows\n1 = r.json: workload.concurrency[0]\n" \
           "8 = r.json: workload.concurrency[1]\n-->\n"
    assert _messages(tmp_path, text) == []
    text = "1, 1 and 1\n<!-- cite\n1 = r.json: cells[0].rows\n1 = r.json: workload.concurrency[0]\n-->\n"
    assert len(_messages(tmp_path, text)) == 1 and "cited 2 times but printed 3 times" in _messages(tmp_path, text)[0]
    text = "8 and 1\n<!-- cite\n1 = r.json: cells[1].rows\n8 = r.json: workload.concurrency[0]\n-->\n"
    assert len(_messages(tmp_path, text)) == 2  # keys are the printed text: each goes to its own number


def test_a_table_is_cited_by_column_and_row_templates(tmp_path: Path) -> None:
    text = """| rows | eager | compiled |
|---:|---:|---:|
| 1 | 16.80 | 1.541 |
| 8 | 19.60 | 1.392 |

| variant | 1 | 8 |
|---|---:|---:|
| Triton | 1.30 | 1.34 |

<!-- cite
col "eager", "compiled" = r.json: cells[impl={col}, rows={rows}].median_us
row "Triton" = t.log: table(variant)[variant=triton/auto].{col}
-->
"""
    assert _messages(tmp_path, text) == []
    wrong_row = text.replace("| 8 | 19.60 | 1.392 |", "| 32 | 19.60 | 1.392 |")
    messages = _messages(tmp_path, wrong_row)
    assert len(messages) == 3 and all(m.startswith("4: ") for m in messages)
    assert "32 in column 'rows' selects nothing" in " ".join(messages)
    wrong_header = text.replace("| variant | 1 | 8 |", "| variant | 1 | 32 |")
    assert any("no field '32'" in m for m in _messages(tmp_path, wrong_header))
    wrong_cell = text.replace("| 19.60 |", "| 19.50 |")
    assert _messages(tmp_path, wrong_cell)[0].startswith("4: 19.50 does not round to its cited value 19.6")
    uncited = text.replace('col "eager", "compiled"', 'col "eager"')
    assert [m for m in _messages(tmp_path, uncited) if "is not cited" in m] == [
        "3: 1.541 is not cited in the cite block of line 10", "4: 1.392 is not cited in the cite block of line 10"]


def test_a_cell_of_several_numbers_takes_one_expression_each(tmp_path: Path) -> None:
    cell = "S[concurrency={c}, metric=ttft_p95_ms]"
    text = ("| c | B/A (CI, p) |\n|---|---|\n| 8 | 1.1332 (1.0519, p = 0.0079) |\n"
            "<!-- cite\nlet S = r.json: statistics\n"
            f'col "B/A (CI, p)" = {cell}.ratio_b_over_a; {cell}.ci_low; {cell}.p_value\n-->\n')
    assert _messages(tmp_path, text) == []
    short = text.replace(f"; {cell}.p_value", "")
    assert any("prints 3 numbers" in m and "has 2 expressions" in m for m in _messages(tmp_path, short))


def test_a_member_of_a_committed_archive_is_read(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "raw.tar.xz", "w:xz") as tar:
        for name, text in {"./a/b.json": '{"x": 1.234}', "c.csv": "name,seconds\nwarm,12.5\ncold,30.25\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    text = "1.23, 12.5 and 30.3\n<!-- cite\n1.23 = raw.tar.xz/a/b.json: x\n" \
           "12.5 = raw.tar.xz/c.csv: [name=warm].seconds\n" \
           "30.3 = raw.tar.xz/c.csv: [1].seconds\n-->\n"
    assert _messages(tmp_path, text) == []
    messages = _messages(tmp_path, text.replace("raw.tar.xz/a/b.json", "raw.tar.xz/a/c.json"))
    assert any("raw.tar.xz has no member a/c.json" in m for m in messages)


def test_what_is_not_understood_fails(tmp_path: Path) -> None:
    text = "5\n<!-- cite\nlet S = r.json: workload\nlet S = r.json: cells\n5 = T.runs_per_arm\nfive = 5\n-->\n"
    messages = _messages(tmp_path, text)
    assert any("let S is defined twice" in m for m in messages)
    assert any("'T' is neither a file" in m for m in messages)
    assert any("a cite line is `KEY = EXPR`" in m for m in messages)


def test_code_links_comments_and_exempt_patterns_are_not_numbers(tmp_path: Path) -> None:
    text = "\n".join([
        "Ran `--trials 99` on H200 (sm90, Qwen3-0.6B, bf16, x2, t128r1) on 2026-12-01, see [the log](run-77.log).",
        "<!-- 55 is a comment -->",
        "```bash",
        "infercrane kernel screen --rows 123",
        "```",
        "1. a list item is numbered, not measured: https://example.com/v/88",
        "",
        "torch 2.11.0+cu130, driver 580.159.04 at 2026-12-02T00:10:52, commit 55e6969, from 17:37:21, on public-1000.",
        "",
        "    python3 benchmarks/tune.py --rows 4096",
        "",
        "| change | predicted | measured |",
        "|---|---|---|",
        "| C1 | 1.30, 1.35 | 1.31 |",
        "",
        "<!-- cite",
        'cell "C1", "measured" = t.log: table(variant)[variant=cuda/auto]."1" - 0.22',
        "-->",
        "",
    ])
    assert [n.text for n in readme_numbers(text)] == ["1.31"]
    assert [(e.text, e.rule) for e in exempt_numbers(text)] == [
        ("2026-12-01", "date"), ("1.", "list marker"), ("2.11.0+cu130", "version"), ("580.159.04", "version"),
        ("2026-12-02T00:10:52", "date"), ("55e6969", "commit"), ("17:37:21", "clock time"), ("1.30", "prediction"),
        ("1.35", "prediction")]
    assert _messages(tmp_path, text) == []
    # not exempt: a version without two dots, a number after a word, a measured cell beside a predicted one
    assert [n.text for n in readme_numbers("Triton 3.6, python 3.11 or newer, pytest 9.0, 3.11")] == [
        "3.6", "3.11", "9.0", "3.11"]
    assert len(_messages(tmp_path, text.replace("| 1.31 |", "| 1.32 |"))) == 1


def test_an_expression_that_reads_no_file_cites_nothing(tmp_path: Path) -> None:
    messages = _messages(tmp_path, "5 runs\n<!-- cite\n5 = 5\n-->\n")
    assert any("reads no file cites nothing" in m for m in messages)
    assert _messages(tmp_path, "5 runs\n<!-- cite\n5 = r.json: workload.runs_per_arm * 1\n-->\n") == []


def test_selectors_slices_lists_and_names(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.log").write_text("rc=4\nwindow 1 took 8.5 s\nwindow 2 took 9.5 s\nnote: fast\n")
    text = r"""The eager cells 16.80 and 19.60 µs, less the compiled ones 15.26 and 18.21; eager cells above ten µs:
2, above a hundred: 0. The first 3 concurrencies 1, 8, 32; windows 8.5 and 9.5 s, 18.0 s in all; rc 4; the compiled
cell at one row 1.541.
<!-- cite
let F = sub/
let L = F/a.log
let C = r.json: cells
16.80, 19.60 = C[*impl=eager].median_us
15.26, 18.21 = C[*impl=eager].median_us - C[*impl=compiled].median_us
2 = count(C[*median_us>10, impl=eager])
0 = count(C[*median_us>100])
3 = count(r.json: workload.concurrency[0:3])
1, 8, 32 = r.json: workload.concurrency[:]
8.5, 9.5 = L: /took ([\d.]+) s/*
18.0 = sum(L: /took ([\d.]+) s/*)
4 = L: /^rc=(\d)$/
1.541 = C[impl=compiled, rows!=8].median_us
-->
"""
    messages = _messages(tmp_path, text)
    assert messages == [], messages
    assert any("a selector must pick exactly one" in m
               for m in _messages(tmp_path, text.replace("rows!=8", "rows<=8")))
    assert any("3 keys need a list of 3 values; got a list of 2" in m
               for m in _messages(tmp_path, text.replace("concurrency[:]", "concurrency[1:]")))


def test_a_keyed_line_may_give_one_expression_per_key(tmp_path: Path) -> None:
    text = "0.8806 and 1.0341\n<!-- cite\n0.8806, 1.0341 = r.json: statistics[0].ratio_b_over_a; " \
           "r.json: statistics[1].ratio_b_over_a\n-->\n"
    assert _messages(tmp_path, text) == []
    assert len(_messages(tmp_path, text.replace("statistics[1]", "statistics[2]"))) == 1


def test_a_regex_reads_a_fields_text(tmp_path: Path) -> None:
    doc = {"reason": "6.5-21.2 percent faster", "notes": ["a 3.2 s", "b", "c 4.1 s"]}
    (tmp_path / "d.json").write_text(json.dumps(doc))
    text = r"6.5 to 21.2, notes of 3.2 and 4.1 s" + "\n<!-- cite\n" + r"""let D = d.json
6.5 = D: reason~/^([\d.]+)-/
21.2 = D: reason~/-([\d.]+) percent/
3.2, 4.1 = D: notes[*]~/([\d.]+) s/*
-->
"""
    assert _messages(tmp_path, text) == []
def test_ranges_signs_multiplication_and_exponents() -> None:
    numbers = readme_numbers("3.61–5.44 %, 2 × 28, 6.91×, −0.8, eps 1e−6, +27.66 %, 12-13\n")
    assert [n.text for n in numbers] == ["3.61", "5.44", "2", "28", "6.91", "−0.8", "1e−6", "27.66", "12", "13"]
    assert numbers[5].value == -0.8 and numbers[6].value == 1e-6 and numbers[6].half_unit == 5e-7
    assert numbers[0].half_unit == 0.005 and numbers[2].half_unit == 0.5

"""The benchmark READMEs cannot drift from their evidence.

Every number printed in ``docs/benchmarks/**/README.md`` is looked up in the committed file its ``sources`` comment
cites (the rule is in ``tests/docs_numbers.py`` and ``docs/benchmarks/README.md``), and every JSON file committed
under ``docs/benchmarks/`` is a receipt that ``infercrane receipt validate`` accepts, or a fan-out record or a
kernel-agreement record that its model reads. A receipt of a legacy format (its conclusions not derived again) is
accepted only where ``LEGACY_RECEIPTS`` names it, as ``receipt validate --allow-legacy`` accepts it, and its folder's
README says it is superseded.
"""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from docs_numbers import check_readme, readme_numbers
from infercrane.receipts.validate import load_receipt

BENCHMARKS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"
READMES = sorted(BENCHMARKS.glob("**/README.md"))
RECEIPTS = sorted(BENCHMARKS.glob("**/*.json"))
# Superseded receipts of a legacy format kept as the record of the version that wrote them (their raw blocks carry no
# screen result, so ``kernel decide`` cannot make v3 receipts of them): validated with --allow-legacy only.
LEGACY_RECEIPTS = frozenset({"2026-12-01-h200-kernel/kernel-screen.json",
                             "2026-12-01-h200-kernel/kernel-screen-decided-with-serving-tpot.json"})


def _id(path: Path) -> str:
    return str(path.relative_to(BENCHMARKS))


def test_the_benchmark_folders_are_found() -> None:
    assert BENCHMARKS / "README.md" in READMES and len(READMES) > 1
    assert RECEIPTS


@pytest.mark.parametrize("readme", READMES, ids=_id)
def test_every_number_is_in_its_cited_source(readme: Path) -> None:
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
        assert r.legacy_note is None or _id(receipt) in LEGACY_RECEIPTS, (
            f"{_id(receipt)}: {r.legacy_note}; make it a v3 receipt (kernel decide) or name it in LEGACY_RECEIPTS "
            "with a note in its folder's README")


@pytest.mark.parametrize("name", sorted(LEGACY_RECEIPTS))
def test_each_legacy_receipt_allowed_is_one_and_its_readme_says_it_is_superseded(name: str) -> None:
    path = BENCHMARKS / name
    assert load_receipt(path).legacy_note is not None, f"{name} is not of a legacy format: drop it from LEGACY_RECEIPTS"
    readme = (path.parent / "README.md").read_text()
    assert "superseded legacy receipts" in readme.lower() and "--allow-legacy" in readme and path.name in readme


# --- the checker itself, on small READMEs made here ---------------------------------------------------------------

def _write(folder: Path, readme: str, **files: str) -> Path:
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)
    path = folder / "README.md"
    path.write_text(readme)
    return path


def _messages(readme: Path) -> list[str]:
    return [str(p) for p in check_readme(readme)]


def test_a_number_within_its_printed_rounding_passes(tmp_path: Path) -> None:
    src = json.dumps({"median_us": 4.2167, "rows": 32768, "ratio": -0.0204})
    text = "# T\n<!-- sources: r.json -->\n4.22 µs, 4.2 µs, 4.217 µs at 32768 rows; −0.0204, 0.0204.\n"
    readme = _write(tmp_path, text, r__json=src)
    assert _messages(readme) == []


def test_a_number_outside_its_rounding_fails_naming_it(tmp_path: Path) -> None:
    readme = _write(tmp_path, "# T\n<!-- sources: r.json -->\nok 4.22\nbad 4.17 µs\nbad 32767 rows\n",
                    r__json=json.dumps({"x": 4.217, "rows": 32768}))
    messages = _messages(readme)
    assert len(messages) == 2
    assert f"{readme}:4: number 4.17 is not in its sources [r.json]" in messages[0] and "4.217" in messages[0]
    assert f"{readme}:5: number 32767 is not in its sources [r.json]" in messages[1]


def test_an_integer_needs_an_exact_match(tmp_path: Path) -> None:
    readme = _write(tmp_path, "<!-- sources: r.json -->\n4191 GB/s\n", r__json='{"gbps": 4191.4}')
    assert len(_messages(readme)) == 1


def test_a_signed_number_keeps_its_sign(tmp_path: Path) -> None:
    readme = _write(tmp_path, "<!-- sources: r.json -->\n2.0 % slower; −2.0 %; -2.0; +1.5 is not a sign\n",
                    r__json='{"a": -2.0, "b": 1.5}')
    assert _messages(readme) == []
    readme = _write(tmp_path, "<!-- sources: r.json -->\n−1.5\n", r__json='{"b": 1.5}')
    assert len(_messages(readme)) == 1


def test_a_number_before_any_sources_comment_fails(tmp_path: Path) -> None:
    readme = _write(tmp_path, "# T\nmeasured 7 times\n<!-- sources: r.json -->\n7\n", r__json='{"n": 7}')
    assert _messages(readme) == [f"{readme}:2: 7 appears before any <!-- sources: … --> comment"]


def test_a_missing_source_file_fails(tmp_path: Path) -> None:
    readme = _write(tmp_path, "<!-- sources: r.json, gone.log -->\n7\n", r__json='{"n": 7}')
    messages = _messages(readme)
    assert len(messages) == 1 and "cited source gone.log does not exist" in messages[0]
    readme = _write(tmp_path, "<!-- sources: gone.log -->\n7\n")
    messages = _messages(readme)
    assert "cited source gone.log does not exist" in messages[0]
    assert "number 7 is not in its sources [gone.log]" in messages[1]


def test_each_sources_comment_governs_the_text_after_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "b.log").write_text("took 12.5 s\n")
    readme = _write(tmp_path / "sub", "<!-- sources: a.json -->\n3.25\n<!-- sources: ../b.log -->\n12.5 and 3.25\n",
                    a__json='{"t": 3.25}')
    assert _messages(readme) == [f"{readme}:4: number 3.25 is not in its sources [../b.log]; nearest there: 12.5"]


def test_code_links_comments_dates_and_names_are_not_numbers(tmp_path: Path) -> None:
    text = "\n".join([
        "<!-- sources: r.json -->",
        "Ran `--trials 99` on H200 (sm90, Qwen3-0.6B, bf16, x2, t128r1) on 2026-12-01, see [the log](run-77.log).",
        "<!-- 55 is a comment -->",
        "```bash",
        "infercrane kernel screen --rows 123",
        "```",
        "~~~",
        "456",
        "~~~",
        "1. a list item is numbered, not measured: https://example.com/v/88",
        "``a ` 42 span``, and `<!-- sources: shown.json -->` is shown, not declared",
        "",
    ])
    readme = _write(tmp_path, text, r__json="{}")
    _, numbers = readme_numbers(text)
    assert numbers == [] and _messages(readme) == []


def test_ranges_minus_signs_multiplication_and_versions(tmp_path: Path) -> None:
    text = "<!-- sources: r.json -->\n3.61–5.44 %, 2 × 28, 6.91×, torch 2.11.0+cu130, −0.8, eps 1e−6\n"
    _, numbers = readme_numbers(text)
    assert [n.text for n in numbers] == ["3.61", "5.44", "2", "28", "6.91", "2.11.0", "−0.8", "1e−6"]
    assert numbers[-1].value == 1e-6 and numbers[-1].half_unit == 5e-7
    numbers = numbers[:-1]
    assert [n.percent for n in numbers[:2]] == [True, True] and numbers[-1].value == -0.8
    source = '{"lo": 0.0361, "hi": 5.44, "f": [2, 28, 6.913, -0.8], "v": "%s"}'
    readme = _write(tmp_path, text, r__json=(source % "2.11.0+cu130")[:-1] + ', "eps": 1e-06}')
    assert _messages(readme) == []
    readme = _write(tmp_path, text.replace(", eps 1e−6", ""), r__json=source % "2.11.01")
    assert _messages(readme) == [f"{readme}:2: version 2.11.0 is not in its sources [r.json]"]


def test_a_percentage_matches_a_stored_fraction(tmp_path: Path) -> None:
    readme = _write(tmp_path, "<!-- sources: r.json -->\n97.6 % of copy, 97.6 percent\n", r__json='{"fraction": 0.976}')
    assert _messages(readme) == []
    readme = _write(tmp_path, "<!-- sources: r.json -->\n0.976 of copy, 97.6 µs\n", r__json='{"fraction": 0.976}')
    assert _messages(readme) == [f"{readme}:2: number 97.6 is not in its sources [r.json]; nearest there: 0.976"]
    readme = _write(tmp_path, "<!-- sources: r.json -->\n97.7 % of copy\n", r__json='{"fraction": 0.976}')
    assert _messages(readme) == [f"{readme}:2: number 97.7 % (nor as a fraction) is not in its sources [r.json]; "
                                 "nearest there: 0.976"]


def test_a_tar_source_is_read_member_by_member(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "raw.tar.xz", "w:xz") as tar:
        for name, text in {"a.json": '{"x": 1.234}', "b.log": "total 5.5 s"}.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    readme = _write(tmp_path, "<!-- sources: raw.tar.xz -->\n1.23 and 5.5 but not 6.6\n")
    messages = _messages(readme)
    assert len(messages) == 1 and "number 6.6 is not in its sources [raw.tar.xz]" in messages[0]

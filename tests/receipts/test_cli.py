"""The receipt CLI: exit codes, messages naming file and field, show/diff/schema output; --help stays light."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evidence import archived

from infercrane.cli import main
from infercrane.receipts.registry import MODELS
from infercrane.receipts.schemas import json_schema, schema_filename

REPO = Path(__file__).resolve().parents[2]


def test_help_imports_no_heavy_module() -> None:
    code = ("import sys; from infercrane.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'vllm', 'aiperf', 'triton', 'cupy', 'transformers') if m in sys.modules]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_validate_exit_codes(seed_poc: Path, seed_screening: Path, tmp_path: Path, capsys) -> None:
    # the seeds are of legacy formats: accepted on their arithmetic with --allow-legacy (tests/receipts/test_legacy.py)
    assert main(["receipt", "validate", "--allow-legacy", str(seed_poc), str(seed_screening)]) == 0
    bad = tmp_path / "bad.json"
    doc = json.loads(seed_screening.read_text())
    doc["measurements"][3]["triton_ms"] = 0.007
    bad.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["receipt", "validate", "--allow-legacy", str(seed_poc), str(bad)]) == 2
    out = capsys.readouterr().out
    assert f"INVALID {bad}: measurements[3].speedup_vs_triton" in out
    assert "1 of 2 receipt(s) invalid" in out


def test_validate_directory_and_missing(tmp_path: Path, capsys) -> None:
    assert main(["receipt", "validate", str(tmp_path), str(tmp_path / "nope.json")]) == 2
    out = capsys.readouterr().out
    assert "is a directory" in out and "no such file" in out


def test_show_prints_tables_and_decision(seed_poc: Path, capsys) -> None:
    assert main(["receipt", "show", str(seed_poc)]) == 0
    out = capsys.readouterr().out
    for needle in ("paired_aiperf.measurements", "10485.5", "accept compiled vLLM over eager",
                   "qualification_boundary", "VLLM_USE_DEEP_GEMM=0"):
        assert needle in out


def test_show_invalid_exits_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "e.json").write_text("")
    assert main(["receipt", "show", str(tmp_path / "e.json")]) == 2
    assert "empty file" in capsys.readouterr().err


def test_diff_same_kind_and_refuses_mixed(seed_screening: Path, seed_poc: Path, tmp_path: Path, capsys) -> None:
    doc = json.loads(seed_screening.read_text())
    m = doc["measurements"][0]
    m["cuda_ms"] = 0.0055
    m["speedup_vs_triton"] = round(m["triton_ms"] / m["cuda_ms"], 5)
    m["speedup_vs_vllm_vendor"] = round(m["vllm_vendor_ms"] / m["cuda_ms"], 5)
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    assert main(["receipt", "diff", str(seed_screening), str(b)]) == 0  # changed fields only, by default
    out = capsys.readouterr().out
    record = out.index("measurements[rows=1]\n")  # the record's line, then its fields by name
    assert "cuda_ms" in out[record:] and "0.8697" in out[record:]  # 0.0055 / 0.0063238095
    assert "rows=8" not in out
    assert main(["receipt", "diff", str(seed_screening), str(b), "--all"]) == 0
    assert "rows=8" in capsys.readouterr().out
    assert main(["receipt", "diff", str(seed_screening), str(seed_poc)]) == 2
    assert "different kinds of receipt" in capsys.readouterr().err


def test_published_schemas_are_current() -> None:
    for version in MODELS:
        path = REPO / "schemas" / schema_filename(version)
        assert path.exists(), f"missing {path}: run `infercrane receipt schema --write schemas`"
        assert json.loads(path.read_text()) == json_schema(version), (
            f"{path} is stale: run `infercrane receipt schema --write schemas`")


def test_seeds_validate_against_published_json_schema(seed_poc: Path, seed_screening: Path,
                                                      written_receipt: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for path in (seed_poc, seed_screening, written_receipt):
        doc = json.loads(path.read_text())
        schema = json.loads((REPO / "schemas" / schema_filename(doc["schema_version"])).read_text())
        jsonschema.validate(doc, schema)


def test_schema_command(capsys) -> None:
    assert main(["receipt", "schema", "--version", "infercrane.optimization-poc-receipt/v1"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "OptimizationPocReceiptV1"
    assert main(["receipt", "schema", "--version", "nope/v1"]) == 2


def test_env_json_on_cpu(capsys) -> None:
    assert main(["env", "--json-output"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["software"]["python"] == sys.version.split()[0]
    assert info["software"]["vllm"] in ("absent",) or info["software"]["vllm"]
    assert info["hardware"]["cpu_count"] >= 1


def test_show_prints_a_file_name_with_markup_as_text(seed_poc: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the whole path on one line, however long the test's folder
    odd = tmp_path / "[bold]poc[red].json"
    odd.write_bytes(seed_poc.read_bytes())
    assert main(["receipt", "show", str(odd)]) == 0
    assert "[bold]poc[red].json" in capsys.readouterr().out


def test_schema_write_refuses_a_file_in_place_of_the_folder(tmp_path: Path, capsys) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["receipt", "schema", "--write", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--write" in err and "Traceback" not in err


def test_validate_and_show_say_a_receipt_is_incomplete(capsys) -> None:
    partial = archived("2026-12-01-h200-poc/poc-evidence-first-sitting.tar.xz/poc.json")
    assert main(["receipt", "validate", str(partial)]) == 0
    assert "incomplete: in progress or interrupted (its writer was not recorded; public still to run)" in \
        capsys.readouterr().out
    complete = REPO / "docs" / "benchmarks" / "2026-12-01-h200-serving" / "seed-paired-eager-vs-compiled.json"
    assert main(["receipt", "validate", str(complete)]) == 0
    assert "incomplete" not in capsys.readouterr().out

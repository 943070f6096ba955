"""`infercrane kernel screen`, `kernel list` and `kernel decide` on the CPU: a functional screen with a user
candidate, labelled as such, with a receipt that validates; a cheating candidate is rejected; a re-decision keeps the
evidence; list options in every form; bad input refused before any screening; foreign text printed as text."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from infercrane.cli import main
from infercrane.errors import InfercraneError
from infercrane.kernels import registry
from infercrane.receipts.validate import load_receipt

FIXTURES = Path(__file__).parent / "fixtures"


class _Captured(InfercraneError):
    exit_code = 99


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Replace the harness's screen by a recorder that stops the command: what the CLI would screen, nothing run."""
    import infercrane.kernels.harness.runner as runner

    seen: dict[str, Any] = {}

    def screen(spec: Any, impl_keys: Any = None, **kw: Any) -> Any:
        seen.update(spec=spec, impls=impl_keys, **kw)
        raise _Captured("captured")

    monkeypatch.setattr(runner, "screen", screen)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # restored after the test
    return seen


@pytest.fixture
def tripwire(captured: dict[str, Any]) -> dict[str, Any]:
    return captured


def _screen(tmp_path: Path, candidate: str, name: str) -> dict:
    out = tmp_path / name / "kernel-screen.json"
    rc = main(["kernel", "screen", "--device", "cpu", "--rows", "1", "8", "--impls", "eager", "--checks", "2",
               "--model", "Qwen/Qwen3-0.6B", "--candidate", candidate, "--out", str(out)])
    assert rc == 0
    return load_receipt(out).document


def test_functional_screen_of_a_user_candidate(tmp_path: Path, capsys) -> None:
    doc = _screen(tmp_path, f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm", "good")
    assert "FUNCTIONAL RUN" in capsys.readouterr().out
    assert doc["evidence_class"] == "cpu-functional-check"
    assert doc["candidate"]["key"] == "user" and doc["candidate"]["in_place"] is False
    assert doc["decision_code"] == "inconclusive" and "functional check only" in doc["decision"]
    user = next(i for i in doc["result"]["implementations"] if i["key"] == "user")
    assert user["timings"] == [] and doc["measurements"] == []
    assert [c["rows"] for c in user["correctness"]] == [1, 8] and all(c["passed"] for c in user["correctness"])
    assert doc["model_shape_source"]["hidden_size"] == 1024


def _cuda_line(capsys) -> str:
    assert main(["kernel", "list", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    line = " ".join(ln.split("│")[4].strip() for ln in out.splitlines()
                    if ln.startswith("│") and ln.count("│") > 4 and ln.split("│")[1].strip() in ("cuda", ""))
    return " ".join(line.split()[line.split().index("skipped:"):])  # the cuda row's "a screen here" cell


def test_functional_screen_compiles_the_cuda_candidate_to_ptx_where_nvrtc_can(tmp_path: Path, capsys) -> None:
    """Without a GPU the screen compiles the CUDA candidate to PTX where NVRTC is installed, and says why not where it
    is not; `kernel list` predicted the same, from the same check (``nvrtc.ptx_compile_available``)."""
    from infercrane.kernels.ops.nvrtc import ptx_compile_available

    predicted = _cuda_line(capsys)
    out = tmp_path / "k.json"
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager", "cuda", "--checks", "1",
                 "--out", str(out)]) == 0
    cuda = next(i for i in load_receipt(out).document["result"]["implementations"] if i["key"] == "cuda")
    assert cuda["status"] == "skipped"
    ok, why_not = ptx_compile_available()
    if ok:
        assert any("compiled to PTX for compute_90" in n for n in cuda["notes"])
        assert "the screen compiles it to PTX with NVRTC instead" in predicted
    else:
        assert f"not compiled without a GPU either: {why_not}" in cuda["notes"]
        assert "compiles it to PTX" not in predicted and why_not.split(":")[0] in predicted, predicted


@pytest.mark.parametrize("available", [True, False])
def test_kernel_list_predicts_ptx_from_the_check_the_screen_reads(capsys, monkeypatch, available: bool) -> None:
    """Once `kernel list` said "compiles it to PTX" wherever the op had a compiler, NVRTC installed or not."""
    import infercrane.kernels.ops.nvrtc as nvrtc

    monkeypatch.setattr(nvrtc, "ptx_compile_available",
                        lambda: (True, "") if available else (False, "NVRTC is not installed (test)"))
    line = _cuda_line(capsys)
    if available:
        assert "the screen compiles it to PTX with NVRTC instead" in line
    else:
        assert "compiles it to PTX" not in line
        assert "nor compiled to PTX without a GPU: NVRTC is not installed (test)" in line


def test_a_functional_screens_header_says_nothing_is_timed(tmp_path: Path, captured: dict, capsys) -> None:
    """The header of a screen on the CPU says what it does, not timing modes and trials it will not use."""
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager,triton", "--trials", "7",
                 "--out", str(tmp_path / "k.json")]) == 99
    out = " ".join(capsys.readouterr().out.split())  # the header, unwrapped
    header = out[out.index("kernel screen"):]
    header = header[:header.index("→")]
    assert "functional: nothing timed" in header and "3 checks per row count" in header, header
    assert "modes=" not in header and "7 trials" not in header, header


def test_a_timed_screens_plan_names_its_modes_and_trials() -> None:
    from infercrane.kernels.harness.runner import plan_summary

    timed = plan_summary("cuda", modes=["launch", "graph"], trials=7, samples_per_trial=20, checks=3)
    assert "launch, graph" in timed and "7 trials" in timed and "nothing timed" not in timed


def test_cheating_candidate_is_rejected_naming_the_bad_index(tmp_path: Path) -> None:
    doc = _screen(tmp_path, f"{FIXTURES / 'cheaters.py'}:first_row_only", "cheat")
    assert doc["decision_code"] == "reject"
    user = next(i for i in doc["result"]["implementations"] if i["key"] == "user")
    bad = [c for c in user["correctness"] if not c["passed"]]
    assert [c["rows"] for c in bad] == [8]  # one row is all it computes: rows=1 passes, rows=8 fails at row 1
    out = next(t for t in bad[0]["checks"][0]["tensors"] if t["name"] == "out")
    assert out["first_bad_index"][0] == 1 and out["mismatched"] > 0


def test_decide_again_keeps_the_measuring_machine(tmp_path: Path) -> None:
    doc = _screen(tmp_path, f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm", "again")
    folder = tmp_path / "again"
    out = tmp_path / "decided.json"
    assert main(["kernel", "decide", str(folder / "kernel-screen.json"), "--out", str(out)]) == 0
    new = load_receipt(out).document
    assert new["app_id"] == doc["app_id"] and new["hardware"] == doc["hardware"]
    assert new["decision"] == doc["decision"] and new["result"] == doc["result"]
    assert new["decided_from"] == {"receipt": str(folder / "kernel-screen.json"),
                                   "content_sha256": doc["content_sha256"]}


def test_decide_refuses_what_is_not_a_v3_kernel_receipt(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("{}")
    rc = main(["kernel", "decide", str(tmp_path / "junk.json"), "--out", str(tmp_path / "x.json")])
    assert rc == 2 and not (tmp_path / "x.json").exists()
    old = Path(__file__).parents[2] / "docs" / "benchmarks" / "2026-12-01-h200-kernel" / "kernel-screen.json"
    rc = main(["kernel", "decide", str(old), "--out", str(tmp_path / "y.json")])
    assert rc == 2 and not (tmp_path / "y.json").exists()  # a v2 receipt carries no result to decide from


@pytest.mark.parametrize("args, needle", [
    (["--rows", "0"], "--rows"),
    (["--rows", "1,x"], "--rows x"),
    (["--model", "Nope/Model"], "Nope/Model"),
    (["--candidate", "missing.py:fn"], "missing.py"),
    (["--impls", "nope"], "--impls"),
    (["--trials", "0"], "--trials 0"),
    (["--serving-recipe", "compiled"], "--serving-receipt"),
])
def test_bad_input_fails_before_any_kernel_runs(tmp_path: Path, capsys, args: list[str], needle: str) -> None:
    rc = main(["kernel", "screen", "--device", "cpu", "--out", str(tmp_path / "k.json"), *args])
    assert rc == 2
    captured = capsys.readouterr()
    assert needle in captured.err + captured.out
    assert not (tmp_path / "k.json").exists()


@pytest.mark.parametrize("rows", [["1,8,32"], ["1", "--rows", "8", "--rows", "32"], ["1", "8", "32"], ["1,8", "32"]])
def test_list_options_read_commas_repeats_and_spaces_alike(tmp_path: Path, captured: dict, rows: list[str]) -> None:
    rc = main(["kernel", "screen", "--device", "cpu", "--rows", *rows, "--modes", "launch,graph", "--impls",
               "eager,triton", "--out", str(tmp_path / "k.json")])
    assert rc == 99
    assert captured["rows"] == [1, 8, 32] and tuple(captured["spec"].rows) == (1, 8, 32)
    assert captured["modes"] == ["launch", "graph"] and captured["impls"] == ["eager", "triton"]


def test_rows_default_to_the_ops_own(tmp_path: Path, captured: dict) -> None:
    assert main(["kernel", "screen", "--device", "cpu", "--bandwidth-rows", "--out", str(tmp_path / "k.json")]) == 99
    op = "fused_add_rmsnorm"
    assert captured["rows"] == [*registry.default_rows(op), *registry.bandwidth_rows(op)]


@pytest.mark.parametrize("op", registry.known_ops())
def test_op_builds_the_ops_spec_from_the_registry(op: str, tmp_path: Path, captured: dict) -> None:
    assert main(["kernel", "screen", "--op", op, "--device", "cpu", "--rows", "8", "--out",
                 str(tmp_path / "k.json")]) == 99
    spec = captured["spec"]
    assert isinstance(spec, registry.op_module(op).SPEC) and spec.hidden_size == 1024 and tuple(spec.rows) == (8,)


def test_rms_norm_is_screened_once_registered(tmp_path: Path, captured: dict) -> None:
    if "rms_norm" not in registry.known_ops():
        pytest.skip("rms_norm is not registered yet")
    assert main(["kernel", "screen", "--op", "rms_norm", "--device", "cpu", "--rows", "1",
                 "--out", str(tmp_path / "k.json")]) == 99
    assert type(captured["spec"]).__module__.startswith("infercrane.kernels.ops.rms_norm")


def _fails_early(argv: list[str], capsys) -> str:
    rc = main(argv)
    out = capsys.readouterr()
    text = out.out + out.err
    assert rc == 2, text
    assert "Traceback" not in text
    return text


def test_unknown_op_lists_the_known_ones(tmp_path: Path, tripwire: dict, capsys) -> None:
    for cmd in (["kernel", "screen", "--out", str(tmp_path / "k.json")], ["kernel", "list"]):
        text = _fails_early([*cmd, "--op", "no_such_op"], capsys)
        assert "--op" in text and all(op in text for op in registry.known_ops())


def test_out_that_cannot_be_written_fails_before_screening(tmp_path: Path, tripwire: dict, capsys) -> None:
    (tmp_path / "a-file").write_text("x")
    text = _fails_early(["kernel", "screen", "--device", "cpu", "--out", str(tmp_path)], capsys)
    assert "--out" in text and "directory" in text
    text = _fails_early(["kernel", "screen", "--device", "cpu", "--out", str(tmp_path / "a-file" / "k.json")], capsys)
    assert "--out" in text and "a-file" in text
    assert tripwire == {}


def test_no_candidate_selected_fails_naming_the_candidates(tmp_path: Path, tripwire: dict, capsys) -> None:
    text = _fails_early(["kernel", "screen", "--impls", "eager", "--out", str(tmp_path / "k.json")], capsys)
    candidates = [i.key for i in registry.implementations("fused_add_rmsnorm") if i.kind == "candidate"]
    assert "--impls" in text and candidates and all(k in text for k in candidates)
    assert tripwire == {}


def test_rows_that_cannot_fit_are_refused_with_both_numbers(tmp_path: Path, tripwire: dict, capsys) -> None:
    text = _fails_early(["kernel", "screen", "--device", "cpu", "--rows", "1,100000000", "--out",
                         str(tmp_path / "k.json")], capsys)
    assert "--rows 100000000" in text and text.count("GiB") >= 2 and "MemAvailable" in text
    assert tripwire == {}


def test_kernel_list_says_what_a_screen_here_would_do(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    for op in registry.known_ops():
        assert main(["kernel", "list", "--op", op]) == 0
        out = capsys.readouterr().out
        for impl in registry.implementations(op):
            line = next(ln for ln in out.splitlines() if f" {impl.key} " in ln)
            assert any(w in line for w in ("timed on the GPU", "checked on the CPU", "skipped:")), line
        assert "TRITON_INTERPRET" not in os.environ  # probing left the environment as it was
    if not torch.cuda.is_available() and "triton" in registry.known_keys("fused_add_rmsnorm"):
        assert main(["kernel", "list", "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        triton_line = next(ln for ln in out.splitlines() if " triton " in ln)
        triton_ok = registry.get("fused_add_rmsnorm", "triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        if triton_ok.probe()[0]:
            assert "under Triton's interpreter" in triton_line, out


def _doc_with(text: str) -> dict[str, Any]:
    check = {"check_index": 0, "phase": "eager", "seed": 1, "input_scale": 1.0, "passed": False,
             "contract_error": text, "tensors": []}
    impls = [{"key": "eager", "kind": "baseline", "status": "ok", "skip_reason": None, "error": None,
              "correctness": [{"rows": 8, "passed": True, "checks": []}], "timings": []},
             {"key": "user", "kind": "candidate", "status": "failed", "skip_reason": None, "error": text,
              "correctness": [{"rows": 8, "passed": False, "checks": [check]}], "timings": []},
             {"key": "cuda", "kind": "candidate", "status": "skipped", "skip_reason": text, "error": None,
              "correctness": [], "timings": []}]
    return {"result": {"implementations": impls, "comparisons": []}, "measurements": [], "amdahl": [],
            "decision": f"reject {text}", "reason": text,
            "other_candidates": [{"implementation": "cuda", "decision": text, "reason": text}]}


def test_summary_prints_markup_in_foreign_text_as_text() -> None:
    from rich.console import Console

    from infercrane.commands.kernel import _print_summary

    con = Console(record=True, width=200)
    _print_summary(con, _doc_with("boom [/oops] [bold]x[/bold]\nTraceback line"))
    out = con.export_text()
    assert "boom [/oops] [bold]x[/bold]" in out
    for key, status in (("eager", "ok"), ("user", "failed"), ("cuda", "skipped")):  # one table, every status
        assert any(key in ln and status in ln for ln in out.splitlines()), out
    assert "Traceback line" not in out  # first lines only: the receipt keeps the rest


def test_a_candidate_raising_markup_is_reported_not_crashing(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "markup.py"
    bad.write_text("def fused_add_rmsnorm(x, residual, weight, eps):\n"
                   "    raise RuntimeError('boom [/oops]')\n\nfused_add_rmsnorm.in_place = False\n")
    out = tmp_path / "k.json"
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager", "--checks", "1",
                 "--candidate", f"{bad}:fused_add_rmsnorm", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "boom [/oops]" in text and load_receipt(out).document["decision_code"] == "reject"


def test_a_functional_screen_names_a_screened_candidate_not_a_skipped_one(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager,triton,cuda", "--checks", "1",
                 "--out", str(out)]) == 0
    doc = load_receipt(out).document
    assert doc["candidate"]["key"] == "triton" and "functional check only" in doc["decision"]
    assert [o["implementation"] for o in doc["other_candidates"]] == ["cuda"]


def test_decide_never_overwrites_the_receipt_it_decides_from(tmp_path: Path, capsys) -> None:
    doc = _screen(tmp_path, f"{FIXTURES / 'good_candidate.py'}:fused_add_rmsnorm", "own")
    measured = tmp_path / "own" / "kernel-screen.json"
    before = measured.read_bytes()
    assert main(["kernel", "decide", str(measured), "--out", str(measured)]) == 2
    assert "the receipt being decided again" in capsys.readouterr().err and measured.read_bytes() == before
    assert doc["content_sha256"]


@pytest.mark.parametrize("run_id", ["../../x", "a/b", ".."])
def test_a_run_id_that_would_leave_runs_is_refused(tmp_path: Path, capsys, monkeypatch, run_id: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INFERCRANE_RUN_ID", run_id)
    assert main(["kernel", "screen", "--device", "cpu", "--rows", "1", "--impls", "eager,triton"]) == 2
    assert "INFERCRANE_RUN_ID" in capsys.readouterr().err and not (tmp_path / "runs").exists()

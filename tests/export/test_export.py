"""``infercrane export``: receipts of every kind as one CSV table and one JSON summary.

The receipts are real: the committed H200 receipts (a kernel screen v3 and v2, a kernel-in-vLLM A/B, a two-driver
serve bench, a PoC with its embedded sections), a functional kernel screen run here on the CPU by the screen harness,
and a paired-window serve ab receipt built from synthetic runs by the serving lab's own receipt builder. Each check
holds the export against the receipt's own fields: row counts equal its cells, checks, comparisons, runs and
statistics; values equal the fields they came from; the summary's decisions equal the receipt's.
"""
from __future__ import annotations

import csv
import io
import json
import re
from functools import lru_cache
from pathlib import Path
import pytest

from evidence import archived

from infercrane.cli import main
from infercrane.decide.vocabulary import VERDICTS, WORDS
from infercrane.receipts.validate import Receipt, load_receipt
from infercrane.report.export import COLUMNS, HEADLINE_KEYS, export_rows, export_summary, export_text

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "docs" / "benchmarks"
KERNEL_V3 = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")
KERNEL_V2 = BENCH / "2026-12-01-h200-kernel" / "kernel-screen.json"
APPLY = BENCH / "2026-12-01-h200-kernel-in-vllm" / "compiled-cuda.json"
BENCH_TWO_DRIVERS = BENCH / "2026-12-01-h200-poc" / "drivers-c8.json"
POC = archived("2026-12-01-h200-poc/poc-evidence.tar.xz/poc.json")
SEEDS = REPO / "examples" / "receipts"
DOC = REPO / "docs" / "exports.md"
GOOD_CANDIDATE = REPO / "tests" / "kernels" / "fixtures" / "good_candidate.py"


@lru_cache(maxsize=None)
def _loaded(path: Path) -> Receipt:
    return load_receipt(path)


def _csv(receipt: Receipt, table: str = "measured") -> list[dict[str, str]]:
    text = export_text(receipt, "csv", table=table)
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    assert tuple(header) == COLUMNS
    rows = list(reader)
    assert all(len(r) == len(COLUMNS) for r in rows)
    return [dict(zip(header, r)) for r in rows]


def _of(rows: list[dict[str, str]], kind: str, section: str | None = None) -> list[dict[str, str]]:
    return [r for r in rows if r["row_kind"] == kind and (section is None or r["section"] == section)]


def _num(text: str) -> float | None:
    return None if text == "" else float(text)


# --------------------------------------------------------------------------------------------- receipts made here


@pytest.fixture(scope="module")
def functional_kernel(tmp_path_factory) -> Path:
    """A functional kernel screen (no GPU: correctness only) by the screen harness, in process, as a v3 receipt."""
    pytest.importorskip("torch")
    from infercrane.decide.policy import load_policy
    from infercrane.env.capture import provenance
    from infercrane.kernels.harness.runner import screen
    from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec
    from infercrane.kernels.receipt import build_document
    from infercrane.receipts.validate import write_receipt

    spec = FusedAddRMSNormSpec(hidden_size=128, eps=1e-6, rows=(1, 8), num_layers=28)
    res = screen(spec, ["eager", "vllm_vendor"], candidate=f"{GOOD_CANDIDATE}:fused_add_rmsnorm", device="cpu",
                 isolate=False, checks=1)
    assert res.run_kind == "functional"
    prov = provenance(config={"op": "fused_add_rmsnorm", "rows": [1, 8]},
                      command_line=["infercrane", "kernel", "screen"])
    doc = build_document(res, load_policy("kernel"), provenance=prov, model_source="test")
    return write_receipt(doc, tmp_path_factory.mktemp("kernel") / "kernel.json").path


@pytest.fixture(scope="module")
def paired_ab(tmp_path_factory) -> Path:
    """A complete serve ab receipt of the paired window design (A B B A blocks, window pairs, one decision family),
    built by the serving lab's receipt builder from synthetic runs (test data, not measurements)."""
    pytest.importorskip("transformers")
    from infercrane.decide.policy import load_policy
    from infercrane.env.capture import provenance
    from infercrane.models.standin import write_stand_in
    from infercrane.receipts.validate import write_receipt
    from infercrane.serving.metrics import RunMetrics
    from infercrane.serving.receipt import build_document, plan_config
    from infercrane.serving.recipes import RECIPE_SCHEMA_VERSION, Recipe
    from infercrane.serving.workload import PlanResult, load_workload, plan_runs

    tmp = tmp_path_factory.mktemp("paired")
    stand_in = tmp / "standin"
    write_stand_in("Qwen/Qwen3-0.6B", stand_in)
    arms = ["slow", "fast"]
    recipes = {a: Recipe(schema_version=RECIPE_SCHEMA_VERSION, name=a, engine="testserver", model=str(stand_in))
               .resolved() for a in arms}
    w = load_workload("quick")
    result = PlanResult(workload=w, recipes=recipes, drivers=["aiperf"], order="sandwich",
                        plan=plan_runs(arms, w, "sandwich"), analysis="pairs")
    for arm, base in (("slow", 400.0), ("fast", 800.0)):
        for i in range(w.runs_per_arm):
            for c in w.concurrency:
                tok_s = base * c * (1 + 0.013 * ((i * 7 + c) % 5))
                result.runs.append(RunMetrics(
                    arm=arm, recipe_sha256="0" * 64, run_index=i, concurrency=c, driver="aiperf", driver_version="1",
                    token_count_source="server", streaming=True, expected_output_tokens=w.output_tokens,
                    raw_export_path=f"{arm}/visit00/phases/r{i:02d}_c{c}/profile_export_aiperf.json",
                    requests_sent=100, requests_completed=100, failures=0, output_length_mismatches=0,
                    output_tokens_total=1600, duration_s=1600 / tok_s, output_tok_s=tok_s, request_s=tok_s / 16,
                    ttft_p50_ms=40.0 * 400 / base, ttft_p95_ms=(50.0 + i) * 400 / base,
                    ttft_p99_ms=60.0 * 400 / base, tpot_p50_ms=1000 / tok_s * c, tpot_p95_ms=(1100 + i) / tok_s * c,
                    tpot_p99_ms=1200 / tok_s * c, e2e_p50_ms=100.0, e2e_p95_ms=16000 / tok_s * c,
                    e2e_p99_ms=17000 / tok_s * c, started_at="2026-12-01T00:00:00+00:00"))
    result.complete = True
    prov = provenance(config=plan_config("ab", list(recipes.values()), w, {"order": "sandwich"}),
                      command_line=["infercrane", "serve", "ab"])
    doc = build_document(result, kind="ab", policy=load_policy("serving"), provenance=prov)
    return write_receipt(doc, tmp / "ab.json").path


# --------------------------------------------------------------------------------------------- kernel lab


def test_a_kernel_screen_is_one_row_per_cell_check_and_comparison_with_its_conditions() -> None:
    r = _loaded(KERNEL_V3)
    res = r.model.result
    rows = _csv(r)
    assert len(_of(rows, "timing")) == sum(len(i.timings) for i in res.implementations)
    assert len(_of(rows, "correctness")) == sum(len(i.correctness) for i in res.implementations)
    assert len(rows) == len(_of(rows, "timing")) + len(_of(rows, "correctness"))  # every implementation ran
    assert len(_csv(r, "comparisons")) == len(_of(_csv(r, "comparisons"), "comparison")) == len(res.comparisons)
    # every row names its conditions
    assert {(x["gpu"], x["op"], x["dtype"], x["hidden"], x["gpu_driver"]) for x in rows} == {
        (r.model.hardware.gpu, res.spec.op, res.spec.dtype, str(res.spec.hidden_size), r.model.hardware.driver)}
    assert {x["receipt_sha256"] for x in rows} == {r.model.content_sha256}
    # a cell's numbers are the receipt's, to the last bit
    impl = res.implementations[2]
    cell = impl.timings[-1]
    row = next(x for x in _of(rows, "timing") if (x["implementation"], x["rows"], x["timing_mode"])
               == (impl.key, str(cell.rows), cell.mode))
    assert _num(row["median_us"]) == cell.summary.median and _num(row["q3_us"]) == cell.summary.q3
    assert int(row["trials"]) == len(cell.blocks) and int(row["samples"]) == cell.summary.n
    assert _num(row["trial_median_min_us"]) == min(cell.trial_medians())
    assert row["flags"] == "; ".join(cell.flags)
    # decisions: the candidate's and the other candidates', none for a baseline
    decided = {x["implementation"]: x["decision_code"] for x in _of(rows, "timing")}
    assert decided[r.model.candidate.key] == r.model.decision_code
    assert all(decided[o.implementation] == o.decision_code for o in r.model.other_candidates)
    assert all(decided[i.key] == "" for i in res.implementations if i.kind == "baseline")


def test_a_kernel_comparison_carries_its_interval_its_method_and_both_verdict_words() -> None:
    r = _loaded(KERNEL_V3)
    rows = _of(_csv(r, "comparisons"), "comparison")
    assert len(rows) == len(r.model.result.comparisons)
    for comp, row in zip(r.model.result.comparisons, rows):
        assert (row["implementation"], row["reference"], int(row["rows"]), row["timing_mode"]) == (
            comp.candidate, comp.reference, comp.rows, comp.mode)
        assert _num(row["ratio"]) == comp.speedup.ratio and _num(row["ci_low"]) == comp.speedup.ci_lo
        assert row["lab_verdict"] == comp.verdict.value and row["verdict"] == VERDICTS[comp.verdict.value]
        assert row["method"] == comp.speedup.method
        assert row["role"] == ("family" if comp.family else "described")
        if comp.family:
            assert row["family_lab_verdict"] == comp.family.verdict.value
    assert {x["verdict"] for x in rows} <= {"improved", "worse", "equivalent", "inconclusive", "not-decided"}


def test_the_kernel_summary_leads_with_the_decision_and_the_comparison_that_limits_it() -> None:
    r = _loaded(KERNEL_V3)
    s = export_summary(r)
    assert (s["kind"], s["schema_version"], s["content_sha256"]) == (
        "kernel-screen", r.schema_version, r.model.content_sha256)
    (sec,) = s["sections"]
    assert (sec["decision_code"], sec["decision"], sec["reason"]) == (r.model.decision_code, r.model.decision,
                                                                      r.model.reason)
    family = [c for c in r.model.result.comparisons if c.family and c.candidate == r.model.candidate.key]
    lowest = min(family, key=lambda c: c.speedup.ci_lo)
    h = sec["headline"]
    assert (h["reference"], h["rows"], h["timing_mode"], h["ci_low"]) == (
        lowest.reference, lowest.rows, lowest.mode, lowest.speedup.ci_lo)
    assert h["method"] and set(h) == set(HEADLINE_KEYS) and sec["timing_mode"] == r.model.policy.timing_mode
    assert sum(sec["verdicts"]["comparison"].values()) == len(r.model.result.comparisons)


def test_a_v2_kernel_screen_exports_its_timings_checks_and_comparisons() -> None:
    r = _loaded(KERNEL_V2)
    rows = _csv(r)
    assert len(_of(rows, "timing")) == len(r.model.timings)
    assert len(_of(rows, "correctness")) == len(r.model.correctness)
    assert len(_of(_csv(r, "comparisons"), "comparison")) == len(r.model.comparisons)
    t = r.model.timings[0]
    row = _of(rows, "timing")[0]
    assert (row["implementation"], _num(row["median_us"]), int(row["samples"])) == (t.implementation, t.median_us, t.n)
    assert export_summary(r)["sections"][0]["decision_code"] == r.model.decision_code


def test_a_functional_screen_exports_its_checks_and_names_what_was_skipped(functional_kernel: Path) -> None:
    r = load_receipt(functional_kernel)
    res = r.model.result
    rows = _csv(r)
    assert _of(rows, "timing") == [] and _csv(r, "comparisons") == []
    assert len(_of(rows, "correctness")) == sum(len(i.correctness) for i in res.implementations)
    skipped = _of(rows, "implementation")
    assert [(x["implementation"], x["implementation_status"]) for x in skipped] == [
        (i.key, i.status) for i in res.implementations if not i.correctness]
    assert all(x["note"] for x in skipped)  # why it was skipped
    check = next(x for x in _of(rows, "correctness") if x["implementation"] == "user")
    assert check["correctness_passed"] == "true" and check["run_kind"] == "functional"
    (sec,) = export_summary(r)["sections"]
    assert sec["decision_code"] == r.model.decision_code == "inconclusive" and sec["headline"] is None


# --------------------------------------------------------------------------------------------- serving lab


def test_a_serving_ab_is_one_row_per_run_with_every_metric_and_its_conditions() -> None:
    r = _loaded(APPLY)
    m = r.model
    rows = _csv(r)
    runs = _of(rows, "run")
    assert len(runs) == len(rows) == len(m.runs)  # the measured table of a serving receipt: its runs, one row each
    a, b = m.paired_aiperf.comparisons[0].recipe_a, m.paired_aiperf.comparisons[0].recipe_b
    for run, row in zip(m.runs, runs):
        assert (row["recipe"], int(row["run_index"]), int(row["concurrency"]), row["driver"]) == (
            run.recipe, run.run_index, run.concurrency, run.driver)
        assert row["arm"] == ("A" if run.recipe == a else "B")
        for metric in ("output_tokens_per_second", "ttft_p95_ms", "tpot_p50_ms", "latency_p99_ms"):
            assert _num(row[metric]) == getattr(run, metric)
        assert row["ok"] == ("true" if run.status == "ok" else "false") and row["raw_export"] == run.raw_export
        assert row["driver_version"] == m.drivers[run.driver]
    w = m.paired_aiperf.workload
    assert {(x["model"], x["gpu"], x["workload"], x["input_tokens"], x["window_s"]) for x in runs} == {
        (m.model.id, m.provenance.hardware.gpu, w.preset, str(w.input_tokens), repr(w.window_s))}
    versions = {e.recipe: e.version for e in m.engines}
    assert all(x["engine_version"] == versions[x["recipe"]] for x in runs)
    assert {x["decision_code"] for x in rows} == {m.paired_aiperf.decision_code}
    assert {x["lab_verdict"] for x in rows} == {""}  # a run is measured, not compared
    compared = _csv(r, "comparisons")
    stats = _of(compared, "statistic")
    assert len(stats) == len(m.paired_aiperf.statistics)
    for s, row in zip(m.paired_aiperf.statistics, stats):
        assert (row["metric"], int(row["concurrency"]), _num(row["ratio"]), _num(row["ci_high"])) == (
            s.metric, s.concurrency, s.ratio_b_over_a, s.ci_high)
        assert row["lab_verdict"] == s.verdict and row["verdict"] == VERDICTS[s.verdict]
        assert (row["recipe"], row["reference"], row["method"]) == (b, a, s.interval_method)
    # a kernel inside the engine: the prediction beside the measurement, per concurrency
    predicted = m.kernel_in_serving.prediction["concurrencies"]
    rows_p = _of(compared, "prediction")
    assert len(compared) == len(stats) + len(rows_p)
    assert [(int(x["concurrency"]), _num(x["predicted_ratio"]), x["lab_verdict"]) for x in rows_p] == [
        (c["concurrency"], c["predicted_ratio"], c["verdict"]) for c in predicted]


def test_the_serving_summary_names_the_decision_and_the_comparison_it_turns_on() -> None:
    r = _loaded(APPLY)
    pa = r.model.paired_aiperf
    s = export_summary(r, label="apply.json")
    assert s["kind"] == "kernel-apply" and s["receipt"] == "apply.json" and s["gpu"] == "NVIDIA H200"
    (sec,) = s["sections"]
    assert (sec["decision_code"], sec["decision"], sec["reason"]) == (pa.decision_code, pa.decision, pa.reason)
    assert (sec["subject"], sec["reference"]) == (pa.comparisons[0].recipe_b, pa.comparisons[0].recipe_a)
    # rejected on a guard metric that reads WORSE: the headline is the least favourable of those
    worse = [st for st in pa.statistics if st.verdict == "WORSE" and st.metric in r.model.policy["guard_metrics"]]
    assert pa.decision_code == "reject" and worse
    h = sec["headline"]
    assert h["lab_verdict"] == "WORSE" and h["verdict"] == "worse"
    assert h["ci_high"] == max(st.ci_high for st in worse) and h["method"]
    assert [c["lab_verdict"] for c in sec["prediction"]["concurrencies"]] == [
        c["verdict"] for c in r.model.kernel_in_serving.prediction["concurrencies"]]


def test_a_paired_window_ab_exports_its_decision_family(paired_ab: Path) -> None:
    r = load_receipt(paired_ab)
    pa = r.model.paired_aiperf
    from infercrane.serving.workload import load_workload

    w = load_workload("quick")  # the synthetic A/B's design: every run of both arms at every concurrency
    assert len(_csv(r)) == len(r.model.runs) == 2 * w.runs_per_arm * len(w.concurrency)
    rows = _csv(r, "comparisons")
    assert len(rows) == len(pa.statistics) + len(pa.family.tests)
    tests = _of(rows, "family_test")
    assert [(x["metric"], x["role"], x["lab_verdict"]) for x in tests] == [
        (t.metric, t.role, t.verdict) for t in pa.family.tests]
    # per-concurrency statistics of a paired design are described, not tested
    assert {(x["lab_verdict"], x["verdict"], x["role"]) for x in _of(rows, "statistic")} == {
        ("", "not-decided", "described")}
    (sec,) = export_summary(r)["sections"]
    primary = next(t for t in pa.family.tests if t.role == "primary")
    assert sec["decision_code"] == pa.decision_code == "accept"
    assert (sec["headline"]["row_kind"], sec["headline"]["metric"], sec["headline"]["ratio"]) == (
        "family_test", primary.metric, primary.ratio_b_over_a)
    assert sec["headline"]["verdict"] == "improved"


def test_a_serve_bench_exports_runs_of_both_drivers_and_their_agreement() -> None:
    r = _loaded(BENCH_TWO_DRIVERS)
    runs = _csv(r)
    assert len(runs) == len(_of(runs, "run")) == len(r.model.runs)
    assert {(x["driver"], x["driver_version"]) for x in runs} == set(r.model.drivers.items())
    assert {x["arm"] for x in runs} == {""}  # one recipe: no arms
    agreement = _of(_csv(r, "comparisons"), "agreement")
    assert [(x["metric"], x["reference"], x["driver"], x["lab_verdict"]) for x in agreement] == [
        (a.metric, a.reference_driver, a.driver, a.verdict) for a in r.model.bench.driver_agreement]
    assert all(x["verdict"] == VERDICTS[x["lab_verdict"]] for x in agreement)
    (sec,) = export_summary(r)["sections"]
    assert sec["kind"] == "serve-bench" and sec["decision_code"] is None and sec["headline"] is None


# --------------------------------------------------------------------------------------------- PoC


def test_a_poc_exports_the_rows_of_every_section_it_embeds() -> None:
    r = _loaded(POC)
    ev = r.model.evidence
    rows = _csv(r) + _csv(r, "comparisons")
    sections = {f"{part}.{gpu}": doc for part in ("kernel", "paired", "public")
                for gpu, doc in getattr(ev, part).items()}
    assert list(dict.fromkeys(x["section"] for x in _csv(r))) == list(sections)
    for name, doc in sections.items():
        mine = [x for x in rows if x["section"] == name]
        assert {x["receipt_sha256"] for x in mine} == {doc["content_sha256"]}
        if name.startswith("kernel."):
            res = doc["result"]
            assert len(_of(mine, "timing")) == sum(len(i["timings"]) for i in res["implementations"])
            assert len(_of(mine, "comparison")) == len(res["comparisons"])
        else:
            assert len(_of(mine, "run")) == len(doc["runs"])
            assert len(_of(mine, "statistic")) == len(doc["paired_aiperf"]["statistics"])
    s = export_summary(r)
    assert s["kind"] == "poc" and s["complete"] is True
    assert s["qualification_boundary"] == r.model.qualification_boundary
    by_name = {sec["section"]: sec for sec in s["sections"]}
    assert list(by_name) == list(sections)
    assert by_name["kernel.h200"]["decision_code"] == sections["kernel.h200"]["decision_code"] \
        == r.model.custom_kernel.gpus["h200"].decision_code
    assert by_name["paired.h200"]["decision_code"] == sections["paired.h200"]["paired_aiperf"]["decision_code"] \
        == r.model.paired_aiperf.decision_code
    assert by_name["public.h200"]["decision_code"] == r.model.public_workload_reproduction.decision_code


# --------------------------------------------------------------------------------------------- the command


def test_the_command_writes_csv_to_stdout_and_json_to_a_file(tmp_path: Path, capsys) -> None:
    r = _loaded(BENCH_TWO_DRIVERS)
    for argv, table, kinds in (([], "measured", {"run"}), (["--table", "comparisons"], "comparisons", {"agreement"})):
        assert main(["export", str(BENCH_TWO_DRIVERS), *argv]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0] == ",".join(COLUMNS)
        rows = list(csv.DictReader(io.StringIO(out)))
        assert len(rows) == len(export_rows(r, table)) and {x["row_kind"] for x in rows} == kinds
    target = tmp_path / "sub" / "summary.json"
    assert main(["export", str(BENCH_TWO_DRIVERS), "--format", "json", "--out", str(target)]) == 0
    assert str(target) in capsys.readouterr().out
    summary = json.loads(target.read_text())
    assert summary == export_summary(_loaded(BENCH_TWO_DRIVERS), label=str(BENCH_TWO_DRIVERS))


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("infercrane: error: "), captured.err
    return lines[0]


@pytest.mark.parametrize("content, says", [
    ("not json at all", "not valid JSON"),
    ('{"schema_version": "infercrane.kernel-agreement/v2"}', "unknown schema_version"),
])
def test_a_file_that_is_not_a_receipt_exits_2_with_one_line(tmp_path: Path, capsys, content: str, says: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["export", str(bad)]) == 2
    assert says in _one_error_line(capsys)


def test_an_edited_receipt_exits_2_with_one_line_and_the_first_problem(tmp_path: Path, capsys) -> None:
    doc = json.loads(BENCH_TWO_DRIVERS.read_text())
    doc["runs"][0]["output_tokens_per_second"] *= 2
    doc["bench"]["failures"] = 7
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    assert main(["export", str(edited), "--format", "json"]) == 2
    line = _one_error_line(capsys)
    assert "not a valid receipt: content_sha256" in line and "more)" in line and "receipt validate" in line


def test_a_table_with_the_json_summary_is_refused_before_the_receipt_is_read(capsys) -> None:
    assert main(["export", "no-such.json", "--format", "json", "--table", "comparisons"]) == 2
    assert "--table comparisons" in _one_error_line(capsys)


@pytest.mark.parametrize("seed", ["cuda-kernel-screening-v1.seed.json", "optimization-poc-v1.seed.json"])
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_v1_seed_receipt_is_refused_in_one_line_saying_why(capsys, seed: str, fmt: str) -> None:
    assert main(["export", str(SEEDS / seed), "--format", fmt]) == 2
    line = _one_error_line(capsys)
    assert "v1 seed receipt" in line and "medians only" in line


def test_the_export_never_overwrites_the_receipt(tmp_path: Path, capsys, functional_kernel: Path) -> None:
    copy = tmp_path / "k.json"
    copy.write_bytes(functional_kernel.read_bytes())
    assert main(["export", str(copy), "--out", str(copy)]) == 2
    assert "--out" in _one_error_line(capsys) and copy.read_bytes() == functional_kernel.read_bytes()


# --------------------------------------------------------------------------------------------- the documentation


def _doc_table_names(heading: str) -> list[str]:
    """The backticked names in the first column of the tables under ``heading`` in docs/exports.md."""
    text = DOC.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    part = text[start:end if end > 0 else None]
    return [m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", part, re.M)]


def test_every_column_and_key_is_documented() -> None:
    assert _doc_table_names("CSV columns") == list(COLUMNS)
    summary = export_summary(_loaded(BENCH_TWO_DRIVERS))
    section = summary["sections"][0]
    documented = _doc_table_names("JSON summary")
    assert [k for k in documented if k in summary] == list(summary)
    assert [k for k in documented if k in section and k not in summary] == [k for k in section if k not in summary]
    assert set(documented) == set(summary) | set(section)


def test_the_verdict_table_in_the_docs_is_the_vocabulary() -> None:
    text = DOC.read_text()
    for _, _, word, norm, _ in WORDS:
        assert re.search(rf"^\| [^|]+ \| `{re.escape(word)}` \| `{norm}` \|", text, re.M), (word, norm)


def test_every_row_of_every_receipt_kind_fills_only_its_own_columns(functional_kernel: Path, paired_ab: Path) -> None:
    kernel_only = {"op", "hidden", "implementation_kind", "median_us", "correctness_passed"}
    serving_only = {"workload", "arm", "run_index", "output_tokens_per_second", "raw_export"}
    for path in (KERNEL_V3, APPLY, functional_kernel, paired_ab):
        r = _loaded(path) if path in (KERNEL_V3, APPLY) else load_receipt(path)
        for row in export_rows(r, "measured") + export_rows(r, "comparisons"):
            assert set(row) == set(COLUMNS)
            filled = {k for k, v in row.items() if v is not None}
            if row["row_kind"] in ("timing", "correctness", "comparison", "implementation"):
                assert not filled & serving_only, (row["row_kind"], filled & serving_only)
            else:
                assert not filled & kernel_only, (row["row_kind"], filled & kernel_only)

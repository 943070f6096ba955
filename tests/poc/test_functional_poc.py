"""`infercrane poc functional` end to end on a CPU: the kernel's functional screen and both A/Bs through real AIPerf
against the test server, joined in one receipt that validates; a resumed PoC reuses every finished section; a failure
part-way keeps the finished sections in a receipt marked incomplete; two such receipts relabelled as two GPU types
merge into one."""
from __future__ import annotations

import json

import pytest

from builders import relabel
from infercrane.cli import main
from infercrane.errors import RunFailed
from infercrane.receipts.validate import load_receipt

pytestmark = pytest.mark.slow
# functional_run: the functional PoC, run once per session (tests/conftest.py); the report tests read it too


@pytest.mark.timeout(900)
def test_the_functional_poc_joins_its_sections_in_one_valid_receipt(functional_run):
    config, out = functional_run
    doc = load_receipt(out).document
    assert doc["complete"] is True and doc["evidence_class"] == "functional-check"
    assert doc["qualification_boundary"].startswith("FUNCTIONAL PoC")
    ck = doc["custom_kernel"]["cpu"]
    assert ck["evidence_class"] == "cpu-functional-check" and ck["measurements"] == []
    assert ck["decision_code"] == "inconclusive" and "float32 oracle" in ck["correctness"]
    pa = doc["paired_aiperf"]
    m = {x["recipe"]: x for x in pa["measurements"]}
    assert set(m) == {"testserver", "testserver-fast"} and pa["failures"] == 0
    # testserver-fast is programmed with half the latencies: the A/B sees it faster
    assert all(c["throughput_speedup"] > 1.3 for c in pa["comparisons"])
    # the semantic-quality gate ran end to end against the test servers' toy model (both arms its reference norm)
    gate = doc["quality_gate"]
    assert gate["ran"] is True and gate["verdict"] == "PASS" and gate["accuracy"]["reference"] == 1.0
    assert gate["token_agreement"]["identical_items"] == gate["items"]["items"] == 200
    assert "semantic quality gated on InferCrane's generated items (paired A/B: gate PASS)" in \
        doc["qualification_boundary"]
    pw = doc["public_workload_reproduction"]
    assert [a["recipe"] for a in pw["arms"]] == ["testserver", "testserver-fast"] and pw["decision"]
    # the sitting: both test servers started at once for both A/Bs; its time accounting is in the receipt
    sitting = doc["provenance"]["config"]["sitting"]
    assert sitting["engines"] == 2 and 0 < sitting["measured_s"] < sitting["engine_up_s"] < sitting["wall_s"]
    assert 0 < sitting["measured_share_of_engine_up"] < 1 and set(sitting["sections_wall_s"]) == {
        "kernel", "paired", "public"}
    idle = sitting["unmeasured_up"]  # where the engines stood unmeasured: listed, and no more than the difference
    assert idle and all(0 <= u["from_s"] < u["to_s"] <= sitting["wall_s"] for u in idle)
    assert sum(u["s"] for u in idle) <= sitting["engine_up_s"] - sitting["measured_s"] + 1e-6
    # each section's receipt lies in the run folder, and the PoC receipt embeds exactly those
    folder = out.with_suffix("")
    # the paired A/B's first AIPerf block was started as its engine came up, the public A/B's during the paired
    # A/B's last block; both were used as they were
    for section in ("paired", "public"):
        section_doc = load_receipt(folder / f"{section}.json").document
        first = section_doc["plan_blocks"][0]
        assert first["prestarted"] is True and first["hidden_startup_s"] > 0, section
        assert not [n for n in json.dumps(section_doc).split('"') if "ended unused" in n], section
    for section in ("kernel", "paired", "public"):
        section_doc = load_receipt(folder / f"{section}.json").document
        assert doc["evidence"][section]["cpu"]["content_sha256"] == section_doc["content_sha256"], section


@pytest.mark.timeout(300)
def test_resume_reuses_every_finished_section(functional_run, monkeypatch, capsys):
    config, out = functional_run
    monkeypatch.chdir(out.parent.parent)
    before = json.loads(out.read_text())["evidence"]
    capsys.readouterr()
    assert main(["poc", "--resume", str(out.parent)]) == 0  # the config: the one the PoC recorded
    said = capsys.readouterr().out
    assert f"resuming with the one the PoC was run with, {config}" in said
    for section in ("kernel", "paired", "public"):
        assert f"{section}: reusing" in said and f"{section}: reused" in said
    after = load_receipt(out).document["evidence"]
    for section in ("kernel", "paired", "public"):
        assert after[section]["cpu"]["content_sha256"] == before[section]["cpu"]["content_sha256"]


def _resume_with_the_public_ab_stopped(functional_run, tmp_path, monkeypatch, stop) -> tuple:
    """A copy of the functional run without its public receipt, resumed with the public A/B replaced by ``stop``:
    (config, run folder, exit code)."""
    import shutil

    import infercrane.serving.ab as poc_serving

    config, out = functional_run
    run = tmp_path / "run"
    shutil.copytree(out.parent, run)
    (run / "poc" / "public.json").unlink()
    monkeypatch.setattr(poc_serving, "run_ab", stop)
    monkeypatch.chdir(out.parent.parent)
    return config, run, main(["poc", str(config), "--resume", str(run)])


@pytest.mark.timeout(300)
def test_a_failure_part_way_keeps_the_finished_sections(functional_run, tmp_path, monkeypatch, capsys):
    def engine_dies(plan, **kw):
        raise RunFailed(f"{plan.section}: the engine died (test)")

    config, run, code = _resume_with_the_public_ab_stopped(functional_run, tmp_path, monkeypatch, engine_dies)
    assert code == 4
    doc = load_receipt(run / "poc.json").document
    assert doc["complete"] is False
    assert "section public stopped: public: the engine died (test)" in doc["incomplete_reason"]
    assert set(doc["evidence"]["kernel"]) == set(doc["evidence"]["paired"]) == {"cpu"}
    assert doc["evidence"]["public"] == {} and doc["public_workload_reproduction"] is None
    assert doc["custom_kernel"] and doc["paired_aiperf"]


@pytest.mark.timeout(300)
def test_two_functional_receipts_of_two_gpu_types_merge(functional_run, tmp_path):
    _, out = functional_run
    doc = json.loads(out.read_text())
    a, b = tmp_path / "l40s.json", tmp_path / "h100.json"
    a.write_text(json.dumps(relabel(doc, "NVIDIA L40S")))
    b.write_text(json.dumps(relabel(doc, "NVIDIA H100 80GB HBM3")))
    merged = tmp_path / "merged.json"
    assert main(["receipt", "merge", str(a), str(b), "--out", str(merged)]) == 0
    m = load_receipt(merged).document
    assert {"l40s", "h100"} <= set(m["custom_kernel"]) and sorted(m["evidence"]["kernel"]) == ["h100", "l40s"]
    assert [x["receipt"] for x in m["merged_from"]] == [str(a), str(b)]
    # cost across GPU types: each type's serving receipts priced at its own price, ranked cheapest first (the same
    # throughputs relabelled, so the cheaper GPU-hour wins: L40S 2.25 against H100 6.155 dollars, prices.yaml)
    assert sorted(m["cost"]["by_gpu"]["paired"]) == ["h100", "l40s"]
    for row in m["cost"]["ranked"]:
        assert [x["gpu"] for x in row["output_usd_per_mtok_by_gpu"]] == ["l40s", "h100"]
        l40s, h100 = (x["usd"] for x in row["output_usd_per_mtok_by_gpu"])
        assert h100 / l40s == pytest.approx(6.155 / 2.25, rel=1e-4)
    # the merged receipt's report: both GPU types in the per-GPU table, each GPU's decision on the page; nothing was
    # timed, so no timing panel: each GPU's correctness is drawn under its own kernel screen instead
    pytest.importorskip("matplotlib")
    from infercrane.report.build import receipt_report

    rep = receipt_report(merged)
    names = {f.name for s in rep.sections for f in s.figures}
    assert "custom-kernel-per-gpu" not in names
    assert {"kernel-h100-correctness", "kernel-l40s-correctness"} <= names
    (per_gpu,) = [t for s in rep.sections for t in s.tables if t.title == "Per GPU"]
    assert sorted(r[0] for r in per_gpu.rows) == ["h100", "l40s"]
    named = " ".join(d.section for d in rep.head.decisions if d.section.startswith("custom_kernel"))
    assert "h100" in named and "l40s" in named
    assert main(["report", str(merged), "--out", str(tmp_path / "report")]) == 0


@pytest.mark.timeout(300)
def test_the_poc_ends_by_writing_its_report(functional_run):
    """The main job's last step: the report of what it measured beside its receipt, labelled functional, its
    decisions and boundary on the page and every image loaded in Chromium (where Chromium is installed)."""
    import html
    import sys
    from pathlib import Path

    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
    from report_browser import loaded_dom

    _, out = functional_run
    page = out.with_name("poc.report") / "index.html"
    assert page.is_file()
    doc = load_receipt(out).document
    text = html.unescape(page.read_text())
    assert doc["qualification_boundary"] in text and "functional check" in text
    assert doc["paired_aiperf"]["decision"] in text and doc["custom_kernel"]["cpu"]["decision"] in text
    dom, images, loaded = loaded_dom(page)
    assert images == loaded == len(list(page.parent.glob("*/*.png"))) > 0


@pytest.mark.timeout(300)
def test_ctrl_c_in_a_later_section_prints_how_to_continue(functional_run, tmp_path, monkeypatch, capsys):
    def interrupted(plan, **kw):
        raise KeyboardInterrupt

    capsys.readouterr()
    config, run, code = _resume_with_the_public_ab_stopped(functional_run, tmp_path, monkeypatch, interrupted)
    assert code == 130
    said = capsys.readouterr().out
    assert "public: STOPPED" in said
    (line,) = [x for x in said.splitlines() if "continue with: " in x]
    assert line.endswith(f"poc {config} --resume {run}")
    assert "--resume" in load_receipt(run / "poc.json").document["incomplete_reason"]


def _stop_in_the_kernel_section(tmp_path, monkeypatch, capsys, screen):
    import infercrane.kernels.screen as kernel_screen
    import infercrane.serving.ab as poc_serving

    def no_serving(plan, **kw):
        raise AssertionError("the PoC went on past a stopped kernel section")

    monkeypatch.setattr(kernel_screen, "run_prepared_screen", screen)
    monkeypatch.setattr(poc_serving, "run_ab", no_serving)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    code = main(["poc", "functional", "--out", str(tmp_path / "run" / "poc.json")])
    return code, capsys.readouterr().out


@pytest.mark.timeout(300)
def test_ctrl_c_in_the_kernel_section_keeps_the_run_folder_and_says_so(tmp_path, monkeypatch, capsys):
    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    code, said = _stop_in_the_kernel_section(tmp_path, monkeypatch, capsys, interrupted)
    assert code == 130
    assert (tmp_path / "run" / "poc").is_dir() and not (tmp_path / "run" / "poc.json").exists()
    assert "no section finished, so there is no PoC receipt yet" in said
    assert "continue with: " in said and said.rstrip().endswith(f"poc functional --resume {tmp_path / 'run'}")


@pytest.mark.timeout(300)
def test_a_screen_stopped_by_sigterm_stops_the_poc(tmp_path, monkeypatch, capsys):
    """The screen catches the interruption to write a partial receipt of what finished; the PoC must not take that
    receipt for a finished section and go on."""
    from types import SimpleNamespace

    partial = tmp_path / "run" / "poc" / "kernel.json"

    def stopped_screen(*a, **kw):
        return SimpleNamespace(path=partial, document={"result": {
            "interrupted": "terminated by SIGTERM after 3 of 20 steps"}})

    code, said = _stop_in_the_kernel_section(tmp_path, monkeypatch, capsys, stopped_screen)
    assert code == 143
    assert f"kernel: the screen's partial receipt is kept as {partial}" in said
    assert "kernel: STOPPED" in said and "paired: start" not in said


@pytest.mark.timeout(900)
def test_a_poc_whose_paired_ab_replays_a_trace_decides_on_goodput_and_states_each_boundary(tmp_path, monkeypatch):
    """A PoC config takes a trace workload like any other: its paired A/B replays the trace on its schedule against the
    test servers, decided on goodput under the config's SLO policy; the PoC receipt validates, says each serving
    section's own boundary (the trace's, the public workload's), and the trace gate reads it."""
    from infercrane.serving.trace import TraceSpec, generate

    spec = TraceSpec.model_validate({"requests": 30, "rate_per_s": 20.0, "arrival": "poisson", "seed": 4,
                                     "input_length": {"kind": "uniform", "low": 20, "high": 60},
                                     "output_length": {"kind": "uniform", "low": 4, "high": 12}})
    (tmp_path / "t.jsonl").write_text(generate(spec))
    (tmp_path / "w.yaml").write_text("schema_version: infercrane.serving-workload/v1\nname: trace-test\n"
                                     "concurrency: [16]\ninput_tokens: 40\noutput_tokens: 8\ntrace: t.jsonl\n"
                                     "runs_per_arm: 3\narm_order: interleaved\narrival_tolerance_ms: 200\n")
    (tmp_path / "p.yaml").write_text("schema_version: infercrane.serving-policy/v1\nprimary_metric: goodput_req_s\n"
                                     "guard_metrics: [ttft_p95_ms]\nmin_pairs: 3\n"
                                     "slos: [{metric: e2e, percentile: 95, max_ms: 1000}]\n")
    config = tmp_path / "c.yaml"
    config.write_text("schema_version: infercrane.poc-config/v1\nname: trace-functional\nmodel: Qwen/Qwen3-0.6B\n"
                      "gpu: none\nkernel: {op: fused_add_rmsnorm, candidates: [triton], baselines: [eager, "
                      "torch_compile, vllm_vendor], rows: [1], checks: 1}\n"
                      "paired: {recipes: [testserver, testserver-fast], workload: w.yaml}\n"
                      "public: {recipes: [testserver, testserver-fast], workload: quick-public}\n"
                      "serving: {stand_in: true, drivers: [aiperf], coresident: true, policy: p.yaml}\n")
    monkeypatch.chdir(tmp_path)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "poc.json"
    assert main(["poc", str(config), "--out", str(out)]) == 0
    doc = load_receipt(out).document  # validates: every section derived again, the boundary included
    paired = doc["evidence"]["paired"]["cpu"]
    assert paired["paired_aiperf"]["workload"]["trace"]["name"] == "t.jsonl"
    assert paired["paired_aiperf"]["family"]["tests"][0]["metric"] == "goodput_req_s"
    assert all(r["arrival"]["within"] for r in paired["runs"])
    boundary = doc["qualification_boundary"]
    assert "paired A/B: performance under a replayed request trace (t.jsonl" in boundary
    assert "public A/B: synthetic performance evidence only" in boundary
    assert main(["gate", str(out), "--rules", "release-trace"]) == 1  # a functional PoC is not measured on a GPU

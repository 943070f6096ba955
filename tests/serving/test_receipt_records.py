"""A serving receipt's raw evidence against the plan its configuration gives (``serving.receipt.record_problems``),
whether its plan finished or not: a dropped, duplicated or unplanned run, a shared raw export, a run outside the
receipt's time, a zeroed recipe hash, swapped arm labels, an engine record that carries no run and a model revision
that is not the recipe's are each caught and named by field path, after the content hash is recomputed; the committed
receipts they are made on validate untouched."""
from __future__ import annotations

import copy
import json
import tarfile
from pathlib import Path
from typing import Callable

import pytest

from receipt_edits import problems as _problems, rehashed as _rehashed

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
AB = DOCS / "2026-12-01-h200-serving" / "seed-paired-eager-vs-compiled.json"  # two engines, one after the other
CUDA_AB = DOCS / "2026-12-01-h200-kernel-in-vllm" / "compiled-cuda.json"       # co-resident engines, a kernel arm
SITTING = DOCS / "2026-12-06-h100-poc-one-sitting-seventh-try" / "poc-evidence.tar.xz"  # a PoC sitting's A/Bs
FIFTH = DOCS / "2026-12-05-h200-poc-one-sitting-fifth-try" / "poc-evidence.tar.xz"      # an A/B that stopped


def _member(tar: Path, name: str) -> dict:
    with tarfile.open(tar) as t:
        return json.loads(t.extractfile(name).read())


def _load(source: Path | tuple[Path, str]) -> dict:
    return _member(*source) if isinstance(source, tuple) else json.loads(source.read_text())


PUBLIC = (SITTING, "./poc/public.json")     # the compiled engine of the paired A/B serves its balanced arm
STOPPED = (FIFTH, "./poc/paired.json")      # complete: false


@pytest.mark.parametrize("source", [AB, CUDA_AB, PUBLIC, STOPPED], ids=["ab", "co-resident", "sitting", "stopped"])
def test_committed_receipt_passes_untouched(source) -> None:
    assert _problems(_load(source)) == []


def _swap_labels(d: dict) -> None:
    a, b = d["engines"][0], d["engines"][1]
    for key in ("recipe", "recipe_sha256"):
        a[key], b[key] = b[key], a[key]


def _extra_engine(recipe: str | None = None) -> Callable[[dict], None]:
    def edit(d: dict) -> None:
        extra = copy.deepcopy(d["engines"][0])
        if recipe is not None:
            extra["recipe"] = recipe
        d["engines"].append(extra)
    return edit


def _without_kernel(d: dict) -> None:
    cmd = d["engines"][1]["command_line"]
    i = cmd.index("--ir-op-priority")
    del cmd[i:i + 2]  # the kernel arm's engine ran vLLM's own kernel


EDITS: dict[str, tuple[object, Callable[[dict], None], str, str]] = {
    "a dropped run": (AB, lambda d: d["runs"].pop(3), "runs", "hold no record of 1 of the plan's 30 runs"),
    "a duplicated run": (AB, lambda d: d["runs"].append(copy.deepcopy(d["runs"][3])), "runs[30]", "repeats runs[3]"),
    "an unplanned run": (AB, lambda d: d["runs"][0].update(concurrency=2), "runs[0]", "is no run of the plan"),
    "a shared raw export": (AB, lambda d: d["runs"][4].update(raw_export=d["runs"][3]["raw_export"]),
                            "runs[4].raw_export", "is runs[3]'s raw export too"),
    "a run past the receipt": (AB, lambda d: d["runs"][29].update(duration_s=5000.0), "runs[29].duration_s",
                               "after the receipt was recorded"),
    "runs wider than the plan's wall time": (CUDA_AB, lambda d: d.update(plan_wall_s=600.0), "plan_wall_s",
                                             "the runs span"),
    "a zeroed recipe hash": (AB, lambda d: d["engines"][0].update(recipe_sha256="0" * 64), "engines[0].recipe_sha256",
                             "hashes to"),
    "swapped arm labels": (AB, _swap_labels, "engines[0].command_line", "does not launch recipe 'compiled'"),
    "a kernel arm launched without its kernel": (CUDA_AB, _without_kernel, "engines[1].command_line",
                                                 "does not launch recipe 'compiled-cuda'"),
    "an extra engine record of an arm": (AB, _extra_engine(), "engines[2]", "is engine 2 of recipe 'eager'"),
    "an extra engine record of no recipe": (AB, _extra_engine("ghost"), "engines[2].recipe",
                                            "no recipe of provenance.config"),
    "a second co-resident engine": (CUDA_AB, _extra_engine(), "engines[2]", "one engine up for all"),
    "a second engine of a sitting": (PUBLIC, _extra_engine(), "engines[2]", "recipe 'balanced'"),
    "a duplicated run of a stopped plan": (STOPPED, lambda d: d["runs"].append(copy.deepcopy(d["runs"][0])),
                                           f"runs[{len(_load(STOPPED)['runs'])}]", "repeats runs[0]"),
}


@pytest.mark.parametrize(("source", "edit", "field", "words"), EDITS.values(), ids=list(EDITS))
def test_edited_records_are_caught_by_field(source, edit: Callable[[dict], None], field: str, words: str) -> None:
    doc = copy.deepcopy(_load(source))
    edit(doc)
    problems = _problems(doc)
    assert any(p == field and words in m for p, m in problems), problems


def test_a_stopped_plan_need_not_hold_every_run() -> None:
    doc = copy.deepcopy(_load(STOPPED))
    doc["runs"].pop()
    assert _problems(doc) == []


def _hub_id_ab() -> dict:
    """A serve ab receipt of the shipped eager and compiled recipes (the hub id Qwen/Qwen3-0.6B) over synthetic runs
    (test data, not measurements), as ``serve ab`` builds it."""
    from infercrane.decide.policy import load_policy
    from infercrane.env.capture import provenance
    from infercrane.serving.metrics import RunMetrics
    from infercrane.serving.receipt import build_document, model_provenance, plan_config
    from infercrane.serving.recipes import load_recipe
    from infercrane.serving.workload import PlanResult, load_workload, plan_runs

    recs = [load_recipe("eager"), load_recipe("compiled")]
    w = load_workload("seed-paired").with_overrides(concurrency=[8], runs_per_arm=5)
    result = PlanResult(workload=w, recipes={r.name: r for r in recs}, drivers=["aiperf"], order="sequential",
                        plan=plan_runs([r.name for r in recs], w, "sequential"), complete=True)
    for arm, tok_s in (("eager", 400.0), ("compiled", 2400.0)):
        result.runs += [RunMetrics(
            arm=arm, recipe_sha256="", run_index=i, concurrency=8, driver="aiperf", driver_version="1",
            token_count_source="server", streaming=True, expected_output_tokens=64,
            raw_export_path=f"{arm}/run{i:02d}.json", requests_sent=100, requests_completed=100, failures=0,
            output_length_mismatches=0, output_tokens_total=6400, duration_s=6400 / tok_s, output_tok_s=tok_s + i,
            request_s=tok_s / 64, ttft_p50_ms=40.0, ttft_p95_ms=50.0 + i, ttft_p99_ms=55.0, tpot_p50_ms=8000 / tok_s,
            tpot_p95_ms=8800 / tok_s, tpot_p99_ms=9600 / tok_s, e2e_p50_ms=100.0, e2e_p95_ms=512000 / tok_s + i,
            e2e_p99_ms=560000 / tok_s, started_at="2026-12-01T09:00:00+00:00") for i in range(5)]
    prov = provenance(config=plan_config("ab", recs, w, {"order": "sequential"}), command_line=["test"],
                      model=model_provenance(recs[0]))
    return _rehashed(build_document(result, kind="ab", policy=load_policy("serving"), provenance=prov))


def test_a_hub_id_recipe_names_its_catalog_revision() -> None:
    doc = _hub_id_ab()
    assert _problems(doc) == [] and doc["provenance"]["model"]["config_sha256"] is not None
    doc["provenance"]["model"]["revision"] = doc["model"]["revision"] = "1" * 40  # relabelled consistently
    problems = _problems(doc)
    assert any(p == "provenance.model.revision" and "from the catalog, revision c1899de" in m for p, m in problems), \
        problems

"""A PoC receipt derives every section from the receipts it embeds: it validates as assembled, the kernel's decision
rests on one decode step per concurrency of the paired A/B, and an edited section, an edited embedded receipt or a
kernel decided with other steps is caught by name even after every hash is recomputed."""
from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from builders import REPO, poc_of, rehash
from infercrane.receipts.validate import check_document, write_receipt


def _problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    model, problems = check_document(doc)
    return problems


def test_the_assembled_poc_receipt_validates_and_holds_every_seed_section(h200_poc, tmp_path):
    assert _problems(h200_poc) == []
    doc = write_receipt(h200_poc, tmp_path / "poc.json").document
    for field in ("custom_kernel", "paired_aiperf", "public_workload_reproduction", "runtime_compatibility",
                  "qualification_boundary"):
        assert doc[field], field
    assert doc["complete"] is True and doc["evidence_class"] == "real-gpu-measurement"
    ck = doc["custom_kernel"]
    assert ck["operator"] == "fused residual-add + RMSNorm" and set(ck) >= {"h200", "decision", "reason"}
    row = ck["h200"]["measurements"][0]
    assert set(row) >= {"rows", "custom_ms", "vllm_ms", "speedup_vs_vllm", "speedup_vs_eager"}
    assert row["speedup_vs_vllm"] == pytest.approx(row["vllm_ms"] / row["custom_ms"])
    assert ck["decision"] == doc["evidence"]["kernel"]["h200"]["decision"]


def test_each_concurrency_gives_its_row_count_its_own_decode_step(h200_poc, h200_docs):
    """Rows 1, 8, 32 divide by the compiled arm's median TPOT p50 at c = 1, 8, 32; rows 128 and 512 (no such
    concurrency) have no ceiling."""
    import statistics

    paired = h200_docs["paired"]
    kernel = h200_poc["evidence"]["kernel"]["h200"]
    assert kernel["decode_step"] is None and [s["rows"] for s in kernel["decode_steps"]] == [1, 8, 32]
    for step in kernel["decode_steps"]:
        tpot = [r["tpot_p50_ms"] for r in paired["runs"] if r["recipe"] == "compiled"
                and r["concurrency"] == step["rows"] and r["status"] == "ok"]
        assert step["ms"] == pytest.approx(statistics.median(tpot))
    amdahl = {a["rows"]: a for a in h200_poc["custom_kernel"]["h200"]["amdahl"]}
    assert sorted(amdahl) == [1, 8, 32]
    assert len({a["decode_step_ms"] for a in amdahl.values()}) == 3  # not one step for every row
    assert kernel["decided_from"]["content_sha256"] == h200_docs["kernel"]["content_sha256"]


def test_the_public_block_is_the_ab_set_against_the_published_example(h200_poc):
    pw = h200_poc["public_workload_reproduction"]
    pa = h200_poc["evidence"]["public"]["h200"]["paired_aiperf"]
    assert [a["recipe"] for a in pw["arms"]] == ["balanced", "throughput"]
    assert pw["decision"] == pa["decision"] and pw["decision_code"] == pa["decision_code"] is not None
    assert pw["workload"] == {"requests": 1000, "concurrency": 100, "input_tokens": 1000, "output_tokens": 500,
                              "streaming": True}
    assert pw["published_example"]["hardware_and_runtime_disclosed"] is False
    pct = pw["arms"][0]["output_tokens_per_second"] / 22521.42 * 100
    assert f"balanced {pct:.1f} percent" in pw["comparison_boundary"]
    assert "not an apples-to-apples product ranking" in pw["comparison_boundary"]


def test_a_disclosed_example_reads_otherwise():
    from infercrane.poc.derive import comparison_boundary

    arms = [{"recipe": "a", "output_tokens_per_second": 50.0}]
    disclosed = comparison_boundary({"output_tokens_per_second": 100.0, "request_throughput": 1.0,
                                     "hardware_and_runtime_disclosed": True}, arms, "w", test_server=False)
    assert "a 50.0 percent" in disclosed and "apples-to-apples" not in disclosed and "discloses" in disclosed
    none = comparison_boundary(None, arms, "quick", test_server=False)
    assert "no published example" in none


def _edit_kernel_steps(d: dict[str, Any]) -> None:
    """A consistent forgery: the kernel decided again, validly, with a longer decode step than the paired A/B shows
    (a smaller op share); only the link to the paired A/B can tell."""
    from infercrane.poc.derive import decide_with_steps
    from infercrane.receipts.models_v3 import DecodeStep

    k = d["evidence"]["kernel"]["h200"]
    steps = [DecodeStep(**{**s, "ms": s["ms"] * 2}) for s in k["decode_steps"]]
    d["evidence"]["kernel"]["h200"] = decide_with_steps(k, steps, measured="kernel.json")


EDITS: dict[str, tuple[Callable[[dict], None], str]] = {
    "kernel decision": (lambda d: d["custom_kernel"]["h200"].update(decision="accept for serving"),
                        "custom_kernel.h200.decision"),
    "kernel time": (lambda d: d["custom_kernel"]["h200"]["measurements"][0].update(
        custom_ms=d["custom_kernel"]["h200"]["measurements"][0]["custom_ms"] * 0.5), "custom_kernel.h200.measurements"),
    "kernel reason": (lambda d: d["custom_kernel"].update(reason="the candidate wins"), "custom_kernel.reason"),
    "paired decision": (lambda d: d["paired_aiperf"].update(decision="reject compiled vLLM"),
                        "paired_aiperf.decision"),
    "public decision": (lambda d: d["public_workload_reproduction"].update(decision="accept throughput mode"),
                        "public_workload_reproduction.decision"),
    "public boundary": (lambda d: d["public_workload_reproduction"].update(comparison_boundary="a product ranking"),
                        "public_workload_reproduction.comparison_boundary"),
    "public arm": (lambda d: d["public_workload_reproduction"]["arms"][1].update(output_tokens_per_second=99999.0),
                   "public_workload_reproduction.arms"),
    "boundary": (lambda d: d.update(qualification_boundary="production ready"), "qualification_boundary"),
    "class": (lambda d: d.update(evidence_class="functional-check"), "evidence_class"),
    "ledger": (lambda d: d["runtime_compatibility"].pop(), "runtime_compatibility"),
    "embedded run": (lambda d: d["evidence"]["paired"]["h200"]["runs"][0].update(output_tokens_per_second=1.0),
                     "evidence.paired.h200.content_sha256"),
    "embedded run, re-hashed": (
        lambda d: d["evidence"]["paired"].update(h200=rehash({**d["evidence"]["paired"]["h200"], "runs": [
            {**d["evidence"]["paired"]["h200"]["runs"][0], "output_tokens_per_second": 1.0},
            *d["evidence"]["paired"]["h200"]["runs"][1:]]})), "evidence.paired.h200"),
    "kernel steps": (_edit_kernel_steps, "evidence.kernel.h200.decode_steps"),
    "filed under another GPU": (lambda d: d["evidence"]["public"].update(h100=d["evidence"]["public"].pop("h200")),
                                "evidence.public.h100"),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_an_edited_poc_receipt_is_caught_by_name_even_re_hashed(h200_poc, name):
    edit, where = EDITS[name]
    doc = copy.deepcopy(h200_poc)
    edit(doc)
    problems = _problems(rehash(doc))
    assert problems, "the edit went unnoticed"
    assert any(p.startswith(where) for p, _ in problems), problems


def test_complete_needs_every_section(h200_docs):
    partial = poc_of({"kernel": h200_docs["kernel"], "paired": h200_docs["paired"]}, complete=False)
    assert _problems(partial) == []  # a partial PoC receipt is valid as what it is
    assert partial["public_workload_reproduction"] is None and partial["custom_kernel"]["h200"]["amdahl"]
    claimed = rehash({**partial, "complete": True, "incomplete_reason": None})
    assert any(p == "complete" for p, _ in _problems(claimed))


def test_a_kernel_alone_keeps_its_own_decode_step(h200_docs):
    """Without a paired A/B on its GPU the kernel receipt is taken as it was decided (here: with the decode step it
    was given), and the boundary claims no serving result."""
    only = poc_of({"kernel": h200_docs["kernel"]}, complete=False)
    assert _problems(only) == []
    k = only["evidence"]["kernel"]["h200"]
    assert k is not None and k["decode_step"] == h200_docs["kernel"]["decode_step"]
    assert only["paired_aiperf"] is None and only["model"]["weights"] == "none"
    assert only["qualification_boundary"].startswith("operator microbenchmark only")


# --- the PoC's own provenance against its sections ----------------------------------------------------------------

def _recorded(d: dict[str, Any], when: str) -> None:
    d["recorded_at"] = d["provenance"]["recorded_at"] = when


def _outer_gpu(d: dict[str, Any], gpu: str, command: str = "poc") -> None:
    from infercrane.hashing import config_hash

    d["provenance"]["hardware"]["gpu"] = gpu
    d["provenance"]["config"]["command"] = command
    d["provenance"]["config_sha256"] = config_hash(d["provenance"]["config"])


def _poc_config_hash(d: dict[str, Any]) -> None:
    from infercrane.hashing import config_hash

    config = d["provenance"]["config"]
    config.update(config={"name": "seed"}, config_sha256=config_hash({"name": "seed"}))
    config["config"]["name"] = "seed, edited"
    d["provenance"]["config_sha256"] = config_hash(config)


PROVENANCE_EDITS: dict[str, tuple[Callable[[dict], None], str, str]] = {
    "recorded before its sections": (lambda d: _recorded(d, "2026-12-01T00:30:00+00:00"),
                                     "evidence.paired.h200.recorded_at", "after the receipts it embeds"),
    "another GPU than its sections'": (lambda d: _outer_gpu(d, "NVIDIA B200"), "provenance.hardware.gpu",
                                       "measured on 'NVIDIA H200'"),
    "no GPU, real GPU evidence": (lambda d: _outer_gpu(d, "none"), "provenance.hardware.gpu", "names no GPU"),
    "a merge that names a GPU": (lambda d: _outer_gpu(d, "NVIDIA B200", "receipt merge"), "provenance.hardware.gpu",
                                 "receipt merge measures nothing"),
    "its configuration not its hash": (_poc_config_hash, "provenance.config.config_sha256", "hashes to"),
}


@pytest.mark.parametrize("name", list(PROVENANCE_EDITS))
def test_the_pocs_provenance_against_its_sections_is_caught_by_field(h200_poc, name):
    edit, field, words = PROVENANCE_EDITS[name]
    doc = copy.deepcopy(h200_poc)
    edit(doc)
    problems = _problems(rehash(doc))
    assert any(p == field and words in m for p, m in problems), problems


SITTING = REPO / "docs/benchmarks/2026-12-06-h100-poc-one-sitting-seventh-try/poc-evidence.tar.xz"


def test_an_engine_shared_by_the_two_ab_carries_its_recipes_hash_in_both():
    """The public A/B's balanced arm ran on the engine started for the paired A/B's compiled recipe, which only the
    paired receipt holds: a zeroed hash there passes the public receipt alone, not the PoC."""
    import tarfile

    with tarfile.open(SITTING) as t:
        poc = json.loads(t.extractfile("./poc.json").read())
    assert _problems(poc) == []
    public = copy.deepcopy(poc["evidence"]["public"]["h100"])
    engine = public["engines"][0]
    assert engine["recipe"] == "compiled" and "compiled" not in public["provenance"]["config"]["recipes"]
    engine["recipe_sha256"] = "0" * 64
    poc["evidence"]["public"]["h100"] = rehash(public)
    assert _problems(poc["evidence"]["public"]["h100"]) == []
    problems = _problems(rehash(poc))
    assert any(p == "evidence.public.h100.engines[0].recipe_sha256" and "other A/B" in m for p, m in problems), \
        problems

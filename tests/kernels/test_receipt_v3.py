"""A v3 kernel receipt carries the screen's result and re-decides itself: an edited decision, verdict, interval or
median does not validate, even after the content hash is recomputed."""
from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import pytest

from evidence import archived
from test_harness_runner import GOOD, _synthetic_device

from infercrane.decide.policy import load_policy
from infercrane.kernels.harness.runner import screen
from infercrane.kernels.ops.fused_add_rmsnorm.spec import FusedAddRMSNormSpec
from infercrane.kernels.receipt import build_document
from infercrane.hashing import HASH_FIELD, config_hash, content_hash
from infercrane.receipts.models_v3 import DecodeStep
from infercrane.receipts.validate import check_document, write_receipt

torch = pytest.importorskip("torch")

PROV = {
    "infercrane_version": "0.1.0", "git_commit": None, "git_dirty": None,
    "command_line": ["infercrane", "kernel", "screen"], "config": {}, "config_sha256": config_hash({}), "run_id": "r1",
    "hardware": {"gpu": "synthetic", "compute_capability": "9.0", "cpu": "x", "cpu_count": 2, "host": "h",
                 "platform": "linux"},
    "software": {"torch": "2"},
}


def _prov() -> dict:
    """PROV stamped now: a receipt is recorded after the screen it holds."""
    return PROV | {"recorded_at": datetime.now(timezone.utc).isoformat()}


@pytest.fixture
def timed_doc(monkeypatch):
    _synthetic_device(monkeypatch, [])
    spec = FusedAddRMSNormSpec(hidden_size=128, eps=1e-6, rows=(8, 64), num_layers=28)
    res = screen(spec, ["eager"], modes=["graph"], trials=4, samples_per_trial=4, candidate=GOOD, isolate=False)
    policy = load_policy("kernel")
    doc = build_document(res, policy, provenance=_prov(), model_source="test",
                         decode_step=DecodeStep(ms=2.0, source="user: --decode-step-ms"))
    doc[HASH_FIELD] = content_hash(doc)
    return doc


def _rehash(doc):
    doc = {k: v for k, v in doc.items() if k != HASH_FIELD}
    doc[HASH_FIELD] = content_hash(doc)
    return doc


def test_a_timed_v3_receipt_validates_and_decides_from_its_result(timed_doc, tmp_path):
    model, problems = check_document(timed_doc)
    assert problems == [] and model is not None
    assert timed_doc["decision_code"] in ("accept", "retain") and timed_doc["amdahl"]
    write_receipt(timed_doc, tmp_path / "k.json")  # writes: its own checks pass


@pytest.mark.parametrize("edit,where", [
    (lambda d: d.update(decision_code="reject"), "decision_code"),
    (lambda d: d.update(reason=d["reason"].replace("faster", "slower")), "reason"),
    (lambda d: d["result"]["comparisons"][0]["speedup"].update(ci_lo=d["result"]["comparisons"][0]["speedup"]["ci_lo"] * 0.5), "result.comparisons"),
    (lambda d: d["result"]["comparisons"][0].update(verdict="SLOWER"), "result.comparisons"),
    (lambda d: d["result"]["implementations"][0]["timings"][0]["summary"].update(
        median=d["result"]["implementations"][0]["timings"][0]["summary"]["median"] * 1.1), "result.implementations"),
    (lambda d: d["result"]["implementations"][0]["timings"][0].update(flags=[]) or
     d["result"]["implementations"][0]["timings"][0]["blocks"][-1].update(second_timer_us=1e-3), "result.implementations"),
    (lambda d: d["measurements"][0].update(speedup_vs_eager=9.0), "measurements"),
    (lambda d: d["policy"].update(same_margin=0.3), "result.comparison"),
    (lambda d: d["amdahl"][0].update(decode_step_source="serving receipt"), "amdahl"),
])
def test_an_edit_that_keeps_the_hash_right_is_still_caught(timed_doc, edit, where):
    doc = copy.deepcopy(timed_doc)
    edit(doc)
    doc = _rehash(doc)
    _, problems = check_document(doc)
    assert problems, "the edit went unnoticed"
    assert any(p.startswith(where) for p, _ in problems), problems


# --------------------------------------------------------------------------------------------- host cost per call


@pytest.fixture
def launch_doc(monkeypatch):
    """A timed receipt of a launch-mode screen: its blocks carry the host's time per call of every burst."""
    _synthetic_device(monkeypatch, [])
    spec = FusedAddRMSNormSpec(hidden_size=128, eps=1e-6, rows=(8, 64), num_layers=28)
    res = screen(spec, ["eager"], modes=["launch", "graph"], trials=3, samples_per_trial=4, candidate=GOOD,
                 isolate=False)
    doc = build_document(res, load_policy("kernel"), provenance=_prov(), model_source="test")
    doc[HASH_FIELD] = content_hash(doc)
    return doc


def _launch_cell(doc, key="eager", rows=8):
    impl = next(i for i in doc["result"]["implementations"] if i["key"] == key)
    return next(c for c in impl["timings"] if c["mode"] == "launch" and c["rows"] == rows)


def test_a_receipt_with_host_times_validates_and_states_their_method(launch_doc):
    from infercrane.kernels.harness.timing import HOST_METHOD

    model, problems = check_document(launch_doc)
    assert problems == [] and model is not None
    assert launch_doc["result"]["host_method"] == HOST_METHOD
    cell = _launch_cell(launch_doc)
    assert cell["host_summary"]["median"] > 0 and cell["host_bound"] is True  # 12 us of host, about 11 us of launch
    assert _launch_cell(launch_doc, "user")["host_bound"] is False


@pytest.mark.parametrize("edit", [
    lambda d: _launch_cell(d)["host_summary"].update(median=_launch_cell(d)["host_summary"]["median"] * 0.5),
    lambda d: _launch_cell(d).update(host_bound=False),
    lambda d: _launch_cell(d, "user").update(host_bound=True),
    lambda d: _launch_cell(d).update(host_summary=None, host_bound=None),
    # the raw evidence changed under an unchanged summary
    lambda d: _launch_cell(d)["blocks"][0].update(host_samples_us=[1.0] * len(_launch_cell(d)["blocks"][0]["samples_us"])),
], ids=["median", "bound", "not-bound", "dropped", "raw"])
def test_an_edited_host_cost_is_caught_by_deriving_it_again(launch_doc, edit):
    doc = copy.deepcopy(launch_doc)
    edit(doc)
    _, problems = check_document(_rehash(doc))
    assert any(p.startswith("result.implementations[") and ".host_" in p and "raw blocks" in m
               for p, m in problems), problems


@pytest.mark.parametrize("edit,words", [
    (lambda d: d["result"].update(host_method=None), "names no host_method"),
    (lambda d: _launch_cell(d)["blocks"][0]["host_samples_us"].pop(), "one per sample"),
], ids=["no-method", "one-short"])
def test_host_times_without_their_method_or_out_of_step_with_the_samples_do_not_validate(launch_doc, edit, words):
    doc = copy.deepcopy(launch_doc)
    edit(doc)
    model, problems = check_document(_rehash(doc))
    assert model is None and any(words in m for _, m in problems), problems


@pytest.mark.gpu
def test_a_launch_mode_screen_on_a_gpu_reads_every_implementations_host_cost_and_validates(tmp_path):
    """A tiny screen of every built-in implementation in launch mode, decided in launch mode: each implementation
    that ran has a host time per call for every sample (positive and finite), a summary and a host_bound in every
    cell, and the receipt validates: its host figures derived again from the raw host times."""
    import math
    from importlib import resources

    from infercrane.cli import main
    from infercrane.kernels.harness.timing import HOST_METHOD
    from infercrane.receipts.validate import load_receipt

    policy = tmp_path / "launch.yaml"  # the shipped kernel policy, deciding on launch timings
    shipped = resources.files("infercrane.decide.policies").joinpath("kernel.yaml").read_text()
    policy.write_text(shipped.replace("timing_mode: graph", "timing_mode: launch"))
    out = tmp_path / "k.json"
    rc = main(["kernel", "screen", "--rows", "1", "8", "--modes", "launch", "--policy", str(policy), "--trials", "2",
               "--samples", "5", "--checks", "1", "--out", str(out)])
    assert rc == 0
    doc = load_receipt(out).document  # validates, or raises naming the field
    assert main(["receipt", "validate", str(out)]) == 0
    res = doc["result"]
    assert res["host_method"] == HOST_METHOD
    ran = [i for i in res["implementations"] if i["status"] == "ok"]
    assert {"eager", "triton"} <= {i["key"] for i in ran}, [(i["key"], i["status"], i.get("error")) for i in
                                                            res["implementations"]]
    for impl in ran:
        cells = [c for c in impl["timings"] if c["mode"] == "launch"]
        assert {c["rows"] for c in cells} == {1, 8}, impl["key"]
        for c in cells:
            host = [t for b in c["blocks"] for t in b["host_samples_us"]]
            assert len(host) == sum(len(b["samples_us"]) for b in c["blocks"]) == 10
            assert all(0 < t and math.isfinite(t) for t in host), (impl["key"], host)
            assert 0 < c["host_summary"]["median"] and math.isfinite(c["host_summary"]["median"])
            assert isinstance(c["host_bound"], bool)
    floors = res["calibration"]["floors"]
    assert all(b["host_samples_us"] for b in floors if b["mode"] == "launch")


def test_identical_trials_give_an_interval_that_holds_its_point(monkeypatch):
    """The boundary case: a zero-width interval (every trial the same) still holds its point and validates."""
    _synthetic_device(monkeypatch, [])
    spec = FusedAddRMSNormSpec(hidden_size=128, eps=1e-6, rows=(8,))
    res = screen(spec, ["eager"], modes=["graph"], trials=3, samples_per_trial=4, candidate=GOOD, isolate=False)
    for c in res.comparisons:
        assert c.speedup.ci_lo <= c.speedup.ratio <= c.speedup.ci_hi
    doc = build_document(res, load_policy("kernel"), provenance=_prov(), model_source="test")
    doc[HASH_FIELD] = content_hash(doc)
    assert check_document(doc)[1] == []


# --------------------------------------------------------------------------------------------- the flag rule


def _widened_doc():
    """A committed H200 receipt (every decision comparison flagged by a timer disagreement under the old rule) as a
    new screen writes it: its result compared under the flag rule 'widen', everything derived again, hashed."""
    import json

    from infercrane.decide.policy import KernelPolicy
    from infercrane.kernels.harness.compare import with_comparisons
    from infercrane.kernels.receipt import derive
    from infercrane.receipts.screen_result import ScreenResult

    path = archived("2026-12-02-h200-executors/receipts.tar.xz/local-rms_norm.h200.json")
    doc = json.loads(path.read_text())
    pol = KernelPolicy.model_validate(doc["policy"])
    res = with_comparisons(ScreenResult.model_validate(doc["result"]), pol, flag_rule="widen")
    doc.update(derive(res, pol, None), result=res.model_dump(mode="json"), decode_step=None)
    return _rehash(doc)


def _first_widened(doc, holds):
    return next(c for c in doc["result"]["comparisons"] if c.get("widened") and c["widened"]["holds"] is holds)


def test_a_receipt_under_the_widen_rule_validates_and_records_its_rule():
    doc = _widened_doc()
    assert check_document(doc)[1] == []
    assert doc["result"]["comparison_policy"]["flag_rule"] == "widen"
    assert {c["flag_rule"] for c in doc["result"]["comparisons"]} == {"widen"}
    kept, lost = _first_widened(doc, True), _first_widened(doc, False)
    assert kept["verdict"] == kept["speedup"]["verdict"] and kept["flags"]
    assert lost["verdict"] == "FLAGGED"


@pytest.mark.parametrize("edit,where", [
    # a verdict the widened interval does not hold, claimed anyway (the comparison's own validator)
    (lambda d: _first_widened(d, False).update(verdict=_first_widened(d, False)["speedup"]["verdict"]),
     "result.comparisons"),
    # a wider factor than the cells' disagreement gives (re-derived from the cells)
    (lambda d: _first_widened(d, True)["widened"].update(
        factor=_first_widened(d, True)["widened"]["factor"] * 1.001,
        ci_lo=_first_widened(d, True)["widened"]["ci_lo"] / 1.001,
        ci_hi=_first_widened(d, True)["widened"]["ci_hi"] * 1.001), "result.comparisons"),
    # the rule dropped from the record: re-derived under 'void', the kept verdicts do not follow
    (lambda d: d["result"]["comparison_policy"].pop("flag_rule"), "result.comparison"),
])
def test_an_edit_of_the_flag_rule_or_its_interval_is_caught(edit, where):
    doc = copy.deepcopy(_widened_doc())
    edit(doc)
    _, problems = check_document(_rehash(doc))
    assert problems and any(p.startswith(where) for p, _ in problems), problems


# --- the receipt's records against each other: the device measured, the screen's window, the model screened ------

COMMITTED = archived("2026-12-01-h200-kernel-two-ops/receipts.tar.xz/fused_add_rmsnorm.json")


def _both_hardware(d: dict, **fields) -> None:
    d["hardware"].update(fields)
    d["provenance"]["hardware"].update(fields)


def _finished_first(d: dict) -> None:
    res = d["result"]
    res["started_at"], res["finished_at"] = res["finished_at"], res["started_at"]


RECORD_EDITS = {
    "GPU name not the device measured": (lambda d: _both_hardware(d, gpu="NVIDIA A100-SXM4-80GB"), "hardware.gpu",
                                         "result.device.name"),
    "compute capability not the device's": (lambda d: _both_hardware(d, compute_capability="sm80"),
                                            "hardware.compute_capability", "'9.0'"),
    "memory not the device's": (lambda d: _both_hardware(d, gpu_memory_gib=79.18), "hardware.gpu_memory_gib",
                                "139.8"),
    "SM count not the device's": (lambda d: _both_hardware(d, sm_count=108), "hardware.sm_count", "132"),
    "screen finished before it started": (_finished_first, "result.finished_at", "before result.started_at"),
    "wall time not the screen's window": (lambda d: d["result"].update(wall_s=d["result"]["wall_s"] * 3),
                                          "result.wall_s", "started_at .. finished_at"),
    "model id not the spec's": (lambda d: d["model_shape_source"].update(id="meta-llama/Llama-3.1-8B"),
                                "model_shape_source.id", "result.spec.model_id"),
    "config field not the spec's shape": (lambda d: d["result"]["spec"]["config_fields"].update(hidden_size=4096),
                                          "result.spec.config_fields.hidden_size", "screened 1024"),
    "provenance's model revision not the screen's": (lambda d: d["provenance"]["model"].update(revision="1" * 40),
                                                     "provenance.model.revision", "the screen's model"),
}


def test_a_committed_receipt_holds_its_records_together():
    model, problems = check_document(json.loads(COMMITTED.read_text()))
    assert model is not None and problems == []


@pytest.mark.parametrize(("edit", "field", "words"), RECORD_EDITS.values(), ids=list(RECORD_EDITS))
def test_records_that_contradict_each_other_are_caught_by_field(edit, field, words):
    doc = json.loads(COMMITTED.read_text())
    edit(doc)
    _, problems = check_document(_rehash(doc))
    assert any(p == field and words in m for p, m in problems), problems

"""Kernels inside the engine, InferCrane's side: recipes that name kernels, what they add to the engine, preflight,
the proof that a kernel ran (and failed stages named), and the token gate between arms (on the test server)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from infercrane.errors import InputError, RunFailed
from infercrane.serving import kernels
from infercrane.serving.engine import Engine
from infercrane.serving.recipes import Recipe, load_recipe
from infercrane.vllm_plugin.selection import ENV_KERNELS, ENV_STATS, KernelChoice, decode

PRIORITY = ("(EngineCore pid=1) INFO 12-01 [kernel.py:271] Final IR op priority after setting platform defaults: "
            "IrOpPriorityConfig(rms_norm=['native'], fused_add_rms_norm=['{first}', 'native'])")


def _recipe(**kw) -> Recipe:
    data = {"schema_version": "infercrane.serving-recipe/v1", "name": "k", "engine": "vllm", "model": "Qwen/Qwen3-0.6B"}
    return Recipe.model_validate({**data, **kw}).resolved()


def test_a_recipe_names_kernels_by_vllm_ir_op_in_either_spelling():
    r = _recipe(kernels={"fused_add_rmsnorm": "triton"})
    assert r.kernels == {"fused_add_rms_norm": "triton"}
    with pytest.raises(ValueError, match="user needs candidate"):
        _recipe(kernels={"rms_norm": "user"})
    with pytest.raises(ValueError, match="no op names user"):
        _recipe(candidate="k.py:f")
    with pytest.raises(ValueError, match="known: fused_add_rms_norm, rms_norm"):
        _recipe(kernels={"silu_and_mul": "triton"})
    with pytest.raises(ValueError, match="inside vLLM"):
        _recipe(engine="testserver", model="m", kernels={"rms_norm": "triton"})


def test_recipes_without_kernels_keep_their_hash():
    # hashed as before the fields existed (receipts name shipped recipes by these hashes)
    from infercrane.hashing import config_hash

    r = load_recipe("balanced")
    data = r.canonical()
    assert "kernels" not in data and "candidate" not in data
    assert r.sha256 == config_hash(data)
    assert _recipe(kernels={"rms_norm": "triton"}).sha256 != _recipe().sha256


def test_engine_additions_priority_selection_compile_cache_and_plugin_record(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels, "_plugin_installed", lambda: False)
    cand = tmp_path / "mine.py"
    cand.write_text("IN_PLACE = True\ndef k(x, residual, weight, eps):\n    pass\n")
    r = _recipe(kernels={"fused_add_rms_norm": "user", "rms_norm": "triton"}, candidate=f"{cand}:k")
    args, env = kernels.engine_additions(r, tmp_path / "e-kernels")
    assert args[0] == "--ir-op-priority"
    assert json.loads(args[1]) == {"fused_add_rms_norm": ["infercrane_user"], "rms_norm": ["infercrane_triton"]}
    choices = decode(env[ENV_KERNELS])
    assert [c.provider for c in choices] == ["infercrane_user", "infercrane_triton"]
    assert choices[0].candidate == f"{cand.resolve()}:k" and len(choices[0].source_sha256) == 64
    assert env[ENV_STATS] == str(tmp_path / "e-kernels")
    entry = Path(env["PYTHONPATH"].split(":")[0])
    assert "infercrane = infercrane.vllm_plugin:register" in \
        (entry / "infercrane_vllm_plugin-0.dist-info" / "entry_points.txt").read_text()
    # the compile cache is keyed on the kernel's source: an edit moves it
    cand.write_text("IN_PLACE = True\ndef k(x, residual, weight, eps):\n    return None\n")
    _, env2 = kernels.engine_additions(r, tmp_path / "e-kernels")
    assert env2["VLLM_CACHE_ROOT"] != env["VLLM_CACHE_ROOT"]
    assert kernels.engine_additions(_recipe(), tmp_path / "x") == ([], {})


def test_preflight_refuses_a_vllm_without_the_op_or_without_an_ir(tmp_path):
    r = _recipe(kernels={"fused_add_rms_norm": "user"}, candidate=f"{tmp_path}/k.py:f")
    with pytest.raises(InputError, match="has no IR op fused_add_rms_norm"):
        kernels.check_kernels(r, probe_output=json.dumps({"ir_ops": ["rms_norm"]}))
    with pytest.raises(InputError, match="no IR op registry"):
        kernels.check_kernels(r, probe_output=json.dumps({"error": "ModuleNotFoundError: No module named 'vllm.ir'"}))
    with pytest.raises(InputError, match="does not exist"):
        kernels.check_kernels(r, probe_output=json.dumps({"ir_ops": ["fused_add_rms_norm", "rms_norm"]}))


def _record(**kw):
    doc = {"provider": "infercrane_triton", "vllm_op": "fused_add_rms_norm", "pid": 7, "detail": {"registered": True},
           # no sources_sha256: the proof's choice names none either
           "calls": 3, "calls_captured": 2, "calls_by_shape": {"8x1024 bfloat16": 3}, "declined": {},
           "checks": [{"shape": "8x1024 bfloat16", "passed": True, "max_abs_err": 0.01, "max_rel_err": 0.004,
                       "against": "vLLM native"}], "errors": []}
    doc.update(kw)
    return doc


@pytest.mark.parametrize("log_first, record, stage", [
    ("infercrane_triton", _record(), None),
    ("native", _record(), "priority"),
    (None, _record(), "priority"),
    ("infercrane_triton", _record(detail={}, errors=["registration failed: RuntimeError: no GPU"]), "registration"),
    ("infercrane_triton", _record(errors=["the kernel raised at 8x1024 bfloat16: RuntimeError: boom"]), "raised"),
    ("infercrane_triton", _record(calls=0, calls_by_shape={}, checks=[]), "calls"),
    ("infercrane_triton", _record(checks=[{"shape": "8x1024 bfloat16", "passed": False, "max_abs_err": 3.5,
                                           "max_rel_err": 1.0, "against": "vLLM native"}]), "gate"),
])
def test_the_proof_names_the_stage_that_failed(log_first, record, stage):
    log = "" if log_first is None else PRIORITY.format(first=log_first)
    doc = kernels.proof(KernelChoice("fused_add_rms_norm", "triton"), log, [record])
    assert doc["failed_stage"] == stage
    assert doc["ran"] == (stage in (None, "gate", "raised")) and doc["gate_passed"] == (stage is None)
    if stage is not None:
        assert kernels.why_failed(doc).startswith("kernel infercrane_triton for fused_add_rms_norm")


def test_a_failed_gate_reads_as_the_gate_and_its_error():
    bad = _record(checks=[{"shape": "1x1024 bfloat16", "passed": False, "max_abs_err": 3.5, "max_rel_err": 1.0,
                           "against": "vLLM native"}])
    doc = kernels.proof(KernelChoice("fused_add_rms_norm", "triton"), PRIORITY.format(first="infercrane_triton"), [bad])
    assert kernels.why_failed(doc) == ("kernel infercrane_triton for fused_add_rms_norm failed the in-engine gate at "
                                       "1x1024 bfloat16 against vLLM's native implementation (max abs error 3.5)")


def _arms(**kernel_arms):
    return {"ref": SimpleNamespace(kernels={}), **{a: SimpleNamespace(kernels=k) for a, k in kernel_arms.items()}}


def test_the_token_gate_passes_identical_greedy_outputs(tmp_path, ts_recipe):
    gates = kernels.KernelGates(_arms(cand={"rms_norm": "triton"}), "ref", coresident=False)
    with Engine(ts_recipe(), log_dir=tmp_path, label="ref", startup_timeout_s=30) as ref, \
            Engine(ts_recipe(), log_dir=tmp_path, label="cand", startup_timeout_s=30) as cand:
        gates.before_visit("ref", ref)
        gates.before_visit("cand", cand)
    assert cand.record.token_gate == {"reference": "ref", "prompts": len(kernels.GATE_PROMPTS),
                                      "max_tokens": kernels.GATE_MAX_TOKENS, "greedy": True, "identical": True,
                                      "first_divergence": None, "compared": "token ids"}
    assert ref.record.token_gate is None  # the reference is not judged against itself


def test_the_token_gate_stops_a_diverging_arm_before_it_is_timed(tmp_path, ts_recipe):
    gates = kernels.KernelGates(_arms(cand={"rms_norm": "triton"}), "ref", coresident=False)
    with Engine(ts_recipe(), log_dir=tmp_path, label="ref", startup_timeout_s=30) as ref, \
            Engine(ts_recipe("--diverge-after", "5"), log_dir=tmp_path, label="cand", startup_timeout_s=30) as cand:
        gates.before_visit("ref", ref)
        with pytest.raises(RunFailed, match=r"token gate failed against arm 'ref'.*prompt 0 .*token 5: 5 against 12"):
            gates.before_visit("cand", cand)
    assert cand.record.token_gate["identical"] is False


def test_the_gate_needs_a_reference_arm_first():
    with pytest.raises(InputError, match="timed before the reference arm"):
        kernels.KernelGates(_arms(cand={"rms_norm": "triton"}), "cand", coresident=False)
    kernels.KernelGates(_arms(cand={"rms_norm": "triton"}), "cand", coresident=True)  # all up before any visit
    with pytest.raises(InputError, match="needs a reference arm"):
        kernels.KernelGates({"a": SimpleNamespace(kernels={"rms_norm": "cuda"})}, "a", coresident=True)


def test_a_kernel_orders_of_magnitude_slower_than_native_fails_the_gate():
    slow = _record(checks=[{"shape": "8x1024 bfloat16", "passed": False, "max_abs_err": 0.01, "max_rel_err": 0.004,
                            "against": "vLLM native", "native_us": 12.0, "kernel_us": 4800.0, "slowdown": 400.0,
                            "too_slow": True}])
    doc = kernels.proof(KernelChoice("fused_add_rms_norm", "triton"), PRIORITY.format(first="infercrane_triton"), [slow])
    assert doc["failed_stage"] == "gate"
    assert kernels.why_failed(doc) == ("kernel infercrane_triton for fused_add_rms_norm failed the in-engine gate: 400 "
                                       "times slower than vLLM's native implementation at 8x1024 bfloat16 (4800.0 us "
                                       "against 12.0 us)")


LOWERED = ("DEBUG 12-01 [lowering_pass.py:90] Selected implementations: rms_norm=native*57, "
           "fused_add_rms_norm=infercrane_triton*55,native")


def test_the_lowering_lines_say_which_provider_got_the_ops_nodes():
    assert kernels.lowered_counts([LOWERED, LOWERED], "fused_add_rms_norm") == {"infercrane_triton": 110, "native": 2}
    assert kernels.lowered_counts([LOWERED], "rms_norm") == {"native": 57}
    assert kernels.lowered_counts(["nothing here"], "rms_norm") is None
    choice = KernelChoice("fused_add_rms_norm", "triton")
    log = PRIORITY.format(first="infercrane_triton")
    assert kernels.proof(choice, log, [_record()], [LOWERED])["failed_stage"] is None
    # compiled, and the lowering pass gave every node to native: the kernel is not in the graph
    native_only = LOWERED.replace("infercrane_triton*55,native", "native*56")
    doc = kernels.proof(choice, log, [_record()], [native_only])
    assert doc["failed_stage"] == "lowering" and "did not run in the compiled graph" in kernels.why_failed(doc)


def test_the_proof_holds_an_engine_to_the_selection_it_was_started_with(tmp_path, monkeypatch):
    from infercrane.vllm_plugin.selection import kernel_sources_sha256

    monkeypatch.setattr(kernels, "_plugin_installed", lambda: True)
    cand = tmp_path / "mine.py"
    cand.write_text("IN_PLACE = True\ndef k(x, residual, weight, eps):\n    pass\n")
    r = _recipe(kernels={"fused_add_rms_norm": "user"}, candidate=f"{cand}:k")
    eng = Engine(r, log_dir=tmp_path / "logs", label="cand")
    started = kernel_sources_sha256("fused_add_rms_norm", "user", r.candidate)
    eng.log_path.parent.mkdir(parents=True)
    eng.log_path.write_text(PRIORITY.format(first="infercrane_user") + "\n")
    eng.kernel_stats_dir.mkdir()
    rec = _record(provider="infercrane_user", detail={"registered": True, "sources_sha256": started})
    (eng.kernel_stats_dir / "infercrane_user-fused_add_rms_norm-7.json").write_text(json.dumps(rec))
    cand.write_text("IN_PLACE = True\ndef k(x, residual, weight, eps):\n    return None\n")  # edited mid-run
    (doc,) = kernels.prove(eng)
    assert doc["source_sha256"] == started and doc["engine_sources_match"] and doc["failed_stage"] is None
    assert eng.record.kernels == [doc]


def test_an_engine_whose_kernel_raised_says_so_when_it_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels, "_plugin_installed", lambda: True)
    eng = Engine(_recipe(kernels={"fused_add_rms_norm": "triton"}), log_dir=tmp_path / "logs", label="cand")
    eng.log_path.parent.mkdir(parents=True)
    eng.log_path.write_text(PRIORITY.format(first="infercrane_triton") + "\nTraceback (most recent call last):\n")
    eng.kernel_stats_dir.mkdir()
    raised = "the kernel raised at 8192x1024 bfloat16: RuntimeError: The size of tensor a (7) must match"
    (eng.kernel_stats_dir / "infercrane_triton-fused_add_rms_norm-7.json").write_text(
        json.dumps(_record(checks=[], errors=[raised])))
    err = eng.failure("exited with code 1 before it was ready")
    assert f"its kernel records say: {raised}" in err.message
    (doc,) = eng.record.kernels
    assert doc["failed_stage"] == "raised" and kernels.why_failed(doc) == (
        f"kernel infercrane_triton for fused_add_rms_norm {raised} inside the engine")


def test_a_kernel_arm_whose_reference_engine_is_not_up_is_not_timed():
    # co-resident engines that fell back to one at a time: the kernel arm's visit comes with no reference engine
    gates = kernels.KernelGates(_arms(cand={"rms_norm": "triton"}), "cand", coresident=True)
    cand = SimpleNamespace(record=SimpleNamespace(token_gate=None))
    with pytest.raises(RunFailed, match="timed before the reference arm 'ref' had given the token gate its outputs"):
        gates.before_visit("cand", cand, {})
    assert cand.record.token_gate is None

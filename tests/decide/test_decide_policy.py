import pytest

from infercrane.decide import KernelPolicy, ServingPolicy, load_policy, policy_sha256
from infercrane.errors import InputError


def _write(tmp_path, text):
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    return p


def test_packaged_defaults():
    k = load_policy("kernel")
    assert isinstance(k, KernelPolicy)
    assert (k.timing_mode, k.same_margin, k.confidence) == ("graph", 0.02, 0.95)
    assert k.counted_baselines == ["eager", "torch_compile", "vllm_vendor"]
    assert (k.decision_max_rows, k.decide_on_bandwidth_rows) == (512, False)
    assert k.alpha == pytest.approx(0.05) and k.decides_on(512) and not k.decides_on(2048)
    s = load_policy("serving")
    assert isinstance(s, ServingPolicy)
    assert (s.primary_metric, s.equivalence_margin, s.min_runs_per_arm) == ("output_tok_s", 0.01, 5)
    assert s.guard_metrics == ["ttft_p95_ms", "e2e_p95_ms"]
    assert s.alpha == pytest.approx(0.05)


def test_user_file_overrides_only_its_keys(tmp_path):
    p = _write(tmp_path, "schema_version: infercrane.kernel-policy/v1\nsame_margin: 0.05\n")
    k = load_policy("kernel", p)
    assert k.same_margin == 0.05 and k.timing_mode == "graph"
    assert policy_sha256(k) != policy_sha256(load_policy("kernel"))


def test_bandwidth_rows_enter_the_decision_only_when_a_policy_says_so(tmp_path):
    p = _write(tmp_path, "schema_version: infercrane.kernel-policy/v1\ndecide_on_bandwidth_rows: true\n")
    k = load_policy("kernel", p)
    assert k.decides_on(8192) and k.decision_max_rows == 512


def test_the_kernel_policy_has_no_bootstrap_settings(tmp_path):
    # Kernel intervals are trial-level t intervals; an old policy file naming bootstrap keys fails loudly.
    assert not hasattr(load_policy("kernel"), "bootstrap_resamples")  # trial-level t intervals: nothing bootstrapped
    p = _write(tmp_path, "schema_version: infercrane.kernel-policy/v1\nbootstrap_resamples: 2000\n")
    with pytest.raises(InputError, match=r"field 'bootstrap_resamples': unknown key"):
        load_policy("kernel", p)


def test_unknown_key_is_named(tmp_path):
    p = _write(tmp_path, "schema_version: infercrane.kernel-policy/v1\nsame_margn: 0.05\n")
    with pytest.raises(InputError, match=r"field 'same_margn': unknown key"):
        load_policy("kernel", p)


def test_bad_value_is_named(tmp_path):
    p = _write(tmp_path, "schema_version: infercrane.kernel-policy/v1\ntiming_mode: wallclock\n")
    with pytest.raises(InputError, match=r"field 'timing_mode': .*'wallclock'"):
        load_policy("kernel", p)
    p = _write(tmp_path, "schema_version: infercrane.serving-policy/v1\nequivalence_margin: -0.01\n")
    with pytest.raises(InputError, match=r"equivalence_margin"):
        load_policy("serving", p)


def test_unknown_metric_lists_known_ones(tmp_path):
    p = _write(tmp_path, "schema_version: infercrane.serving-policy/v1\nguard_metrics: [ttft_p95]\n")
    with pytest.raises(InputError, match=r"field 'guard_metrics': .*known: output_tok_s"):
        load_policy("serving", p)


def test_min_runs_that_can_never_reach_significance_is_refused(tmp_path):
    p = _write(tmp_path, "schema_version: infercrane.serving-policy/v1\nmin_runs_per_arm: 3\n")
    with pytest.raises(InputError, match=r"smallest possible p is 0.1"):
        load_policy("serving", p)


def test_wrong_schema_missing_file_bad_yaml_and_kind(tmp_path):
    p = _write(tmp_path, "schema_version: infercrane.serving-policy/v1\n")
    with pytest.raises(InputError, match="expected 'infercrane.kernel-policy/v1'"):
        load_policy("kernel", p)
    with pytest.raises(InputError, match="absent.yaml: no such file"):
        load_policy("kernel", tmp_path / "absent.yaml")
    with pytest.raises(InputError, match="not valid YAML"):
        load_policy("kernel", _write(tmp_path, "a: [1, 2\n"))
    with pytest.raises(InputError, match="expected a mapping"):
        load_policy("kernel", _write(tmp_path, "- 1\n- 2\n"))
    with pytest.raises(InputError, match="known kinds: kernel, serving"):
        load_policy("cluster")  # type: ignore[call-overload]

"""A small, internally consistent v2 screening receipt built from fixed numbers (test data, not a measurement)."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from infercrane.env.capture import provenance
from infercrane.receipts.validate import write_receipt

SAMPLES_US = {("eager", 1): [5.0, 5.2, 5.1, 5.3, 5.0], ("triton", 1): [1.1, 1.2, 1.1, 1.15, 1.12],
              ("eager", 8): [5.4, 5.5, 5.6, 5.4, 5.5], ("triton", 8): [1.2, 1.25, 1.21, 1.22, 1.3]}


def _timing(impl: str, rows: int) -> dict:
    s = SAMPLES_US[(impl, rows)]
    q = statistics.quantiles(s, n=4, method="inclusive")
    return {"implementation": impl, "rows": rows, "mode": "graph", "samples_us": s, "median_us": statistics.median(s),
            "q1_us": q[0], "q3_us": q[2], "n": len(s), "bytes_moved": rows * 1024 * 8 + 2048, "achieved_gbps": None,
            "sm_clock_mhz_before": 1980.0, "sm_clock_mhz_after": 1980.0, "throttled": False}


@pytest.fixture
def screening_v2_doc() -> dict:
    timings = [_timing(i, r) for (i, r) in SAMPLES_US]
    med = {(t["implementation"], t["rows"]): t["median_us"] for t in timings}
    measurements, comparisons = [], []
    for rows in (1, 8):
        e, t = med[("eager", rows)], med[("triton", rows)]
        measurements.append({"rows": rows, "eager_ms": e / 1000, "triton_ms": t / 1000, "speedup_vs_eager": e / t})
        comparisons.append({"candidate": "triton", "baseline": "eager", "rows": rows, "mode": "graph", "speedup": e / t,
                            "ci_low": e / t * 0.95, "ci_high": e / t * 1.05, "confidence": 0.95, "verdict": "FASTER",
                            "method": "bootstrap of the ratio of medians (fixed test data)"})
    correctness = [{"implementation": i, "rows": r, "passed": True, "checks": 3, "rule": "|out-ref| <= atol + rtol*|ref|",
                    "rtol": 0.016, "atol": 0.01, "max_abs_err": 0.004, "max_rel_err": 0.003, "mismatched": 0}
                   for (i, r) in SAMPLES_US]
    prov = provenance(config={"op": "fused_add_rmsnorm", "rows": [1, 8]}, command_line=["infercrane", "kernel", "screen"])
    hw = {k: v for k, v in prov["hardware"].items()}
    hw.update(gpu="NVIDIA H200", compute_capability="sm90", gpu_count=1)
    prov["hardware"] = hw
    return {
        "schema_version": "infercrane.cuda-kernel-screening-receipt/v2",
        "recorded_at": prov["recorded_at"],
        "evidence_class": "real-gpu-microbenchmark",
        "app_id": prov["run_id"],
        "model_shape_source": {"id": "Qwen/Qwen3-0.6B", "revision": "c1899de289a04d12100db370d81485cdf75e47ca",
                               "hidden_size": 1024, "rms_norm_eps": 1e-6, "num_hidden_layers": 28, "dtype": "bfloat16",
                               "source": "catalog"},
        "hardware": hw,
        "software": prov["software"],
        "candidate": {"operator": "fused residual-add + RMSNorm", "implementation": "Triton", "key": "triton",
                      "source": "infercrane/kernels/ops/fused_add_rmsnorm/triton_kernel.py", "dtype": "bfloat16",
                      "in_place": True, "correctness": "passed against the float32 oracle on every measured shape"},
        "measurements_timing_mode": "graph",
        "measurements": measurements,
        "decision": "retain as a correct kernel candidate, but do not integrate into serving yet",
        "decision_code": "retain",
        "reason": "fixed test data",
        "qualification_boundary": "operator microbenchmark only; no end-to-end serving claim",
        "implementations": [
            {"key": "eager", "label": "eager PyTorch", "kind": "baseline", "in_place": False, "source": "torch",
             "status": "ok"},
            {"key": "triton", "label": "Triton", "kind": "candidate", "in_place": True, "source": "triton_kernel.py",
             "status": "ok"}],
        "correctness": correctness,
        "timings": timings,
        "comparisons": comparisons,
        "policy": {"same_margin": 0.02},
        "provenance": prov,
    }


@pytest.fixture
def written_receipt(tmp_path: Path, screening_v2_doc: dict) -> Path:
    return write_receipt(screening_v2_doc, tmp_path / "screen.json").path

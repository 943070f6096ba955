#!/usr/bin/env bash
# The kernel-lab receipts of docs/benchmarks/: both ops (fused residual-add + RMSNorm, RMSNorm) screened on one GPU,
# decode rows and bandwidth rows, all three timing modes, plus the GPU test suite. Needs torch, triton and cupy
# importable by python3, and InferCrane's pure-Python dependencies (pydantic, cyclopts, rich, pyyaml, scipy) on
# PYTHONPATH. vLLM's vendor kernels come from the op library of its wheel when INFERCRANE_VLLM_OPS_LIB names it.
#   bash benchmarks/kernel_h200.sh OUTDIR            # STEPS="tests screen" (default); also "smoke"
# OPS (default "fused_add_rmsnorm rms_norm") picks the screened ops; SERVING_RECEIPT names a serving receipt whose
# compiled-recipe TPOT at concurrency 1 is the decode step time of the Amdahl ceiling.
# smoke: one short fused-add screen of the decode rows (3 trials), to check the harness before a full run.
# Each step runs even if an earlier one failed and prints its exit code; logs go to OUTDIR.
# On a tree copied without .git, set INFERCRANE_GIT_COMMIT so the receipts name the commit.
set -uo pipefail
out=${1:?usage: kernel_h200.sh OUTDIR}
steps=${STEPS:-tests screen}
trials=${TRIALS:-5}
mkdir -p "$out"
ic() { python3 -m infercrane "$@"; }
step() { echo "=== $(date -u +%H:%M:%S) $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

if [[ " $steps " == *" smoke "* ]]; then
  step "smoke: fused_add_rmsnorm, decode rows, 3 trials"
  ic kernel screen --op fused_add_rmsnorm --trials 3 --out "$out/smoke.json" 2>&1 | tee "$out/smoke.log"
  echo "rc=${PIPESTATUS[0]}"
fi

if [[ " $steps " == *" tests "* ]]; then
  step "pytest -m gpu"
  python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/gputests.log"
  echo "rc=${PIPESTATUS[0]}"
fi

if [[ " $steps " == *" screen "* ]]; then
  step_args=()
  [ -n "${SERVING_RECEIPT:-}" ] && step_args=(--serving-receipt "$SERVING_RECEIPT" --serving-recipe compiled \
                                              --serving-concurrency 1)
  for op in ${OPS:-fused_add_rmsnorm rms_norm}; do
    step "screen: $op, decode + bandwidth rows, launch/graph/cold, $trials trials"
    ic kernel screen --op "$op" --bandwidth-rows --trials "$trials" "${step_args[@]}" --out "$out/$op.json" 2>&1 \
      | tee "$out/$op.log"
    echo "rc=${PIPESTATUS[0]}"
  done
fi
step done

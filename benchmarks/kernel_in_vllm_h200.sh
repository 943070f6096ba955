#!/usr/bin/env bash
# A candidate kernel inside vLLM on one GPU machine (infercrane kernel apply), detached through poc_h200.sh:
#   bash benchmarks/kernel_in_vllm_h200.sh OUTDIR triton            # Triton kernel: compiled and eager vLLM
#   bash benchmarks/kernel_in_vllm_h200.sh OUTDIR cuda compiled     # CUDA kernel: compiled vLLM only
#   bash benchmarks/poc_h200.sh wait OUTDIR SECONDS / pack OUTDIR DEST   # as for the PoC
# Serves the offline stand-in of Qwen3-0.6B (dummy weights) on the seed-paired workload (c = 1, 8, 32, 5 runs per
# arm, co-resident arms). Needs vllm==0.22.1 and aiperf==0.12.0 importable by python3; on a tree copied without
# .git, set INFERCRANE_GIT_COMMIT. Each mode's receipt is written as it goes (OUTDIR/apply/<mode>.json).
set -uo pipefail
out=${1:?usage: kernel_in_vllm_h200.sh OUTDIR IMPL [MODES...]}
impl=${2:?usage: kernel_in_vllm_h200.sh OUTDIR IMPL [MODES...]}
shift 2
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(compiled eager)
here=$(dirname "$0")
bash "$here/poc_h200.sh" run "$out" -- python3 -m infercrane kernel apply --op fused_add_rms_norm --impl "$impl" \
  --modes "${modes[@]}" --stand-in --out "$out/apply"

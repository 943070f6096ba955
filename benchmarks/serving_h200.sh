#!/usr/bin/env bash
# The serving-lab receipts of docs/benchmarks/: eager vs compiled vLLM on the seed-paired workload, and the
# public-1000 workload on compiled vLLM with both drivers, served from the offline stand-in of Qwen3-0.6B
# (--load-format dummy). Needs vllm==0.22.1 and aiperf==0.12.0 importable by python3 and one GPU.
#   bash benchmarks/serving_h200.sh OUTDIR [RUNS]          # STEPS="ab bench" (default); also "bench-seed"
# bench-seed: the seed-paired workload on compiled vLLM with both drivers on one engine (default request counts).
# Each step runs even if an earlier one failed; every step leaves a receipt (complete or marked incomplete).
# On a tree copied without .git, set INFERCRANE_GIT_COMMIT so the receipts name the commit.
set -uo pipefail
out=${1:?usage: serving_h200.sh OUTDIR [RUNS]}
runs=${2:-5}
steps=${STEPS:-ab bench}
mkdir -p "$out"
ic() { python3 -m infercrane "$@"; }
step() { echo "=== $(date -u +%H:%M:%S) $*"; }

step stand-in
[ -f "$out/stand-in/config.json" ] || ic model stand-in Qwen/Qwen3-0.6B --out "$out/stand-in"

if [[ " $steps " == *" ab "* ]]; then
  step "seed-paired: eager vs compiled, $runs runs per arm"
  # 12 requests per concurrency slot (at least 24): windows of 12-24 s for eager, 2-4 s for compiled at these rates.
  ic serve ab eager compiled --model "$out/stand-in" --workload seed-paired --runs "$runs" --order sequential \
     --requests-per-slot 12 --min-requests 24 --out "$out/seed-paired-eager-vs-compiled.json"
  echo "rc=$?"
fi

if [[ " $steps " == *" bench "* ]]; then
  step "public-1000 on compiled, aiperf and vllm bench serve on the same engine"
  ic serve bench compiled --model "$out/stand-in" --workload public-1000 --drivers aiperf vllm-bench --runs 3 \
     --out "$out/public-1000-compiled.json"
  echo "rc=$?"
fi
if [[ " $steps " == *" bench-seed "* ]]; then
  step "seed-paired on compiled, aiperf and vllm bench serve on the same engine"
  ic serve bench compiled --model "$out/stand-in" --workload seed-paired --drivers aiperf vllm-bench --runs 3 \
     --out "$out/seed-paired-compiled-two-drivers.json"
  echo "rc=$?"
fi
step done

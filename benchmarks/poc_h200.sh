#!/usr/bin/env bash
# The shipped seed-reproduction PoC on one GPU machine, driven in pieces: a PoC outlasts one remote command, so it
# runs in its own session and later commands wait on it and pack what it has written.
#   bash benchmarks/poc_h200.sh start OUTDIR [CONFIG]   # launch `infercrane poc` detached; returns at once
#   bash benchmarks/poc_h200.sh wait OUTDIR SECONDS [DEST]  # wait up to SECONDS for it to end; print its log's
#                                                       # tail; with DEST, then pack what is on disk into it (a
#                                                       # machine lost before the next call then loses no receipt)
#   bash benchmarks/poc_h200.sh pack OUTDIR DEST        # receipts + console log, and the artifacts, as tarballs
#   bash benchmarks/poc_h200.sh run OUTDIR -- CMD...     # any other long command the same way (e.g. kernel apply)
# An OUTDIR that already holds poc.json is resumed (`--resume OUTDIR/poc.json`): its finished sections are reused.
# AGREE=1 adds, after the PoC, the two drivers on one compiled engine at c = 8 with shared prompts
# (`serve bench compiled --workload seed-paired-two-drivers`), written to OUTDIR/drivers-c8.json.
# Needs vllm==0.22.1 and aiperf==0.12.0 importable by python3 and one GPU. On a tree copied without .git, set
# INFERCRANE_GIT_COMMIT so the receipts name the commit. The PoC receipt is signed with a key made in OUTDIR/keys.
# Every section's receipt is written as it finishes, so a PoC stopped part-way keeps what it measured
# (`infercrane poc CONFIG --resume OUTDIR/poc.json` continues it).
set -uo pipefail
verb=${1:?usage: poc_h200.sh start|wait|pack OUTDIR ...}
out=${2:?usage: poc_h200.sh start|wait|pack OUTDIR ...}
log=$out/poc.log

# run each line of OUTDIR/command.txt in turn, in a session of its own, logging to the log; returns at once
launch() {
  echo "=== $(date -u +%FT%TZ) start: $(head -1 "$out/command.txt")" >>"$log"
  setsid nohup bash -c 'while read -r line; do
                          echo "=== $(date -u +%FT%TZ) run: $line" >>"$1"
                          eval "PYTHONUNBUFFERED=1 $line" </dev/null >>"$1" 2>&1
                          rc=$?; echo "=== $(date -u +%FT%TZ) rc=$rc" >>"$1"
                        done <"$2"; echo "=== $(date -u +%FT%TZ) all done" >>"$1"' _ "$log" "$out/command.txt" \
    </dev/null >/dev/null 2>&1 &
  sleep 2
  tail -3 "$log"
}

case $verb in
run)
  shift 2; [ "${1:-}" = "--" ] && shift
  mkdir -p "$out"
  { printf '%q ' "$@"; echo; } >"$out/command.txt"
  launch
  ;;
start)
  config=${3:-seed-reproduction}
  mkdir -p "$out"
  if [ -f "$out/poc.json" ]; then where=(--resume "$out/poc.json"); else where=(--out "$out/poc.json"); fi
  # the PoC receipt is signed as it is written, with a key made for this machine (its public half is packed)
  [ -f "$out/keys/infercrane.key" ] || python3 -m infercrane receipt keygen --out "$out/keys" >/dev/null
  {
    printf '%q ' python3 -m infercrane poc "$config" "${where[@]}" --sign-key "$out/keys/infercrane.key"; echo
    if [ -n "${AGREE:-}" ]; then
      printf '%q ' python3 -m infercrane serve bench compiled --stand-in --workload seed-paired-two-drivers \
        --drivers aiperf vllm-bench --runs 3 --concurrency 8 --out "$out/drivers-c8.json"; echo
    fi
  } >"$out/command.txt"
  launch
  ;;
wait)
  secs=${3:?usage: poc_h200.sh wait OUTDIR SECONDS}
  end=$((SECONDS + secs))
  while ((SECONDS < end)) && ! grep -q '^=== .* all done' "$log"; do sleep 5; done
  tail -c 6000 "$log"
  grep -q '^=== .* all done' "$log" && echo "PoC ended" || echo "PoC still running"
  if [ -n "${4:-}" ]; then bash "$0" pack "$out" "$4" >/dev/null; fi
  ;;
pack)
  dest=${3:?usage: poc_h200.sh pack OUTDIR DEST}
  mkdir -p "$dest"
  cp "$log" "$out/command.txt" "$dest/" 2>/dev/null
  [ -f "$out/poc.json" ] && cp "$out/poc.json" "$dest/"
  [ -f "$out/poc.json.dsse.json" ] && cp "$out/poc.json.dsse.json" "$dest/"
  [ -f "$out/keys/infercrane.pub" ] && cp "$out/keys/infercrane.pub" "$dest/"
  # every receipt of the run, every log and the report's page (its figures are inside it); AIPerf's per-request
  # records and inputs stay behind (tens of MB)
  (cd "$out" && find . \( -name '*.json' -o -name '*.log' -o -name '*.txt' -o -name '*.csv' \
                          -o -path './poc.report/index.html' \) \
     ! -name 'profile_export.jsonl' ! -name 'inputs.json' ! -path './stand-in*' -print0 \
     | tar --null -cJf "$dest/poc-evidence.tar.xz" -T -)
  ls -la "$dest"
  ;;
*)
  echo "unknown verb $verb (start, wait, pack)" >&2; exit 2 ;;
esac

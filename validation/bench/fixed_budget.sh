#!/usr/bin/env bash
# The largest GPT that trains within a fixed device-tier budget (default 2 GiB per rank) under each
# memory strategy: everything on the device, ZeRO-3 over 2 ranks, --offload cpu (the optimizer
# states on the host tier), --offload nvme, ZeRO-3 with cpu offload, and ZeRO-3 on one rank with
# the states and the parameters' shard on the host tier (--offload-params). Not a test: never
# registered with CTest. For each strategy the planner (--dry-run) finds the most layers of a
# hidden-1024 GPT (16 heads, sequence 256, micro-batch 1, vocabulary 8192, full activation
# checkpointing) whose predicted device peak fits the budget; that model then trains 3 steps under
# --device-memory-limit, which would stop it past the budget, and the table gives its parameters,
# the measured device peak, the host tier, and the median step time.
#
# usage: fixed_budget.sh [--build DIR] [--budget BYTES|2G] [--dir DIR] [--max-layers N]
#   --dir: where --offload nvme's scratch files go (default $OUT_DIR/budget, OUT_DIR=/tmp/tessera-bench)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
budget=2G
max_layers=64
OUT_DIR=${OUT_DIR:-/tmp/tessera-bench}
dir=$OUT_DIR/budget
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --max-layers) max_layers=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dir"
"$build/apps/data_prep" synth --vocab 8192 --tokens 200000 --seed 3 --output "$tmp/data.h5" >/dev/null
model=(--input "$tmp/data.h5" --hidden 1024 --heads 16 --seq-len 256 --micro-batch 1 --activation-checkpointing full
       --threads $(( $(nproc) > 1 ? $(nproc) / 2 : 1 )) --warmup 1)

planned_peak() {  # RANKS LAYERS options...: the dry run's predicted peak per rank
  local ranks=$1 layers=$2; shift 2
  "$build/apps/gpt_train" "${model[@]}" --layers "$layers" --global-batch "$ranks" --dp "$ranks" "$@" --dry-run |
    sed -n 's/^predicted peak per rank: \([0-9]*\) bytes.*/\1/p'
}
limit=$(python3 -c "
import re, sys
m = re.fullmatch(r'(\d+)([KMG]?)(i?B)?', sys.argv[1]) or sys.exit('error: --budget ' + sys.argv[1] + ': bytes, or with K, M, G')
print(int(m.group(1)) << {'': 0, 'K': 10, 'M': 20, 'G': 30}[m.group(2)])" "$budget")
echo "budget: $budget = $limit bytes of device tier per rank; model: hidden 1024, 16 heads, seq 256, micro-batch 1,"
echo "vocab 8192, full activation checkpointing; $(nproc) cores"
echo
echo "| strategy | ranks | layers | parameters | planned device peak MiB | measured device peak MiB | host tier MiB | step s (median) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
strategy() {  # LABEL RANKS options...
  local label=$1 ranks=$2; shift 2
  local best=0 peak=0 lo=1 hi=$max_layers
  while (( lo <= hi )); do  # the most layers that fit (the peak grows with the layers)
    local mid=$(( (lo + hi) / 2 )) p
    p=$(planned_peak "$ranks" "$mid" "$@")
    if (( p <= limit )); then best=$mid peak=$p lo=$(( mid + 1 )); else hi=$(( mid - 1 )); fi
  done
  if (( best == 0 )); then echo "| $label | $ranks | none fits | | | | | |"; return 0; fi
  rm -f "$tmp/m.jsonl"
  mpirun -np "$ranks" "$build/apps/gpt_train" "${model[@]}" --layers "$best" --global-batch "$ranks" --steps 3 \
    --device-memory-limit "$limit" "$@" --metrics "$tmp/m.jsonl" >"$tmp/run.log" 2>&1 ||
    { echo "| $label | $ranks | $best | run failed: $(grep -m1 error: "$tmp/run.log") | | | | |"; return 0; }
  local params; params=$(sed -n 's/.*parameters: \([0-9]*\).*/\1/p' "$tmp/run.log" | head -1)
  /usr/bin/python3 - "$tmp/m.jsonl" "$label" "$ranks" "$best" "$params" "$peak" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
label, ranks, layers, params, planned = sys.argv[2:7]
mib = lambda b: f"{int(b) / 2**20:.0f}"
print(f"| {label} | {ranks} | {layers} | {int(params) / 1e6:.0f}M | {mib(planned)} | {mib(max(r['peak_mem_bytes'] for r in rows))} | "
      f"{mib(rows[-1].get('host_peak_bytes', 0))} | {statistics.median(r['step_ms'] for r in rows[1:]) / 1e3:.1f} |")
PY
}
strategy "everything on the device" 1
strategy "ZeRO-3 (dp 2)" 2 --zero 3
strategy "--offload cpu" 1 --offload cpu
strategy "--offload nvme" 1 --offload nvme --offload-dir "$dir"
strategy "ZeRO-3 (dp 2) + --offload cpu" 2 --zero 3 --offload cpu
strategy "ZeRO-3 + --offload cpu + --offload-params" 1 --zero 3 --offload cpu --offload-params

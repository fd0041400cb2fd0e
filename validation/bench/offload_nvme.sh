#!/usr/bin/env bash
# Optimizer-state offload benchmark: gpt_train's step time and peak memory with the AdamW states
# in memory (--offload none) and streamed from scratch files (--offload nvme), back to back, on a
# GPT-2 124M (about 124M parameters: 1 GB of fp32 states). Not a test: never registered with CTest.
#
# usage: offload_nvme.sh [--build DIR] [--dir DIR] [--steps N] [--repeats R]
#   --build:   default <repo>/build (needs apps/gpt_train and apps/data_prep)
#   --dir:     where the scratch files go (default $OUT_DIR/offload); put it on the disk to measure
#   --steps:   per run, default 8; the first 2 are warm-up
#   --repeats: runs of each, alternating none, nvme, none, ... (default 2, so that a burst of load
#              from elsewhere falls on both); the table pools the timed steps of each
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build
steps=8
repeats=2
OUT_DIR=${OUT_DIR:-/tmp/tessera-bench}
dir=$OUT_DIR/offload
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
(( steps >= 4 )) || { echo "error: --steps must be at least 4" >&2; exit 2; }
for exe in data_prep gpt_train; do
  [[ -x $build/apps/$exe ]] || { echo "error: $build/apps/$exe not found (--build DIR)" >&2; exit 1; }
done
mkdir -p "$OUT_DIR/data" "$OUT_DIR/offload_runs" "$dir"
data=$OUT_DIR/data/synth_v50257.h5
[[ -f $data ]] || "$build/apps/data_prep" synth --vocab 50257 --tokens 2000000 --seed 1 --output "$data" >/dev/null

model=(--layers 12 --hidden 768 --heads 12 --seq-len 64 --global-batch 4 --micro-batch 4 --lr 3e-4 --seed 1)
echo "GPT-2 124M, batch 4 x seq 64, $repeats x $steps steps each, OMP_NUM_THREADS=2; scratch files in $dir ($(df -h --output=fstype,source "$dir" | tail -1 | xargs))"
runs=$OUT_DIR/offload_runs
rm -f "$runs"/*.jsonl
for ((r = 1; r <= repeats; ++r)); do
  for offload in none nvme; do
    extra=()
    [[ $offload == nvme ]] && extra=(--offload nvme --offload-dir "$dir")
    echo "$offload $(cut -d' ' -f1 /proc/loadavg)" >> "$runs/load.txt"
    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$build/apps/gpt_train" --input "$data" "${model[@]}" --steps "$steps" \
      --threads 2 --metrics "$runs/$offload.$r.jsonl" "${extra[@]}" >"$runs/$offload.$r.log" 2>&1 ||
      { cat "$runs/$offload.$r.log"; echo "error: the $offload run failed" >&2; exit 1; }
  done
done
python3 - "$runs" <<'PY'
import glob, json, statistics, sys
runs = sys.argv[1]
print(f'{"offload":<8} {"steps":>5} {"min ms":>9} {"median ms":>10} {"peak MiB":>9} {"state MiB":>10}')
base = None
for offload in ("none", "nvme"):
    rows = []
    for path in sorted(glob.glob(f"{runs}/{offload}.*.jsonl")):
        rows += [json.loads(l) for l in open(path) if '"step_ms"' in l][2:]
    ms = [r["step_ms"] for r in rows]
    line = (f'{offload:<8} {len(ms):>5} {min(ms):9.1f} {statistics.median(ms):10.1f} '
            f'{rows[-1]["peak_mem_bytes"] / 2**20:9.1f} {rows[-1]["state_bytes"] / 2**20:10.1f}')
    if base is None:
        base = min(ms), statistics.median(ms)
    else:
        line += f'   nvme / none: min {min(ms) / base[0]:.2f}, median {statistics.median(ms) / base[1]:.2f}'
    print(line)
loads = open(f"{runs}/load.txt").read().split()
print("1-minute load at each run's start:", " ".join(loads[1::2]))
PY
echo "peak MiB: the tracked allocator's peak (nvme's states are not in it, its two 8 MiB stream buffers"
echo "are); state MiB: ZeroOptimizer::state_bytes(), which still counts the states wherever they live."

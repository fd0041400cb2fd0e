#!/usr/bin/env bash
# Benchmark of the parallel layouts on 4 ranks (not a test: never registered with CTest): one GPT
# trained for a few steps under dp, 1D tp, tp with split_gather, Ulysses and ring sequence
# parallelism and a tp x sp mix, with one rank as the baseline; prints a markdown table of median
# tokens/s, communication bytes per step (rank 0's, as the metrics count them) and peak memory per
# rank. On a machine with fewer cores than ranks the ranks share cores (oversubscribed): compare
# bytes and memory freely, tokens/s only with that in mind.
#
# usage: parallel_modes.sh [--build DIR] [--steps N] [--threads T]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
steps=8
threads=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 8192 --tokens 400000 --seed 3 --output "$tmp/data.h5" >/dev/null
model=(--input "$tmp/data.h5" --layers 4 --hidden 256 --heads 8 --seq-len 512 --global-batch 8 --steps "$steps"
       --warmup 1 --threads "$threads")
echo "model: 4 layers, hidden 256, 8 heads, seq 512, global batch 8, vocab 8192; $steps steps, $threads thread(s) per rank, $(nproc) cores"
echo
echo "| layout | ranks | tokens/s (median) | comm MB/step (rank 0) | peak MB/rank | loss at the last step |"
echo "| --- | --- | --- | --- | --- | --- |"
run() {  # label ranks options...
  local label=$1 ranks=$2; shift 2
  mpirun -np "$ranks" "$build/apps/gpt_train" "${model[@]}" "$@" --metrics "$tmp/m.jsonl" >/dev/null
  /usr/bin/python3 - "$tmp/m.jsonl" "$label" "$ranks" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][1:]  # the first step warms up
print(f"| {sys.argv[2]} | {sys.argv[3]} | {statistics.median(r['tokens_per_s'] for r in rows):.0f} | "
      f"{statistics.median(r['comm_bytes'] for r in rows) / 2**20:.2f} | {max(r['peak_mem_bytes'] for r in rows) / 2**20:.1f} | "
      f"{rows[-1]['loss']:.4f} |")
PY
}
run "one rank" 1
run "dp 4" 4
run "dp 4, ZeRO-3" 4 --zero 3
run "tp 4 (1d)" 4 --tp 4
run "tp 4, split_gather" 4 --tp 4 --sp-mode split_gather
run "sp 4, all_to_all" 4 --sp 4 --sp-mode all_to_all
run "sp 4, ring" 4 --sp 4 --sp-mode ring
run "tp 2 x sp 2 (ring)" 4 --tp 2 --sp 2 --sp-mode ring
run "tp 2 x dp 2" 4 --tp 2

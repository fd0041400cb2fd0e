#!/usr/bin/env bash
# Benchmark of the tensor-parallel modes on 8 ranks (not a test: never registered with CTest): one
# GPT trained for a few steps under 1D tp (tp 8, and tp 4 x dp 2), 2D SUMMA (tp 4 = 2 x 2, dp 2),
# 2.5D (tp 8 = depth 2 x 2 x 2) and 3D (tp 8 = 2 x 2 x 2), with one rank as the baseline; prints a
# markdown table of median tokens/s, communication bytes per step (rank 0's, as the metrics count
# them), peak memory and state memory (parameters, gradients, optimizer states) per rank, and the
# loss at the last step, which every layout should reproduce from the one-rank run (nearly equal).
# The 8 ranks share this machine's cores (oversubscribed): tokens/s is relative only; the bytes and
# the memory are exact.
#
# usage: tensor_modes.sh [--build DIR] [--steps N] [--threads T]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
steps=6
threads=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 8192 --tokens 400000 --seed 3 --output "$tmp/data.h5" >/dev/null
# The grid modes need: global batch divisible by dp x the batch split (2d: q = 2; 2.5d: d q = 4;
# 3d: q^2 = 4), heads and hidden by q (3d: hidden by q^2). 16, 8 and 256 satisfy all of them.
batch=16
model=(--input "$tmp/data.h5" --layers 4 --hidden 256 --heads 8 --seq-len 256 --global-batch "$batch"
       --steps "$steps" --warmup 1 --threads "$threads")
echo "model: 4 layers, hidden 256, 8 heads, seq 256, global batch $batch, vocab 8192; $steps steps, $threads thread(s) per rank, $(nproc) cores"
echo
echo "| layout | ranks | tokens/s (median) | comm MB/step (rank 0) | peak MB/rank | state MB/rank | loss at the last step |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
run() {  # label ranks options...
  local label=$1 ranks=$2; shift 2
  rm -f "$tmp/m.jsonl"
  # A mode that fails gets a row saying so (its error is on stderr) and the others still run.
  local rc=0
  mpirun -np "$ranks" "$build/apps/gpt_train" "${model[@]}" "$@" --metrics "$tmp/m.jsonl" >/dev/null || rc=$?
  if [[ $rc -ne 0 ]]; then echo "| $label | $ranks | failed (exit $rc) | | | | |"; status=1; return 0; fi
  /usr/bin/python3 - "$tmp/m.jsonl" "$label" "$ranks" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][1:]  # the first step warms up
print(f"| {sys.argv[2]} | {sys.argv[3]} | {statistics.median(r['tokens_per_s'] for r in rows):.0f} | "
      f"{statistics.median(r['comm_bytes'] for r in rows) / 2**20:.2f} | {max(r['peak_mem_bytes'] for r in rows) / 2**20:.1f} | "
      f"{rows[-1]['state_bytes'] / 2**20:.1f} | {rows[-1]['loss']:.4f} |")
PY
}
status=0
run "one rank" 1 --micro-batch "$batch"
run "1d: tp 8" 8 --tp 8
run "1d: tp 4 x dp 2" 8 --tp 4
run "2d: tp 4 (2 x 2) x dp 2" 8 --tp 4 --tp-mode 2d
run "2.5d: tp 8 (depth 2, 2 x 2)" 8 --tp 8 --tp-mode 2.5d --tp-depth 2
run "3d: tp 8 (2 x 2 x 2)" 8 --tp 8 --tp-mode 3d
exit $status

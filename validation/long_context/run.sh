#!/usr/bin/env bash
# Long context with ring attention (not a test): the per-rank memory budget that one rank needs
# for a sequence of S tokens lets 4 ranks under ring attention train 4 S, where one rank would need
# about 4 times the budget. Trains a small GPT for a few steps at S on one rank, at 4 S on one rank
# and at 4 S on 4 ranks (--sp 4 --sp-mode ring); prints peak memory per rank, loss and tokens/s.
#
# usage: run.sh [--build DIR] [--seq S] [--steps N]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
seq=4096
steps=6
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
long=$((4 * seq))
"$build/apps/data_prep" synth --vocab 256 --tokens $((40 * long)) --seed 9 --output "$tmp/data.h5" >/dev/null
model=(--input "$tmp/data.h5" --layers 4 --hidden 128 --heads 8 --global-batch 1 --steps "$steps" --warmup 1
       --lr 1e-3 --threads 1)
echo "model: 4 layers, hidden 128, 8 heads, batch 1, vocab 256; $steps steps"
echo
echo "| run | ranks | sequence | peak MB per rank | first loss | last loss | tokens/s (median) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
run() {  # label ranks seq options...
  local label=$1 ranks=$2 s=$3; shift 3
  mpirun -np "$ranks" "$build/apps/gpt_train" "${model[@]}" --seq-len "$s" "$@" --metrics "$tmp/m.jsonl" --overwrite >/dev/null
  /usr/bin/python3 - "$tmp/m.jsonl" "$label" "$ranks" "$s" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {max(r['peak_mem_bytes'] for r in rows) / 2**20:.1f} | "
      f"{rows[0]['loss']:.4f} | {rows[-1]['loss']:.4f} | {statistics.median(r['tokens_per_s'] for r in rows[1:]):.0f} |")
PY
}
run "one rank, S" 1 "$seq"
run "one rank, 4 S" 1 "$long"
run "ring attention, 4 S" 4 "$long" --sp 4 --sp-mode ring

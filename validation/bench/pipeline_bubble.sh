#!/usr/bin/env bash
# Benchmark of the pipeline bubble (not a test: never registered with CTest): one GPT trained for a
# few steps at pp 2 under each schedule (gpipe, 1f1b, interleaved with 2 chunks per stage, zb) with
# --trace, and at one rank as the baseline; pipeline_bubble_report.py computes from each trace, for
# the steps after the first, the measured bubble beside docs/pipeline.md's theory and beside a
# simulation of the traced programs with their own compute times (the last stage also runs the LM
# head's backward in its forward step, so the stages are unequal), and prints a markdown table.
# One thread per rank: pp 2 needs 2 cores for the ranks not to share one.
#
# usage: pipeline_bubble.sh [--build DIR] [--steps N] [--layers L] [--micro-batch B] [--out FILE.md]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
steps=8 layers=8 micro_batch=2 out=
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --micro-batch) micro_batch=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
(( steps >= 2 )) || { echo "error: --steps must be at least 2 (the first is skipped)" >&2; exit 2; }
cores=$(nproc --all)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
global_batch=16 stages=2
micro=$(( global_batch / micro_batch ))
"$build/apps/data_prep" synth --vocab 512 --tokens 200000 --seed 3 --output "$tmp/data.h5" >/dev/null
model=(--input "$tmp/data.h5" --layers "$layers" --hidden 256 --heads 8 --seq-len 128 --global-batch "$global_batch"
       --micro-batch "$micro_batch" --steps "$steps" --warmup 1 --threads 1)
echo "model: $layers layers, hidden 256, 8 heads, seq 128, vocab 512, global batch $global_batch in $micro micro-batches" \
     "of $micro_batch; $steps steps (the first skipped), 1 thread per rank, $cores cores," \
     "load average $(cut -d' ' -f1 /proc/loadavg) at the start"
mpirun -np 1 "$build/apps/gpt_train" "${model[@]}" --metrics "$tmp/one.jsonl" >/dev/null
runs=()
run() {  # NAME SCHEDULE CHUNKS
  local name=$1 schedule=$2 chunks=$3
  mpirun -np "$stages" "$build/apps/gpt_train" "${model[@]}" --pp "$stages" --pp-schedule "$schedule" \
    --virtual-stages "$chunks" --trace "$tmp/$name.json" --metrics "$tmp/$name.jsonl" >/dev/null
  runs+=("$name:$schedule:$chunks:$tmp/$name.json:$tmp/$name.jsonl")
}
run gpipe gpipe 1
run 1f1b 1f1b 1
run interleaved interleaved 2
run zb zb 1
echo
/usr/bin/python3 "$here/pipeline_bubble_report.py" --stages "$stages" --micro "$micro" --steps "$steps" \
  --baseline "$tmp/one.jsonl" ${out:+--out "$out"} "${runs[@]}"

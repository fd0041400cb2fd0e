#!/usr/bin/env bash
# Benchmark of ZeRO-3's overlap (not a test: never registered with CTest): one GPT whose units are
# large (8 blocks of hidden 512: 12.6 MB gathered per block, a small vocabulary) trained on 4 ranks
# under --zero 3 with --zero3-overlap off (each unit all-gathered and reduce-scattered when it is
# reached, waited at once: the baseline) and on (the next unit's all-gather in flight while this
# one computes, reduce-scatters completed later), the two modes alternating, `--repeats` runs each.
# Prints the median exposed communication per step (the metrics' comm_ms: time rank 0 spent
# inside communication calls) and step time of each mode over the steps after the first two, their
# ratios (overlapped / blocking), and checks that every loss is the same in both, to the bit.
# Exits 1 when a loss differs; the ratios are reported, not asserted (a shared machine's load moves
# them). On a machine with fewer cores than ranks the ranks share cores: step_ms then gains less
# than comm_ms, since the transfers compete with the compute for the same cores.
#
# usage: zero3_overlap.sh [--build DIR] [--steps N] [--repeats R] [--threads T]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
steps=8 repeats=2 threads=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "error: unknown option $1 (usage: zero3_overlap.sh [--build DIR] [--steps N] [--repeats R] [--threads T])" >&2
       exit 2 ;;
  esac
done
[[ -x "$build/apps/gpt_train" ]] || { echo "error: no $build/apps/gpt_train: build first, or give --build DIR" >&2; exit 1; }
[[ $steps -ge 4 ]] || { echo "error: --steps $steps: at least 4 (the first two are warm-up)" >&2; exit 1; }
[[ $repeats -ge 1 ]] || { echo "error: --repeats $repeats: at least 1" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 512 --tokens 200000 --seed 1 --output "$tmp/data.h5" >/dev/null
model=(--input "$tmp/data.h5" --layers 8 --hidden 512 --heads 8 --seq-len 64 --global-batch 8 --steps "$steps"
       --warmup 1 --seed 3 --threads "$threads" --eval-every 0 --zero 3)
echo "model: 8 layers, hidden 512, 8 heads, seq 64, vocab 512, global batch 8 on 4 ranks (dp 4, ZeRO-3);"
echo "$steps steps per run, $repeats run(s) per mode, $threads thread(s) per rank, $(nproc) cores"
for r in $(seq 1 "$repeats"); do
  for mode in off on; do
    mpirun -np 4 "$build/apps/gpt_train" "${model[@]}" --zero3-overlap $mode --metrics "$tmp/$mode-$r.jsonl" >/dev/null
  done
done
python3 - "$tmp" "$repeats" <<'PY'
import json, statistics, sys
tmp, repeats = sys.argv[1], int(sys.argv[2])
def rows(mode, r):
    return [x for x in map(json.loads, open(f"{tmp}/{mode}-{r}.jsonl")) if "step_ms" in x]
runs = {m: [rows(m, r) for r in range(1, repeats + 1)] for m in ("off", "on")}
reference = [x["loss"] for x in runs["off"][0]]
for mode, mode_runs in runs.items():
    for i, run in enumerate(mode_runs):
        losses = [x["loss"] for x in run]
        if losses != reference:
            sys.exit(f"error: --zero3-overlap {mode} run {i + 1}: losses {losses} differ from {reference}")
med = {m: {k: statistics.median(x[k] for run in runs[m] for x in run if x["step"] > 2)
           for k in ("comm_ms", "step_ms")} for m in runs}
print()
print("| --zero3-overlap | comm_ms (median) | step_ms (median) |")
print("| --- | --- | --- |")
for m in ("off", "on"):
    print(f"| {m} | {med[m]['comm_ms']:.1f} | {med[m]['step_ms']:.1f} |")
comm, step = med["on"]["comm_ms"] / med["off"]["comm_ms"], med["on"]["step_ms"] / med["off"]["step_ms"]
print(f"| on / off | {comm:.3f} | {step:.3f} |")
print()
print(f"losses: the same {len(reference)} values in all {2 * repeats} runs, bit for bit")
print(f"exposed communication: {1 / comm:.2f}x less overlapped (target: at least 2x)")
PY

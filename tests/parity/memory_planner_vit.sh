#!/usr/bin/env bash
# The ViT memory planner (vit_train --dry-run, lib/plan/vit_memory_plan.h) against the tracked memory
# of real vit_train runs: on one rank, dp 2 with ZeRO 1, 2 and 3, tp 2, sp 2 (all_to_all and ring),
# pp 2 (1f1b, and zb), full and selective activation checkpointing, bf16, grid tp (2d at tp 4 with and
# without full checkpointing, 2.5d and 3d at tp 8). For each, the predicted
# total of the rank that writes the metrics (pipeline stage 0) is at least its measured step-2 peak
# and within 10% of it (tests/parity/memory_planner.sh's tolerance for the GPTs), and its
# parameters + gradients + optimizer states equal the run's state_bytes exactly.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v mpirun >/dev/null || { echo "error: mpirun not found"; exit 1; }
data="$tmp/images.h5"
# 12 x 12 images in 4 x 4 patches: 9 patches + the class token = 10 tokens (sp 2 splits them).
"$build/apps/data_prep" synth-images --classes 5 --train 64 --test 8 --size 12 --seed 3 --output "$data" >/dev/null
model=(--layers 4 --hidden 32 --heads 4 --patch 4 --global-batch 8 --steps 2 --threads 1 --crop-pad 0)

# NAME RANKS DP options...: the dry run (one process, planning dp x ... ranks), then the run.
measure_case() {
  local name=$1 ranks=$2 dp=$3; shift 3
  "$build/apps/vit_train" --input "$data" "${model[@]}" "$@" --dp "$dp" --dry-run >"$tmp/$name.plan" &&
  mpirun -np "$ranks" "$build/apps/vit_train" --input "$data" "${model[@]}" "$@" --metrics "$tmp/$name.jsonl" \
    --quiet >/dev/null &&
  echo -n "$name: " &&
  /usr/bin/python3 - "$tmp/$name.plan" "$tmp/$name.jsonl" <<'PY'
import json, re, sys
plan = open(sys.argv[1]).read()
stage0 = re.search(r"^\s+total\s+(\d+) bytes .*\(state (\d+) bytes\)", plan, re.M)  # the first stage's
if not stage0:
    sys.exit(f"error: no memory plan in the dry run:\n{plan}")
predicted, state = int(stage0.group(1)), int(stage0.group(2))
step2 = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l][1]
measured = step2["peak_mem_bytes"]
if state != step2["state_bytes"]:
    sys.exit(f"error: planned state {state} bytes, the run's state_bytes {step2['state_bytes']}\n{plan}")
if predicted < measured or predicted > 1.1 * measured:
    sys.exit(f"error: predicted {predicted} bytes, measured peak {measured}: not within [1, 1.1] of it\n{plan}")
print(f"predicted {predicted} bytes, measured {measured} ({predicted / measured:.4f}x); state {state} exactly")
PY
}

# The cases run side by side, at most $max_jobs at a time (a case's run mostly waits on MPI start-up
# and on its ranks taking turns on 2 cores; the peaks compared are the tracked allocator bytes, not
# the machine's, so a neighbour changes nothing); each case's dry run, run and check are as before,
# its lines printed in order at the end (finish_cases), which fails if any case failed.
source "$(dirname "$0")/../tools/cases_side_by_side.sh"
planned_like_measured() { run_case "$1" measure_case "$@"; }

planned_like_measured one-rank 1 1
planned_like_measured dp2-zero1 2 2 --zero 1
planned_like_measured dp2-zero2 2 2 --zero 2
planned_like_measured dp2-zero3 2 2 --zero 3
planned_like_measured tp2 2 1 --tp 2
planned_like_measured tp2-full 2 1 --tp 2 --activation-checkpointing full
planned_like_measured sp2-all-to-all 2 1 --sp 2
planned_like_measured sp2-ring-selective 2 1 --sp 2 --sp-mode ring --activation-checkpointing selective
planned_like_measured pp2-1f1b 2 1 --pp 2 --micro-batch 2
planned_like_measured pp2-zb 2 1 --pp 2 --micro-batch 2 --pp-schedule zb
planned_like_measured dp2-bf16 2 2 --precision bf16
# Grid tensor parallelism (vit_train takes 2d, 2.5d and 3d): each rank holds a share of the images
# (global / (dp x the grid's batch shares)) and a block of the stream's features; the linears'
# SUMMA blocks (3d: gathered rows and weights) and the split norms' sums are its workspace.
planned_like_measured grid-2d-tp4 4 1 --tp 4 --tp-mode 2d
planned_like_measured grid-2d-tp4-full 4 1 --tp 4 --tp-mode 2d --activation-checkpointing full
planned_like_measured grid-25d-tp8 8 1 --tp 8 --tp-mode 2.5d --tp-depth 2
planned_like_measured grid-3d-tp8 8 1 --tp 8 --tp-mode 3d
finish_cases

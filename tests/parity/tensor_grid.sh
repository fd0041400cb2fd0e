#!/usr/bin/env bash
# Parity: grid tensor parallelism reproduces the one-rank run (losses, step-1 gradients, state
# after 10 steps: tests/tools/layout_parity.sh): --tp-mode 2d (SUMMA) at tp 4 (q = 2) alone, with
# dp and ZeRO 1 and 3, and with pp 2 (1F1B); at tp 9 (q = 3) on a second model; --tp-mode 2.5d at
# tp 8 (q = 2, depth 2) alone and with dp and ZeRO 2; --tp-mode 3d at tp 8 (q = 2) alone and with
# dp and ZeRO 3 (3d with pp: tests/parity/vit_parallel.sh). The grid splits the batch like data
# parallelism. The communication bytes per step, the parameter and the activation memory per rank
# of 2d-tp4, 25d-tp8 and 3d-tp8 equal the cost table's formulas (docs/parallelism.md). Checkpoints
# move between grid and other layouts: 5 + 5 resumed steps equal 10 straight.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
parity_reference ref "$data" --micro-batch 8
parity_case 2d-tp4 4 ref "$data" --tp 4 --tp-mode 2d
parity_case 2d-tp4-dp2-zero1 8 ref "$data" --tp 4 --tp-mode 2d --zero 1
parity_case 2d-tp4-dp2-zero3 8 ref "$data" --tp 4 --tp-mode 2d --zero 3
parity_case 2d-tp4-pp2 8 ref "$data" --tp 4 --tp-mode 2d --pp 2 --micro-batch 2
parity_case 25d-tp8 8 ref "$data" --tp 8 --tp-mode 2.5d --tp-depth 2
parity_case 25d-tp8-dp2-zero2 16 ref "$data" --tp 8 --tp-mode 2.5d --tp-depth 2 --zero 2
parity_case 3d-tp8 8 ref "$data" --tp 8 --tp-mode 3d
parity_case 3d-tp8-dp2-zero3 16 ref "$data" --tp 8 --tp-mode 3d --zero 3

# Communication per step (floats; bytes are 4 x floats) on a grid of side q and depth d (3d: q),
# with L = 2 blocks, hidden C = 32, sequence T = 16, N = this rank's token rows per micro-batch
# (global batch / (q d) sequences; 3d: / q^2), V = the vocabulary padded to 64 q:
#   linears: 2d/2.5d L (21 N C + 36 C^2 / q); 3d L (39 N C + 36 C^2 / q^2)
#   split layer norms, embedding and head: 8 L N + 4 N + 5 N C + 5 V C / q + 3 N
#   vectors summed over the ranks sharing their features: L 13 C / q + 2 C / q + T C / q
#   weight blocks summed over the depth (2.5d): L 12 C^2 / q^2 + V C / q^2; 3d: the table, V C / q^2
# plus per step the gradient norm's share and the loss (8 bytes each) and the step's figures (24:
# trainer.cpp's max of the preemption flag and resident memory, sum of the data bytes read).
# Parameters per rank: L (12 C^2 / q^2 + 13 C / q) + V C / q^2 + T C / q + 2 C / q (3d: 12 C^2 /
# q^3), held as value, gradient, exp_avg and exp_avg_sq in fp32.
for case in "2d-tp4 2d 2 1 582184 125952" "25d-tp8 2.5d 2 2 415400 125952" "3d-tp8 3d 2 2 464552 76800"; do
  read -r name mode q d want_comm want_state <<<"$case"
  echo -n "$name communication and parameter bytes per step: "
  /usr/bin/python3 - "$tmp/$name.jsonl" "$mode" "$q" "$d" "$want_comm" "$want_state" <<'PY'
import json, sys
mode = sys.argv[2]
q, d, want_comm, want_state = map(int, sys.argv[3:])
cube = mode == "3d"
L, C, T = 2, 32, 16
N = 8 // (q * q if cube else q * d) * T
V = -(-61 // (64 * q)) * 64 * q
linears = L * (39 * N * C + 36 * C * C // q**2) if cube else L * (21 * N * C + 36 * C * C // q)
floats = (linears + 8 * L * N + 4 * N + 5 * N * C + 5 * V * C // q + 3 * N
          + L * 13 * C // q + 2 * C // q + T * C // q
          + (L * 12 * C * C // q**2 if d > 1 and not cube else 0) + (V * C // q**2 if d > 1 or cube else 0))
comm = 4 * floats + 40
params = L * (12 * C * C // (q**3 if cube else q**2) + 13 * C // q) + V * C // q**2 + T * C // q + 2 * C // q
state = 4 * 4 * params
if (comm, state) != (want_comm, want_state):
    sys.exit(f"error: the formulas give {comm} and {state} bytes, the script expects {want_comm} and {want_state}")
steps = [json.loads(line) for line in open(sys.argv[1]) if '"loss"' in line]
got = {s["comm_bytes"] for s in steps}
if got != {comm}:
    sys.exit(f"error: comm_bytes {sorted(got)} per step, expected {comm}")
got = {s["state_bytes"] for s in steps}
if got != {state}:
    sys.exit(f"error: state_bytes {sorted(got)}, expected {state}")
print(f"{comm} and {state} as the formulas give")
PY
done

# Activation memory per rank (the tracked peak minus the persistent state, every step) equals
# docs/parallelism.md's formula exactly, in floats (N this rank's token rows, H = 4 heads):
#   L N (15 C/q + 4 + H/q) + (L + 4) N C/q + 8 N C/q + N V/q + 16 N      as 1D's, on feature blocks
#   + 2 N C + 3 V C/q + 2 (2L + 1) N                   vocabulary regions, gathered table, norm sums
#   + 2 max(N C, V C/q [, 3d: 4 C^2/q^2]) + V C/q^2    gather and reduce-scatter staging
#   + linears' workspace: 2d/2.5d 8 N C/q + 8 C^2/q^2; 3d 12 N C + 8 C^2/q^2 + 4 C^2/q^3
#   + the largest group of partial gradients packed for its all-reduce
for case in "2d 4 --tp 4 --tp-mode 2d" "2.5d 8 --tp 8 --tp-mode 2.5d --tp-depth 2" "3d 8 --tp 8 --tp-mode 3d"; do
  read -r mode ranks options <<<"$case"
  mpirun -np "$ranks" "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 3 $options \
    --metrics "$tmp/memory-$mode.jsonl" >/dev/null
  echo -n "activation bytes per rank under $mode: "
  /usr/bin/python3 - "$tmp/memory-$mode.jsonl" "$mode" <<'PY'
import json, sys
mode = sys.argv[2]
cube = mode == "3d"
q, d = 2, 2 if mode == "2.5d" else 1
L, C, T, H = 2, 32, 16, 4
N = 8 // (q * q if cube else q * d) * T
V = -(-61 // (64 * q)) * 64 * q
floats = (L * N * (15 * C // q + 4 + H // q) + (L + 4) * N * C // q + 8 * N * C // q + N * V // q + 16 * N
          + 2 * N * C + 3 * V * C // q + 2 * (2 * L + 1) * N
          + 2 * max(N * C, V * C // q, 4 * C * C // q**2 if cube else 0) + V * C // q**2
          + (12 * N * C + 8 * C * C // q**2 + 4 * C * C // q**3 if cube else 8 * N * C // q + 8 * C * C // q**2))
rows_group = L * 13 * C // q + 2 * C // q + T * C // q
if cube:
    packed = max(L * 6 * C // q + 2 * C // q + T * C // q, L * 7 * C // q, V * C // q**2)
else:
    packed = max(rows_group, L * 12 * C * C // q**2 + V * C // q**2 if d > 1 else 0)
want = 4 * (floats + packed)
got = {r["peak_mem_bytes"] - r["state_bytes"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
if got != {want}:
    sys.exit(f"error: {sorted(got)} bytes of activations, the formula gives {want}")
print(f"{want} as the formula gives")
PY
done

# Resume across layouts: the step-5 checkpoint of 2d-tp4 resumed at one rank and at 2.5d tp 8, 3d
# tp 8's at 2d tp 4; the one-rank step-5 checkpoint resumed at 2d tp 4 x dp 2 ZeRO-3.
resume_case 2d-tp4-to-one-rank ref "$data" "$tmp/2d-tp4/step_5.h5" 1 --micro-batch 8
resume_case 2d-tp4-to-25d-tp8 ref "$data" "$tmp/2d-tp4/step_5.h5" 8 --tp 8 --tp-mode 2.5d --tp-depth 2
resume_case 3d-tp8-to-2d-tp4 ref "$data" "$tmp/3d-tp8/step_5.h5" 4 --tp 4 --tp-mode 2d
resume_case one-rank-to-2d-tp4-dp2-zero3 ref "$data" "$tmp/ref/step_5.h5" 8 --tp 4 --tp-mode 2d --zero 3

# A second model for a 3 x 3 grid: hidden 36 and 6 heads split over q = 3, the batch of 6 over the
# grid's 3 rows.
common=(--layers 2 --hidden 36 --heads 6 --seq-len 16 --global-batch 6 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01)
parity_reference ref9 "$data" --micro-batch 6
parity_case 2d-tp9 9 ref9 "$data" --tp 9 --tp-mode 2d

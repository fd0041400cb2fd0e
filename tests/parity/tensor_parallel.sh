#!/usr/bin/env bash
# Parity: 1D tensor parallelism (Megatron: heads, MLP and vocabulary split) at tp 2 and 4, alone
# and with dp and ZeRO 1, 2 and 3, reproduces the one-rank run (losses, step-1 gradients, state
# after 10 steps: tests/tools/layout_parity.sh). Two vocabularies: 61 (one tp rank holds only
# padding rows) and 201 (split unevenly, padded). The communication bytes per step equal the cost
# table's formula. Checkpoints move between tensor-parallel and other layouts: 10 + 10 resumed
# steps equal 20 straight.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"

for vocab in 61 201; do
  data="$tmp/v$vocab.h5"
  "$build/apps/data_prep" synth --vocab $vocab --tokens 20000 --seed 5 --output "$data" >/dev/null
  parity_reference "ref$vocab" "$data" --micro-batch 8
  parity_case "vocab$vocab-tp2" 2 "ref$vocab" "$data" --tp 2
  parity_case "vocab$vocab-tp4" 4 "ref$vocab" "$data" --tp 4
  parity_case "vocab$vocab-tp2-dp2-micro2" 4 "ref$vocab" "$data" --tp 2 --micro-batch 2
  parity_case "vocab$vocab-tp2-dp2-zero1" 4 "ref$vocab" "$data" --tp 2 --zero 1
  parity_case "vocab$vocab-tp2-dp2-zero2-micro2" 4 "ref$vocab" "$data" --tp 2 --zero 2 --micro-batch 2
  parity_case "vocab$vocab-tp2-dp2-zero3" 4 "ref$vocab" "$data" --tp 2 --zero 3
done
parity_case "vocab61-tp4-dp2-zero3" 8 ref61 "$tmp/v61.h5" --tp 4 --zero 3

# Communication of tp 2 (dp 1), per step, as docs/parallelism.md gives it: per micro-batch of
# N = 8 x 16 rows, hidden C = 32, L = 2 blocks: 4 all-reduces of N x C per block, one for the
# embedding and one for the head's dx, plus 3N values of the vocab-parallel loss; per step the
# gradient norm's share (a double) and the step's figures (24 bytes: trainer.cpp's max of the
# preemption flag and resident memory, sum of the data bytes read).
echo -n "tp2 communication bytes per step: "
/usr/bin/python3 - "$tmp/vocab61-tp2.jsonl" <<'PY'
import json, sys
n, c, layers = 8 * 16, 32, 2
want = 4 * (layers * 4 * n * c + 2 * n * c + 3 * n) + 8 + 24
got = {json.loads(line)["comm_bytes"] for line in open(sys.argv[1]) if '"loss"' in line}
if got != {want}:
    sys.exit(f"error: comm_bytes {sorted(got)} per step, expected {want}")
print(f"{want} as the formula gives")
PY

# Activation memory per rank (the tracked peak minus the persistent state) at tp 1, 2 and 4 on a
# 1024-token sequence equals docs/parallelism.md's formula exactly.
"$build/apps/data_prep" synth --vocab 61 --tokens 100000 --seed 5 --output "$tmp/long.h5" >/dev/null
for tp in 1 2 4; do
  mpirun -np $tp "$build/apps/gpt_train" --input "$tmp/long.h5" --layers 2 --hidden 32 --heads 4 --seq-len 1024 \
    --global-batch 2 --steps 2 --threads 1 --tp $tp --metrics "$tmp/long$tp.jsonl" >/dev/null
  echo -n "activation bytes per rank at tp $tp: "
  /usr/bin/python3 - "$tmp/long$tp.jsonl" $tp <<'PY'
import json, sys
tp = int(sys.argv[2])
L, C, H, N = 2, 32, 4, 2 * 1024
vp = -(-61 // (64 * tp)) * 64 * tp  # the vocabulary padded to 64 x tp
floats = (L * N * (3 * C + 12 * C // tp + 4 + H // tp) + (L + 4) * N * C + 8 * N * C // tp + N * vp // tp
          + 9 * N + (7 * N if tp > 1 else 0))
last = [json.loads(line) for line in open(sys.argv[1]) if '"loss"' in line][-1]
got = last["peak_mem_bytes"] - last["state_bytes"]
if got != 4 * floats:
    sys.exit(f"error: {got} bytes of activations, the formula gives {4 * floats}")
print(f"{got} as the formula gives")
PY
done

# Resume across layouts (vocabulary 201): save at tp 2 x dp 2 ZeRO-3, resume at one rank and at
# tp 4; save at one rank, resume at tp 2 x dp 2 ZeRO-1.
data="$tmp/v201.h5"
mpirun -np 1 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 20 --micro-batch 8 \
  --metrics "$tmp/ref20.jsonl" --checkpoint-dir "$tmp/ref20" --checkpoint-every 10 >/dev/null
mpirun -np 4 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 20 --tp 2 --zero 3 \
  --metrics "$tmp/tpfirst.jsonl" --checkpoint-dir "$tmp/tpck" --checkpoint-every 10 >/dev/null
resume_case tp2-dp2-zero3-to-one-rank ref20 "$data" "$tmp/tpck/step_10.h5" 1 --micro-batch 8
resume_case tp2-dp2-zero3-to-tp4 ref20 "$data" "$tmp/tpck/step_10.h5" 4 --tp 4
resume_case one-rank-to-tp2-dp2-zero1 ref20 "$data" "$tmp/ref20/step_10.h5" 4 --tp 2 --zero 1

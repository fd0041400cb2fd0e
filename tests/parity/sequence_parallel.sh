#!/usr/bin/env bash
# Parity: sequence parallelism in both modes (all_to_all = Ulysses, ring = ring attention) at
# sp 2 and 4, with dp, with 1D tensor parallelism (tp x sp x dp) and with ZeRO, reproduces the
# one-rank run (losses, step-1 gradients, state after 10 steps: tests/tools/layout_parity.sh);
# a checkpoint saved under sp resumes at one rank; and the activation memory per rank of a long
# sequence falls as 1/sp.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
parity_reference ref "$data" --micro-batch 8
for mode in all_to_all ring; do
  parity_case "$mode-sp2" 2 ref "$data" --sp 2 --sp-mode $mode
  parity_case "$mode-sp4" 4 ref "$data" --sp 4 --sp-mode $mode
  parity_case "$mode-sp2-dp2-micro2" 4 ref "$data" --sp 2 --sp-mode $mode --micro-batch 2
  parity_case "$mode-sp2-tp2" 4 ref "$data" --sp 2 --tp 2 --sp-mode $mode
  parity_case "$mode-sp2-dp2-zero1" 4 ref "$data" --sp 2 --sp-mode $mode --zero 1
done
parity_case "ring-sp2-dp2-zero2" 4 ref "$data" --sp 2 --sp-mode ring --zero 2
parity_case "all_to_all-sp2-tp2-dp2-zero3" 8 ref "$data" --sp 2 --tp 2 --sp-mode all_to_all --zero 3
parity_case "ring-sp4-dp2-zero3" 8 ref "$data" --sp 4 --sp-mode ring --zero 3

echo -n "a checkpoint saved at ring sp 4 x dp 2 ZeRO-3, resumed on one rank: "
mpirun -np 1 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 20 --micro-batch 8 \
  --metrics "$tmp/ref20.jsonl" >/dev/null
mpirun -np 8 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 20 --sp 4 --sp-mode ring --zero 3 \
  --checkpoint-dir "$tmp/spck" --checkpoint-every 10 --metrics "$tmp/sp20.jsonl" >/dev/null
mpirun -np 1 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 20 --micro-batch 8 \
  --resume "$tmp/spck/step_10.h5" --metrics "$tmp/resumed.jsonl" >/dev/null
head -n 10 "$tmp/sp20.jsonl" | cat - "$tmp/resumed.jsonl" > "$tmp/all.jsonl"
$compare_losses "$tmp/ref20.jsonl" "$tmp/all.jsonl" --rtol 1e-5

# Memory: a 1024-token sequence; what a rank holds beyond its persistent state (activations and
# attention buffers) at sp 2 and 4, against one rank. The tracked allocator's peak is exact.
"$build/apps/data_prep" synth --vocab 61 --tokens 100000 --seed 5 --output "$tmp/long.h5" >/dev/null
long=(--input "$tmp/long.h5" --layers 2 --hidden 32 --heads 4 --seq-len 1024 --global-batch 2 --steps 2 --threads 1)
mpirun -np 1 "$build/apps/gpt_train" "${long[@]}" --metrics "$tmp/long1.jsonl" >/dev/null
for mode in ring all_to_all; do
  for sp in 2 4; do
    mpirun -np $sp "$build/apps/gpt_train" "${long[@]}" --sp $sp --sp-mode $mode --metrics "$tmp/long_$mode$sp.jsonl" >/dev/null
    echo -n "activation memory per rank, $mode sp $sp: "
    /usr/bin/python3 - "$tmp/long1.jsonl" "$tmp/long_$mode$sp.jsonl" $sp <<'PY'
import json, sys
def activations(path):
    last = [json.loads(line) for line in open(path) if '"loss"' in line][-1]
    return last["peak_mem_bytes"] - last["state_bytes"]
one, sp = activations(sys.argv[1]), activations(sys.argv[2])
# 1/sp of one rank's, times at most 1.4 for the modes' own buffers (ring: the visiting key/value
# block and its gradient sums; all-to-all: the head-sharded q, k, v and output), which scale alike.
bound = 1.4 / int(sys.argv[3])
ratio = sp / one
if ratio > bound:
    sys.exit(f"error: {sp} bytes, {ratio:.3f} of one rank's {one}: more than {bound:.3f}")
print(f"{ratio:.3f} of one rank's {one} bytes (bound {bound:.3f})")
PY
  done
done

#!/usr/bin/env bash
# Parity: sequence parallelism in its three modes (all_to_all = Ulysses and ring = ring attention
# at sp 2 and 4, with dp, with 1D tensor parallelism (tp x sp x dp) and with ZeRO; split_gather =
# Megatron's, inside the tp group, at tp 2 and 4, with dp and ZeRO) reproduces the one-rank run
# (losses, step-1 gradients, state after 10 steps: tests/tools/layout_parity.sh); a checkpoint saved
# under sp resumes at one rank; split_gather's communication bytes equal docs/parallelism.md's
# formula; and the activation memory per rank of a long sequence falls as 1/sp (split_gather: below
# 1D tensor parallelism's).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"
# The key part of the QKV bias has an exact gradient of zero: AdamW turns its rounding noise into
# lr-sized steps, and after 10 steps the layouts differ there by up to ~1e-5 (1.02e-5 seen).
state_atol=2e-5

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
parity_case "split_gather-tp2" 2 ref "$data" --tp 2 --sp-mode split_gather
parity_case "split_gather-tp4" 4 ref "$data" --tp 4 --sp-mode split_gather
parity_case "split_gather-tp2-dp2-zero2-micro2" 4 ref "$data" --tp 2 --sp-mode split_gather --zero 2 --micro-batch 2
parity_case "split_gather-tp2-dp2-zero3" 4 ref "$data" --tp 2 --sp-mode split_gather --zero 3
parity_case "ring-sp2-dp2-zero2" 4 ref "$data" --sp 2 --sp-mode ring --zero 2
parity_case "all_to_all-sp2-tp2-dp2-zero3" 8 ref "$data" --sp 2 --tp 2 --sp-mode all_to_all --zero 3
parity_case "ring-sp4-dp2-zero3" 8 ref "$data" --sp 4 --sp-mode ring --zero 3

# Ulysses and ring attention, per step, as docs/parallelism.md gives them (E = B x T/sp x H x D
# values of one rank's q, k or v; all-to-all counted by what a rank sends, its own block included):
# all_to_all 32E bytes per block; ring 24E bytes per block on rank 0 (its key/value block sent
# forward and again backward, its dk/dv returned); plus the gradients' all-reduce over dp x sp
# (the flat buffer: state_bytes / 16 values at ZeRO-0), the loss share (8) and the step's figures
# (24: trainer.cpp's max of the preemption flag and resident memory, sum of the data bytes read).
for case in all_to_all:2:32 all_to_all:4:32 ring:2:24 ring:4:24; do
  IFS=: read -r mode sp per_block <<< "$case"
  echo -n "$mode sp $sp communication bytes per step (rank 0): "
  /usr/bin/python3 - "$tmp/$mode-sp$sp.jsonl" "$sp" "$per_block" <<'PY'
import json, sys
sp, per_block = int(sys.argv[2]), int(sys.argv[3])
e = 8 * (16 // sp) * 4 * 8  # B x T/sp x H x D
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "loss" not in m:
        continue
    want = 2 * per_block * e + 4 * (m["state_bytes"] // 16) + 8 + 24
    if m["comm_bytes"] != want:
        sys.exit(f"error: step {m['step']}: comm_bytes {m['comm_bytes']}, expected {want}")
print(f"{want} as the formula gives")
PY
done

# split_gather at tp 2, per step (N = 8 x 16 rows, C = 32, L = 2, counted as CommStats does: an
# all-gather by its output, a reduce-scatter by its input, N x C values each): per block forward 2
# all-gathers + 2 reduce-scatters, backward 2 all-gathers of dy, 2 re-gathers of x and 2
# reduce-scatters of dx; the embedding 2, the head 3, and 3N values of the vocab-parallel loss; per
# step the layer norms' partial gradients (2 per block + the final one, C each, summed over tp),
# the gradient norm's share (8) and the step's figures (24).
echo -n "split_gather tp2 communication bytes per step: "
/usr/bin/python3 - "$tmp/split_gather-tp2.jsonl" <<'PY'
import json, sys
n, c, layers = 8 * 16, 32, 2
want = 4 * (layers * 10 * n * c + 5 * n * c + 3 * n + (2 * layers + 1) * 2 * c) + 8 + 24
got = {json.loads(line)["comm_bytes"] for line in open(sys.argv[1]) if '"loss"' in line}
if got != {want}:
    sys.exit(f"error: comm_bytes {sorted(got)} per step, expected {want}")
print(f"{want} as the formula gives")
PY

echo -n "a checkpoint saved at ring sp 4 x dp 2 ZeRO-3, resumed on one rank: "
mpirun -np 1 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 20 --micro-batch 8 \
  --metrics "$tmp/ref20.jsonl" >/dev/null
mpirun -np 8 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 20 --sp 4 --sp-mode ring --zero 3 \
  --checkpoint-dir "$tmp/spck" --checkpoint-every 10 --metrics "$tmp/sp20.jsonl" >/dev/null
mpirun -np 1 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 20 --micro-batch 8 \
  --resume "$tmp/spck/step_10.h5" --metrics "$tmp/resumed.jsonl" >/dev/null
grep -m 10 '"loss"' "$tmp/sp20.jsonl" | cat - "$tmp/resumed.jsonl" > "$tmp/all.jsonl"
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
# split_gather keeps the norms' and residual stream's rows split: less than 1D tensor parallelism.
for mode in 1d split_gather; do
  opts=(--tp 2); [ $mode = split_gather ] && opts+=(--sp-mode split_gather)
  mpirun -np 2 "$build/apps/gpt_train" "${long[@]}" "${opts[@]}" --metrics "$tmp/long_tp_$mode.jsonl" >/dev/null
done
echo -n "activation memory per rank, split_gather vs 1D at tp 2: "
/usr/bin/python3 - "$tmp/long_tp_1d.jsonl" "$tmp/long_tp_split_gather.jsonl" <<'PY'
import json, sys
def activations(path):
    last = [json.loads(line) for line in open(path) if '"loss"' in line][-1]
    return last["peak_mem_bytes"] - last["state_bytes"]
one_d, split = activations(sys.argv[1]), activations(sys.argv[2])
if split >= 0.95 * one_d:
    sys.exit(f"error: split_gather holds {split} bytes, 1D {one_d}: not less")
print(f"{split} vs {one_d} bytes ({split / one_d:.3f})")
PY

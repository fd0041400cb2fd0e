#!/usr/bin/env bash
# Activation checkpointing in vit_train changes memory, nothing else: --activation-checkpointing
# full and selective, every block and every 2nd, on one rank, at tp 2, at dp 2 with ZeRO-3, at
# pp 2 (1f1b) and at sp 2: the 10-step losses, the step-1 gradients and the state after 10 steps
# equal the same layout's plain run to a relative 1e-6 (recomputation is bit-identical on the
# CPU). The activation memory (tracked peak minus persistent state) falls by exactly what
# docs/memory.md's formulas give for the ViT's blocks (MLP width mlp_ratio x hidden).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
app=vit_train data_option=--data
common=(--layers 4 --hidden 32 --heads 4 --patch 4 --mlp-ratio 2 --pool mean --global-batch 8 --lr 3e-3 --warmup 2
        --seed 11 --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"

same_as_plain() {  # NAME PLAIN: run NAME equals run PLAIN (losses, step-1 gradients, step-10 state)
  echo -n "$1: "
  $compare_losses "$tmp/$2.jsonl" "$tmp/$1.jsonl" --rtol 1e-6
  echo -n "    step-1 gradients (exp_avg): "
  $compare_checkpoints "$tmp/$2/step_1.h5" "$tmp/$1/step_1.h5" --rtol 1e-6 --only 'exp_avg$'
  echo -n "    parameters and states after 10 steps: "
  $compare_checkpoints "$tmp/$2/step_10.h5" "$tmp/$1/step_10.h5" --rtol 1e-6
}

checkpointed_like_plain() {  # NAME RANKS options...: the plain run, then checkpointed runs against it
  local name=$1 ranks=$2; shift 2
  parity_train "$name" "$ranks" "$data" "$@"
  for variant in "full 1" "selective 1" "full 2" "selective 2"; do
    read -r mode k <<<"$variant"
    parity_train "$name-$mode-k$k" "$ranks" "$data" "$@" --activation-checkpointing "$mode" --checkpoint-every-k-blocks "$k"
    same_as_plain "$name-$mode-k$k" "$name"
  done
}

data="$tmp/images.h5"
"$build/apps/data_prep" synth-images --classes 5 --train 200 --test 40 --size 16 --seed 3 --output "$data" >/dev/null
checkpointed_like_plain one-rank 1 --micro-batch 8
checkpointed_like_plain tp2 2 --tp 2
checkpointed_like_plain dp2-zero3 2 --zero 3
checkpointed_like_plain pp2-1f1b 2 --pp 2 --micro-batch 2 --pp-schedule 1f1b
checkpointed_like_plain sp2-ring 2 --sp 2 --sp-mode ring

# Activation memory where activations dominate (4 layers, hidden 32, 4 heads, 32 x 32 images in
# 2 x 2 patches: 256 tokens, 4 images, N = 1024 token rows): rank 0's step-2 peak minus state_bytes.
"$build/apps/data_prep" synth-images --classes 5 --train 16 --test 4 --size 32 --seed 3 --output "$tmp/big.h5" >/dev/null
memory_run() {  # NAME RANKS options...
  local name=$1 ranks=$2; shift 2
  mpirun -np "$ranks" "$build/apps/vit_train" --data "$tmp/big.h5" --layers 4 --hidden 32 --heads 4 --patch 2 \
    --mlp-ratio 2 --pool mean --global-batch 4 --steps 2 --threads 1 --metrics "$tmp/mem-$name.jsonl" "$@" >/dev/null
}
memory_run plain 1
memory_run tp2 2 --tp 2
for mode in full selective; do
  for k in 1 2; do memory_run $mode-k$k 1 --activation-checkpointing $mode --checkpoint-every-k-blocks $k; done
  memory_run tp2-$mode 2 --tp 2 --activation-checkpointing $mode
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
L, C, H, M, N = 4, 32, 4, 64, 1024  # M: the MLP's width (mlp_ratio 2)

def activations(name):
    last = [json.loads(l) for l in open(f"{tmp}/mem-{name}.jsonl") if '"loss"' in l][-1]
    return last["peak_mem_bytes"] - last["state_bytes"]

def block(n, tp):  # a block's saved tensors per micro-batch, bytes (docs/memory.md, MLP width M)
    return 4 * n * (3 * C + (4 * C + 2 * M) // tp + 4 + H // tp)

def core(n, tp):  # the attention core's output and log-sum-exp: what selective recomputes
    return 4 * n * (C + H) // tp

# (run, plain run, blocks checkpointed, bytes per checkpointed block): one shared buffer replaces them.
cases = [("full-k1", "plain", 4, block(N, 1)), ("full-k2", "plain", 2, block(N, 1)),
         ("selective-k1", "plain", 4, core(N, 1)), ("selective-k2", "plain", 2, core(N, 1)),
         ("tp2-full", "tp2", 4, block(N, 2)), ("tp2-selective", "tp2", 4, core(N, 2))]
for name, plain, checkpointed, per_block in cases:
    want = (checkpointed - 1) * per_block
    before, after = activations(plain), activations(name)
    if before - after != want:
        sys.exit(f"error: {name}: activations {after} bytes against {before} plain: saved {before - after},"
                 f" the formula gives {want}")
    print(f"activation bytes {name}: {after} against {before} plain ({after / before:.3f}x), saving {want}"
          " as the formula gives")
PY

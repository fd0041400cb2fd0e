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
app=vit_train data_option=--input
common=(--layers 4 --hidden 32 --heads 4 --patch 4 --mlp-ratio 2 --pool mean --global-batch 8 --lr 3e-3 --warmup 2
        --seed 11 --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"

data="$tmp/images.h5"
"$build/apps/data_prep" synth-images --classes 5 --train 200 --test 40 --size 16 --seed 3 --output "$data" >/dev/null
checkpointed_like_plain one-rank 1 "$data" --micro-batch 8
checkpointed_like_plain tp2 2 "$data" --tp 2
checkpointed_like_plain dp2-zero3 2 "$data" --zero 3
checkpointed_like_plain pp2-1f1b 2 "$data" --pp 2 --micro-batch 2 --pp-schedule 1f1b
checkpointed_like_plain sp2-ring 2 "$data" --sp 2 --sp-mode ring

# Activation memory where activations dominate (4 layers, hidden 32, 4 heads, 32 x 32 images in
# 2 x 2 patches: 256 tokens, 4 images, N = 1024 token rows): rank 0's step-2 peak minus state_bytes.
"$build/apps/data_prep" synth-images --classes 5 --train 16 --test 4 --size 32 --seed 3 --output "$tmp/big.h5" >/dev/null
memory_run() {  # NAME RANKS options...
  local name=$1 ranks=$2; shift 2
  mpirun -np "$ranks" "$build/apps/vit_train" --input "$tmp/big.h5" --layers 4 --hidden 32 --heads 4 --patch 2 \
    --mlp-ratio 2 --pool mean --global-batch 4 --steps 2 --threads 1 --metrics "$tmp/mem-$name.jsonl" "$@" >/dev/null
}
memory_run plain 1
memory_run tp2 2 --tp 2
for mode in full selective; do
  for k in 1 2; do memory_run $mode-k$k 1 --activation-checkpointing $mode --recompute-every-k-blocks $k; done
  memory_run tp2-$mode 2 --tp 2 --activation-checkpointing $mode
done
# (run, plain run, checkpointed blocks, mode, token rows, tp): hidden 32, 4 heads, MLP width 64.
python3 "$src/tests/tools/activation_savings.py" "$tmp" 32 4 64 full-k1,plain,4,full,1024,1 \
  full-k2,plain,2,full,1024,1 selective-k1,plain,4,selective,1024,1 selective-k2,plain,2,selective,1024,1 \
  tp2-full,tp2,4,full,1024,2 tp2-selective,tp2,4,selective,1024,2

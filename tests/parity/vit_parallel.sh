#!/usr/bin/env bash
# Parity of vit_train: data parallelism with ZeRO 1, 2, 3 and micro-batching, 1D tensor
# parallelism, tp x dp with ZeRO (class-token and mean pooling), and pipeline parallelism (GPipe,
# 1F1B, ZB-H1 with its weight gradients deferred, interleaved with 2 chunks per stage, uneven
# stages with --pp-layers; pp x dp with ZeRO-1, and ZeRO-3 under ZB-H1 and 1F1B; pp x tp) and
# the grid tensor-parallel modes (2d at tp 4 alone and with dp and ZeRO-3, 2.5d and 3d at tp 8, 3d with pp 2 and ZeRO-1) reproduce the
# one-rank run on a synthetic image set (losses, step-1 gradients and the state after 10 steps:
# tests/tools/layout_parity.sh);
# checkpoints saved at tp 2 x dp 2 ZeRO-3 and at pp 2 x dp 2 ZeRO-3 (ZB-H1) resume on one rank, and
# the first also at pp 2; evaluation gives the same loss and accuracy under every layout.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
app=vit_train data_option=--input
# The key part of the QKV bias has an exactly zero gradient (softmax ignores a shift shared by a
# query's scores); AdamW turns its rounding noise into steps of up to lr (3e-3) x 1e-2 here.
state_atol=5e-5
common=(--layers 2 --hidden 32 --heads 4 --patch 4 --mlp-ratio 2 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01 --eval-every 10)
source "$src/tests/tools/layout_parity.sh"

data="$tmp/images.h5"
"$build/apps/data_prep" synth-images --classes 5 --train 200 --test 40 --size 16 --seed 3 --output "$data" >/dev/null
parity_reference ref "$data" --micro-batch 8
parity_case dp2 2 ref "$data"
parity_case dp2-micro2-zero1 2 ref "$data" --micro-batch 2 --zero 1
parity_case dp4-zero2 4 ref "$data" --zero 2
parity_case dp4-zero3 4 ref "$data" --zero 3
parity_case tp2 2 ref "$data" --tp 2
parity_case tp4 4 ref "$data" --tp 4
parity_case tp2-dp2-zero3 4 ref "$data" --tp 2 --zero 3
parity_reference ref-mean "$data" --micro-batch 8 --pool mean
parity_case tp2-dp2-zero2-mean-pool 4 ref-mean "$data" --tp 2 --zero 2 --pool mean
# Pipelines: the patch embedding on the first stage; the final norm, pooling, head and loss on the last.
parity_case pp2-gpipe 2 ref "$data" --pp 2 --micro-batch 2 --pp-schedule gpipe
parity_case pp2-1f1b 2 ref "$data" --pp 2 --micro-batch 1 --pp-schedule 1f1b
parity_case pp2-zb 2 ref "$data" --pp 2 --micro-batch 2 --pp-schedule zb
parity_case pp2-dp2-zero1 4 ref "$data" --pp 2 --micro-batch 2 --zero 1
parity_case pp2-dp2-zero3-zb 4 ref "$data" --pp 2 --micro-batch 1 --zero 3 --pp-schedule zb
parity_case pp2-tp2 4 ref "$data" --pp 2 --tp 2 --micro-batch 2
# Grids: each rank holds a share of the images and a block of the features (docs/parallelism.md).
parity_case 2d-tp4 4 ref "$data" --tp 4 --tp-mode 2d
parity_case 2d-tp4-dp2-zero3 8 ref "$data" --tp 4 --tp-mode 2d --zero 3
parity_case 25d-tp8 8 ref "$data" --tp 8 --tp-mode 2.5d --tp-depth 2
parity_case 3d-tp8 8 ref "$data" --tp 8 --tp-mode 3d
parity_case 3d-tp8-pp2-zero1 16 ref "$data" --tp 8 --tp-mode 3d --pp 2 --micro-batch 1 --zero 1
common_2_layers=("${common[@]}")
common=(--layers 4 "${common[@]:2}")  # common starts with --layers 2 (an option is given once)
parity_reference ref-deep "$data" --micro-batch 8 --pool mean
parity_case pp2-interleaved-v2-mean-pool 2 ref-deep "$data" --pool mean --pp 2 --micro-batch 2 \
  --pp-schedule interleaved --virtual-stages 2
# Uneven stages (--pp-layers): the first stage, which also embeds the patches, holds one block of four.
parity_case pp2-uneven-1-3 2 ref-deep "$data" --pool mean --pp 2 --micro-batch 2 --pp-layers 1,3
common=("${common_2_layers[@]}")

echo -n "evaluation (loss and accuracy at step 10) under every layout: "
python3 "$src/tests/tools/compare_evals.py" "$tmp" ref dp2 dp2-micro2-zero1 dp4-zero2 dp4-zero3 tp2 tp4 tp2-dp2-zero3 \
  pp2-gpipe pp2-1f1b pp2-zb pp2-dp2-zero1 pp2-dp2-zero3-zb pp2-tp2 2d-tp4 2d-tp4-dp2-zero3 25d-tp8 3d-tp8 \
  3d-tp8-pp2-zero1 -- ref-mean tp2-dp2-zero2-mean-pool -- ref-deep pp2-interleaved-v2-mean-pool

# Resume across layouts: step-5 checkpoints of tp 2 x dp 2 ZeRO-3 on one rank and at pp 2 (gpipe),
# of pp 2 x dp 2 ZeRO-3 (zb) on one rank.
resume_case tp2-dp2-zero3-to-one-rank ref "$data" "$tmp/tp2-dp2-zero3/step_5.h5" 1 --micro-batch 8
resume_case tp2-dp2-zero3-to-pp2-gpipe ref "$data" "$tmp/tp2-dp2-zero3/step_5.h5" 2 --pp 2 --micro-batch 2 \
  --pp-schedule gpipe
resume_case pp2-dp2-zero3-zb-to-one-rank ref "$data" "$tmp/pp2-dp2-zero3-zb/step_5.h5" 1 --micro-batch 8

#!/usr/bin/env bash
# Sequence parallelism in vit_train reproduces the one-rank run (losses, step-1 gradients and the
# state after 10 steps: tests/tools/layout_parity.sh; evaluation loss and accuracy): every image's
# tokens split over sp ranks, attention over all of them (not causal) in the all_to_all and the
# ring mode, with mean pooling (16 x 16 images in 4 x 4 patches: 16 tokens, sp 2 and 4) and with
# the class token (12 x 12 images: 9 patches + the class token = 10 tokens, sp 2: the class token on
# rank 0 only), and combined with dp and ZeRO-3, tp and pp. Checkpoints move between sp 2 x dp 2
# and one rank. (An sp that does not divide the tokens is refused: tests/badinput.)
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
app=vit_train data_option=--input
# The key part of the QKV bias has an exactly zero gradient (tests/parity/vit_parallel.sh says why).
state_atol=5e-5
common=(--layers 2 --hidden 32 --heads 4 --patch 4 --mlp-ratio 2 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01 --eval-every 10)
source "$src/tests/tools/layout_parity.sh"

mean="$tmp/images16.h5" cls="$tmp/images12.h5"
"$build/apps/data_prep" synth-images --classes 5 --train 200 --test 40 --size 16 --seed 3 --output "$mean" >/dev/null
"$build/apps/data_prep" synth-images --classes 5 --train 200 --test 40 --size 12 --seed 3 --output "$cls" >/dev/null

parity_reference ref-mean "$mean" --micro-batch 8 --pool mean
parity_case sp2-a2a-mean 2 ref-mean "$mean" --pool mean --sp 2
parity_case sp4-ring-mean 4 ref-mean "$mean" --pool mean --sp 4 --sp-mode ring
parity_case sp2-ring-tp2-mean 4 ref-mean "$mean" --pool mean --sp 2 --sp-mode ring --tp 2

parity_reference ref-cls "$cls" --micro-batch 8
parity_case sp2-a2a-cls 2 ref-cls "$cls" --sp 2
parity_case sp2-ring-dp2-zero3-cls 4 ref-cls "$cls" --sp 2 --sp-mode ring --zero 3
parity_case sp2-pp2-1f1b-cls 4 ref-cls "$cls" --sp 2 --pp 2 --micro-batch 2 --pp-schedule 1f1b
parity_case sp2-tp2-pp2-cls 8 ref-cls "$cls" --sp 2 --tp 2 --pp 2 --micro-batch 2

echo -n "evaluation (loss and accuracy at step 10) under every layout: "
python3 "$src/tests/tools/compare_evals.py" "$tmp" ref-mean sp2-a2a-mean sp4-ring-mean sp2-ring-tp2-mean -- ref-cls \
  sp2-a2a-cls sp2-ring-dp2-zero3-cls sp2-pp2-1f1b-cls sp2-tp2-pp2-cls

# Resume across layouts: the one-rank step-5 checkpoint at sp 2 x dp 2 (ring), and sp 2 x dp 2
# ZeRO-3's on one rank.
resume_case one-rank-to-sp2-dp2-ring ref-cls "$cls" "$tmp/ref-cls/step_5.h5" 4 --sp 2 --sp-mode ring
resume_case sp2-dp2-zero3-to-one-rank ref-cls "$cls" "$tmp/sp2-ring-dp2-zero3-cls/step_5.h5" 1 --micro-batch 8

#!/usr/bin/env bash
# Parity: gpt_train --arch llama under grid tensor parallelism reproduces its one-rank run (losses,
# evaluation, step-1 gradients, state after 10 steps: tests/tools/layout_parity.sh). The grid's
# RMSNorm all-reduces its rows' sums of squares over the feature ranks, the grouped-query attention
# splits its 2 kv heads (of 4 query heads) over the grid's side q = 2 like the query heads, the
# SwiGLU MLP's gate, up and down are grid linears, the untied head a vocabulary region. Cases:
# --tp-mode 2d at tp 4 alone and with dp 2 and ZeRO 1, --tp-mode 2.5d at tp 8 (depth 2), --tp-mode 3d
# at tp 8, and a head tied to the embedding (--tie-embeddings) at 2d tp 4. Checkpoints are
# layout-free: 2d tp 4's step 5 resumes at one rank, the one-rank step 5 at 2d tp 4, and both
# continue the one-rank curve. (Refused combinations: tests/badinput/test_badinput_gpt_train.cpp.)
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 64 --seq-len 16 --global-batch 8
        --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
parity_reference ref "$data" --micro-batch 8
parity_case 2d-tp4 4 ref "$data" --tp 4 --tp-mode 2d
parity_case 2d-tp4-dp2-zero1 8 ref "$data" --tp 4 --tp-mode 2d --zero 1
parity_case 25d-tp8 8 ref "$data" --tp 8 --tp-mode 2.5d --tp-depth 2
parity_case 3d-tp8 8 ref "$data" --tp 8 --tp-mode 3d

# A head tied to the token embedding: the table's blocks gathered for the head as for the lookup.
parity_reference tied "$data" --micro-batch 8 --tie-embeddings
parity_case tied-2d-tp4 4 tied "$data" --tp 4 --tp-mode 2d --tie-embeddings

# Checkpoints move between the grid and one rank, both ways.
resume_case 2d-tp4-to-one-rank ref "$data" "$tmp/2d-tp4/step_5.h5" 1 --micro-batch 8
resume_case one-rank-to-2d-tp4 ref "$data" "$tmp/ref/step_5.h5" 4 --tp 4 --tp-mode 2d

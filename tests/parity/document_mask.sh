#!/usr/bin/env bash
# Parity: gpt_train --document-mask (attention inside each document of a packed window, positions
# restarting at each document) under tp2, --tp-mode 3d at tp 8 (whose attention holds other
# sequences than its stream rows: the documents must follow them), sp2 ring, sp2 all_to_all and pp2
# reproduces its one-rank run (losses, evaluation, step-1 gradients, state after 10 steps:
# tests/tools/layout_parity.sh), for the gpt2 arch (learned positions) and llama (rotary); the mask
# changes the losses (windows of 16 bytes hold several documents of 3 to 12 bytes).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$src/tests/tools/layout_parity.sh"

data="$tmp/docs.h5"
short_documents "$data"

for arch in gpt2 llama; do
  common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
          --threads 1 --bucket-mb 0.01 --document-mask)
  [ $arch = llama ] && common+=(--arch llama --kv-heads 2 --ffn-hidden 64)
  echo "== $arch"
  parity_reference "$arch-ref" "$data" --micro-batch 8
  parity_case "$arch-tp2" 2 "$arch-ref" "$data" --tp 2
  parity_case "$arch-3d-tp8" 8 "$arch-ref" "$data" --tp 8 --tp-mode 3d
  for mode in ring all_to_all; do parity_case "$arch-sp2-$mode" 2 "$arch-ref" "$data" --sp 2 --sp-mode $mode; done
  parity_case "$arch-pp2" 2 "$arch-ref" "$data" --pp 2 --micro-batch 2
done

# The mask is not a no-op: the same run without it has other losses.
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11 --threads 1
        --bucket-mb 0.01)
parity_reference gpt2-unmasked "$data" --micro-batch 8
if $compare_losses "$tmp/gpt2-ref.jsonl" "$tmp/gpt2-unmasked.jsonl" --rtol 1e-3 >/dev/null 2>&1; then
  echo "error: --document-mask left the losses as they were without it"; exit 1
fi
echo "document_mask: every layout equals one rank; the mask changes the losses"

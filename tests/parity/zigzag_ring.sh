#!/usr/bin/env bash
# Parity: --sp-mode zigzag (ring attention over the zigzag layout: rank r holds chunks r and
# 2 sp - 1 - r of 2 sp, lib/nn/zigzag_layout.h) reproduces the one-rank run (losses, evaluation,
# step-1 gradients, state after 10 steps: tests/tools/layout_parity.sh) for gpt2 (learned
# positions) and llama (rotary) at sp 2 and 4, with dp (dp2 x sp2), with 1D tensor parallelism
# (tp2 x sp2), with ZeRO-3, a pipeline (pp2 x sp2), selective activation checkpointing, and with
# --document-mask (loss masks: loss_mask.sh); checkpoints move between layouts without
# conversion (saved under sp2 zigzag, resumed on one rank and at dp 2; saved on one rank, resumed
# at sp4 zigzag); the communication bytes per step equal docs/parallelism.md's formula; and the
# memory planner's zigzag entry is what the runs measure (zigzag minus ring, to the byte).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$src/tests/tools/layout_parity.sh"
# As in sequence_parallel.sh: the key part of the QKV bias has an exact gradient of zero, and
# AdamW turns its rounding noise into lr-sized steps.
state_atol=2e-5

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
for arch in gpt2 llama; do
  common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
          --threads 1 --bucket-mb 0.01)
  [ $arch = llama ] && common+=(--arch llama --kv-heads 2 --ffn-hidden 64)
  echo "== $arch"
  parity_reference "$arch-ref" "$data" --micro-batch 8
  parity_case "$arch-sp2" 2 "$arch-ref" "$data" --sp 2 --sp-mode zigzag
  parity_case "$arch-sp4" 4 "$arch-ref" "$data" --sp 4 --sp-mode zigzag
  parity_case "$arch-sp2-dp2-micro2" 4 "$arch-ref" "$data" --sp 2 --sp-mode zigzag --micro-batch 2
  parity_case "$arch-sp2-tp2" 4 "$arch-ref" "$data" --sp 2 --tp 2 --sp-mode zigzag
  resume_case "$arch: sp2 zigzag step 5 -> one rank" "$arch-ref" "$data" "$tmp/$arch-sp2/step_5.h5" 1 --micro-batch 8
done
# The loop left llama's options in `common`: the gpt2 ones again for the gpt2 cases below.
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11 --threads 1
        --bucket-mb 0.01)
parity_case gpt2-sp2-dp2-zero3 4 gpt2-ref "$data" --sp 2 --sp-mode zigzag --zero 3
parity_case gpt2-sp2-pp2 4 gpt2-ref "$data" --sp 2 --pp 2 --sp-mode zigzag --micro-batch 2
parity_case gpt2-sp2-selective 2 gpt2-ref "$data" --sp 2 --sp-mode zigzag --activation-checkpointing selective
resume_case "gpt2: sp2 zigzag step 5 -> dp2" gpt2-ref "$data" "$tmp/gpt2-sp2/step_5.h5" 2
resume_case "gpt2: one rank step 5 -> sp4 zigzag" gpt2-ref "$data" "$tmp/gpt2-ref/step_5.h5" 4 --sp 4 --sp-mode zigzag

# Communication per step (rank 0; every rank alike), as docs/parallelism.md gives it (E = B x T/sp
# x H x D values of one rank's q, k or v): each key/value block goes round the whole ring forward
# and backward, and its dk/dv sums with it: 48 (sp - 1) E bytes per block, sent and received; plus
# the gradients' all-reduce over sp (state_bytes / 16 values at ZeRO-0), the loss share (8) and the
# step's figures (24).
for sp in 2 4; do
  echo -n "zigzag sp $sp communication bytes per step (rank 0): "
  /usr/bin/python3 - "$tmp/gpt2-sp$sp.jsonl" "$sp" <<'PY'
import json, sys
sp = int(sys.argv[2])
e = 8 * (16 // sp) * 4 * 8  # B x T/sp x H x D
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "loss" not in m:
        continue
    want = 2 * 48 * (sp - 1) * e + 4 * (m["state_bytes"] // 16) + 8 + 24
    if m["comm_bytes"] != want:
        sys.exit(f"error: step {m['step']}: comm_bytes {m['comm_bytes']}, expected {want}")
print(f"{want} as the formula gives")
PY
done

# Document masking: documents of 1 to 3 words packed into windows of 16 bytes.
docs="$tmp/docs.h5"
short_documents "$docs"
for arch in gpt2 llama; do
  common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
          --threads 1 --bucket-mb 0.01 --document-mask)
  [ $arch = llama ] && common+=(--arch llama --kv-heads 2 --ffn-hidden 64)
  echo "== $arch --document-mask"
  parity_reference "$arch-docs-ref" "$docs" --micro-batch 8
  parity_case "$arch-docs-sp2" 2 "$arch-docs-ref" "$docs" --sp 2 --sp-mode zigzag
  parity_case "$arch-docs-sp4" 4 "$arch-docs-ref" "$docs" --sp 4 --sp-mode zigzag
done

# Memory: zigzag holds what ring holds plus each row's position (4 bytes a row) and, for learned
# positions, their looked-up rows (C floats a row): the planned difference is the measured one.
"$build/apps/data_prep" synth --vocab 61 --tokens 50000 --seed 5 --output "$tmp/long.h5" >/dev/null
for arch in gpt2 llama; do
  long=(--input "$tmp/long.h5" --layers 2 --hidden 32 --heads 4 --seq-len 256 --global-batch 2 --steps 2 --threads 1)
  [ $arch = llama ] && long+=(--arch llama --kv-heads 2 --ffn-hidden 64)
  for mode in ring zigzag; do
    "$build/apps/gpt_train" "${long[@]}" --sp 2 --sp-mode $mode --dp 1 --dry-run > "$tmp/mem-$arch-$mode.plan"
    mpirun -np 2 "$build/apps/gpt_train" "${long[@]}" --sp 2 --sp-mode $mode --metrics "$tmp/mem-$arch-$mode.jsonl" \
      >/dev/null
  done
  echo -n "$arch: zigzag's memory beyond ring's, planned and measured: "
  /usr/bin/python3 - "$tmp/mem-$arch-ring.plan" "$tmp/mem-$arch-zigzag.plan" "$tmp/mem-$arch-ring.jsonl" \
    "$tmp/mem-$arch-zigzag.jsonl" <<'PY'
import json, re, sys
def planned(path):
    return int(re.search(r"^\s+total\s+(\d+) bytes", open(path).read(), re.M).group(1))
def measured(path):
    return [json.loads(l) for l in open(path) if '"loss"' in l][1]["peak_mem_bytes"]
plan = planned(sys.argv[2]) - planned(sys.argv[1])
got = measured(sys.argv[4]) - measured(sys.argv[3])
if plan != got or plan <= 0:
    sys.exit(f"error: zigzag - ring planned {plan} bytes, measured {got}")
print(f"{plan} bytes both")
PY
done
echo "zigzag_ring: every layout equals one rank; checkpoints move between layouts"

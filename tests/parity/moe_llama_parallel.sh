#!/usr/bin/env bash
# Parity: moe_train --arch llama (SwiGLU experts, Mixtral's router normalisation, shared experts)
# reproduces its one-rank run under ep 2 x dp 2 (ZeRO 0 and 3), tp 2 and pp 2 1f1b (losses,
# evaluation, step-1 gradients, state after 10 steps: tests/tools/layout_parity.sh), and full
# activation checkpointing changes nothing, on the smallest model with a dense block and an MoE
# block; resuming with other shared experts, or with gates normalised otherwise, is refused
# naming the field.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
app=moe_train
model=(--arch llama --layers 2 --hidden 16 --heads 2 --kv-heads 1 --ffn-hidden 32 --seq-len 8 --global-batch 8
       --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01 --experts 4 --moe-every 2 --expert-hidden 16
       --top-k 2 --capacity-factor 0)
common=("${model[@]}" --shared-experts 2 --router-norm softmax_topk)
source "$src/tests/tools/layout_parity.sh"

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
parity_reference ref8 "$data" --micro-batch 8
parity_case "tp2" 2 ref8 "$data" --tp 2 --micro-batch 8
parity_reference ref4 "$data" --micro-batch 4
parity_case "ep2-dp2" 4 ref4 "$data" --ep 2 --micro-batch 2
parity_case "ep2-dp2-zero3" 4 ref4 "$data" --ep 2 --micro-batch 2 --zero 3
parity_case "pp2-1f1b" 2 ref4 "$data" --pp 2 --micro-batch 4 --pp-schedule 1f1b
# Full activation checkpointing recomputes the MoE block (shared experts too) and changes nothing.
parity_train ckpt-full 1 "$data" --micro-batch 8 --activation-checkpointing full
same_as_plain ckpt-full ref8

# Refused, naming the problem.
refused() {  # EXPECTED_MESSAGE options...
  local want=$1; shift
  if mpirun -np 1 "$build/apps/moe_train" --input "$data" "$@" >"$tmp/out" 2>&1; then
    echo "error: accepted: $*"; exit 1
  fi
  grep -qF -- "$want" "$tmp/out" || { echo "error: '$want' not in:"; cat "$tmp/out"; exit 1; }
  echo "refused as expected: $want"
}
ck="$tmp/ref4/step_10.h5"
refused "shared_experts: 2 in the checkpoint, 1 here" --steps 11 --resume "$ck" "${model[@]}" --shared-experts 1
refused "gates_renormalised: 1 in the checkpoint, 0 here" --steps 11 --resume "$ck" "${model[@]}" --shared-experts 2 \
  --router-norm softmax
refused "--router-norm topk: expected auto" --steps 1 --router-norm topk
refused "--shared-experts must be >= 0, got -1" --steps 1 --shared-experts -1

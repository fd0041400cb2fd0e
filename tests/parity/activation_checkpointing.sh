#!/usr/bin/env bash
# Activation checkpointing changes memory, nothing else. gpt_train with --activation-checkpointing
# full and selective, every block and every 2nd (--recompute-every-k-blocks 1, 2), on one rank,
# at tp 2, at dp 2 with ZeRO-3 and at pp 2 (1f1b), and moe_train at ep 2: the 10-step losses, the
# step-1 gradients and the state after 10 steps equal the same layout's plain run to a relative
# 1e-6 (recomputation on the CPU is bit-identical: the differences are 0). The activation memory
# (tracked peak minus persistent state) falls by exactly what docs/memory.md's formulas give. The
# combinations that are refused say why. (vit_train: tests/parity/vit_activation_checkpointing.sh.)
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--layers 4 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"


data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
checkpointed_like_plain one-rank 1 "$data" --micro-batch 8
checkpointed_like_plain tp2 2 "$data" --tp 2
checkpointed_like_plain dp2-zero3 2 "$data" --zero 3
checkpointed_like_plain pp2-1f1b 2 "$data" --pp 2 --micro-batch 2 --pp-schedule 1f1b
gpt_common=("${common[@]}")
app=moe_train
common+=(--experts 4 --moe-every 2 --top-k 2 --capacity-factor 1.25)
checkpointed_like_plain moe-ep2 2 "$data" --ep 2 --micro-batch 4
app=gpt_train
common=("${gpt_common[@]}")

# Activation memory where activations dominate (4 layers, hidden 32, 4 heads, 1024 tokens, 2
# sequences, N = 2048 token rows): rank 0's step-2 peak minus state_bytes, against the plain run's.
"$build/apps/data_prep" synth --vocab 61 --tokens 100000 --seed 5 --output "$tmp/long.h5" >/dev/null
memory_run() {  # NAME RANKS options...: global batch $global_batch (default 2)
  local name=$1 ranks=$2; shift 2
  mpirun -np "$ranks" "$build/apps/gpt_train" --input "$tmp/long.h5" --layers 4 --hidden 32 --heads 4 --seq-len 1024 \
    --global-batch "${global_batch:-2}" --steps 2 --threads 1 --metrics "$tmp/mem-$name.jsonl" "$@" >/dev/null
}
memory_run plain 1
memory_run tp2 2 --tp 2
global_batch=4 memory_run pp2 2 --pp 2 --micro-batch 1
for mode in full selective; do
  for k in 1 2; do memory_run $mode-k$k 1 --activation-checkpointing $mode --recompute-every-k-blocks $k; done
  memory_run tp2-$mode 2 --tp 2 --activation-checkpointing $mode
  global_batch=4 memory_run pp2-$mode 2 --pp 2 --micro-batch 1 --activation-checkpointing $mode
done
# (run, plain run, checkpointed blocks per micro-batch in flight x micro-batches in flight, mode,
# token rows per micro-batch, tp); pp 2, 1f1b, 4 micro-batches of 1 sequence: stage 0 (rank 0)
# holds blocks 0-1 for 2 in flight.
python3 "$src/tests/tools/activation_savings.py" "$tmp" 32 4 128 full-k1,plain,4,full,2048,1 \
  full-k2,plain,2,full,2048,1 selective-k1,plain,4,selective,2048,1 selective-k2,plain,2,selective,2048,1 \
  tp2-full,tp2,4,full,2048,2 tp2-selective,tp2,4,selective,2048,2 pp2-full,pp2,4,full,1024,1 \
  pp2-selective,pp2,4,selective,1024,1

# Refused, with the reason.
refused() {  # EXPECTED_MESSAGE command...
  local want=$1; shift
  if "$@" >"$tmp/out" 2>&1; then echo "error: accepted: $*"; exit 1; fi
  grep -qF -- "$want" "$tmp/out" || { echo "error: '$want' not in:"; cat "$tmp/out"; exit 1; }
  echo "refused as expected: $want"
}
refused "with --pp-schedule zb: not supported" mpirun -np 2 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 1 \
  --pp 2 --micro-batch 2 --pp-schedule zb --activation-checkpointing full
refused "expected none, full or selective" "$build/apps/gpt_train" --input "$data" --activation-checkpointing some
refused "must be in [1, --layers 4]" "$build/apps/gpt_train" --input "$data" --layers 4 --steps 1 \
  --activation-checkpointing full --recompute-every-k-blocks 5
refused "must be >= 1" "$build/apps/gpt_train" --input "$data" --recompute-every-k-blocks 0

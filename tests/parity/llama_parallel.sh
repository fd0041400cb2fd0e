#!/usr/bin/env bash
# Parity: gpt_train --arch llama (RMSNorm, rotary grouped-query attention, SwiGLU, untied head)
# under every layout family reproduces its one-rank run (losses, evaluation, step-1 gradients,
# state after 10 steps: tests/tools/layout_parity.sh), memory options change nothing else (activation
# checkpointing, offload): 4 heads and 2 kv heads (tp 2 splits them,
# tp 4 replicates each over a pair of ranks), and 1 kv head (multi-query: replicated at tp 2); a
# head tied to the embedding across a pipeline; a checkpoint saved under tp2 x pp2 resumes under
# sp2 x dp2 and continues the same curve; bf16 stays within the documented tolerance of fp32;
# what is not supported, or contradicts a checkpoint, is refused naming the fields.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
llama() {  # KV_HEADS: the common options
  common=(--arch llama --layers 4 --hidden 32 --heads 4 --kv-heads "$1" --ffn-hidden 64 --seq-len 16 --global-batch 8
          --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01)
}
llama 2
source "$src/tests/tools/layout_parity.sh"

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
parity_reference ref "$data" --micro-batch 8
parity_case dp2-zero3 2 ref "$data" --zero 3
parity_case tp2-kv-split 2 ref "$data" --tp 2
parity_case tp4-kv-replicated 4 ref "$data" --tp 4
for mode in ring all_to_all; do parity_case "sp2-$mode" 2 ref "$data" --sp 2 --sp-mode $mode; done
parity_case tp2-split_gather 2 ref "$data" --tp 2 --sp-mode split_gather
parity_case tp2-sp2-dp2 8 ref "$data" --tp 2 --sp 2 --sp-mode all_to_all --micro-batch 2
for schedule in 1f1b zb; do parity_case "pp2-$schedule" 2 ref "$data" --pp 2 --micro-batch 2 --pp-schedule $schedule; done
parity_case pp2-interleaved-v2 2 ref "$data" --pp 2 --micro-batch 2 --pp-schedule interleaved --virtual-stages 2
parity_case tp2-pp2 4 ref "$data" --tp 2 --pp 2 --micro-batch 2
resume_case "tp2 x pp2 step 5 -> sp2 x dp2" ref "$data" "$tmp/tp2-pp2/step_5.h5" 4 --sp 2 --sp-mode ring

# Memory options change nothing else: activation checkpointing (full and selective, every block and
# every 2nd) on one rank and at tp 2, optimizer states offloaded to the host.
checkpointed_like_plain ckpt-one-rank 1 "$data" --micro-batch 8
checkpointed_like_plain ckpt-tp2 2 "$data" --tp 2
parity_train offload-cpu 1 "$data" --micro-batch 8 --offload cpu
same_as_plain offload-cpu ref

# A head tied to the token embedding: the last pipeline stage's mirror of the table.
parity_reference tied "$data" --micro-batch 8 --tie-embeddings
parity_case tied-pp2-tp2 4 tied "$data" --tp 2 --pp 2 --micro-batch 2 --tie-embeddings

# Multi-query attention: one kv head, replicated over tp 2 (its gradient summed over tp).
llama 1
parity_reference mqa "$data" --micro-batch 8
parity_case mqa-tp2 2 mqa "$data" --tp 2
llama 2

# bf16 against fp32 over 50 steps: the documented tolerance (relative 2e-3 on every loss).
for precision in fp32 bf16; do
  mpirun -np 1 "$build/apps/gpt_train" --input "$data" "${common[@]}" --steps 50 --precision $precision \
    --metrics "$tmp/50-$precision.jsonl" >/dev/null
done
echo -n "bf16 vs fp32 over 50 steps: "
$compare_losses "$tmp/50-fp32.jsonl" "$tmp/50-bf16.jsonl" --rtol 2e-3

# Refused, naming the problem.
refused() {  # EXPECTED_MESSAGE RANKS options...
  local want=$1 ranks=$2; shift 2
  if mpirun -np "$ranks" "$build/apps/gpt_train" --input "$data" --steps 1 "$@" >"$tmp/out" 2>&1; then
    echo "error: accepted: $*"; exit 1
  fi
  grep -qF -- "$want" "$tmp/out" || { echo "error: '$want' not in:"; cat "$tmp/out"; exit 1; }
  echo "refused as expected: $want"
}
base=(--arch llama --layers 4 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --threads 1)
refused "--kv-heads 3 does not divide --heads 4" 1 "${base[@]}" --kv-heads 3
refused "--kv-heads 6 and --tp 4: tensor parallelism splits the kv heads" 4 --arch llama --hidden 48 --heads 12 \
  --kv-heads 6 --tp 4
refused "--kv-heads is an option of --arch llama" 1 --kv-heads 2
ck="$tmp/ref/step_10.h5"
refused "kv_heads: 2 in the checkpoint, 1 here" 1 --resume "$ck" "${base[@]}" --ffn-hidden 64 --kv-heads 1
refused "ffn_hidden: 64 in the checkpoint, 128 here" 1 --resume "$ck" "${base[@]}" --kv-heads 2 --ffn-hidden 128
# The norm epsilon and rotary base are recorded too (model.norm_eps, model.rope_theta).
refused "rope_theta: 10000 in the checkpoint, 500 here" 1 --resume "$ck" "${base[@]}" --kv-heads 2 --ffn-hidden 64 \
  --rope-theta 500
refused "norm_eps: 1e-05 in the checkpoint, 1e-06 here" 1 --resume "$ck" "${base[@]}" --kv-heads 2 --ffn-hidden 64 \
  --norm-eps 1e-6
refused "holds a llama model, not gpt" 1 --resume "$ck" --layers 4 --hidden 32 --heads 4 --seq-len 16

# Rotary positions hold no table: a checkpoint resumes at another --seq-len (gpt2's is refused).
mpirun -np 1 "$build/apps/gpt_train" --input "$data" "${common[@]/#16/32}" --steps 12 --resume "$ck" \
  --metrics "$tmp/longer.jsonl" >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "error: resuming at --seq-len 32 failed"; exit 1; }
grep -q '"step":12' "$tmp/longer.jsonl" || { echo "error: the resumed run at --seq-len 32 did not reach step 12"; exit 1; }
echo "resumed at --seq-len 32 from a checkpoint trained at 16: 2 more steps"

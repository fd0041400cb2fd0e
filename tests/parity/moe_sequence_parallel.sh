#!/usr/bin/env bash
# Parity: moe_train under sequence parallelism reproduces its one-rank run (losses, evaluation,
# step-1 gradients, state after 10 steps: tests/tools/layout_parity.sh): sp 2 ring and all_to_all,
# tp 2 with split_gather, ep 2 x sp 2 (ring and all_to_all), for gpt2 and for llama with shared
# experts. The MoE layers' token group is ep x the token shards (nn/expert_layout.h), so the
# one-rank reference's micro-batch is the ep group's sequences, whole. Where capacity binds the
# drops, expert loads and auxiliary loss equal one rank's, step by step. A checkpoint saved under
# ep 2 x sp 2 resumes on one rank and continues the same losses.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
app=moe_train
source "$src/tests/tools/layout_parity.sh"
for tool in data_prep moe_train; do
  [ -x "$build/apps/$tool" ] || { echo "error: $build/apps/$tool not built"; exit 1; }
done

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null

# REF CASE: the MoE metrics of every training step equal (drops and loads exactly, the aux loss to
# a relative 1e-5), and the capacity dropped something.
same_moe_metrics() {
  echo -n "    drops, expert loads and aux loss: "
  /usr/bin/python3 - "$tmp/$1.jsonl" "$tmp/$2.jsonl" <<'PY'
import json, sys
def metrics(path):
    return [{k: v for k, v in json.loads(l).items()
             if k in ("dropped_tokens", "aux_loss") or k.startswith("expert_load")}
            for l in open(path) if '"loss"' in l]
ref, run = metrics(sys.argv[1]), metrics(sys.argv[2])
if len(ref) != len(run) or not ref:
    sys.exit(f"error: {len(run)} steps against the reference's {len(ref)}")
for step, (a, b) in enumerate(zip(ref, run), 1):
    if set(a) != set(b) or "dropped_tokens" not in a:
        sys.exit(f"error: step {step}: metrics {sorted(b)} against {sorted(a)}")
    for k in a:
        tol = 1e-5 if k == "aux_loss" else 1e-9
        if abs(a[k] - b[k]) > tol * max(1.0, abs(a[k])):
            sys.exit(f"error: step {step}: {k} {b[k]} here, {a[k]} on one rank")
dropped = sum(m["dropped_tokens"] for m in ref)
if dropped == 0:
    sys.exit("error: the capacity dropped no token: the case tests nothing")
print(f"equal over {len(ref)} steps ({dropped:.0f} assignments dropped in all)")
PY
}

# The layouts, each against the one-rank run of 8 sequences per micro-batch (ep 2 x sp 2: 4 per ep
# rank, the two ep ranks' together).
sp_layouts() {  # PREFIX REF [check]: with check, the MoE metrics too
  local prefix=$1 ref=$2 check=${3:-}
  for mode in ring all_to_all; do
    parity_case "$prefix-sp2-$mode" 2 "$ref" "$data" --sp 2 --sp-mode $mode
    [ -z "$check" ] || same_moe_metrics "$ref" "$prefix-sp2-$mode"
    parity_case "$prefix-ep2-sp2-$mode" 4 "$ref" "$data" --ep 2 --sp 2 --sp-mode $mode --micro-batch 4
    [ -z "$check" ] || same_moe_metrics "$ref" "$prefix-ep2-sp2-$mode"
  done
  parity_case "$prefix-tp2-split_gather" 2 "$ref" "$data" --tp 2 --sp-mode split_gather
  [ -z "$check" ] || same_moe_metrics "$ref" "$prefix-tp2-split_gather"
}

# gpt2, top-2 without a capacity; then top-1 with one that drops.
common=(--layers 2 --hidden 16 --heads 2 --seq-len 8 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11 --threads 1
        --bucket-mb 0.01 --experts 4 --moe-every 2 --top-k 2 --capacity-factor 0)
parity_reference gpt2 "$data" --micro-batch 8
sp_layouts gpt2 gpt2
common=(--layers 2 --hidden 16 --heads 2 --seq-len 8 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11 --threads 1
        --bucket-mb 0.01 --experts 4 --moe-every 2 --top-k 1 --capacity-factor 1.0)
parity_reference gpt2-drop "$data" --micro-batch 8
sp_layouts gpt2-drop gpt2-drop check

# llama (SwiGLU experts, Mixtral's gates, 2 shared experts, grouped-query attention), top-2 with a
# capacity that drops.
common=(--arch llama --layers 2 --hidden 16 --heads 4 --kv-heads 2 --ffn-hidden 32 --seq-len 8 --global-batch 8
        --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01 --experts 4 --moe-every 2 --expert-hidden 16
        --top-k 2 --capacity-factor 1.0 --shared-experts 2 --router-norm softmax_topk)
parity_reference llama "$data" --micro-batch 8
sp_layouts llama llama check

# A checkpoint saved at step 5 under ep 2 x sp 2 (all_to_all) resumes on one rank: the losses of
# steps 6-10 continue the one-rank curve.
resume_case "ep2 x sp2 step 5 -> one rank" llama "$data" "$tmp/llama-ep2-sp2-all_to_all/step_5.h5" 1 \
  --micro-batch 8

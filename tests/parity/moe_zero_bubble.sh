#!/usr/bin/env bash
# Parity: moe_train under the zero-bubble schedule (--pp-schedule zb, ZB-H1). Each stage's backward
# splits into B (the input gradients through the experts and the router, with both expert-parallel
# all-to-alls) and W (the experts' and the router's weight gradients from what B kept: nn/moe.h).
# For gpt2 (GELU experts) and llama (SwiGLU experts, shared experts): pp 2 zb and pp 2 zb x ep 2
# reproduce the one-rank run (losses, evaluation, step-1 gradients, state after 10 steps:
# tests/tools/layout_parity.sh), and pp 2 zb equals pp 2 1f1b bit for bit (W runs backward's own
# products on copies of the same operands, into the same gradients in the same micro-batch order).
# With a capacity that drops tokens, pp 2 zb x ep 2 drops the same assignments as one rank. The
# runs' traces show W steps, so the split really ran (the runner verifies the schedule first).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
app=moe_train
source "$src/tests/tools/layout_parity.sh"

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null

# NAME OTHER: the losses and every tensor of the step-1 and step-10 checkpoints equal exactly.
same_bits() {
  echo -n "$1 = $2 bit for bit: "
  $compare_losses "$tmp/$2.jsonl" "$tmp/$1.jsonl" --rtol 0
  echo -n "    step-1 and step-10 checkpoints: "
  $compare_checkpoints "$tmp/$2/step_1.h5" "$tmp/$1/step_1.h5" --rtol 0 >/dev/null
  $compare_checkpoints "$tmp/$2/step_10.h5" "$tmp/$1/step_10.h5" --rtol 0
}

# NAME: a pp 2 zb run with its trace; the trace must hold W steps (backward_w) of every stage.
zb_case() {
  local name=$1 ranks=$2; shift
  parity_case "$name" "$@" --pp-schedule zb --trace "$tmp/$name.trace.json"
  echo -n "    W steps in the trace: "
  /usr/bin/python3 - "$tmp/$name.trace.json" "$ranks" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
w = [e for e in events if str(e.get("name", "")).startswith("backward_w")]
ranks = {e["pid"] for e in w}
if len(ranks) != int(sys.argv[2]):
    sys.exit(f"error: backward_w steps on ranks {sorted(ranks)} of {sys.argv[2]}: the backward was not split")
print(f"{len(w)} over all {len(ranks)} ranks")
PY
}

# The reference's micro-batch is an ep group's (ep x --micro-batch sequences): capacity and the
# load-balancing loss are over the group's tokens. 4 micro-batches per step: W is deferred past
# later micro-batches' B steps.
for arch in gpt2 llama; do
  if [ $arch = gpt2 ]; then  # blocks 1 and 3 have experts: one per stage
    common=(--layers 4 --hidden 32 --heads 4 --seq-len 16 --experts 4 --moe-every 2 --top-k 2 --capacity-factor 0)
  else  # every block has experts, and two shared ones; Mixtral's gates
    common=(--arch llama --layers 2 --hidden 16 --heads 2 --kv-heads 1 --ffn-hidden 32 --seq-len 8 --experts 4
            --moe-every 1 --expert-hidden 16 --top-k 2 --capacity-factor 0 --shared-experts 2
            --router-norm softmax_topk)
  fi
  common+=(--global-batch 8 --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01)
  parity_reference "$arch-ref2" "$data" --micro-batch 2
  zb_case "$arch-pp2-zb" 2 "$arch-ref2" "$data" --pp 2 --micro-batch 2
  zb_case "$arch-pp2-ep2-zb" 4 "$arch-ref2" "$data" --pp 2 --ep 2 --micro-batch 1
  parity_train "$arch-pp2-1f1b" 2 "$data" --pp 2 --micro-batch 2 --pp-schedule 1f1b
  same_bits "$arch-pp2-zb" "$arch-pp2-1f1b"
done

# Top-1 with a capacity that drops tokens (over the ep group's tokens): the same drops and losses.
common=(--layers 4 --hidden 32 --heads 4 --seq-len 16 --experts 4 --moe-every 2 --top-k 1 --capacity-factor 1.0
        --global-batch 8 --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01)
parity_reference drop-ref2 "$data" --micro-batch 2
zb_case "drop-pp2-ep2-zb" 4 drop-ref2 "$data" --pp 2 --ep 2 --micro-batch 1
echo -n "dropped tokens under pp 2 zb x ep 2: "
/usr/bin/python3 - "$tmp/drop-ref2.jsonl" "$tmp/drop-pp2-ep2-zb.jsonl" <<'PY'
import json, sys
def dropped(path):
    return [json.loads(l)["dropped_tokens"] for l in open(path) if '"loss"' in l]
ref, zb = dropped(sys.argv[1]), dropped(sys.argv[2])
if len(ref) != len(zb):
    sys.exit(f"error: {len(zb)} steps under zb, {len(ref)} on one rank")
for step, (a, b) in enumerate(zip(ref, zb), 1):
    if abs(a - b) > 1e-6 * max(1.0, abs(a)):
        sys.exit(f"error: step {step}: {b} assignments dropped under pp 2 zb x ep 2, {a} on one rank")
if sum(ref) == 0:
    sys.exit("error: the capacity dropped no token: the case tests nothing")
print(f"equal over {len(ref)} steps ({sum(ref):.0f} assignments dropped in all)")
PY

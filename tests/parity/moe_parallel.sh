#!/usr/bin/env bash
# Parity: moe_train under expert parallelism reproduces the one-rank run (losses, step-1 gradients,
# state after 10 steps: tests/tools/layout_parity.sh): ep 2 and 4, ep x tp, ep x dp with ZeRO 1, 2
# and 3, ep x pp; with capacity dropping too, where the drop counts and expert loads match. The
# one-rank reference's micro-batch is an ep group's (ep x --micro-batch sequences): capacity and
# the load-balancing loss are over the group's tokens. Checkpoints move between ep layouts.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
app=moe_train
common=(--layers 4 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01 --experts 4 --moe-every 2 --top-k 2 --capacity-factor 0)
source "$src/tests/tools/layout_parity.sh"

data="$tmp/v61.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$data" >/dev/null
parity_reference ref8 "$data" --micro-batch 8
parity_case "ep2" 2 ref8 "$data" --ep 2 --micro-batch 4
parity_case "ep4" 4 ref8 "$data" --ep 4 --micro-batch 2
parity_case "ep2-tp2" 4 ref8 "$data" --ep 2 --tp 2 --micro-batch 4
parity_reference ref4 "$data" --micro-batch 4
parity_case "ep2-dp2-zero1" 4 ref4 "$data" --ep 2 --micro-batch 2 --zero 1
parity_case "ep2-dp2-zero2" 4 ref4 "$data" --ep 2 --micro-batch 2 --zero 2
parity_case "ep2-dp2-zero3" 4 ref4 "$data" --ep 2 --micro-batch 2 --zero 3
parity_case "ep2-pp2" 4 ref4 "$data" --ep 2 --pp 2 --micro-batch 2

# Top-1 with a capacity that drops tokens: the same drops and loads as one rank.
common_top2=("${common[@]}")
common=("${common[@]:0:${#common[@]}-4}" --top-k 1 --capacity-factor 1.0)  # in place of common's last 4
parity_reference drop-ref "$data" --micro-batch 8
parity_case "ep4-drop" 4 drop-ref "$data" --ep 4 --micro-batch 2
common=("${common_top2[@]}")
echo -n "dropped tokens and expert loads under ep 4: "
/usr/bin/python3 - "$tmp/drop-ref.jsonl" "$tmp/ep4-drop.jsonl" <<'PY'
import json, sys
def metrics(path):
    return [{k: v for k, v in json.loads(l).items() if k == "dropped_tokens" or k.startswith("expert_load")}
            for l in open(path) if '"loss"' in l]
ref, ep = metrics(sys.argv[1]), metrics(sys.argv[2])
for step, (a, b) in enumerate(zip(ref, ep), 1):
    for k in a:
        if abs(a[k] - b[k]) > 1e-6 * max(1.0, abs(a[k])):
            sys.exit(f"error: step {step}: {k} {b[k]} under ep 4, {a[k]} on one rank")
dropped = sum(m["dropped_tokens"] for m in ref)
if dropped == 0:
    sys.exit("error: the capacity dropped no token: the case tests nothing")
print(f"equal over {len(ref)} steps ({dropped:.0f} assignments dropped in all)")
PY

# Checkpoints across ep layouts: 20 steps at ep 2 x dp 2 (ZeRO-3) saving step 10; 10 more at ep 4,
# and at one rank, equal 20 straight one-rank steps.
mpirun -np 1 "$build/apps/moe_train" --input "$data" "${common[@]}" --steps 20 --micro-batch 4 \
  --metrics "$tmp/straight.jsonl" >/dev/null
echo -n "20 steps at ep2 x dp2 zero3: "
mpirun -np 4 "$build/apps/moe_train" --input "$data" "${common[@]}" --steps 20 --ep 2 --micro-batch 2 --zero 3 \
  --checkpoint-dir "$tmp/first" --checkpoint-every 10 --metrics "$tmp/first.jsonl" >/dev/null
$compare_losses "$tmp/straight.jsonl" "$tmp/first.jsonl" --rtol 1e-5
grep -m 10 '"loss"' "$tmp/straight.jsonl" > "$tmp/first10.jsonl"
for layout in "4 --ep 4 --micro-batch 1" "1 --micro-batch 4"; do
  set -- $layout
  ranks=$1; shift
  echo -n "resume at $*: "
  mpirun -np "$ranks" "$build/apps/moe_train" --input "$data" "${common[@]}" --steps 20 "$@" \
    --resume "$tmp/first/step_10.h5" --metrics "$tmp/resumed.jsonl" >/dev/null
  cat "$tmp/first10.jsonl" "$tmp/resumed.jsonl" > "$tmp/resumed.all.jsonl"
  $compare_losses "$tmp/straight.jsonl" "$tmp/resumed.all.jsonl" --rtol 1e-5
done

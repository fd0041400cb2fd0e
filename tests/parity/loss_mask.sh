#!/usr/bin/env bash
# Parity: training on instruction data with a loss mask (data_prep sft) averages the loss over the
# response tokens of the global batch identically under every layout: gpt_train under dp 2, tp 2
# (vocab-parallel loss), sp 2 ring and zigzag, pp 2 (micro-batches on a pipeline) and dp x micro-batches, and
# moe_train under ep 2, each reproduces the one-rank run (losses, evaluation, step-1 gradients,
# state after 10 steps: tests/tools/layout_parity.sh). A mask of all ones gives the plain run's
# metrics bit for bit (one rank and tp 2); the response mask changes the loss (the test is not
# vacuous); and a mask of all zeros trains with loss 0 and gradient norm 0.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01)
source "$src/tests/tools/layout_parity.sh"
# As in sequence_parallel.sh: AdamW turns the rounding noise of near-zero gradient elements into
# lr-sized steps. Here one element of blocks.0.mlp.proj.weight has a step-1 gradient of 4.7e-10 (the
# tensor's median is 1.5e-3), far below AdamW's eps 1e-8: its first update is anywhere in [0, lr],
# and sp 2 ring lands 5.2e-5 from one rank (from step 1 on, not growing; tp 2: 1.4e-5). The
# gradients themselves match to 2.3e-7 and the losses to 1e-7.
state_atol=1e-4

# 400 examples of bytes: prompts and responses of varied lengths, an end-of-example byte (10) after each.
/usr/bin/python3 - "$tmp/chat.jsonl" <<'PY'
import json, random, sys
r = random.Random(7)
words = "the a cat sat on mat why how what is it blue red sky sea run ran".split()
with open(sys.argv[1], "w") as f:
    for i in range(400):
        prompt = " ".join(r.choice(words) for _ in range(r.randint(1, 6))) + "?"
        response = " ".join(r.choice(words) for _ in range(r.randint(1, 8))) + "."
        f.write(json.dumps({"prompt": "Q: " + prompt + " A:", "response": " " + response}) + "\n")
PY
data="$tmp/sft.h5"
"$build/apps/data_prep" sft --input "$tmp/chat.jsonl" --eos-id 10 --val-fraction 0.2 --output "$data" >/dev/null

parity_reference ref "$data" --micro-batch 8
parity_case "dp2" 2 ref "$data" --micro-batch 4
parity_case "tp2" 2 ref "$data" --tp 2 --micro-batch 8
parity_case "ring-sp2" 2 ref "$data" --sp 2 --sp-mode ring --micro-batch 8
parity_case "zigzag-sp2" 2 ref "$data" --sp 2 --sp-mode zigzag --micro-batch 8
parity_case "pp2-micro2" 2 ref "$data" --pp 2 --micro-batch 2
parity_case "dp2-micro2-zero1" 2 ref "$data" --micro-batch 2 --zero 1

# The same data with the mask all ones, and without a mask: the same run, bit for bit.
/usr/bin/python3 - "$data" "$tmp/ones.h5" "$tmp/plain.h5" "$tmp/zeros.h5" <<'PY'
import shutil, sys, h5py
src, ones, plain, zeros = sys.argv[1:]
for out, value in ((ones, 1), (plain, None), (zeros, 0)):
    shutil.copy(src, out)
    with h5py.File(out, "r+") as f:
        for split in ("train", "val"):
            if value is None:
                del f[f"/{split}/loss_mask"]
            else:
                f[f"/{split}/loss_mask"][...] = value
PY
same_bits() {  # NAME PLAIN: every loss, grad_norm and eval_loss equal
  echo -n "$1 equals $2 bit for bit: "
  /usr/bin/python3 - "$tmp/$1.jsonl" "$tmp/$2.jsonl" <<'PY'
import json, sys
def rows(path):
    return [{k: v for k, v in json.loads(l).items() if k in ("step", "loss", "grad_norm", "eval_loss")} for l in open(path)]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
if not a or a != b:
    sys.exit(f"error: the metrics differ:\n{a}\n{b}")
print(f"{len(a)} lines identical")
PY
}
for layout in "1" "2 --tp 2"; do
  read -r ranks opts <<< "$layout"
  name=$(echo "r$ranks$opts" | tr -d ' -')
  # shellcheck disable=SC2086
  parity_train "ones-$name" "$ranks" "$tmp/ones.h5" --micro-batch 8 $opts
  # shellcheck disable=SC2086
  parity_train "plain-$name" "$ranks" "$tmp/plain.h5" --micro-batch 8 $opts
  same_bits "ones-$name" "plain-$name"
done

echo -n "the response mask changes the loss: "
/usr/bin/python3 - "$tmp/ref.jsonl" "$tmp/plain-r1.jsonl" <<'PY'
import json, sys
first = [next(json.loads(l)["loss"] for l in open(p) if '"loss"' in l) for p in sys.argv[1:]]
if first[0] == first[1]:
    sys.exit(f"error: masked and plain step-1 losses are both {first[0]}")
print(f"step 1: {first[0]:.5f} masked, {first[1]:.5f} plain")
PY

echo -n "a mask of all zeros: "
mpirun -np 1 "$build/apps/gpt_train" --input "$tmp/zeros.h5" "${common[@]}" --steps 3 --micro-batch 8 \
  --eval-every 3 --eval-batches 1 --metrics "$tmp/zeros.jsonl" >/dev/null
/usr/bin/python3 - "$tmp/zeros.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "loss" in r]
evals = [r["eval_loss"] for r in rows if "eval_loss" in r]
if len(train) != 3 or any(r["loss"] != 0 or r["grad_norm"] != 0 for r in train) or evals != [0]:
    sys.exit(f"error: expected loss 0, grad_norm 0 and eval_loss 0, got {rows}")
print("loss 0, grad_norm 0 and eval_loss 0 at every step")
PY

# moe_train: the loss mask under expert parallelism (the reference's micro-batch is the ep group's).
app=moe_train
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01 --experts 4 --moe-every 2 --top-k 2 --capacity-factor 0)
parity_reference moe-ref "$data" --micro-batch 8
parity_case "moe-ep2" 2 moe-ref "$data" --ep 2 --micro-batch 4

#!/usr/bin/env bash
# Sequence parallelism in vit_train reproduces the one-rank run (losses, step-1 gradients and the
# state after 10 steps: tests/tools/layout_parity.sh; evaluation loss and accuracy): every image's
# tokens split over sp ranks, attention over all of them (not causal) in the all_to_all and the
# ring mode, with mean pooling (16 x 16 images in 4 x 4 patches: 16 tokens, sp 2 and 4) and with
# the class token (12 x 12 images: 9 patches + the class token = 10 tokens, sp 2: the class token on
# rank 0 only), and combined with dp and ZeRO-3, tp and pp. A checkpoint saved at sp 2 x dp 2
# resumes on one rank. (An sp that does not divide the tokens is refused: tests/badinput.)
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
app=vit_train data_option=--data
# The key part of the QKV bias has an exactly zero gradient (tests/parity/vit_parallel.sh says why).
state_atol=5e-5
common=(--layers 2 --hidden 32 --heads 4 --patch 4 --mlp-ratio 2 --global-batch 8 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --bucket-mb 0.01 --eval-every 10)
source "$src/tests/tools/layout_parity.sh"

mean="$tmp/images16.h5" cls="$tmp/images12.h5"
"$build/apps/data_prep" synth-images --classes 5 --train 200 --test 40 --size 16 --seed 3 --output "$mean" >/dev/null
"$build/apps/data_prep" synth-images --classes 5 --train 200 --test 40 --size 12 --seed 3 --output "$cls" >/dev/null

parity_reference ref-mean "$mean" --micro-batch 8 --pool mean
parity_case sp2-a2a-mean 2 ref-mean "$mean" --pool mean --sp 2
parity_case sp4-ring-mean 4 ref-mean "$mean" --pool mean --sp 4 --sp-mode ring
parity_case sp2-ring-tp2-mean 4 ref-mean "$mean" --pool mean --sp 2 --sp-mode ring --tp 2

parity_reference ref-cls "$cls" --micro-batch 8
parity_case sp2-a2a-cls 2 ref-cls "$cls" --sp 2
parity_case sp2-ring-dp2-zero3-cls 4 ref-cls "$cls" --sp 2 --sp-mode ring --zero 3
parity_case sp2-pp2-1f1b-cls 4 ref-cls "$cls" --sp 2 --pp 2 --micro-batch 2 --pp-schedule 1f1b
parity_case sp2-tp2-pp2-cls 8 ref-cls "$cls" --sp 2 --tp 2 --pp 2 --micro-batch 2

echo -n "evaluation (loss and accuracy at step 10) under every layout: "
/usr/bin/python3 - "$tmp" ref-mean sp2-a2a-mean sp4-ring-mean sp2-ring-tp2-mean -- ref-cls sp2-a2a-cls \
  sp2-ring-dp2-zero3-cls sp2-pp2-1f1b-cls sp2-tp2-pp2-cls <<'PY'
import json, sys
folder, groups = sys.argv[1], " ".join(sys.argv[2:]).split(" -- ")
def last_eval(name):
    return [json.loads(l) for l in open(f"{folder}/{name}.jsonl") if "eval_loss" in l][-1]
said = []
for group in groups:  # a reference, then the layouts that must evaluate as it does
    ref_name, *names = group.split()
    ref = last_eval(ref_name)
    for name in names:
        e = last_eval(name)
        if abs(e["eval_loss"] - ref["eval_loss"]) > 1e-5 * abs(ref["eval_loss"]) or abs(e["eval_acc"] - ref["eval_acc"]) > 1e-9:
            sys.exit(f"error: {name}: eval_loss {e['eval_loss']}, eval_acc {e['eval_acc']} vs {ref_name}'s {ref['eval_loss']}, {ref['eval_acc']}")
    said.append(f"{ref_name} {ref['eval_loss']:.6f} / {ref['eval_acc']:.4f} under {len(names)} layouts")
print("eval_loss / eval_acc:", "; ".join(said))
PY

echo -n "a checkpoint saved at sp 2 x dp 2 (ring), resumed on one rank: "
mpirun -np 1 "$build/apps/vit_train" --data "$cls" "${common[@]}" --steps 20 --micro-batch 8 \
  --metrics "$tmp/ref20.jsonl" >/dev/null
mpirun -np 4 "$build/apps/vit_train" --data "$cls" "${common[@]}" --steps 20 --sp 2 --sp-mode ring \
  --checkpoint-dir "$tmp/ck" --checkpoint-every 10 --metrics "$tmp/first.jsonl" >/dev/null
mpirun -np 1 "$build/apps/vit_train" --data "$cls" "${common[@]}" --steps 20 --micro-batch 8 \
  --resume "$tmp/ck/step_10.h5" --metrics "$tmp/resumed.jsonl" >/dev/null
# The first run's steps 1..10 (its training lines only), then the resumed ones.
grep '"loss"' "$tmp/first.jsonl" > "$tmp/first_train.jsonl"
head -n 10 "$tmp/first_train.jsonl" | cat - "$tmp/resumed.jsonl" > "$tmp/all.jsonl"
$compare_losses "$tmp/ref20.jsonl" "$tmp/all.jsonl" --rtol 1e-5

#!/usr/bin/env bash
# CTest `train`: generate on checkpoints gpt_train trains here (byte-level text):
# - `--score` equals gpt_train's eval_loss on the same windows within relative 1e-6 (gpt2, llama),
#   and moe_train's (its gpt2 and Llama MoE models) where the trainer's expert capacity does not
#   bind: generate sends every token to its top-k experts, so it reproduces an evaluation that
#   dropped none (moe_tiny at --capacity-factor 4: an expert's capacity 2 N of the N tokens it can
#   get at most; moe_llama_tiny's factor is 0, no limit);
# - seeded sampling (temperature, top-k, top-p, repetition penalty) gives every prompt the same
#   text alone (--prompt, and one slot at a time) and inside a batch of 16 prompts of mixed
#   lengths (16 slots, and 5 slots refilled as sequences finish); another seed gives other text.
# usage: generate_runs.sh <build_dir> <source_dir>
set -euo pipefail
source "$(dirname "$0")/../tools/script_prelude.sh"
script_args "$@"
need_apps data_prep gpt_train moe_train generate
make_scratch generate-runs
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {
  echo "+ $*"
  local rc=0
  "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [[ $rc -eq 0 ]] || { cat "$tmp/out" "$tmp/err"; fail "command exited with status $rc: $*"; }
}

run "$build/apps/data_prep" text --input "$src/README.md" --output "$tmp/text.h5" --val-fraction 0.1

# --score against gpt_train's (moe_train's) evaluation of the same windows.
for arch in gpt2 llama moe_gpt2 moe_llama; do
  trainer=(gpt_train --config "$src/inputs/${arch/gpt2/gpt}_tiny.ini")
  [[ $arch != moe_gpt2 ]] || trainer=(moe_train --config "$src/inputs/moe_tiny.ini" --capacity-factor 4)
  [[ $arch != moe_llama ]] || trainer=(moe_train --config "$src/inputs/moe_llama_tiny.ini")
  steps=20
  [[ $arch != moe_* ]] || steps=6  # the experts' routing is what is checked, not training
  run "$build/apps/${trainer[0]}" "${trainer[@]:1}" --input "$tmp/text.h5" --steps $steps \
      --eval-every $steps --eval-batches 3 --metrics "$tmp/$arch.jsonl" --checkpoint-dir "$tmp/$arch" \
      --checkpoint-every $steps
  want=$(grep -o '"eval_loss":[-0-9.e+]*' "$tmp/$arch.jsonl" | tail -n 1 | cut -d: -f2)
  [[ -n $want ]] || fail "$arch: ${trainer[0]} wrote no eval_loss"
  run "$build/apps/generate" --checkpoint "$tmp/$arch/step_$steps.h5" --score "$tmp/text.h5" --seq-len 32 \
      --global-batch 16 --eval-batches 3 --max-batch 5
  got=$(grep -o '^loss [-0-9.e+]*' "$tmp/out" | cut -d' ' -f2)
  [[ -n $got ]] || fail "$arch: generate --score printed no loss: $(cat "$tmp/out")"
  grep -q 'bits per byte' "$tmp/out" || fail "$arch: no bits per byte for byte-level data: $(cat "$tmp/out")"
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-6 * abs(b) else 1)" \
    "$got" "$want" || fail "$arch: generate --score gives $got, ${trainer[0]}'s eval_loss $want (relative 1e-6)"
  echo "$arch: --score $got = ${trainer[0]} eval_loss $want"
done

# Seeded sampling: the same text whatever the batch (prompts of 2 to 17 bytes, 12 new tokens: the
# model's 32 positions).
: >"$tmp/prompts.jsonl"
for i in $(seq 0 15); do
  words=$(sed -n "$((i * 7 + 3))p" "$src/README.md" | tr -cd 'a-zA-Z ' | cut -c1-$((2 + i)))
  printf '{"text": "%s"}\n' "${words:-tessera}" >>"$tmp/prompts.jsonl"
done
first=$(head -n 1 "$tmp/prompts.jsonl" | python3 -c 'import json, sys; print(json.load(sys.stdin)["text"])')
sample=(--temperature 0.9 --top-k 40 --top-p 0.95 --repetition-penalty 1.1 --max-new-tokens 12)
ck=$tmp/gpt2/step_20.h5
for slots in 1 5 16; do
  run "$build/apps/generate" --checkpoint "$ck" --prompts "$tmp/prompts.jsonl" "${sample[@]}" --seed 9 \
      --max-batch $slots --output "$tmp/batch$slots.jsonl"
done
run "$build/apps/generate" --checkpoint "$ck" --prompts "$tmp/prompts.jsonl" "${sample[@]}" --seed 10 \
    --max-batch 16 --output "$tmp/seed10.jsonl"
run "$build/apps/generate" --checkpoint "$ck" --prompt "$first" "${sample[@]}" --seed 9
cp "$tmp/out" "$tmp/alone.txt"
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def load(name):
    with open(f"{tmp}/{name}") as f:
        return [json.loads(line) for line in f]
runs = {n: load(f"batch{n}.jsonl") for n in (1, 5, 16)}
other = load("seed10.jsonl")
for n, lines in runs.items():
    assert len(lines) == 16 and [l["index"] for l in lines] == list(range(16)), f"batch {n}: lines {len(lines)}"
    for a, b in zip(runs[1], lines):
        assert a["completion_ids"] == b["completion_ids"], \
            f"prompt {a['index']}: alone {a['completion_ids']} but in {n} slots {b['completion_ids']}"
texts = [l["completion"] for l in runs[16]]
assert len(set(texts)) > 8, f"the 16 completions are not varied: {texts}"
differ = sum(a["completion_ids"] != b["completion_ids"] for a, b in zip(runs[16], other))
assert differ >= 12, f"seed 10 changed only {differ} of 16 completions"
alone = open(f"{tmp}/alone.txt").read()
assert alone == runs[16][0]["completion"] + "\n", f"--prompt alone gave {alone!r}, the batch {runs[16][0]['completion']!r}"
print(f"seeded sampling: 16 prompts identical alone, in 5 and in 16 slots; seed 10 changed {differ} of 16")
PY
keep=0
echo "generate_runs: --score equals eval_loss; seeded text independent of the batch"

#!/usr/bin/env bash
# Blended token data (--input 'a.h5:W,b.h5:W' or @blend.txt) under every layout: the losses of dp2,
# tp2 and pp2 equal one rank's, so each step's global batch (each row's source and window) is the
# same; the metrics count each source's tokens; a checkpoint saved under tp2 x dp2 records each
# source's samples and epoch, and resumed under pp2 it continues the straight run's losses exactly.
# --resume auto refuses a checkpoint of another blend.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
compare="python3 $src/tests/tools/compare_losses.py"
# Two sources of one vocabulary: 800 tokens (47 windows of 17) and 300 (17 windows: b.h5 runs
# through more than one epoch of its own in 12 steps).
"$build/apps/data_prep" synth --vocab 61 --tokens 800 --seed 5 --output "$tmp/a.h5" >/dev/null
"$build/apps/data_prep" synth --vocab 61 --tokens 300 --seed 6 --output "$tmp/b.h5" >/dev/null
blend="$tmp/a.h5:0.7,$tmp/b.h5:0.3"
common=(--layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 12 --lr 3e-3 --warmup 2 --seed 11
        --threads 1 --log-every 1 --sampling epoch)
"$build/apps/gpt_train" --input "$blend" "${common[@]}" --micro-batch 8 --metrics "$tmp/ref.jsonl" >/dev/null
# The metrics: each source's tokens so far, adding up to the run's (12 steps x 8 rows x 16 tokens).
python3 - "$tmp/ref.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
last = steps[-1]
a, b = last["blend_tokens.0"], last["blend_tokens.1"]
assert a + b == 12 * 8 * 16, (a, b)
assert a > b > 0, (a, b)
assert all(s["blend_tokens.0"] + s["blend_tokens.1"] == s["step"] * 8 * 16 for s in steps), "per-step sums"
print(f"blend tokens after 12 steps: {a:.0f} of a.h5 (weight 0.7), {b:.0f} of b.h5 (weight 0.3)")
PY
# The same blend from a file gives the same run; one source alone is another run.
printf '# the blend of this test\n%s 0.7\n%s 0.3\n' "$tmp/a.h5" "$tmp/b.h5" > "$tmp/blend.txt"
echo -n "blend file: "
"$build/apps/gpt_train" --input "@$tmp/blend.txt" "${common[@]}" --micro-batch 8 --metrics "$tmp/file.jsonl" >/dev/null
$compare "$tmp/ref.jsonl" "$tmp/file.jsonl"
"$build/apps/gpt_train" --input "$tmp/a.h5" "${common[@]}" --micro-batch 8 --metrics "$tmp/alone.jsonl" >/dev/null
if $compare "$tmp/ref.jsonl" "$tmp/alone.jsonl" >/dev/null 2>&1; then
  echo "error: the blend trained on the same batches as a.h5 alone"; exit 1
fi

for layout in "dp2:--micro-batch 4" "tp2:--tp 2 --micro-batch 8" "pp2:--pp 2 --micro-batch 4"; do
  name=${layout%%:*}; read -r -a opts <<< "${layout#*:}"
  echo -n "blend under $name: "
  mpirun -np 2 "$build/apps/gpt_train" --input "$blend" "${common[@]}" "${opts[@]}" --metrics "$tmp/$name.jsonl" >/dev/null
  $compare "$tmp/ref.jsonl" "$tmp/$name.jsonl"
done

# Checkpoint at step 4 under tp2 x dp2, resumed under pp2.
echo -n "blend under tp2 x dp2: "
mpirun -np 4 "$build/apps/gpt_train" --input "$blend" "${common[@]}" --tp 2 --micro-batch 4 --checkpoint-dir "$tmp/ck" \
  --checkpoint-every 4 --metrics "$tmp/tp2dp2.jsonl" >/dev/null
$compare "$tmp/ref.jsonl" "$tmp/tp2dp2.jsonl"
test -f "$tmp/ck/step_4.h5"
# What the checkpoint must record: the samples per source after 4 steps (the metrics' tokens / 16) and
# each source's epoch (samples / windows).
read -r samples epochs < <(python3 - "$tmp/ref.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][3]
n = [int(s["blend_tokens.0"]) // 16, int(s["blend_tokens.1"]) // 16]
print(f"{n[0]},{n[1]} {n[0] // 47},{n[1] // 17}")
PY
)
for attr in "data_blend_samples:$samples" "data_blend_epochs:$epochs"; do
  h5dump -a "/${attr%%:*}" "$tmp/ck/step_4.h5" | grep -q "\"${attr#*:}\"" ||
    { echo "error: the checkpoint's ${attr%%:*} is not ${attr#*:}"; h5dump -a "/${attr%%:*}" "$tmp/ck/step_4.h5"; exit 1; }
done
grep -m 4 '"loss"' "$tmp/tp2dp2.jsonl" > "$tmp/first.jsonl"
echo -n "blend checkpoint of tp2 x dp2 resumed under pp2: "
mpirun -np 2 "$build/apps/gpt_train" --input "$blend" "${common[@]}" --pp 2 --micro-batch 4 --resume "$tmp/ck/step_4.h5" \
  --metrics "$tmp/resumed.jsonl" >/dev/null
cat "$tmp/first.jsonl" "$tmp/resumed.jsonl" > "$tmp/all.jsonl"
$compare "$tmp/ref.jsonl" "$tmp/all.jsonl"
# The blend is part of the run's identity: --resume auto refuses a checkpoint of other weights.
rm -f "$tmp/ck/step_8.h5" "$tmp/ck/step_12.h5"
if "$build/apps/gpt_train" --input "$tmp/a.h5:0.5,$tmp/b.h5:0.5" "${common[@]}" --micro-batch 8 --checkpoint-dir "$tmp/ck" \
     --resume auto --metrics "$tmp/other.jsonl" > "$tmp/other.out" 2>&1; then
  echo "error: --resume auto continued a checkpoint of another blend"; exit 1
fi
grep -q "belongs to another run" "$tmp/other.out" && grep -q "data_blend_samples" "$tmp/other.out" ||
  { cat "$tmp/other.out"; exit 1; }
echo "token blend: ok"

#!/usr/bin/env bash
# Epoch sampling (--sampling epoch) under every layout: over a file of 47 windows (an epoch is
# under 6 steps of 8 rows) the losses of dp2, tp2, pp2 and sp2 equal one rank's, so each step's
# global batch is the same; a checkpoint saved mid-epoch under tp2 x dp2 records the sampling and
# the epoch, and resumed under pp2 it continues the straight run's losses exactly, across epochs.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
compare="python3 $src/tests/tools/compare_losses.py"
# 800 tokens: 47 windows of 17 (seq 16 + 1), 1 token left over.
"$build/apps/data_prep" synth --vocab 61 --tokens 800 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 14
        --lr 3e-3 --warmup 2 --seed 11 --threads 1 --log-every 1)
epoch=(--sampling epoch)
"$build/apps/gpt_train" "${common[@]}" "${epoch[@]}" --micro-batch 8 --metrics "$tmp/ref.jsonl" >/dev/null
"$build/apps/gpt_train" "${common[@]}" --micro-batch 8 --sampling random --metrics "$tmp/random.jsonl" >/dev/null
if python3 "$src/tests/tools/compare_losses.py" "$tmp/ref.jsonl" "$tmp/random.jsonl" >/dev/null 2>&1; then
  echo "error: --sampling epoch trained on the same batches as --sampling random"; exit 1
fi

for layout in "dp2:--micro-batch 4" "tp2:--tp 2 --micro-batch 8" "pp2:--pp 2 --micro-batch 4" "sp2:--sp 2 --micro-batch 8"; do
  name=${layout%%:*}; read -r -a opts <<< "${layout#*:}"
  echo -n "epoch sampling under $name: "
  mpirun -np 2 "$build/apps/gpt_train" "${common[@]}" "${epoch[@]}" "${opts[@]}" --metrics "$tmp/$name.jsonl" >/dev/null
  $compare "$tmp/ref.jsonl" "$tmp/$name.jsonl"
done

# Mid-epoch checkpoint under tp2 x dp2 (step 4: sample 32 of epoch 0's 47), resumed under pp2.
echo -n "epoch sampling under tp2 x dp2: "
mpirun -np 4 "$build/apps/gpt_train" "${common[@]}" "${epoch[@]}" --tp 2 --micro-batch 4 --checkpoint-dir "$tmp/ck" \
  --checkpoint-every 4 --metrics "$tmp/tp2dp2.jsonl" >/dev/null
$compare "$tmp/ref.jsonl" "$tmp/tp2dp2.jsonl"
test -f "$tmp/ck/step_4.h5"
grep -m 4 '"loss"' "$tmp/tp2dp2.jsonl" > "$tmp/first.jsonl"
h5dump -a /data_sampling "$tmp/ck/step_4.h5" | grep -q '"epoch"' || { echo "error: no data_sampling epoch in the checkpoint"; exit 1; }
h5dump -a /data_epoch "$tmp/ck/step_4.h5" | grep -q '(0): 0' || { echo "error: the checkpoint does not record epoch 0"; exit 1; }
echo -n "mid-epoch tp2 x dp2 checkpoint resumed under pp2: "
mpirun -np 2 "$build/apps/gpt_train" "${common[@]}" "${epoch[@]}" --pp 2 --micro-batch 4 --resume "$tmp/ck/step_4.h5" \
  --metrics "$tmp/resumed.jsonl" >/dev/null
cat "$tmp/first.jsonl" "$tmp/resumed.jsonl" > "$tmp/all.jsonl"
$compare "$tmp/ref.jsonl" "$tmp/all.jsonl"
# The run's sampling is part of its identity: --resume auto refuses a checkpoint of the other mode.
rm -f "$tmp/ck/step_8.h5" "$tmp/ck/step_12.h5"  # step_14 (the last) stays the newest
if "$build/apps/gpt_train" "${common[@]}" --sampling random --micro-batch 8 --checkpoint-dir "$tmp/ck" --resume auto \
     --metrics "$tmp/other.jsonl" > "$tmp/other.out" 2>&1; then
  echo "error: --resume auto continued an epoch-sampled checkpoint with --sampling random"; exit 1
fi
grep -q -- "--sampling epoch there, random here" "$tmp/other.out" || { cat "$tmp/other.out"; exit 1; }
echo "token epochs: ok"

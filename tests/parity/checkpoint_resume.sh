#!/usr/bin/env bash
# Resume parity: 20 steps straight equal 10 steps + checkpoint + 10 resumed steps, where the
# checkpoint is saved at dp=4 ZeRO-3 and resumed at dp=2 ZeRO-1, at one rank, at dp=4 ZeRO-0 and
# at dp=2 ZeRO-3 with other micro-batching; --resume auto skips a newer, corrupt checkpoint.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
compare="python3 $src/tests/tools/compare_losses.py"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 20
        --lr 3e-3 --warmup 2 --seed 11 --threads 1)
"$build/apps/gpt_train" "${common[@]}" --micro-batch 8 --metrics "$tmp/ref.jsonl" >/dev/null

mpirun -np 4 "$build/apps/gpt_train" "${common[@]}" --micro-batch 2 --zero 3 --checkpoint-dir "$tmp/ck" \
  --checkpoint-every 10 --metrics "$tmp/first.jsonl" >/dev/null
test -f "$tmp/ck/step_10.h5" && test -f "$tmp/ck/step_20.h5"
ls "$tmp/ck" | grep -q tmp && { echo "error: a .tmp checkpoint was left behind"; exit 1; }
$compare "$tmp/ref.jsonl" "$tmp/first.jsonl"
grep -m 10 '"loss"' "$tmp/first.jsonl" > "$tmp/first10.jsonl"

resume_case() {  # name, ranks, extra options
  local name=$1 ranks=$2; shift 2
  echo -n "resume at $name: "
  mpirun -np "$ranks" "$build/apps/gpt_train" "${common[@]}" --resume "$tmp/ck/step_10.h5" "$@" \
    --metrics "$tmp/$name.jsonl" >/dev/null
  cat "$tmp/first10.jsonl" "$tmp/$name.jsonl" > "$tmp/$name.all.jsonl"
  $compare "$tmp/ref.jsonl" "$tmp/$name.all.jsonl"
}
resume_case "dp2-zero1" 2 --micro-batch 4 --zero 1
resume_case "one-rank" 1 --micro-batch 8
resume_case "dp4-zero0" 4 --micro-batch 1 --zero 0
resume_case "dp2-zero3" 2 --micro-batch 2 --zero 3
resume_case "dp4-zero2" 4 --micro-batch 2 --zero 2

# --resume auto takes the newest checkpoint that validates: corrupt step_20 and expect step_10.
size=$(stat -c %s "$tmp/ck/step_20.h5")  # the middle of the file is tensor data
printf '\x5a\xa5' | dd of="$tmp/ck/step_20.h5" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
echo -n "resume auto past a corrupt newest checkpoint: "
"$build/apps/gpt_train" "${common[@]}" --micro-batch 8 --checkpoint-dir "$tmp/ck" --resume auto \
  --checkpoint-every 100 --metrics "$tmp/auto.jsonl" > "$tmp/auto.log" 2>&1
grep -q "resumed from .*step_10.h5" "$tmp/auto.log" || { cat "$tmp/auto.log"; echo "error: did not resume from step 10"; exit 1; }
cat "$tmp/first10.jsonl" "$tmp/auto.jsonl" > "$tmp/auto.all.jsonl"
$compare "$tmp/ref.jsonl" "$tmp/auto.all.jsonl"

# An explicit --resume of a corrupt checkpoint is refused on every rank, naming the problem (the
# auto run above wrote a good step_20 again: corrupt it once more).
size=$(stat -c %s "$tmp/ck/step_20.h5")
printf '\x5a\xa5' | dd of="$tmp/ck/step_20.h5" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
echo -n "explicit resume of a corrupt checkpoint: "
if mpirun -np 2 "$build/apps/gpt_train" "${common[@]}" --micro-batch 4 --resume "$tmp/ck/step_20.h5" \
     > "$tmp/bad.log" 2>&1; then
  echo "error: a corrupt checkpoint was accepted"; exit 1
fi
grep -q "error: cannot resume: .*checksum" "$tmp/bad.log" || { cat "$tmp/bad.log"; echo "error: no clear message"; exit 1; }
echo "refused: $(grep -m1 'error:' "$tmp/bad.log")"

#!/usr/bin/env bash
# Re-running a job that has already finished (its newest checkpoint is of step --steps) says so and
# changes nothing: the metrics file, the trace and every checkpoint stay byte for byte as they were,
# no file appears or goes, no loss is claimed, and the exit code is 0. Under --resume auto and
# --resume FILE.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
run=(--input "$tmp/data.h5" --layers 1 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 4
     --threads 1 --checkpoint-dir "$tmp/out/ck" --checkpoint-every 2 --keep-checkpoints 1
     --metrics "$tmp/out/m.jsonl" --trace "$tmp/out/trace.json")
mkdir -p "$tmp/out"
"$build/apps/gpt_train" "${run[@]}" >/dev/null
snapshot() { (cd "$tmp/out" && find . -type f | sort | xargs sha256sum); }
snapshot > "$tmp/before.txt"
grep -q "step_4.h5" "$tmp/before.txt" && grep -q "m.jsonl" "$tmp/before.txt" || { cat "$tmp/before.txt"; exit 1; }

for resume in auto "$tmp/out/ck/step_4.h5"; do
  "$build/apps/gpt_train" "${run[@]}" --resume "$resume" >"$tmp/again.log" 2>&1 ||
    { cat "$tmp/again.log"; echo "error: --resume $resume: re-running a finished job failed"; exit 1; }
  grep -q "already finished at step 4; nothing to do" "$tmp/again.log" ||
    { cat "$tmp/again.log"; echo "error: --resume $resume: no 'already finished at step 4; nothing to do'"; exit 1; }
  if grep -qi "loss" "$tmp/again.log"; then
    cat "$tmp/again.log"; echo "error: --resume $resume: a run that trained nothing printed a loss"; exit 1
  fi
  snapshot > "$tmp/after.txt"
  diff "$tmp/before.txt" "$tmp/after.txt" ||
    { echo "error: --resume $resume: re-running a finished job changed the files above"; exit 1; }
  echo "--resume $resume: $(grep -o 'already finished.*' "$tmp/again.log"); $(wc -l < "$tmp/after.txt") files unchanged"
done

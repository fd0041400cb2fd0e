#!/usr/bin/env bash
# Numerical guard: a NaN put into one gradient at step 4 (test hook) stops the run on every rank
# with the step, the first non-finite parameter and the last good checkpoint named, under ZeRO
# 0, 2 and 3 (where the gradient lives in one rank's shard), and under bf16 with ZeRO 0 and 2 (whose
# norm is summed as the gradients are rounded, before the NaN is put in: it must be summed again);
# with --on-nan skip the step is skipped and the run completes.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 6 --threads 1)
for run in 0-fp32 2-fp32 3-fp32 0-bf16 2-bf16; do
  zero=${run%-*}; precision=${run#*-}
  if TESSERA_FAULT_NAN_STEP=4 timeout -k 10 60 mpirun -np 2 "$build/apps/gpt_train" "${common[@]}" --zero $zero \
       --precision $precision --checkpoint-dir "$tmp/ck$run" --checkpoint-every 2 > "$tmp/z$run.log" 2>&1; then
    echo "error: zero $zero $precision: a NaN gradient did not stop the run"; exit 1
  fi
  line=$(grep -m1 "error: step 4" "$tmp/z$run.log" || true)
  for words in "is not finite" "first non-finite gradient: blocks.0.mlp.fc.weight" "last good checkpoint: $tmp/ck$run/step_2.h5"; do
    [[ $line == *"$words"* ]] || { cat "$tmp/z$run.log"; echo "error: zero $zero $precision: '$words' missing"; exit 1; }
  done
  [ ! -e "$tmp/ck$run/step_4.h5" ] || { echo "error: zero $zero $precision: a checkpoint was written after the NaN"; exit 1; }
  echo "zero $zero $precision: stopped: ${line#*error: }"
done
TESSERA_FAULT_NAN_STEP=4 mpirun -np 2 "$build/apps/gpt_train" "${common[@]}" --on-nan skip \
  --metrics "$tmp/skip.jsonl" > "$tmp/skip.log" 2>&1 || { cat "$tmp/skip.log"; echo "error: --on-nan skip failed"; exit 1; }
python3 - "$tmp/skip.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r]
if len(steps) != 6 or steps[-1]["skipped_steps"] != 1 or steps[2]["skipped_steps"] != 0:
    sys.exit(f"error: expected 6 steps with step 4 skipped, got {[(r['step'], r['skipped_steps']) for r in steps]}")
print("--on-nan skip: 6 steps, step 4 skipped, the run completed")
PY

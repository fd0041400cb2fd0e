#!/usr/bin/env bash
# Faults: one of 4 ranks is killed (SIGKILL) at a pseudo-random step, in 10 trials. Every job must
# end within a bound (no survivor waits forever), `--resume auto` must continue from the last
# complete checkpoint, and the resumed losses must equal those of an uninterrupted run.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 12
        --lr 3e-3 --warmup 2 --seed 11 --threads 1 --comm-timeout 30)
mpirun -np 4 "$build/apps/gpt_train" "${common[@]}" --zero 1 --metrics "$tmp/ref.jsonl" >/dev/null

for trial in $(seq 0 9); do
  rank=$(( (trial * 3 + 1) % 4 )); step=$(( 2 + (trial * 7) % 10 ))   # fixed pseudo-random choices
  dir="$tmp/ck$trial"
  start=$(date +%s)
  if TESSERA_FAULT_KILL="$rank:$step" timeout -k 10 90 mpirun -np 4 "$build/apps/gpt_train" "${common[@]}" --zero 1 \
       --checkpoint-dir "$dir" --checkpoint-every 2 --metrics "$tmp/killed$trial.jsonl" >"$tmp/killed$trial.log" 2>&1; then
    echo "error: trial $trial: the job with a killed rank exited 0"; exit 1
  fi
  elapsed=$(( $(date +%s) - start ))
  # timeout(1) exits 124 when it had to stop a hung job: that is the failure this test looks for.
  [ "$elapsed" -lt 90 ] || { echo "error: trial $trial: the job hung after rank $rank died"; exit 1; }
  mpirun -np 4 "$build/apps/gpt_train" "${common[@]}" --zero 1 --checkpoint-dir "$dir" --checkpoint-every 2 --resume auto \
    --metrics "$tmp/resumed$trial.jsonl" >"$tmp/resumed$trial.log" 2>&1 ||
    { cat "$tmp/resumed$trial.log"; echo "error: trial $trial: resume failed"; exit 1; }
  python3 - "$tmp/ref.jsonl" "$tmp/resumed$trial.jsonl" "$trial" "$rank" "$step" "$elapsed" <<'PY'
import json, sys
ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
got = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
trial, rank, step, elapsed = sys.argv[3:]
if max(got, default=0) != max(ref):
    sys.exit(f"error: trial {trial}: the resumed run ended at step {max(got, default=0)}, not {max(ref)}")
first = min(got)
expected_first = (int(step) - 1) // 2 * 2 + 1   # after the last checkpoint before the killed step
if first != expected_first:
    sys.exit(f"error: trial {trial}: resumed at step {first}, expected {expected_first}")
worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in got)
if worst > 1e-5:
    sys.exit(f"error: trial {trial}: resumed losses differ from the uninterrupted run by {worst:.2e}")
print(f"trial {trial}: rank {rank} killed at step {step}; job ended in {elapsed} s; resumed at step {first}; "
      f"losses match (worst {worst:.1e})")
PY
done

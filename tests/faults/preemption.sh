#!/usr/bin/env bash
# Preemption: SIGUSR1 (as Slurm's --signal sends it) or SIGTERM (a cancellation, or a time limit's
# first notice) to one rank of 4 makes every rank checkpoint at the step boundary and exit with
# code 3; --resume auto then finishes the run with the losses of an uninterrupted one. The signal
# is raised by a test hook at a chosen step (deterministic).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 20
        --lr 3e-3 --warmup 2 --seed 11 --threads 1)
mpirun -np 4 "$build/apps/gpt_train" "${common[@]}" --metrics "$tmp/ref.jsonl" --checkpoint-dir "$tmp/ref" >/dev/null

for signal in USR1 TERM; do
  rm -rf "$tmp/ck" "$tmp/first.jsonl" "$tmp/second.jsonl"  # each signal: a fresh run and its resume
  echo -n "SIG$signal: "
  set +e
  TESSERA_FAULT_SIGNAL=2:7:$signal mpirun -np 4 "$build/apps/gpt_train" "${common[@]}" --checkpoint-dir "$tmp/ck" \
    --metrics "$tmp/first.jsonl" > "$tmp/first.log" 2>&1
  code=$?
  set -e
  [ "$code" -eq 3 ] || { cat "$tmp/first.log"; echo "error: a preempted run exited $code, not 3"; exit 1; }
  stopped=$(python3 -c "import json,sys; print(max(r['step'] for r in map(json.loads, open(sys.argv[1])) if 'loss' in r))" "$tmp/first.jsonl")
  [ -f "$tmp/ck/step_$stopped.h5" ] || { ls "$tmp/ck"; echo "error: no checkpoint of step $stopped"; exit 1; }
  [ "$stopped" -eq 7 ] || { echo "error: stopped at step $stopped, not at the signalled step 7"; exit 1; }
  echo "preempted at step $stopped with exit code 3 and checkpoint step_$stopped.h5"

  mpirun -np 4 "$build/apps/gpt_train" "${common[@]}" --checkpoint-dir "$tmp/ck" --resume auto \
    --metrics "$tmp/second.jsonl" >/dev/null
  cat "$tmp/first.jsonl" "$tmp/second.jsonl" > "$tmp/all.jsonl"
  python3 "$src/tests/tools/compare_losses.py" "$tmp/ref.jsonl" "$tmp/all.jsonl" --rtol 1e-5
done

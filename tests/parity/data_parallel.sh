#!/usr/bin/env bash
# Parity: data parallelism on 2 and 4 ranks, under ZeRO 0, 1, 2 and 3, with one and several
# micro-batches per rank (and the default, global batch / dp) and small gradient buckets (many
# overlapped reductions), reproduces the one-rank loss curve and evaluation (the mean over the same
# two global batches of the validation split) to a relative 1e-5, and the parameters and optimizer
# states after 10 steps.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 10
        --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01 --eval-every 5 --eval-batches 2)
compare() {  # RUN: losses, evaluations, then the state after 10 steps, against the one-rank run
  python3 "$src/tests/tools/compare_losses.py" "$tmp/ref.jsonl" "$tmp/$1.jsonl" --rtol 1e-5
  echo -n "    evaluation: "
  python3 "$src/tests/tools/compare_losses.py" "$tmp/ref.jsonl" "$tmp/$1.jsonl" --key eval_loss --rtol 1e-5
  echo -n "    parameters and states after 10 steps: "
  /usr/bin/python3 "$src/tests/tools/compare_checkpoints.py" "$tmp/ref/step_10.h5" "$tmp/$1/step_10.h5" --rtol 1e-5 --atol 1e-5
}
"$build/apps/gpt_train" "${common[@]}" --micro-batch 8 --metrics "$tmp/ref.jsonl" --checkpoint-dir "$tmp/ref" >/dev/null
for zero in 0 1 2 3; do
  for case in "2 4" "2 2" "4 2" "4 1"; do
    set -- $case
    echo -n "dp=$1 micro-batch=$2 zero=$zero: "
    run=dp$1_$2_$zero
    mpirun -np "$1" "$build/apps/gpt_train" "${common[@]}" --micro-batch "$2" --zero "$zero" \
      --metrics "$tmp/$run.jsonl" --checkpoint-dir "$tmp/$run" >/dev/null
    compare "$run"
  done
done
# The default micro-batch (global batch / dp: one per rank), as a user's first run has it.
for ranks in 2 4; do
  echo -n "dp=$ranks default micro-batch: "
  mpirun -np "$ranks" "$build/apps/gpt_train" "${common[@]}" --metrics "$tmp/dp${ranks}_default.jsonl" \
    --checkpoint-dir "$tmp/dp${ranks}_default" >/dev/null
  compare "dp${ranks}_default"
done
# Eight ranks under ZeRO-3: shards of about 3.5k elements, units gathered from eight pieces.
echo -n "dp=8 micro-batch=1 zero=3: "
mpirun -np 8 "$build/apps/gpt_train" "${common[@]}" --micro-batch 1 --zero 3 --metrics "$tmp/dp8.jsonl" \
  --checkpoint-dir "$tmp/dp8" >/dev/null
compare dp8

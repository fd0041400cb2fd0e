#!/usr/bin/env bash
# End-to-end vit_train: a small ViT on a synthetic 10-class image set (data_prep synth-images),
# 2 data-parallel ranks, 60 steps with augmentation: the test accuracy reaches 90% and the loss
# falls below half its initial value; the metrics carry eval_loss and eval_acc.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth-images --classes 10 --train 1000 --test 200 --size 16 --seed 4 --output "$tmp/d.h5" >/dev/null
mpirun -np 2 "$build/apps/vit_train" --config "$src/inputs/vit_tiny.ini" --input "$tmp/d.h5" --steps 60 \
  --eval-every 30 --metrics "$tmp/m.jsonl" >/dev/null
/usr/bin/python3 - "$tmp/m.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
train = [l["loss"] for l in lines if "loss" in l]
evals = [l for l in lines if "eval_acc" in l]
if len(train) != 60 or len(evals) != 2:
    sys.exit(f"error: {len(train)} training lines and {len(evals)} evaluations, expected 60 and 2")
if evals[-1]["eval_acc"] < 0.9:
    sys.exit(f"error: test accuracy {evals[-1]['eval_acc']:.3f} after 60 steps, expected >= 0.9")
if train[-1] > 0.5 * train[0]:
    sys.exit(f"error: loss {train[0]:.3f} -> {train[-1]:.3f}, expected to halve")
print(f"loss {train[0]:.3f} -> {train[-1]:.3f}; test accuracy {evals[0]['eval_acc']:.3f} at step 30, "
      f"{evals[-1]['eval_acc']:.3f} at step 60")
PY

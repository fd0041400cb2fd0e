#!/usr/bin/env bash
# The ViT data loader's throughput against what training consumes (issue: the loader alone must
# deliver at least 5x the images per second a training step needs at the CPU config).
#   1. vit_train --benchmark-loader: global batches of the augmenting loader on its background
#      thread (crop from 4-pixel padding, flip, normalisation), no training: images/s;
#   2. vit_train training steps of the same config: samples_per_s from the metrics (median of the
#      steps after the first 3);
#   then prints both and their ratio.
# usage: validation/bench/image_loader.sh [--build DIR] [--data cifar10.h5] [--config INI] [--threads N]
#   --data defaults to /tmp/tessera-cifar10/cifar10.h5, made by validation/cifar10/prepare.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build data=/tmp/tessera-cifar10/cifar10.h5 config=$root/inputs/vit_cifar10_cpu.ini threads=2
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "error: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$data" ] || "$root/validation/cifar10/prepare.sh" --build "$build" >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
loader=$("$build/apps/vit_train" --config "$config" --input "$data" --threads "$threads" --benchmark-loader 40 2>&1 |
         sed -n 's/.*loader: \([0-9.e+]*\) images\/s.*/\1/p')
[ -n "$loader" ] || { echo "error: vit_train --benchmark-loader printed no rate" >&2; exit 1; }
"$build/apps/vit_train" --config "$config" --input "$data" --threads "$threads" --epochs 0 --steps 12 --eval-every-epochs 0 --eval-every 0 \
  --metrics "$tmp/m.jsonl" >/dev/null 2>&1
/usr/bin/python3 - "$tmp/m.jsonl" "$loader" "$config" <<'PY'
import json, statistics, sys
rates = [json.loads(l)["samples_per_s"] for l in open(sys.argv[1]) if '"loss"' in l][3:]
train, loader = statistics.median(rates), float(sys.argv[2])
print(f"config {sys.argv[3].split('/')[-1]}: loader alone {loader:.0f} images/s, training consumes {train:.0f} "
      f"images/s (median of {len(rates)} steps): loader / training = {loader / train:.1f}x")
PY

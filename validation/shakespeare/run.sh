#!/usr/bin/env bash
# Trains a small byte-level GPT on tinyshakespeare and records its eval-loss curve.
# usage: validation/shakespeare/run.sh [--data PATH/tinyshakespeare.txt] [--out DIR] [--steps N] [--build DIR]
# Not part of CI: on 2 cores 600 steps of the default config take about five minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
data=$root/../shared/data/tinyshakespeare.txt
out=/tmp/tessera-shakespeare
steps=1000
build=$root/build
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "error: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$data" ] || { echo "error: $data not found (pass --data PATH/tinyshakespeare.txt)" >&2; exit 1; }
mkdir -p "$out"
"$build/apps/data_prep" text --input "$data" --output "$out/shakespeare.h5" --val-fraction 0.1 --overwrite
"$build/apps/gpt_train" --config "$root/inputs/gpt_small.ini" --input "$out/shakespeare.h5" \
  --steps "$steps" --warmup 100 --eval-every 100 --metrics "$out/metrics.jsonl" --overwrite  # a new curve replaces the last
python3 - "$out/metrics.jsonl" > "$out/eval_curve.txt" <<'PY'
import json, sys
print("step eval_loss(nats/byte) bits/byte")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "eval_loss" in r:
        print(r["step"], round(r["eval_loss"], 4), round(r["eval_loss"] / 0.6931471805599453, 4))
PY
cat "$out/eval_curve.txt"

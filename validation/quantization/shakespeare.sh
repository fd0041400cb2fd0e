#!/usr/bin/env bash
# Perplexity of quantised weights: trains a small byte-level GPT on tinyshakespeare (the config of
# validation/shakespeare), quantises its checkpoint to int8 and int4 (groups of 64 input features,
# the head included and not), and scores the held-out tenth with `generate --score` under each, and
# the quantised ones once more with int8 activations (generate --activations int8, rows "-a8").
# It scores 32 batches of 8 windows of 128 bytes and writes results.txt in the output folder: nats
# per byte, perplexity and its rise over f32.
# usage: validation/quantization/shakespeare.sh [--data PATH/tinyshakespeare.txt] [--out DIR] [--steps N] [--build DIR]
# Not part of CI: on 2 cores it takes about ten minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
data=$root/../shared/data/tinyshakespeare.txt
out=/tmp/tessera-quantization
steps=600
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
[ ! -e "$out" ] || { echo "error: $out exists; pass another --out (nothing is overwritten)" >&2; exit 1; }
mkdir -p "$out"
"$build/apps/data_prep" text --input "$data" --output "$out/shakespeare.h5" --val-fraction 0.1
"$build/apps/gpt_train" --config "$root/inputs/gpt_small.ini" --input "$out/shakespeare.h5" --steps "$steps" \
  --warmup 100 --checkpoint-dir "$out/ck" --metrics "$out/metrics.jsonl"
ck=$out/ck/step_$steps.h5
score() {  # NAME CHECKPOINT [GENERATE OPTIONS]: the held-out split's loss over every window
  "$build/apps/generate" --checkpoint "$2" --score "$out/shakespeare.h5" --seq-len 128 --global-batch 8 --eval-batches 32 \
    --max-batch 16 "${@:3}" >"$out/$1.score" 2>&1
  echo "$1 $(grep -o '^loss [-0-9.e+]*' "$out/$1.score" | cut -d' ' -f2)"
}
{
  score f32 "$ck"
  for bits in 8 4; do
    "$build/apps/ckpt_tool" quantize "$ck" --bits $bits --group-size 64 --output "$out/int$bits.h5" >/dev/null
    "$build/apps/ckpt_tool" quantize "$ck" --bits $bits --group-size 64 --quantize-head --output "$out/int$bits-head.h5" >/dev/null
    score "int$bits" "$out/int$bits.h5"
    score "int$bits-head" "$out/int$bits-head.h5"
    score "int$bits-a8" "$out/int$bits.h5" --activations int8
    score "int$bits-head-a8" "$out/int$bits-head.h5" --activations int8
  done
} >"$out/losses.txt"
python3 - "$out/losses.txt" <<'PY' | tee "$out/results.txt"
import math, sys
rows = [line.split() for line in open(sys.argv[1])]
base = float(rows[0][1])
print(f"{'weights':<12} {'nats/byte':>10} {'perplexity':>11} {'rise':>8}")
for name, loss in rows:
    loss = float(loss)
    print(f"{name:<12} {loss:>10.5f} {math.exp(loss):>11.4f} {100 * (math.exp(loss - base) - 1):>7.3f}%")
PY

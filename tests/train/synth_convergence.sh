#!/usr/bin/env bash
# Convergence: on a synthetic Markov corpus with a known entropy rate, a small GPT reaches an
# eval loss within 3% of that floor.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 64 --tokens 400000 --seed 1 --output "$tmp/data.h5" >/dev/null
floor=$(h5dump -a /entropy_rate "$tmp/data.h5" | awk '/\(0\)/ {print $2}')
[ -n "$floor" ] || { echo "error: no entropy_rate attribute in the synthetic data set"; exit 1; }
"$build/apps/gpt_train" --config "$src/inputs/gpt_tiny.ini" --input "$tmp/data.h5" --threads 1 --eval-batches 32 \
  --metrics "$tmp/m.jsonl" >/dev/null
python3 - "$tmp/m.jsonl" "$floor" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
evals = [r["eval_loss"] for r in rows if "eval_loss" in r]
floor = float(sys.argv[2])
if not evals:
    sys.exit("error: no eval_loss in the metrics")
gap = evals[-1] / floor - 1
print(f"entropy floor {floor:.4f} nats/token; eval losses {[round(e, 4) for e in evals]}; final gap {gap:+.2%}")
if gap > 0.03:
    sys.exit(f"error: final eval loss {evals[-1]:.4f} is more than 3% above the floor {floor:.4f}")
if gap < -0.02:
    sys.exit(f"error: final eval loss {evals[-1]:.4f} is below the entropy floor {floor:.4f}: the floor or the loss is wrong")
PY

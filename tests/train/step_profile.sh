#!/usr/bin/env bash
# The step's profile: every CPU step's metrics line carries gemm_ms, attention_ms, optimizer_ms,
# other_kernels_ms and data_ms, which (with comm_ms) fit inside step_ms; `--trace` without a
# pipeline writes one slice per step and the same split as counters; after the first step a step
# allocates no tensor (`allocations`: the buffers are sized in step 1 and reused).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 64 --tokens 20000 --seed 1 --output "$tmp/data.h5" >/dev/null
"$build/apps/gpt_train" --config "$src/inputs/gpt_tiny.ini" --input "$tmp/data.h5" --threads 1 --steps 3 \
  --eval-every 0 --metrics "$tmp/m.jsonl" --trace "$tmp/trace.json" >/dev/null
/usr/bin/python3 - "$tmp/m.jsonl" "$tmp/trace.json" <<'PY'
import json, sys
KEYS = ("gemm_ms", "attention_ms", "optimizer_ms", "other_kernels_ms", "data_ms")
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
if len(steps) != 3:
    sys.exit(f"error: {len(steps)} step lines in the metrics, expected 3")
for s in steps:
    missing = [k for k in KEYS if k not in s]
    if missing:
        sys.exit(f"error: step {s['step']} has no {missing}")
    if min(s[k] for k in KEYS) < 0 or s["gemm_ms"] <= 0 or s["optimizer_ms"] <= 0 or s["attention_ms"] <= 0:
        sys.exit(f"error: step {s['step']}: implausible split {[s[k] for k in KEYS]}")
    if s["step"] > 1 and s["allocations"] != 0:
        sys.exit(f"error: step {s['step']} allocated {s['allocations']} tensors; only step 1 may")
    covered = sum(s[k] for k in KEYS) + s["comm_ms"]
    if covered > s["step_ms"] * 1.0001:
        sys.exit(f"error: step {s['step']}: the split adds up to {covered} ms, more than the step's {s['step_ms']} ms")
events = json.load(open(sys.argv[2]))["traceEvents"]
slices = [e for e in events if e.get("ph") == "X" and e.get("cat") == "step"]
counters = [e for e in events if e.get("ph") == "C"]
if [e["name"] for e in slices] != ["step 1", "step 2", "step 3"] or len(counters) != 3:
    sys.exit(f"error: trace has step slices {[e['name'] for e in slices]} and {len(counters)} counter events")
for s, c in zip(steps, counters):
    for k in KEYS + ("comm_ms",):
        if abs(c["args"][k] - s[k]) > 1e-3 + 1e-6 * s[k]:
            sys.exit(f"error: step {s['step']}: trace counter {k} = {c['args'][k]}, metrics say {s[k]}")
print("3 steps: split " + ", ".join(f"{k} {steps[-1][k]:.2f}" for k in KEYS) + f" of {steps[-1]['step_ms']:.2f} ms; "
      "trace: 3 step slices, counters equal to the metrics; steps 2-3 allocated nothing")
PY

#!/usr/bin/env bash
# ZeRO-3 overlapped (--zero3-overlap on, the default: the next unit's all-gather posted while this
# one computes, reduce-scatters posted and completed later) against blocking (off): the same
# losses, evaluation losses, and parameters and optimizer states after 6 steps, bit for bit, with
# the same per-step communication bytes; at dp 2 with several micro-batches and selective
# checkpointing, at dp 4, on a pipeline (pp 2 x dp 2, 1F1B and ZB-H1's deferred weight
# gradients), for vit_train at dp 2 and moe_train at dp 2. Overlapped, steps after the first
# allocate nothing (the gather buffers are reused). The trace of an overlapped run shows each
# block's all-gather in flight (track 1) from within the use of the block before it (track 0)
# until after that use ends.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
"$build/apps/data_prep" synth-images --classes 4 --train 64 --test 16 --size 8 --seed 3 --output "$tmp/images.h5" >/dev/null
gpt=(--input "$tmp/data.h5" --layers 3 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2
     --seed 11 --threads 1)

# NAME RANKS APP args...: the run with --zero3-overlap off, then on; both must agree exactly.
same_both_ways() {
  local name=$1 ranks=$2 app=$3; shift 3
  for mode in off on; do
    mpirun -np "$ranks" "$build/apps/$app" "$@" --steps 6 --checkpoint-every 6 --zero 3 --zero3-overlap $mode \
      --metrics "$tmp/$name-$mode.jsonl" --checkpoint-dir "$tmp/$name-$mode" >/dev/null
  done
  echo -n "$name: "
  python3 "$src/tests/tools/compare_losses.py" "$tmp/$name-off.jsonl" "$tmp/$name-on.jsonl" --rtol 0
  /usr/bin/python3 - "$tmp/$name-off.jsonl" "$tmp/$name-on.jsonl" <<'PY'
import json, sys
off, on = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
steps = lambda rows: [r for r in rows if "step_ms" in r]
evals = lambda rows: [r["eval_loss"] for r in rows if "eval_loss" in r]
if not evals(off) or evals(off) != evals(on):
    sys.exit(f"error: evaluation losses {evals(on)} overlapped, {evals(off)} blocking")
for a, b in zip(steps(off), steps(on)):
    if a["comm_bytes"] != b["comm_bytes"]:
        sys.exit(f"error: step {a['step']}: comm_bytes {b['comm_bytes']} overlapped, {a['comm_bytes']} blocking")
    if b["step"] > 1 and b["allocations"] != 0:
        sys.exit(f"error: step {b['step']}: the overlapped run allocated {b['allocations']} tensors")
print(f"    {len(evals(on))} evaluations equal, comm_bytes equal every step, overlapped steps 2+ allocate nothing")
PY
  echo -n "    parameters and states after 6 steps: "
  /usr/bin/python3 "$src/tests/tools/compare_checkpoints.py" "$tmp/$name-off/step_6.h5" "$tmp/$name-on/step_6.h5" \
    --rtol 0
}

evals=(--eval-every 3 --eval-batches 2)
same_both_ways dp2-micro2-selective 2 gpt_train "${gpt[@]}" "${evals[@]}" --micro-batch 2 --activation-checkpointing selective
same_both_ways dp4 4 gpt_train "${gpt[@]}" "${evals[@]}" --micro-batch 1
same_both_ways pp2-dp2-1f1b 4 gpt_train "${gpt[@]}" "${evals[@]}" --pp 2 --micro-batch 1
same_both_ways pp2-dp2-zb 4 gpt_train "${gpt[@]}" "${evals[@]}" --pp 2 --micro-batch 1 --pp-schedule zb
same_both_ways moe-dp2 2 moe_train "${gpt[@]}" "${evals[@]}" --experts 4 --moe-every 2
same_both_ways vit-dp2 2 vit_train --input "$tmp/images.h5" --patch 4 --layers 2 --hidden 32 --heads 4 \
  --global-batch 8 --lr 3e-3 --seed 11 --threads 1 --eval-every 3

# The trace: a block's all-gather is posted during its neighbour's use and completes after it.
mpirun -np 2 "$build/apps/gpt_train" "${gpt[@]}" --steps 2 --eval-every 0 --zero 3 \
  --trace "$tmp/trace.json" --metrics "$tmp/trace.jsonl" >/dev/null
echo -n "trace: "
/usr/bin/python3 - "$tmp/trace.json" <<'PY'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 0]
uses = [e for e in events if e["cat"] == "zero3 unit" and e["tid"] == 0]
flights = [e for e in events if e["cat"] == "zero3" and e["tid"] == 1]
if not uses or not flights:
    sys.exit(f"error: {len(uses)} unit slices, {len(flights)} slices in flight in the trace")
def covered(use, name):  # an all-gather of `name` posted during `use` and completed after it ends
    return any(f["name"] == "all_gather " + name and use["ts"] <= f["ts"] <= use["ts"] + use["dur"] <=
               f["ts"] + f["dur"] for f in flights)
# Forward: blocks 0 and 1 each with the next block's gather in flight over their use; backward:
# blocks 2 and 1 with the previous block's; in each of the two steps.
checked = 0
for use in uses:
    if use["name"].startswith("blocks."):
        j = int(use["name"].split(".")[1])
        checked += sum(covered(use, f"blocks.{k}") for k in (j - 1, j + 1))
need = 2 * (2 + 2)
if checked < need:
    sys.exit(f"error: only {checked} of {need} block uses have a neighbouring block's gather in flight over them")
rs = [f for f in flights if f["name"].startswith("reduce_scatter ")]
print(f"{len(flights)} operations in flight ({len(rs)} reduce-scatters), {checked} block uses overlapped by "
      "the next block's all-gather")
PY

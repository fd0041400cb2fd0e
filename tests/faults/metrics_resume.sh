#!/usr/bin/env bash
# Metrics across a resume: a run checkpointed at step 3 dies at step 6 (test hook: SIGKILL), having
# logged steps 1-5 and evaluations at 2 and 4; `--resume auto` onto the same --metrics file keeps
# the run line and the lines up to step 3, drops those of steps 4-5 (saying so), appends a resume
# line and steps 4-6. The file ends with steps 1..6 once each, in order, each evaluation once, every
# line stamped with its time, and the losses of an uninterrupted run.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 1 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 6
        --lr 3e-3 --warmup 2 --seed 11 --threads 1 --eval-every 2 --eval-batches 2)
"$build/apps/gpt_train" "${common[@]}" --metrics "$tmp/ref.jsonl" >/dev/null

if TESSERA_FAULT_KILL=0:6 "$build/apps/gpt_train" "${common[@]}" --checkpoint-dir "$tmp/ck" --checkpoint-every 3 \
     --metrics "$tmp/m.jsonl" >"$tmp/killed.log" 2>&1; then
  echo "error: the run killed at step 6 exited 0"; exit 1
fi
[ -f "$tmp/ck/step_3.h5" ] && [ ! -e "$tmp/ck/step_6.h5" ] || { ls "$tmp/ck"; echo "error: expected only step_3.h5"; exit 1; }
"$build/apps/gpt_train" "${common[@]}" --checkpoint-dir "$tmp/ck" --checkpoint-every 3 --resume auto \
  --metrics "$tmp/m.jsonl" >"$tmp/resumed.log" 2>&1 || { cat "$tmp/resumed.log"; echo "error: the resume failed"; exit 1; }

/usr/bin/python3 - "$tmp/m.jsonl" "$tmp/ck/step_3.h5" <<'PY'
import json, re, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
kinds = ["run" if "run" in r else "resume" if "resume" in r else "eval" if "eval_loss" in r else "step" for r in rows]
got = [k if k in ("run", "resume") else f"{k}{r['step']}" for k, r in zip(kinds, rows)]
want = ["run", "step1", "step2", "eval2", "step3", "resume", "step4", "eval4", "step5", "step6", "eval6"]
if got != want:
    sys.exit(f"error: the metrics file holds {got}, expected {want}")
iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
for r, name in zip(rows, got):
    if not iso.match(str(r.get("time"))):
        sys.exit(f"error: line {name} has no ISO-8601 time: {r.get('time')!r}")
run, resume = rows[0]["run"], rows[5]["resume"]
if run["world_size"] != 1 or run["options"]["steps"] != "6" or not run["layout"] or "version" not in run:
    sys.exit(f"error: the run line lacks the world size, layout, version or options: {run}")
if resume["step"] != 3 or resume["checkpoint"] != sys.argv[2] or resume["world_size"] != 1 or not resume["layout"]:
    sys.exit(f"error: the resume line is {resume}, expected step 3 from {sys.argv[2]}")
print("metrics after the resume:", " ".join(got))
PY
grep -q "dropped 3 line(s) of steps 4..5 after the resumed step 3" "$tmp/resumed.log" ||
  { cat "$tmp/resumed.log"; echo "error: the log does not say which metrics lines were dropped"; exit 1; }
python3 "$src/tests/tools/compare_losses.py" "$tmp/ref.jsonl" "$tmp/m.jsonl"
python3 "$src/tests/tools/compare_losses.py" "$tmp/ref.jsonl" "$tmp/m.jsonl" --key eval_loss

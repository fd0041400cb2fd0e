#!/usr/bin/env bash
# The metrics file and the trace are valid JSON whatever the user's names hold: a --metrics path
# and --checkpoint-dir with quotes, backslashes, a newline and a control character, and an option
# with a byte that is not UTF-8 (the --offload-dir of an nvme offload). Every line of the metrics
# file (run, steps, resume) parses with Python's json module, each step line has its time, the run line records the options exactly
# (the non-UTF-8 byte as U+FFFD), and the resume line the checkpoint's path.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
weird=$tmp/$'a "quoted" \\back\\slash\nnew line\x01ctl'
odd=$tmp/$'x\xff"y\\'  # a byte that is not UTF-8: the offload folder's name
mkdir -p "$weird" "$odd"
common=(--input "$tmp/data.h5" --layers 1 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --threads 1
        --checkpoint-dir "$weird/ck" --metrics "$weird/m \"1\".jsonl" --offload nvme --offload-dir "$odd")
"$build/apps/gpt_train" "${common[@]}" --steps 2 --trace "$weird/trace \"t\".json" >/dev/null
"$build/apps/gpt_train" "${common[@]}" --steps 3 --resume auto >/dev/null

/usr/bin/python3 - "$weird" <<'PY'
import json, os, sys
weird = sys.argv[1]
metrics = f'{weird}/m "1".jsonl'
json.load(open(f'{weird}/trace "t".json'))  # raises on invalid JSON
rows = []
for n, line in enumerate(open(metrics, encoding="utf-8"), 1):
    try:
        rows.append(json.loads(line))
    except json.JSONDecodeError as e:
        sys.exit(f"error: line {n} of the metrics file is not JSON ({e}): {line!r}")
got = ["run" if "run" in r else "resume" if "resume" in r else r.get("step") for r in rows]
if got != ["run", 1, 2, "resume", 3]:
    sys.exit(f"error: the metrics file holds {got}, expected run, 1, 2, resume, 3")
for r in rows:
    if not isinstance(r.get("time"), str) or not r["time"].endswith("Z"):
        sys.exit(f"error: a line without its time: {r}")
options = rows[0]["run"]["options"]
if options["metrics"] != metrics or options["checkpoint-dir"] != f"{weird}/ck":
    sys.exit(f"error: the run line's paths differ: {options['metrics']!r}, {options['checkpoint-dir']!r}")
if options["offload-dir"] != os.path.dirname(weird) + '/x\ufffd"y\\':
    sys.exit(f"error: the non-UTF-8 option reads {options['offload-dir']!r}")
if rows[3]["resume"]["checkpoint"] != f"{weird}/ck/step_2.h5":
    sys.exit(f"error: the resume line names {rows[3]['resume']['checkpoint']!r}")
print(f"{len(rows)} metrics lines and the trace parse; paths with quotes, backslashes, a newline and a control"
      " character round-trip")
PY

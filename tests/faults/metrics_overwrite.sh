#!/usr/bin/env bash
# A fresh run never silently replaces a metrics file that holds lines: it is refused, naming the
# file and the ways out, and the file is left as it was (also under --resume auto when there is no
# checkpoint to resume); with --overwrite the file is replaced by the new run's; an empty file is
# simply started.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 1 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --threads 1)
"$build/apps/gpt_train" "${common[@]}" --steps 2 --metrics "$tmp/m.jsonl" >/dev/null
cp "$tmp/m.jsonl" "$tmp/kept.jsonl"

refused() {  # what, extra options...
  local what=$1; shift
  if "$build/apps/gpt_train" "${common[@]}" --steps 3 --metrics "$tmp/m.jsonl" "$@" >"$tmp/again.log" 2>&1; then
    echo "error: $what: a fresh run onto a metrics file that holds lines was not refused"; exit 1
  fi
  local line; line=$(grep -m1 "^error:" "$tmp/again.log" || true)
  for words in "metrics file $tmp/m.jsonl" "--resume" "--overwrite"; do
    [[ $line == *"$words"* ]] || { cat "$tmp/again.log"; echo "error: $what: the error does not name '$words'"; exit 1; }
  done
  cmp "$tmp/kept.jsonl" "$tmp/m.jsonl" || { echo "error: $what: the refused run changed the metrics file"; exit 1; }
  echo "$what: refused: ${line#error: }"
}
refused "fresh run"
refused "--resume auto without a checkpoint" --checkpoint-dir "$tmp/ck" --resume auto

"$build/apps/gpt_train" "${common[@]}" --steps 3 --metrics "$tmp/m.jsonl" --overwrite >"$tmp/over.log" 2>&1 ||
  { cat "$tmp/over.log"; echo "error: --overwrite: the run failed"; exit 1; }
: > "$tmp/empty.jsonl"
"$build/apps/gpt_train" "${common[@]}" --steps 3 --metrics "$tmp/empty.jsonl" >/dev/null
for f in m empty; do
  /usr/bin/python3 - "$tmp/$f.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
got = ["run" if "run" in r else r.get("step") for r in rows]
if got != ["run", 1, 2, 3] or rows[0]["run"]["options"]["steps"] != "3":
    sys.exit(f"error: {sys.argv[1]} holds {got}, expected the new run's: run, 1, 2, 3")
PY
done
echo "--overwrite: the file holds the new run's 3 steps; an empty file is started"

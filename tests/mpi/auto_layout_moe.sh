#!/usr/bin/env bash
# parallel_plan search --trainer moe_train end to end on 4 ranks (tests/mpi/auto_layout.sh's twin):
# the search ranks a tiny mixture-of-experts model's layouts (ep and sp among its choices), moe_train
# --dry-run with the top layout's flags plans the same peak, the top layout trains 2 steps, and
# moe_train --layout auto chooses that same layout and trains with it.
set -euo pipefail
build=$1
source_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpirun=${TESSERA_MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v "$mpirun" >/dev/null || { echo "mpirun not found (set TESSERA_MPIEXEC)"; exit 1; }
for app in data_prep parallel_plan moe_train; do
  [ -x "$build/apps/$app" ] || { echo "$build/apps/$app not built"; exit 1; }
done
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
source "$source_dir/tests/tools/machine_file.sh"
machine_file "$tmp/machine.json"  # one 4-rank calibration shared by the three auto_layout tests
model=(--config "$source_dir/inputs/moe_tiny.ini" --input "$tmp/data.h5")
"$build/apps/parallel_plan" search --trainer moe_train --ranks 4 --device-memory 64M --machine "$tmp/machine.json" \
  --json --top 0 "${model[@]}" >"$tmp/search.json"
python3 - "$tmp/search.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["trainer"] == "moe_train", r["trainer"]
eps = {l["args"][l["args"].index("--ep") + 1] for l in r["layouts"]}
assert eps == {"1", "2", "4"}, eps  # every ep that divides 4 ranks and 4 experts fits
sps = {l["args"][l["args"].index("--sp") + 1] for l in r["layouts"]}
assert {"1", "2"} <= sps, sps  # sequence parallelism among the choices (the experts' token shards)
PY
read -r -a top < <(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))['layouts'][0]['args']))" "$tmp/search.json")
planned=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['layouts'][0]['peak_bytes'])" "$tmp/search.json")
dry=$("$build/apps/moe_train" "${model[@]}" "${top[@]}" --dry-run | sed -n 's/^predicted peak per rank: \([0-9]*\) bytes.*/\1/p')
[ "$dry" = "$planned" ] || { echo "dry run plans $dry bytes, the search $planned for ${top[*]}"; exit 1; }
"$mpirun" --oversubscribe -np 4 "$build/apps/moe_train" "${model[@]}" "${top[@]}" --steps 2 --eval-every 0 \
  --metrics "$tmp/m.jsonl" --quiet
steps=$(grep -c '"step_ms"' "$tmp/m.jsonl")
[ "$steps" -ge 1 ] || { echo "the top layout ${top[*]} logged no step"; exit 1; }
"$mpirun" --oversubscribe -np 4 "$build/apps/moe_train" "${model[@]}" --layout auto --machine "$tmp/machine.json" \
  --device-memory-limit 64M --steps 2 --eval-every 0 >"$tmp/auto.log" 2>&1 || { cat "$tmp/auto.log"; exit 1; }
grep -q -- "--layout auto: ${top[*]} (predicted" "$tmp/auto.log" || { echo "--layout auto did not choose ${top[*]}:"; cat "$tmp/auto.log"; exit 1; }
grep -q "done: final loss" "$tmp/auto.log" || { echo "--layout auto did not train:"; cat "$tmp/auto.log"; exit 1; }
echo "ok: top moe_train layout ${top[*]}: planned peak $planned bytes = dry run; trained 2 steps; --layout auto chose it"

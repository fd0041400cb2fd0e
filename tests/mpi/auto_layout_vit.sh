#!/usr/bin/env bash
# parallel_plan search --trainer vit_train end to end on 4 ranks (tests/mpi/auto_layout_moe.sh's
# twin): the search ranks a tiny ViT's layouts (sp among its choices, no split_gather, no ep),
# vit_train --dry-run with the top layout's flags plans the same peak, the top layout trains 2
# steps, and vit_train --layout auto chooses that same layout and trains with it.
set -euo pipefail
build=$1
source_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpirun=${TESSERA_MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v "$mpirun" >/dev/null || { echo "mpirun not found (set TESSERA_MPIEXEC)"; exit 1; }
for app in data_prep parallel_plan vit_train; do
  [ -x "$build/apps/$app" ] || { echo "$build/apps/$app not built"; exit 1; }
done
# 8 x 8 images in 4 x 4 patches with mean pooling: 4 tokens, so sp 2 and 4 split them.
"$build/apps/data_prep" synth-images --classes 4 --train 64 --test 8 --size 8 --seed 5 --output "$tmp/images.h5" >/dev/null
source "$source_dir/tests/tools/machine_file.sh"
machine_file "$tmp/machine.json"  # one 4-rank calibration shared by the three auto_layout tests
model=(--input "$tmp/images.h5" --layers 2 --hidden 16 --heads 4 --patch 4 --pool mean --global-batch 8 --crop-pad 0
       --threads 1)
"$build/apps/parallel_plan" search --trainer vit_train --ranks 4 --device-memory 64M --machine "$tmp/machine.json" \
  --json --top 0 "${model[@]}" >"$tmp/search.json"
python3 - "$tmp/search.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["trainer"] == "vit_train", r["trainer"]
args = [l["args"] for l in r["layouts"]]
sps = {a[a.index("--sp") + 1] for a in args}
assert sps == {"1", "2", "4"}, sps  # every sp that divides 4 ranks and 4 tokens fits
modes = {a[a.index("--sp-mode") + 1] for a in args if "--sp-mode" in a}
assert modes == {"all_to_all", "ring"}, modes
assert not any("--ep" in a or "split_gather" in a for a in args)
assert any(a[a.index("--pp") + 1] != "1" for a in args) and any(a[a.index("--tp") + 1] == "4" for a in args)
PY
read -r -a top < <(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))['layouts'][0]['args']))" "$tmp/search.json")
planned=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['layouts'][0]['peak_bytes'])" "$tmp/search.json")
dry=$("$build/apps/vit_train" "${model[@]}" "${top[@]}" --dry-run | sed -n 's/^predicted peak per rank: \([0-9]*\) bytes.*/\1/p')
[ "$dry" = "$planned" ] || { echo "dry run plans $dry bytes, the search $planned for ${top[*]}"; exit 1; }
"$mpirun" --oversubscribe -np 4 "$build/apps/vit_train" "${model[@]}" "${top[@]}" --steps 2 --metrics "$tmp/m.jsonl" --quiet
steps=$(grep -c '"step_ms"' "$tmp/m.jsonl")
[ "$steps" -ge 1 ] || { echo "the top layout ${top[*]} logged no step"; exit 1; }
"$mpirun" --oversubscribe -np 4 "$build/apps/vit_train" "${model[@]}" --layout auto --machine "$tmp/machine.json" \
  --device-memory-limit 64M --steps 2 >"$tmp/auto.log" 2>&1 || { cat "$tmp/auto.log"; exit 1; }
grep -q -- "--layout auto: ${top[*]} (predicted" "$tmp/auto.log" || { echo "--layout auto did not choose ${top[*]}:"; cat "$tmp/auto.log"; exit 1; }
grep -q "done: final loss" "$tmp/auto.log" || { echo "--layout auto did not train:"; cat "$tmp/auto.log"; exit 1; }
echo "ok: top vit_train layout ${top[*]}: planned peak $planned bytes = dry run; trained 2 steps; --layout auto chose it"

#!/usr/bin/env bash
# parallel_plan end to end on 4 ranks: calibrate (run once for the three auto_layout tests:
# tests/tools/machine_file.sh) writes a valid machine file (structure and positive numbers, not
# timings), search --json ranks a tiny model's layouts, gpt_train --dry-run with the top
# layout's flags plans the same peak, and the top layout trains 2 steps; a grid tp layout (2d) is
# among the search's, --explain breaks it down, and it trains 2 steps.
set -euo pipefail
build=$1
source_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpirun=${TESSERA_MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v "$mpirun" >/dev/null || { echo "mpirun not found (set TESSERA_MPIEXEC)"; exit 1; }
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
source "$source_dir/tests/tools/machine_file.sh"
machine_file "$tmp/machine.json"  # one 4-rank calibration shared by the three auto_layout tests
python3 - "$tmp/machine.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["format"] == "tessera-machine" and m["format_version"] == 1, m.get("format")
assert m["machine"]["ranks"] == 4 and m["machine"]["nodes"] >= 1
for p in ("f32", "bf16"):
    assert [c["class"] for c in m["gemm"][p]] == ["small", "medium", "large"], m["gemm"][p]
    assert all(c["flops_per_s"] > 0 for c in m["gemm"][p])
assert m["attention_flops_per_s"] > 0 and m["copy_bytes_per_s"] > 0
assert all(v > 0 for v in m["kernel_seconds_per_element"].values())
intra = m["collectives"]["intra_node"]
for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
    sizes = sorted(f["group_size"] for f in intra[op])
    assert sizes == [2, 4], (op, sizes)
    assert all(f["latency_s"] >= 0 and f["seconds_per_byte"] >= 0 and f["latency_s"] + f["seconds_per_byte"] > 0 for f in intra[op])
assert [f["group_size"] for f in intra["send_recv"]] == [2]
PY
model=(--config "$source_dir/inputs/gpt_tiny.ini" --input "$tmp/data.h5")
"$build/apps/parallel_plan" search --ranks 4 --device-memory 64M --machine "$tmp/machine.json" --json --top 0 \
  "${model[@]}" >"$tmp/search.json"
read -r -a top < <(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))['layouts'][0]['args']))" "$tmp/search.json")
planned=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['layouts'][0]['peak_bytes'])" "$tmp/search.json")
dry=$("$build/apps/gpt_train" "${model[@]}" "${top[@]}" --dry-run | sed -n 's/^predicted peak per rank: \([0-9]*\) bytes.*/\1/p')
[ "$dry" = "$planned" ] || { echo "dry run plans $dry bytes, the search $planned for ${top[*]}"; exit 1; }
"$mpirun" --oversubscribe -np 4 "$build/apps/gpt_train" "${model[@]}" "${top[@]}" --steps 2 --eval-every 0 \
  --metrics "$tmp/m.jsonl" --quiet
steps=$(grep -c '"step_ms"' "$tmp/m.jsonl")
[ "$steps" -ge 1 ] || { echo "the top layout ${top[*]} logged no step"; exit 1; }
# --layout auto: every rank searches alike and trains with the same top layout, printed at start-up.
"$mpirun" --oversubscribe -np 4 "$build/apps/gpt_train" "${model[@]}" --layout auto --machine "$tmp/machine.json" \
  --device-memory-limit 64M --steps 2 --eval-every 0 >"$tmp/auto.log" 2>&1 || { cat "$tmp/auto.log"; exit 1; }
grep -q -- "--layout auto: ${top[*]} (predicted" "$tmp/auto.log" || { echo "--layout auto did not choose ${top[*]}:"; cat "$tmp/auto.log"; exit 1; }
grep -q "done: final loss" "$tmp/auto.log" || { echo "--layout auto did not train:"; cat "$tmp/auto.log"; exit 1; }
# Grid tensor parallelism: the search (every layout that fits: --top 0) offers --tp-mode 2d (tp 4 =
# 2 x 2 on 4 ranks); --explain prints its breakdown with the grid's communication and memory, the
# dry run of its flags plans the search's peak, and its command line trains.
read -r grid_peak grid_args < <(python3 - "$tmp/search.json" <<'PY'
import json, sys
layouts = [l for l in json.load(open(sys.argv[1]))["layouts"] if "--tp-mode" in l["args"]]
if not layouts:
    sys.exit("error: no --tp-mode layout among the search's")
print(layouts[0]["peak_bytes"], " ".join(layouts[0]["args"]))
PY
)
read -r -a grid <<<"$grid_args"
dry=$("$build/apps/gpt_train" "${model[@]}" "${grid[@]}" --dry-run | sed -n 's/^predicted peak per rank: \([0-9]*\) bytes.*/\1/p')
[ "$dry" = "$grid_peak" ] || { echo "dry run plans $dry bytes, the search $grid_peak for ${grid[*]}"; exit 1; }
"$build/apps/parallel_plan" search --ranks 4 --device-memory 64M --machine "$tmp/machine.json" \
  --explain "${grid[*]}" "${model[@]}" >"$tmp/explain.txt"
grep -q "grid tp: SUMMA" "$tmp/explain.txt" || { echo "--explain ${grid[*]} shows no grid communication:"; cat "$tmp/explain.txt"; exit 1; }
grep -q "grid tp: vocabulary regions" "$tmp/explain.txt" || { echo "--explain ${grid[*]} shows no grid memory:"; cat "$tmp/explain.txt"; exit 1; }
"$mpirun" --oversubscribe -np 4 "$build/apps/gpt_train" "${model[@]}" "${grid[@]}" --steps 2 --eval-every 0 \
  --metrics "$tmp/grid.jsonl" --quiet
grep -q '"step_ms"' "$tmp/grid.jsonl" || { echo "the grid layout ${grid[*]} logged no step"; exit 1; }
echo "ok: top layout ${top[*]}: planned peak $planned bytes = dry run; trained 2 steps; grid layout ${grid[*]} explained and trained"

#!/usr/bin/env bash
# Optimizer-state offload (--offload nvme: exp_avg and exp_avg_sq in scratch files streamed through
# two buffers) equals the in-memory run to a relative 1e-6 (it is in fact exact):
#   1. 10 steps at one rank;
#   2. 10 steps at dp 2 with ZeRO-1 (each rank streams its shard);
#   3. 5 steps + checkpoint + 5 resumed steps, both halves offloaded, equal 10 in-memory steps
#      (the checkpoint reads the states from the files and the resume writes them back);
#   4. --offload cpu equals none;
#   5. the scratch files are gone after every run, and an unwritable --offload-dir stops the run
#      before step 1 with a message naming it.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
compare="python3 $src/tests/tools/compare_losses.py --rtol 1e-6"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8
        --lr 3e-3 --warmup 2 --seed 11 --threads 1)
mkdir -p "$tmp/states"
nvme=(--offload nvme --offload-dir "$tmp/states")
train() {  # NAME RANKS options...
  local name=$1 ranks=$2; shift 2
  mpirun -np "$ranks" "$build/apps/gpt_train" "${common[@]}" --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; echo "error: run $name failed"; exit 1; }
  [[ -z $(ls -A "$tmp/states") ]] || { ls -l "$tmp/states"; echo "error: run $name left scratch files"; exit 1; }
}

# 1. one rank. This model's decay ranges fit one default piece (1M elements); streaming over many
#    pieces is covered by test_optim_offload (pieces of 7 elements, bit-identical).
train ref 1 --steps 10
train nvme 1 --steps 10 "${nvme[@]}"
echo -n "nvme offload vs in memory, one rank, 10 steps: "
$compare "$tmp/ref.jsonl" "$tmp/nvme.jsonl"

# 2. dp 2, ZeRO-1
train dp2-ref 2 --steps 10 --zero 1
train dp2-nvme 2 --steps 10 --zero 1 "${nvme[@]}"
echo -n "nvme offload vs in memory, dp 2 ZeRO-1, 10 steps: "
$compare "$tmp/dp2-ref.jsonl" "$tmp/dp2-nvme.jsonl"

# 3. resume
train first 2 --steps 10 --zero 1 --checkpoint-dir "$tmp/ck" --checkpoint-every 5 "${nvme[@]}"
test -f "$tmp/ck/step_5.h5"
train second 2 --steps 10 --zero 1 --resume "$tmp/ck/step_5.h5" "${nvme[@]}"
grep -m 5 '"loss"' "$tmp/first.jsonl" | cat - "$tmp/second.jsonl" > "$tmp/resumed.jsonl"
echo -n "nvme offload, 5 steps + checkpoint + 5 resumed vs 10 in memory: "
$compare "$tmp/dp2-ref.jsonl" "$tmp/resumed.jsonl"
# and the checkpoint written from the files loads into an in-memory run just as well
train third 1 --steps 10 --resume "$tmp/ck/step_5.h5"
grep -m 5 '"loss"' "$tmp/first.jsonl" | cat - "$tmp/third.jsonl" > "$tmp/resumed-memory.jsonl"
echo -n "checkpoint saved under nvme offload, resumed in memory at one rank: "
$compare "$tmp/dp2-ref.jsonl" "$tmp/resumed-memory.jsonl"

# 4. cpu
train cpu 1 --steps 10 --offload cpu
echo -n "cpu offload vs none: "
$compare "$tmp/ref.jsonl" "$tmp/cpu.jsonl"

# 5. a directory that cannot hold files (a path through a regular file: unwritable even for root)
echo -n "unwritable --offload-dir: "
touch "$tmp/plain-file"
if mpirun -np 2 "$build/apps/gpt_train" "${common[@]}" --steps 2 --offload nvme --offload-dir "$tmp/plain-file/x" \
     >"$tmp/bad.log" 2>&1; then
  echo "error: the run started with an unwritable --offload-dir"; exit 1
fi
grep -q "error: --offload-dir '$tmp/plain-file/x': cannot create files there" "$tmp/bad.log" ||
  { cat "$tmp/bad.log"; echo "error: no clear message"; exit 1; }
grep -q '"step"' "$tmp/bad.log" && { cat "$tmp/bad.log"; echo "error: a step ran"; exit 1; }
echo "refused: $(grep -m1 'error:' "$tmp/bad.log")"
echo -n "--offload nvme without --offload-dir: "
if "$build/apps/gpt_train" "${common[@]}" --steps 2 --offload nvme >"$tmp/nodir.log" 2>&1; then
  echo "error: accepted"; exit 1
fi
grep -q "error: --offload-dir is required" "$tmp/nodir.log" || { cat "$tmp/nodir.log"; echo "error: no clear message"; exit 1; }
echo "refused: $(grep -m1 'error:' "$tmp/nodir.log")"

#!/usr/bin/env bash
# Placement of the optimizer states between the compute device and the host tier, and the device
# memory budget (core/allocator.h, optim/adamw.h; docs/memory.md):
#   1. --offload cpu (every state on the host tier) and --offload-optim-frac 0.5 in chunks of 64 KiB
#      equal the plain run to a relative 1e-6 (the same kernel on each part: exact), at one rank and
#      at dp 2 with ZeRO-1; the device tier's state and peak bytes fall by exactly the host tier's
#      bytes, which the metrics report (host_state_bytes, host_peak_bytes);
#   2. a checkpoint saved with states split between the tiers resumes in a plain run and back;
#   2b. --zero 3 --offload-params (the shard of parameters and gradients on the host tier), alone and
#      with --offload cpu, at one rank and dp 2, equals plain ZeRO-3 the same way, and the planner
#      (--dry-run) predicts the one-rank device peak exactly;
#   3. --placement auto --device-memory-limit between the plain and the all-offloaded peak picks a
#      share whose measured device peak is within the limit (the planner is exact here), and the
#      run equals the plain one; a limit no placement meets is refused before step 1, naming the
#      shortfall; a static placement over the limit stops after step 1, naming the peak.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
compare="python3 $src/tests/tools/compare_losses.py --rtol 1e-6"
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 2 --hidden 64 --heads 4 --seq-len 16 --global-batch 8 --lr 3e-3 --warmup 2
        --seed 11 --threads 1 --placement-chunk-mb 0.0625)
train() {  # NAME RANKS options...
  local name=$1 ranks=$2; shift 2
  mpirun -np "$ranks" "$build/apps/gpt_train" "${common[@]}" --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; echo "error: run $name failed"; exit 1; }
}
last() {  # NAME KEY: the last training step's value
  python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if '\"loss\"' in l][-1].get(sys.argv[2], 0))" \
    "$tmp/$1.jsonl" "$2"
}
moved_to_host() {  # NAME PLAIN: device state and peak bytes fall by the host tier's state bytes
  local host; host=$(last "$1" host_state_bytes)
  [[ $host -gt 0 ]] || { echo "error: $1 reports no host-tier states"; exit 1; }
  [[ $(last "$1" host_peak_bytes) -eq $host ]] || { echo "error: $1: host_peak_bytes != host_state_bytes"; exit 1; }
  for key in state_bytes peak_mem_bytes; do
    [[ $(( $(last "$2" $key) - $(last "$1" $key) )) -eq $host ]] ||
      { echo "error: $1: $key $(last "$1" $key) is not $2's $(last "$2" $key) less $host"; exit 1; }
  done
  echo "    device state and peak bytes $host lower, on the host tier instead"
}

# 1. placements equal the plain run
train ref 1 --steps 10 --checkpoint-dir "$tmp/ref" --checkpoint-every 5
train cpu 1 --steps 10 --offload cpu
echo -n "--offload cpu vs on the device, one rank: "; $compare "$tmp/ref.jsonl" "$tmp/cpu.jsonl"; moved_to_host cpu ref
train half 1 --steps 10 --offload-optim-frac 0.5 --checkpoint-dir "$tmp/half" --checkpoint-every 5
echo -n "--offload-optim-frac 0.5, one rank: "; $compare "$tmp/ref.jsonl" "$tmp/half.jsonl"; moved_to_host half ref
train dp2 2 --steps 10 --zero 1
train dp2-half 2 --steps 10 --zero 1 --offload-optim-frac 0.5
echo -n "--offload-optim-frac 0.5, dp 2 ZeRO-1: "; $compare "$tmp/dp2.jsonl" "$tmp/dp2-half.jsonl"; moved_to_host dp2-half dp2

# 2. resume across placements
train half-to-plain 1 --steps 10 --resume "$tmp/half/step_5.h5"
grep -m 5 '"loss"' "$tmp/half.jsonl" | cat - "$tmp/half-to-plain.jsonl" > "$tmp/a.jsonl"
echo -n "split states saved, resumed on the device: "; $compare "$tmp/ref.jsonl" "$tmp/a.jsonl"
train plain-to-cpu 1 --steps 10 --resume "$tmp/ref/step_5.h5" --offload-optim-frac 0.75
grep -m 5 '"loss"' "$tmp/ref.jsonl" | cat - "$tmp/plain-to-cpu.jsonl" > "$tmp/b.jsonl"
echo -n "device states saved, resumed with 3/4 on the host tier: "; $compare "$tmp/ref.jsonl" "$tmp/b.jsonl"

# 2b. ZeRO-3's shard on the host tier
for ranks in 1 2; do
  train z3-$ranks $ranks --steps 10 --zero 3
  train z3-params-$ranks $ranks --steps 10 --zero 3 --offload-params
  echo -n "--zero 3 --offload-params, $ranks rank(s): "; $compare "$tmp/z3-$ranks.jsonl" "$tmp/z3-params-$ranks.jsonl"
  moved_to_host z3-params-$ranks z3-$ranks
  train z3-all-$ranks $ranks --steps 10 --zero 3 --offload-params --offload cpu
  echo -n "--zero 3 --offload-params --offload cpu, $ranks rank(s): "; $compare "$tmp/z3-$ranks.jsonl" "$tmp/z3-all-$ranks.jsonl"
  moved_to_host z3-all-$ranks z3-$ranks
done
planned=$("$build/apps/gpt_train" "${common[@]}" --zero 3 --offload-params --offload cpu --dry-run |
  sed -n 's/^predicted peak per rank: \([0-9]*\) bytes.*/\1/p')
[[ $planned -eq $(last z3-all-1 peak_mem_bytes) ]] ||
  { echo "error: planned $planned, measured $(last z3-all-1 peak_mem_bytes)"; exit 1; }
echo "    one rank, everything on the host tier: planned device peak $planned bytes = measured"

# 3. the budget
plain=$(last ref peak_mem_bytes) offloaded=$(last cpu peak_mem_bytes)
limit=$(( (plain + offloaded) / 2 ))
train auto 1 --steps 10 --placement auto --device-memory-limit "$limit"
echo -n "--placement auto within $limit bytes (plain $plain, all offloaded $offloaded): "
$compare "$tmp/ref.jsonl" "$tmp/auto.jsonl"
peak=$(last auto peak_mem_bytes)
[[ $peak -le $limit && $(last auto host_state_bytes) -gt 0 ]] || { echo "error: auto: peak $peak, limit $limit"; exit 1; }
grep -m1 -o 'placement auto: .*' "$tmp/auto.log" | sed 's/^/    /'
grep -q "planned device peak $peak bytes" "$tmp/auto.log" || { echo "error: auto: the plan did not predict $peak"; exit 1; }
echo "    measured device peak $peak <= $limit, as planned"
refused() {  # EXPECTED_MESSAGE RANKS options...
  local want=$1 ranks=$2; shift 2
  if mpirun -np "$ranks" "$build/apps/gpt_train" "${common[@]}" --steps 3 "$@" >"$tmp/refused.log" 2>&1; then
    echo "error: accepted: $*"; exit 1
  fi
  grep -qF -- "$want" "$tmp/refused.log" || { cat "$tmp/refused.log"; echo "error: '$want' not said"; exit 1; }
  echo "refused: $(grep -m1 'error:' "$tmp/refused.log")"
}
refused "even with every optimizer state on the host tier the plan needs $offloaded bytes" 1 \
  --placement auto --device-memory-limit $(( offloaded - 1 ))
grep -q '"step"' "$tmp/refused.log" && { echo "error: a step ran before the refusal"; exit 1; }
refused "step 1: the device tier's peak reached $plain bytes" 1 --device-memory-limit "$limit"
refused "step 1: the device tier's peak reached" 2 --device-memory-limit 1M  # both ranks stop together
refused "--placement auto chooses --offload-optim-frac" 1 --placement auto
refused "--offload-optim-frac 0.5 places the optimizer states itself" 1 --offload-optim-frac 0.5 --offload cpu
refused "--device-memory-limit 2X: expected a number of bytes" 1 --device-memory-limit 2X
refused "--offload-params moves ZeRO-3's shard of the parameters: it needs --zero 3" 1 --offload-params
refused "--offload-optim-frac must be in [0, 1], got 1.5" 1 --offload-optim-frac 1.5
refused "--placement some: expected static or auto" 1 --placement some
placement_common=("${common[@]}")
common=("${common[@]:0:${#common[@]}-2}")  # without common's own --placement-chunk-mb (last)
refused "--placement-chunk-mb must be > 0" 1 --placement-chunk-mb 0
common=("${placement_common[@]}")
"$build/apps/data_prep" synth-images --classes 3 --train 24 --test 8 --size 8 --seed 1 --output "$tmp/images.h5" >/dev/null
echo -n "vit_train --placement auto: "
if "$build/apps/vit_train" --input "$tmp/images.h5" --layers 1 --hidden 16 --heads 2 --global-batch 4 --steps 1 \
     --placement auto --device-memory-limit 1G >"$tmp/vit.log" 2>&1; then
  echo "error: accepted"; exit 1
fi
grep -qF "vit_train: --placement auto needs the memory planner" "$tmp/vit.log" || { cat "$tmp/vit.log"; exit 1; }
echo "refused: $(grep -m1 'error:' "$tmp/vit.log")"

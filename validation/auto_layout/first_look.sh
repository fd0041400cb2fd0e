#!/usr/bin/env bash
# A first look at the time model (not the full campaign of issue 35): on this machine for 4 ranks,
# calibrate, search a small GPT, then run the search's top 3 and 3 other fitting layouts (ranks 10,
# 40, 160 of the list) for a few steps each and print predicted against measured step time (the
# median and the least step_ms of steps 2-8; the least is the step least disturbed by other load).
# Usage: first_look.sh BUILD_DIR [OUT_DIR]   (the data set and machine file in OUT_DIR are made once
# and reused; each run's search and metrics go to a new folder OUT_DIR/run.XXXXXX)
set -euo pipefail
build=$1
out=${2:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
[ -f "$out/data.h5" ] || "$build/apps/data_prep" synth --vocab 61 --tokens 50000 --seed 5 --output "$out/data.h5" >/dev/null
[ -f "$out/machine.json" ] || mpirun --oversubscribe -np 4 "$build/apps/parallel_plan" calibrate --output "$out/machine.json"
run=$(mktemp -d "$out/run.XXXXXX")
model=(--config "$here/../../inputs/gpt_tiny.ini" --input "$out/data.h5" --hidden 128 --layers 4 --seq-len 64)
"$build/apps/parallel_plan" search --ranks 4 --device-memory 256M --machine "$out/machine.json" --json --top 0 \
  "${model[@]}" >"$run/search.json"
printf "%-4s %10s %10s %10s  %s\n" rank predicted median least layout
for pick in 1 2 3 10 40 160; do
  line=$(python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); l=d['layouts']
i=int(sys.argv[2])-1
if i < len(l): print('%.3f' % l[i]['predicted_step_ms'], ' '.join(l[i]['args']))" "$run/search.json" "$pick")
  [ -n "$line" ] || continue
  predicted=${line%% *}
  read -r -a args <<<"${line#* }"
  mpirun --oversubscribe -np 4 "$build/apps/gpt_train" "${model[@]}" "${args[@]}" --steps 8 --log-every 1 \
    --eval-every 0 --metrics "$run/m_$pick.jsonl" --quiet
  measured=$(python3 -c "
import json,sys,statistics
s=[json.loads(l) for l in open(sys.argv[1])]; s=[x['step_ms'] for x in s if 'step_ms' in x and x['step']>=2]
print('%.3f %.3f' % (statistics.median(s), min(s)))" "$run/m_$pick.jsonl")
  printf "%-4s %10s %10s %10s  %s\n" "$pick" "$predicted" ${measured} "${args[*]}"
done

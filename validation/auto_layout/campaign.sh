#!/usr/bin/env bash
# Issue 35's validation campaign: for 4 and 8 ranks on this machine and two GPT models (A fits
# without sharding; B, under a --device-memory limit, does not fit as plain data parallelism and
# needs ZeRO, pipeline, tensor or sequence parallelism or checkpointing), calibrate, search, run the
# search's top 5 and a seeded random sample of 10 other valid layouts for a few steps each, and
# record predicted against measured step time and peak memory. campaign_report.py turns the records
# into the README's tables and predicted_vs_measured.png.
# usage: validation/auto_layout/campaign.sh BUILD_DIR [OUT_DIR]
#   OUT_DIR (default: a new /tmp/tessera-campaign.XXXXXX) gets a new folder run-<UTC time>.XXXX per
#   run: data set, machine files, searches, metrics, records.jsonl, report.md, the PNG. Nothing
#   earlier is overwritten. Run it on an otherwise idle machine: it times steps.
#   CAMPAIGN_RANKS="4 8" CAMPAIGN_STEPS=10 CAMPAIGN_RANDOM=10 CAMPAIGN_SEED=35 override the plan.
#   CAMPAIGN_BIND (default core:overload-allowed) is given to mpirun's --bind-to for the calibration
#   and every run alike: it pins the ranks to cores round-robin, so which ranks share a core does not
#   change from run to run (unbound, OpenMPI's choice when ranks outnumber cores, one layout's runs
#   measured up to 1.5x apart; bound, within 8%). CAMPAIGN_BIND=none leaves them unbound.
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
parent=${2:-$(mktemp -d /tmp/tessera-campaign.XXXXXX)}
mkdir -p "$parent"
out=$(mktemp -d "$parent/run-$(date -u +%Y%m%dT%H%M%S).XXXX")
ranks_list=${CAMPAIGN_RANKS:-"4 8"}
steps=${CAMPAIGN_STEPS:-10}
n_random=${CAMPAIGN_RANDOM:-10}
seed=${CAMPAIGN_SEED:-35}
bind=(--bind-to "${CAMPAIGN_BIND:-core:overload-allowed}")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
py=/usr/bin/python3

"$build/apps/data_prep" synth --vocab 61 --tokens 200000 --seed 5 --output "$out/data.h5" >/dev/null
base=(--config "$root/inputs/gpt_tiny.ini" --input "$out/data.h5" --global-batch 16)
model_A=(--hidden 128 --layers 4 --heads 4 --seq-len 64)
model_B=(--hidden 256 --layers 8 --heads 8 --seq-len 128)
memory_A=256M
memory_B=40M  # plain data parallelism (ZeRO 0) of model B plans 53 MiB per rank

echo "campaign: $out (ranks: $ranks_list; $steps steps per layout; top 5 + $n_random random, seed $seed; --bind-to ${bind[1]})"
for ranks in $ranks_list; do
  mpirun --oversubscribe "${bind[@]}" -np "$ranks" "$build/apps/parallel_plan" calibrate --output "$out/machine_$ranks.json" >/dev/null
  for name in A B; do
    model_var="model_${name}[@]"; memory_var="memory_$name"
    model=("${base[@]}" "${!model_var}")
    tag="${name}_$ranks"
    "$build/apps/parallel_plan" search --ranks "$ranks" --device-memory "${!memory_var}" \
      --machine "$out/machine_$ranks.json" --json --top 0 "${model[@]}" >"$out/search_$tag.json"
    # The picks: ranks 1-5 of the list and n_random others drawn with a seeded generator.
    $py - "$out/search_$tag.json" "$n_random" "$seed" >"$out/picks_$tag.txt" <<'PY'
import json, random, sys
layouts = json.load(open(sys.argv[1]))["layouts"]
rest = list(range(5, len(layouts)))
picks = list(range(min(5, len(layouts)))) + sorted(random.Random(int(sys.argv[3])).sample(rest, min(int(sys.argv[2]), len(rest))))
for i in picks:
    l = layouts[i]
    print(i + 1, "%.4f" % l["predicted_step_ms"], l["peak_bytes"], " ".join(l["args"]))
PY
    while read -r rank predicted peak args_text; do
      read -r -a args <<<"$args_text"
      metrics="$out/metrics_${tag}_$rank.jsonl"
      echo "  $tag search rank $rank: $args_text"
      mpirun --oversubscribe "${bind[@]}" -np "$ranks" "$build/apps/gpt_train" "${model[@]}" "${args[@]}" --steps "$steps" \
        --log-every 1 --eval-every 0 --metrics "$metrics" --quiet </dev/null
      $py - "$metrics" "$tag" "$name" "$ranks" "$rank" "$predicted" "$peak" "$args_text" >>"$out/records.jsonl" <<'PY'
import json, statistics, sys
metrics, tag, model, ranks, rank, predicted, peak, args = sys.argv[1:]
steps = [json.loads(l) for l in open(metrics)]
steps = [s for s in steps if "step_ms" in s]
timed = [s["step_ms"] for s in steps if s["step"] >= 3]  # steps 1-2 warm up (allocation, first gathers)
print(json.dumps({"tag": tag, "model": model, "ranks": int(ranks), "search_rank": int(rank),
                  "predicted_ms": float(predicted), "measured_ms": statistics.median(timed),
                  "measured_min_ms": min(timed), "planned_peak_bytes": int(peak),
                  "measured_peak_bytes": max(s["peak_mem_bytes"] for s in steps), "args": args}))
PY
    done <"$out/picks_$tag.txt"
  done
done
$py "$here/campaign_report.py" "$out/records.jsonl" "$out" | tee "$out/report.md"
echo "campaign: records, report.md and predicted_vs_measured.png in $out"

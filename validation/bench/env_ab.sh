#!/usr/bin/env bash
# A/B of one environment setting on a training run: the same command alternately without (A) and
# with (B) the setting, R rounds each, interleaved so that a shared machine's drift falls on both
# alike; prints each side's median step time (from the metrics, warm-up steps dropped), its GEMM
# time and the ratio B / A. For switches such as TESSERA_SHARED_BF16_OPERANDS=0 or
# TESSERA_CPU_GEMM=blas.
# usage: env_ab.sh --set VAR=VALUE [--rounds R] [--warmup W] [--out DIR] -- APP [APP ARGS]
#   APP runs as given (e.g. build/apps/gpt_train ...); --metrics is added. Files go to --out
#   (default: a temporary folder), kept: <side>_r<round>.{jsonl,log}.
set -euo pipefail
setting="" rounds=3 warmup=3 out=""
while (($#)); do
  case $1 in
    --set) setting=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "error: unknown option $1 (usage in the script's header)" >&2; exit 2 ;;
  esac
done
[[ $setting == *=* ]] || { echo "error: --set VAR=VALUE is required" >&2; exit 2; }
(($#)) || { echo "error: the command to run goes after --" >&2; exit 2; }
out=${out:-$(mktemp -d /tmp/env_ab.XXXXXX)}
mkdir -p "$out"

for ((r = 1; r <= rounds; ++r)); do
  for side in A B; do
    run=("$@" --metrics "$out/${side}_r$r.jsonl")
    [[ $side == B ]] && run=(env "$setting" "${run[@]}")
    echo "+ [round $r/$rounds, $side] ${run[*]}"
    rm -f "$out/${side}_r$r.jsonl"
    "${run[@]}" > "$out/${side}_r$r.log" 2>&1 ||
      { tail -5 "$out/${side}_r$r.log"; echo "error: run failed ($side, round $r)" >&2; exit 1; }
  done
done

/usr/bin/python3 - "$out" "$rounds" "$warmup" "$setting" <<'EOF'
import json, os, statistics, sys
out, rounds, warmup, setting = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def steps(side):
    rows = []
    for r in range(1, rounds + 1):
        with open(os.path.join(out, f"{side}_r{r}.jsonl")) as f:
            for line in f:
                o = json.loads(line)
                if "step_ms" in o and "loss" in o and int(o["step"]) > warmup:
                    rows.append(o)
    if not rows:
        sys.exit(f"error: no timed steps in {out}/{side}_r*.jsonl (more steps than --warmup {warmup}?)")
    return rows
med = {}
for side, label in (("A", "as is"), ("B", setting)):
    rows = steps(side)
    med[side] = statistics.median(float(o["step_ms"]) for o in rows)
    gemm = statistics.median(float(o.get("gemm_ms", 0.0)) for o in rows)
    print(f"{side} ({label}): median step {med[side]:.1f} ms, GEMMs {gemm:.1f} ms, {len(rows)} timed steps")
print(f"ratio B / A of the median steps: {med['B'] / med['A']:.3f}")
EOF

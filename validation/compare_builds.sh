#!/usr/bin/env bash
# Compares two builds' training numbers bit for bit: the two CPU benchmark configurations of
# validation/bench/gpt_cpu.sh (a: GPT-2 124M, b: 6 layers, hidden 384) in fp32 and bf16, and a tiny
# GPT under tp 2 x pp 2 x dp 2 (8 ranks) in fp32 and bf16, each run with both builds on the same
# data and options. Compared: every step's loss and every eval_loss of the metrics files (as
# written: 9 significant digits, exact for the float training loss), and the final checkpoint's
# parameters and optimizer states byte for byte (a hash of each dataset; the file is deleted once
# hashed). Prints a table; exits 1 on any difference, 2 on bad usage. Not a test: never registered
# with CTest (config a takes minutes per run on 2 cores).
#
# usage: compare_builds.sh BUILD_A BUILD_B [--steps N] [--only a|b|grid] [--out DIR]
#   --steps N: steps per benchmark-configuration run (default 4; the grid run takes 6), an
#   evaluation after the last one.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3
steps=4
only=""
out=${OUT_DIR:-/tmp/tessera-compare}
usage() { sed -n '11,13p' "$0" | sed 's/^# \{0,1\}//'; }
[[ $# -ge 2 ]] || { usage >&2; exit 2; }
build_a=$1 build_b=$2
shift 2
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "error: --steps must be a positive integer, not '$steps'" >&2; exit 2; }
case $only in ""|a|b|grid) ;; *) echo "error: --only must be a, b or grid" >&2; exit 2 ;; esac
for b in "$build_a" "$build_b"; do
  for exe in data_prep gpt_train; do
    [[ -x $b/apps/$exe ]] || { echo "error: $b/apps/$exe not found (a build directory expected)" >&2; exit 2; }
  done
done
command -v mpirun >/dev/null || { echo "error: mpirun not found (the grid run needs 8 MPI ranks)" >&2; exit 2; }
"$py" -c 'import h5py' 2>/dev/null || { echo "error: $py cannot import h5py (Debian: python3-h5py)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

mkdir -p "$out/data"
rm -rf "$out/runs"
mkdir -p "$out/runs"

# Token data (made by build A's data_prep; both builds read the same files).
data() {  # VOCAB SPLIT(train|val) -> path
  local f=$out/data/v$1_$2.h5 seed=1
  [[ $2 == val ]] && seed=2
  if [[ ! -s $f ]]; then
    rm -f "$f.tmp"
    "$build_a/apps/data_prep" synth --vocab "$1" --tokens 300000 --seed "$seed" --output "$f.tmp" >/dev/null
    mv "$f.tmp" "$f"
  fi
  echo "$f"
}

# The final checkpoint's datasets hashed into NAME.hashes, then the checkpoint removed.
hash_checkpoint() {  # DIR HASHES
  "$py" - "$1" "$2" <<'PY'
import glob, hashlib, json, os, shutil, sys
import h5py
folder, target = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(folder, "step_*.h5")), key=lambda f: int(f.rsplit("_", 1)[1][:-3]))
if not files:
    sys.exit(f"error: no checkpoint in {folder}")
hashes = {}
with h5py.File(files[-1], "r") as f:
    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and (name.startswith("params/") or name.startswith("optim/")):
            hashes[name] = hashlib.sha256(obj[()].tobytes()).hexdigest()
    f.visititems(visit)
json.dump(hashes, open(target, "w"), indent=0, sort_keys=True)
shutil.rmtree(folder)
PY
}

run() {  # NAME BUILD RANKS gpt_train options...
  local name=$1 build=$2 ranks=$3
  shift 3
  local dir=$out/runs/$name
  mkdir -p "$dir"
  echo "+ $name"
  if ! mpirun -np "$ranks" "$build/apps/gpt_train" "$@" --metrics "$dir/metrics.jsonl" --checkpoint-dir "$dir/ckpt" \
      >"$dir/log" 2>&1; then
    tail -5 "$dir/log"
    echo "error: run $name failed (log: $dir/log)" >&2
    exit 1
  fi
  hash_checkpoint "$dir/ckpt" "$dir/hashes.json"
}

cases=()
# The benchmark configurations, with gpt_cpu.sh's options (name:layers:hidden:heads:seq:batch:vocab).
for spec in "a:12:768:12:64:4:50257" "b:6:384:6:128:8:8192"; do
  IFS=: read -r name L C H T B V <<<"$spec"
  [[ -z $only || $only == "$name" ]] || continue
  train=$(data "$V" train) val=$(data "$V" val)
  for precision in fp32 bf16; do
    for side in A B; do
      build=$build_a; [[ $side == B ]] && build=$build_b
      run "$name-$precision-$side" "$build" 1 --input "$train" --val-input "$val" --layers "$L" --hidden "$C" \
        --heads "$H" --seq-len "$T" --global-batch "$B" --micro-batch "$B" --steps "$steps" --lr 3e-4 --warmup 0 \
        --threads 2 --precision "$precision" --eval-every "$steps" --eval-batches 2 --log-every 1
    done
    cases+=("$name-$precision")
  done
done
# tp 2 x pp 2 x dp 2 on 8 ranks: a tiny GPT, micro-batched for the pipeline.
if [[ -z $only || $only == grid ]]; then
  train=$(data 97 train) val=$(data 97 val)
  for precision in fp32 bf16; do
    for side in A B; do
      build=$build_a; [[ $side == B ]] && build=$build_b
      run "grid-tp2pp2dp2-$precision-$side" "$build" 8 --input "$train" --val-input "$val" --tp 2 --pp 2 \
        --layers 4 --hidden 64 --heads 4 --seq-len 32 --global-batch 16 --micro-batch 2 --steps 6 --lr 3e-3 \
        --warmup 2 --threads 1 --precision "$precision" --eval-every 3 --eval-batches 2 --log-every 1
    done
    cases+=("grid-tp2pp2dp2-$precision")
  done
fi

"$py" - "$out/runs" "$build_a" "$build_b" "${cases[@]}" <<'PY'
import json, os, sys
runs, build_a, build_b, cases = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

def metrics(path):
    losses, evals = {}, {}
    for line in open(path):
        rec = json.loads(line)
        if "eval_loss" in rec:
            evals[rec["step"]] = rec["eval_loss"]
        elif "loss" in rec and "step" in rec:
            losses[rec["step"]] = rec["loss"]
    return losses, evals

print(f"A: {build_a}\nB: {build_b}\n")
print(f"{'run':<22} {'steps':>5} {'last loss A':>14} {'last loss B':>14} {'eval A':>12} {'eval B':>12} "
      f"{'tensors':>8}  result")
bad = 0
for case in cases:
    a_dir, b_dir = (os.path.join(runs, f"{case}-{s}") for s in "AB")
    la, ea = metrics(os.path.join(a_dir, "metrics.jsonl"))
    lb, eb = metrics(os.path.join(b_dir, "metrics.jsonl"))
    ha = json.load(open(os.path.join(a_dir, "hashes.json")))
    hb = json.load(open(os.path.join(b_dir, "hashes.json")))
    problems = []
    if not la or not ea:
        problems.append("no loss or eval_loss lines")
    if la.keys() != lb.keys() or ea.keys() != eb.keys():
        problems.append("different steps logged")
    problems += [f"step {s} loss {la[s]!r} != {lb[s]!r}" for s in sorted(la.keys() & lb.keys()) if la[s] != lb[s]]
    problems += [f"step {s} eval_loss {ea[s]!r} != {eb[s]!r}" for s in sorted(ea.keys() & eb.keys()) if ea[s] != eb[s]]
    if ha.keys() != hb.keys() or not ha:
        problems.append("different checkpoint datasets")
    problems += [f"checkpoint {k} differs" for k in sorted(ha.keys() & hb.keys()) if ha[k] != hb[k]]
    last = max(la) if la else None
    lev = max(ea) if ea else None
    print(f"{case:<22} {len(la):>5} {la.get(last, float('nan')):>14.9g} {lb.get(last, float('nan')):>14.9g} "
          f"{ea.get(lev, float('nan')):>12.9g} {eb.get(lev, float('nan')):>12.9g} {len(ha):>8}  "
          f"{'identical' if not problems else 'DIFFERENT'}")
    for p in problems[:10]:
        print(f"    {p}")
    bad += bool(problems)
print()
print("all identical: every loss, eval_loss and checkpoint tensor bit for bit" if not bad
      else f"{bad} of {len(cases)} runs differ")
sys.exit(1 if bad else 0)
PY

#!/usr/bin/env bash
# CIFAR-10 convergence under several parallel layouts (not a test): trains the same ViT with the
# same seed and global batch on one rank and under each layout, then draws every layout's test
# accuracy and loss curves in one PNG and writes a markdown table of the final accuracy per layout.
# The layouts run one after another; each must reproduce the one-rank curve.
#
# usage: validation/cifar10/run.sh [--config FILE.ini] [--epochs E] [--data cifar10.h5] [--out DIR]
#                                  [--build DIR] [--layouts "name:ranks:options;..."] [--threads T]
#   --config   default inputs/vit_cifar10_cpu.ini (inputs/vit_cifar10_lite7.ini is the reference)
#   --epochs   overrides the config's epochs (the comparison, not the final accuracy, is the point
#              on a small machine)
#   --data     default: made by validation/cifar10/prepare.sh from ../shared/data
#   --layouts  default: one rank, tp 4 (1d), tp 4 (2d), tp 8 (2.5d, depth 2), tp 8 (3d), pp 2
#              (1f1b) and tp 2 x dp 2 ZeRO-3
# Needs python3-matplotlib (jobscripts/install_deps.sh validation).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
config=$root/inputs/vit_cifar10_cpu.ini
epochs=""
data=""
out=/tmp/tessera-cifar10-run
build=$root/build
threads=1
layouts="one-rank:1:;tp4-1d:4:--tp 4;tp4-2d:4:--tp 4 --tp-mode 2d;tp8-2.5d:8:--tp 8 --tp-mode 2.5d --tp-depth 2"
layouts+=";tp8-3d:8:--tp 8 --tp-mode 3d;pp2-1f1b:2:--pp 2 --micro-batch 16;tp2-dp2-zero3:4:--tp 2 --zero 3"
while [ $# -gt 0 ]; do
  case $1 in
    --config) config=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
/usr/bin/python3 -c "import matplotlib" 2>/dev/null ||
  { echo "error: python3-matplotlib is missing (jobscripts/install_deps.sh validation)" >&2; exit 1; }
mkdir -p "$out"
if [ -z "$data" ]; then
  data=$out/cifar10.h5
  [ -f "$data" ] || bash "$root/validation/cifar10/prepare.sh" --out "$out" --build "$build" >/dev/null
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
extra=(--threads "$threads")
[ -n "$epochs" ] && extra+=(--epochs "$epochs")
IFS=';' read -ra cases <<< "$layouts"
names=()
for c in "${cases[@]}"; do
  IFS=: read -r name ranks opts <<< "$c"
  echo "== $name ($ranks ranks: ${opts:-no options})"
  # shellcheck disable=SC2086
  mpirun -np "$ranks" "$build/apps/vit_train" --config "$config" --input "$data" "${extra[@]}" $opts \
    --metrics "$out/$name.jsonl" --overwrite 2>&1 | grep -E "eval_loss|done|error" || true
  [ -f "$out/$name.jsonl" ] || { echo "error: $name wrote no metrics" >&2; exit 1; }
  names+=("$name")
done
/usr/bin/python3 "$root/validation/cifar10/plot.py" "$out" "${names[@]}"

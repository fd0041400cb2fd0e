#!/usr/bin/env bash
# Quickstart: installs what is missing, builds, makes the default data (a synthetic Markov corpus
# with a known entropy floor) and trains a small GPT on it with RANKS (default 4) data-parallel ranks.
# usage: RANKS=4 jobscripts/quickstart.sh [extra gpt_train options]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/jobscripts/install_deps.sh" build
"$root/jobscripts/build.sh"

run=${RUN_DIR:-$root/runs/quickstart}
mkdir -p "$run"
data="$run/synth_v64.h5"
[ -f "$data" ] || "$build/apps/data_prep" synth --vocab 64 --tokens 400000 --seed 1 --output "$data"
floor=$(h5dump -a /entropy_rate "$data" 2>/dev/null | awk '/\(0\)/ {print $2}')

ranks=${RANKS:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe -np "$ranks" "$build/apps/gpt_train" --config "$root/inputs/gpt_tiny.ini" \
  --input "$data" --threads 1 --metrics "$run/metrics.jsonl" --overwrite "$@"
echo "quickstart: metrics in $run/metrics.jsonl; the data's entropy floor is ${floor:-?} nats/token"

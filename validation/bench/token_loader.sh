#!/usr/bin/env bash
# The streamed token loader at corpus scale (issue 33): a large token file made by data_prep synth
# (uint16, chunked; 2 billion tokens = 4 GB by default), read by R ranks, warm (the whole file read
# into the page cache first) and cold (the file's pages dropped from the page cache first, this file
# only: posix_fadvise(POSIX_FADV_DONTNEED) after an fsync, checked with fincore; the machine's other
# caches are left alone, so /proc/sys/vm/drop_caches is never written):
#   1. gpt_train --benchmark-loader: each rank reads its share of global batches of random
#      windows on the loader's background thread, no model: tokens/s on the slowest and fastest rank;
#   2. gpt_train training steps of --config on the same file and ranks: data_ms (the step's wait
#      for its rows) as a share of step_ms, median over the steps after the first, and the first
#      step's data_ms (the prefetcher's start: the cold reads no step hides).
# Also prints the peak resident memory per rank (rss_peak_bytes) beside the file's size.
# usage: validation/bench/token_loader.sh [--build DIR] [--tokens N] [--ranks R] [--config INI]
#                                         [--steps S] [--dir DIR] [--keep] [--cache warm|cold|both]
#   --dir: where the file is written (default a temporary folder; needs 2 x N bytes free);
#   --keep: leave the file there (a later run with the same --dir and --tokens reuses it);
#   --cache: which page-cache states to measure (default both: warm, then cold).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build tokens=2000000000 ranks=8 config=$root/inputs/gpt_small.ini steps=6 dir="" keep=0 cache=both
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --cache) cache=$2; shift 2 ;;
    *) echo "error: unknown option $1" >&2; exit 2 ;;
  esac
done
case $cache in warm) states=(warm) ;; cold) states=(cold) ;; both) states=(warm cold) ;;
  *) echo "error: --cache $cache: expected warm, cold or both" >&2; exit 2 ;; esac
command -v fincore >/dev/null || { echo "error: fincore (util-linux) is needed to check the page cache" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); cleanup() { rm -rf "$tmp"; }; trap cleanup EXIT
[ -n "$dir" ] || dir=$tmp
data=$dir/tokens_$tokens.h5
if [ ! -f "$data" ]; then
  need=$((tokens * 2 / 1024 + 1048576)); avail=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
  (( avail > need )) || { echo "error: $dir has ${avail} kB free, the file needs ${need} kB" >&2; exit 1; }
  start=$(date +%s)
  "$build/apps/data_prep" synth --vocab 50257 --tokens "$tokens" --val-tokens 0 --seed 1 --output "$data" >/dev/null
  echo "data_prep synth: $tokens tokens, $(stat -c %s "$data") bytes in $(( $(date +%s) - start )) s"
fi
[ "$keep" = 1 ] || trap 'cleanup; [ "$dir" = "$tmp" ] || rm -f "$data"' EXIT
# The file's pages in the page cache: all of them (warm: read once through), or none (cold).
cached() { fincore --bytes --noheadings --output RES "$data" | tr -d ' '; }
set_cache() {
  if [ "$1" = warm ]; then
    dd if="$data" of=/dev/null bs=8M status=none
  else
    /usr/bin/python3 - "$data" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)  # written pages must be clean to be dropped
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
PY
  fi
  echo "$1: $(cached) of the file's $(stat -c %s "$data") bytes in the page cache"
}
for state in "${states[@]}"; do
  set_cache "$state"
  echo -n "$state "
  mpirun -np "$ranks" "$build/apps/gpt_train" --config "$config" --input "$data" --global-batch $((ranks * 4)) \
    --seq-len 1024 --threads 1 --benchmark-loader 200 2>&1 | grep '^loader:'
done
for state in "${states[@]}"; do
  set_cache "$state"
  mpirun -np "$ranks" "$build/apps/gpt_train" --config "$config" --input "$data" --global-batch "$ranks" \
    --micro-batch 1 --steps "$steps" --log-every 1 --eval-every 0 --threads 1 --metrics "$tmp/$state.jsonl" >/dev/null 2>&1
  /usr/bin/python3 - "$tmp/$state.jsonl" "$config" "$ranks" "$(stat -c %s "$data")" "$state" <<'PY'
import json, statistics, sys
all_rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rows = all_rows[1:]
share = statistics.median(r["data_ms"] / r["step_ms"] for r in rows)
step = statistics.median(r["step_ms"] for r in rows)
data = statistics.median(r["data_ms"] for r in rows)
first = all_rows[0]
print(f"{sys.argv[5]} training ({sys.argv[2].split('/')[-1]}, {sys.argv[3]} ranks, median of {len(rows)} steps): "
      f"step {step:.0f} ms, data_ms {data:.4f} ms = {100 * share:.4f}% of the step; step 1: data_ms "
      f"{first['data_ms']:.3f} ms of {first['step_ms']:.0f} ms; peak RSS per rank "
      f"{rows[-1]['rss_peak_bytes'] / 2**20:.0f} MiB beside a {int(sys.argv[4]) / 2**30:.2f} GiB file")
PY
done

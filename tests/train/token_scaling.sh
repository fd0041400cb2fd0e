#!/usr/bin/env bash
# Data memory is independent of corpus size: the same 2-rank run on a 1-million-token file and on
# a 200-million-token one (400 MB of uint16, made here by data_prep and deleted after) peaks at the
# same resident memory per rank (rss_peak_bytes, VmHWM) within 5 MiB, and its loaders read only the
# rows of the steps trained and prefetched (data_bytes_read, bounded by a formula, not by time):
# start-up reads no token.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
avail=$(df -Pk "$tmp" | awk 'NR == 2 {print $4}')
if (( avail < 1000000 )); then echo "error: token_scaling needs 1 GB free in $tmp, has ${avail} kB"; exit 1; fi
"$build/apps/data_prep" synth --vocab 1000 --tokens 1000000 --val-tokens 0 --seed 1 --output "$tmp/small.h5" >/dev/null
"$build/apps/data_prep" synth --vocab 1000 --tokens 200000000 --val-tokens 0 --seed 1 --output "$tmp/large.h5" >/dev/null
size=$(stat -c %s "$tmp/large.h5")
(( size > 400000000 )) || { echo "error: the 200M-token file has $size bytes, expected uint16 (> 400 MB)"; exit 1; }
seq=64; batch=8; steps=6
for name in small large; do
  mpirun -np 2 "$build/apps/gpt_train" --input "$tmp/$name.h5" --layers 2 --hidden 64 --heads 4 --seq-len $seq \
    --global-batch $batch --micro-batch 4 --steps $steps --log-every 1 --threads 1 --seed 3 \
    --metrics "$tmp/$name.jsonl" >/dev/null
done
rm -f "$tmp/large.h5"
python3 - "$tmp/small.jsonl" "$tmp/large.jsonl" $seq $batch <<'PY'
import json, sys
small, large, seq, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def steps(path):
    return [json.loads(l) for l in open(path) if '"loss"' in l]
s, l = steps(small), steps(large)
assert s and len(s) == len(l), "both runs must log every step"
row_bytes = batch * (seq + 1) * 2   # one step's global batch of uint16 windows, over all ranks
for a, b in zip(s, l):
    for run, rec in (("1M", a), ("200M", b)):
        k, read = rec["step"], rec["data_bytes_read"]
        # Rows of steps 1..k at least; at most the prefetcher's depth (3) plus the step in hand ahead.
        lo, hi = k * row_bytes, (k + 4) * row_bytes
        assert lo <= read <= hi, f"{run} step {k}: loaders read {read} bytes, outside [{lo}, {hi}]"
peak_s, peak_l = s[-1]["rss_peak_bytes"], l[-1]["rss_peak_bytes"]
diff = abs(peak_l - peak_s) / 2**20
print(f"peak RSS per rank: {peak_s / 2**20:.1f} MiB on 1M tokens, {peak_l / 2**20:.1f} MiB on 200M tokens "
      f"(difference {diff:.2f} MiB, limit 5)")
assert diff <= 5, f"peak resident memory differs by {diff:.2f} MiB between 1M and 200M tokens"
print(f"step-1 token bytes read: {s[0]['data_bytes_read']} (1M) and {l[0]['data_bytes_read']} (200M) of a "
      f"{row_bytes}-byte global batch")
PY

#!/usr/bin/env bash
# Document memory is independent of the number of documents: the same 2-rank --document-mask run on
# a file of 2 documents and on one of 10 million (20 million tokens each, made here by data_prep
# synth --document-tokens and deleted after; 80 MB of /doc_offsets, which a whole read would hold on
# every rank) peaks at the same resident memory per rank (rss_peak_bytes) within 5 MiB: the offsets
# are looked up window by window (io/document_index.h). The losses differ (the mask is in use).
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
avail=$(df -Pk "$tmp" | awk 'NR == 2 {print $4}')
if (( avail < 400000 )); then echo "error: document_scaling needs 400 MB free in $tmp, has ${avail} kB"; exit 1; fi
tokens=20000000
"$build/apps/data_prep" synth --vocab 1000 --tokens $tokens --val-tokens 0 --seed 1 --document-tokens 10000000 \
  --output "$tmp/few.h5" >/dev/null
"$build/apps/data_prep" synth --vocab 1000 --tokens $tokens --val-tokens 0 --seed 1 --document-tokens 2 \
  --output "$tmp/many.h5" >/dev/null
for name in few many; do
  docs=$(h5ls "$tmp/$name.h5/train/doc_offsets" | sed -n 's/.*Dataset {\([0-9]*\).*/\1/p')
  echo "$name.h5: $docs documents"
  want=$([ $name = few ] && echo 2 || echo $((tokens / 2)))
  [ "$docs" = "$want" ] || { echo "error: $name.h5 has '$docs' documents, expected $want"; exit 1; }
done
for name in few many; do
  mpirun -np 2 "$build/apps/gpt_train" --input "$tmp/$name.h5" --layers 2 --hidden 64 --heads 4 --seq-len 64 \
    --global-batch 8 --micro-batch 4 --steps 6 --log-every 1 --threads 1 --seed 3 --document-mask \
    --metrics "$tmp/$name.jsonl" >/dev/null
done
rm -f "$tmp/few.h5" "$tmp/many.h5"
python3 - "$tmp/few.jsonl" "$tmp/many.jsonl" <<'PY'
import json, sys
def steps(path):
    return [json.loads(l) for l in open(path) if '"loss"' in l]
few, many = steps(sys.argv[1]), steps(sys.argv[2])
assert few and len(few) == len(many) == 6, "both runs must log every step"
assert any(abs(a["loss"] - b["loss"]) > 1e-4 * abs(a["loss"]) for a, b in zip(few, many)), \
    "the documents of 2 tokens left the losses as they were: the mask is not in use"
peak_f, peak_m = few[-1]["rss_peak_bytes"], many[-1]["rss_peak_bytes"]
diff = abs(peak_m - peak_f) / 2**20
print(f"peak RSS per rank under --document-mask: {peak_f / 2**20:.1f} MiB with 2 documents, "
      f"{peak_m / 2**20:.1f} MiB with 10 million (difference {diff:.2f} MiB, limit 5)")
assert diff <= 5, f"peak resident memory differs by {diff:.2f} MiB between 2 and 10 million documents"
PY

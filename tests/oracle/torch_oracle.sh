#!/usr/bin/env bash
# CTest `oracle`: trains tiny GPT-2 and Llama models (grouped-query, multi-query, tied head,
# non-default rotary base and norm epsilon; and both with --document-mask, its block-diagonal mask
# built by the oracle from the dumped segments) with gpt_train, dumping step 1 and the batches, and
# checks each against an independent float64 PyTorch twin (torch_oracle.py).
# usage: torch_oracle.sh <build_dir> <source_dir>
set -euo pipefail

source "$(dirname "$0")/../tools/script_prelude.sh"
script_args "$@"
# Debian's interpreter with Debian's packages; a missing one is a failure, never a silent pass.
need_debian_python torch:python3-torch h5py:python3-h5py numpy:python3-numpy
need_apps data_prep gpt_train
make_scratch torch_oracle

run "$build/apps/data_prep" synth --vocab 97 --tokens 20000 --seed 3 --output "$tmp/data.h5"

# One model per case: gpt_train trains it 5 steps, dumping step 1, and the oracle rebuilds it.
# vocab 97 is deliberately not a multiple of 64: tessera pads the vocabulary internally.
status=0
failed=()
oracle_case() {
  local name=$1
  shift
  run "$build/apps/gpt_train" --input "${oracle_data:-$tmp/data.h5}" --layers 2 --hidden 48 --seq-len 16 \
      --global-batch 4 --micro-batch 4 --steps 5 --lr 1e-2 --warmup 2 --min-lr 1e-3 \
      --weight-decay 0.1 --grad-clip 1.0 --seed 7 --metrics "$tmp/$name.jsonl" --dump "$tmp/$name.h5" "$@"
  echo "== case $name: $*"
  local rc=0
  "$py" "$src/tests/oracle/torch_oracle.py" --dump "$tmp/$name.h5" --metrics "$tmp/$name.jsonl" || rc=$?
  if [[ $rc -ne 0 ]]; then
    status=1
    failed+=("$name")
  fi
}

oracle_case gpt2 --heads 4
# Llama: grouped-query attention (3 query heads per kv head), untied head
oracle_case llama_gqa --arch llama --heads 6 --kv-heads 2 --ffn-hidden 64
# multi-query attention: every query head reads the one kv head
oracle_case llama_mqa --arch llama --heads 6 --kv-heads 1 --ffn-hidden 64
# the head tied to the token embedding
oracle_case llama_tied --arch llama --heads 6 --kv-heads 2 --ffn-hidden 64 --tie-embeddings
# non-default rotary base and RMSNorm epsilon (both change the loss far beyond the tolerance)
oracle_case llama_theta_eps --arch llama --heads 6 --kv-heads 3 --ffn-hidden 64 --rope-theta 500000 --norm-eps 1e-6
# --document-mask: documents of 2 to 9 bytes packed into windows of 16, the oracle's attention causal
# and block-diagonal by document, positions (learned and rotary) restarting at each document
/usr/bin/python3 -c 'import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400): f.write(json.dumps({"text": "abcdefghij"[: 2 + (i * 5) % 8]}) + "\n")' "$tmp/docs.jsonl"
run "$build/apps/data_prep" text --input "$tmp/docs.jsonl" --output "$tmp/docs.h5"
oracle_data="$tmp/docs.h5"
oracle_case gpt2_document_mask --heads 4 --document-mask
oracle_case llama_document_mask --arch llama --heads 6 --kv-heads 2 --ffn-hidden 64 --document-mask
unset oracle_data

if [[ $status -eq 0 ]]; then
  keep=0
  echo "torch_oracle: every case agrees with PyTorch"
else
  echo "FAIL: torch_oracle: case(s) ${failed[*]} disagree with PyTorch (see above)" >&2
fi
exit $status

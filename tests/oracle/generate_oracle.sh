#!/usr/bin/env bash
# CTest `oracle`: greedy decoding of 64 tokens by `generate` equals an independent PyTorch decode
# of the same weights, token for token (generate_oracle.py), for a gpt2 and a Llama (grouped-query,
# non-default rotary base and norm epsilon) checkpoint, each trained a few steps by gpt_train;
# prompts of several lengths share 2 slots, so continuous batching refills them mid-run.
# usage: generate_oracle.sh <build_dir> <source_dir>
set -euo pipefail
source "$(dirname "$0")/../tools/script_prelude.sh"
script_args "$@"
need_debian_python torch:python3-torch h5py:python3-h5py numpy:python3-numpy
need_apps data_prep gpt_train generate
make_scratch generate-oracle

run "$build/apps/data_prep" synth --vocab 97 --tokens 20000 --seed 3 --output "$tmp/data.h5"
printf '%s\n' '{"ids": [1, 2, 3]}' '{"ids": [5]}' '{"ids": [10, 20, 30, 40, 50, 60, 70, 80, 90, 11, 12]}' \
  '{"ids": [96, 0, 96, 0, 7]}' >"$tmp/prompts.jsonl"

status=0
decode_case() {
  local name=$1 generate_flags=$2 oracle_flags=$3
  shift 3
  run "$build/apps/gpt_train" --input "$tmp/data.h5" --layers 2 --hidden 48 --seq-len 96 --global-batch 4 \
      --steps 15 --lr 1e-2 --warmup 2 --seed 7 --checkpoint-dir "$tmp/$name" --checkpoint-every 15 "$@"
  # shellcheck disable=SC2086
  run "$build/apps/generate" --checkpoint "$tmp/$name/step_15.h5" --prompts "$tmp/prompts.jsonl" \
      --max-new-tokens 64 --max-batch 2 --max-len 96 --logprobs --output "$tmp/$name.jsonl" $generate_flags
  echo "== case $name"
  # shellcheck disable=SC2086
  "$py" "$src/tests/oracle/generate_oracle.py" --checkpoint "$tmp/$name/step_15.h5" --prompts "$tmp/prompts.jsonl" \
      --completions "$tmp/$name.jsonl" --new-tokens 64 $oracle_flags || status=1
}

decode_case gpt2 "" "" --heads 4
# generate takes the norm epsilon and rotary base the checkpoint records; the oracle is told them.
decode_case llama "" "--norm-eps 1e-6 --rope-theta 500" \
  --arch llama --heads 6 --kv-heads 2 --ffn-hidden 64 --norm-eps 1e-6 --rope-theta 500

if [[ $status -eq 0 ]]; then
  keep=0
  echo "generate_oracle: every greedy completion equals PyTorch's"
else
  echo "FAIL: generate_oracle: a completion disagrees with PyTorch (see above)" >&2
fi
exit $status

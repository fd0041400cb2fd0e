#!/usr/bin/env bash
# The time model "on paper": the weak-scaling table of Narayanan et al. 2021 ("Efficient Large-Scale
# Language Model Training on GPU Clusters Using Megatron-LM", SC21, Table 1: GPT from 1.7B to 1T
# parameters on up to 3072 A100s) predicted from a machine file written from the A100's public
# specifications (a100_megatron.json, README.md says which numbers are specs and which assumptions).
# Each row is the paper's layout (tp, pp, the GPUs, the global batch; the micro-batch, interleaving and
# full recomputation of Megatron-LM's examples/sc21/run_table_1.sh) given to `parallel_plan search
# --explain` with --wire-bytes 2 (Megatron communicates fp16); the achieved TFLOP/s per GPU is the
# paper's model-FLOPs formula over the predicted step. Prints paper against predicted and the error.
# usage: megatron_table.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: megatron_table.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
plan=$build/apps/parallel_plan
[[ -x $plan ]] || { echo "megatron_table.sh: $plan not found: build tessera first" >&2; exit 1; }

# name heads hidden layers tp pp gpus global-batch micro-batch virtual-stages paper-TFLOP/s
rows="1.7B 24 2304 24 1 1 32 512 16 1 137
3.6B 32 3072 30 2 1 64 512 16 1 138
7.5B 32 4096 36 4 1 128 512 16 1 142
18.4B 48 6144 40 8 1 256 1024 8 1 135
39.1B 64 8192 48 8 2 512 1536 4 1 138
76.1B 80 10240 60 8 4 1024 1792 2 3 140
145.6B 96 12288 80 8 8 1536 2304 2 2 148
310.1B 128 16384 96 8 16 1920 2160 1 2 155
529.6B 128 20480 105 8 35 2520 2520 1 3 163
1008.0B 160 25600 128 8 64 3072 3072 1 1 163"

echo "| model | heads | hidden | layers | tp | pp | GPUs | batch | micro-batch | schedule | paper TFLOP/s | predicted TFLOP/s | error |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
while read -r name heads hidden layers tp pp gpus batch micro v paper; do
  dp=$((gpus / (tp * pp)))
  layout="--dp $dp --tp $tp --pp $pp --micro-batch $micro --activation-checkpointing full"
  schedule=none
  if ((pp > 1)); then
    if ((v > 1)); then schedule="interleaved, $v chunks"; layout+=" --pp-schedule interleaved --virtual-stages $v"
    else schedule=1f1b; layout+=" --pp-schedule 1f1b"; fi
  fi
  out=$("$plan" search --ranks "$gpus" --ranks-per-node 8 --device-memory 80G --machine "$here/a100_megatron.json" \
        --wire-bytes 2 --vocab 51200 --layers "$layers" --hidden "$hidden" --heads "$heads" --seq-len 2048 \
        --global-batch "$batch" --precision bf16 --explain "$layout")
  predicted=$(sed -n 's/.*model FLOPs per step.*per rank: \([0-9.]*\) TFLOP\/s.*/\1/p' <<<"$out")
  [[ -n $predicted ]] || { echo "megatron_table.sh: no TFLOP/s in the output for $name:" >&2; echo "$out" >&2; exit 1; }
  error=$(awk -v p="$predicted" -v q="$paper" 'BEGIN { printf "%+.1f%%", (p - q) / q * 100 }')
  echo "| $name | $heads | $hidden | $layers | $tp | $pp | $gpus | $batch | $micro | $schedule | $paper | $predicted | $error |"
done <<<"$rows"

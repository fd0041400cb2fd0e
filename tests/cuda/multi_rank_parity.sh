#!/usr/bin/env bash
# Parity on the GPU: --device cuda on several ranks (which share the GPUs there are; their
# collectives go through the Communicator's host staging, or NCCL where each rank has its own GPU)
# reproduces the one-rank --device cuda run: losses and gradient norms of 10 steps to a relative
# 1e-5, for gpt_train under data parallelism with ZeRO 0-3, 1D tensor parallelism, the pipeline and
# sequence parallelism (every mode: all_to_all, ring, zigzag, split_gather), and vit_train under
# dp, tp, pp and sp; a checkpoint written by two ranks resumes on one. Registered
# with the cuda label (a GPU must be visible). The parity label runs it on the CPU with
# TESSERA_TEST_STAGE_HOST=1 (host tensors staged like device ones: the host route's logic).
# usage: multi_rank_parity.sh BUILD SOURCE [DEVICE]   (DEVICE: cuda, the default, or cpu;
#        TESSERA_MPIEXEC: the mpirun to use, default mpirun)
set -euo pipefail
build=$1; src=$2; device=${3:-cuda}
mpirun=${TESSERA_MPIEXEC:-mpirun}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Up to 4 ranks share the GPUs there are, which exclusive-process mode forbids.
if [ "$device" = cuda ] && [ "$(nvidia-smi -L | grep -c '^GPU')" -lt 4 ] &&
   nvidia-smi --query-gpu=compute_mode --format=csv,noheader | grep -qi exclusive; then
  echo "error: a GPU here is in exclusive-process compute mode and there are fewer than 4: ranks cannot share one"
  exit 1
fi
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --device "$device" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8
        --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01 --steps 10)
compare() {  # REF RUN: losses and gradient norms
  python3 "$src/tests/tools/compare_losses.py" "$tmp/$1.jsonl" "$tmp/$2.jsonl" --rtol 1e-5
  echo -n "    gradient norms: "
  python3 "$src/tests/tools/compare_losses.py" "$tmp/$1.jsonl" "$tmp/$2.jsonl" --rtol 1e-5 --key grad_norm
}
run() {  # NAME RANKS options...: gpt_train (or $app) with the options in `common`
  local name=$1 ranks=$2; shift 2
  "$mpirun" -np "$ranks" "$build/apps/${app:-gpt_train}" "${common[@]}" --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
    { tail -20 "$tmp/$name.log"; echo "error: $name failed (above)"; exit 1; }
}
case_() {  # NAME RANKS options...: against the one-rank reference ($ref, default ref)
  echo -n "$1: "
  run "$@"
  compare "${ref:-ref}" "$1"
}

run ref 1 --micro-batch 8 --checkpoint-dir "$tmp/ref" --checkpoint-every 5
for zero in 0 1 2; do
  case_ "dp2-zero$zero" 2 --micro-batch 2 --zero "$zero"
done
case_ dp2-zero3 2 --micro-batch 2 --zero 3 --checkpoint-dir "$tmp/dp2-zero3" --checkpoint-every 5
case_ dp4-zero3 4 --micro-batch 1 --zero 3
case_ tp2 2 --micro-batch 8 --tp 2
case_ tp2-dp2-zero1 4 --micro-batch 4 --tp 2 --zero 1
case_ pp2 2 --micro-batch 2 --pp 2
case_ pp2-dp2 4 --micro-batch 2 --pp 2
case_ sp2 2 --micro-batch 8 --sp 2
case_ sp2-ring-dp2-zero1 4 --micro-batch 4 --sp 2 --sp-mode ring --zero 1
case_ sp2-zigzag 2 --micro-batch 8 --sp 2 --sp-mode zigzag
case_ tp2-split-gather 2 --micro-batch 8 --tp 2 --sp-mode split_gather

# A checkpoint written by two ranks (ZeRO-3: each holds a shard) resumes on one: steps 6-10 equal
# the reference's.
echo -n "resume: dp2-zero3's step-5 checkpoint on one rank, to step 10: "
run resumed 1 --micro-batch 8 --resume "$tmp/dp2-zero3/step_5.h5"
grep -m 5 '"loss"' "$tmp/ref.jsonl" | cat - "$tmp/resumed.jsonl" >"$tmp/resumed.all.jsonl"
python3 "$src/tests/tools/compare_losses.py" "$tmp/ref.jsonl" "$tmp/resumed.all.jsonl" --rtol 1e-5

# vit_train: the same for the image classifier on a synthetic image set (mean pooling: sp splits
# the 16 patch tokens evenly, with no class token).
"$build/apps/data_prep" synth-images --classes 5 --train 200 --test 40 --size 16 --seed 3 --output "$tmp/images.h5" >/dev/null
app=vit_train ref=vit
common=(--input "$tmp/images.h5" --device "$device" --layers 2 --hidden 32 --heads 4 --patch 4 --mlp-ratio 2 --pool mean --global-batch 8
        --lr 3e-3 --warmup 2 --seed 11 --threads 1 --bucket-mb 0.01 --steps 10)
run vit 1 --micro-batch 8
case_ vit-dp2-zero2 2 --micro-batch 4 --zero 2
case_ vit-tp2 2 --micro-batch 8 --tp 2
case_ vit-pp2 2 --micro-batch 2 --pp 2
case_ vit-sp2 2 --micro-batch 8 --sp 2
case_ vit-sp2-ring 2 --micro-batch 8 --sp 2 --sp-mode ring

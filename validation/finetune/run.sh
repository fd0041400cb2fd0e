#!/usr/bin/env bash
# Fine-tuning, end to end (issue 32's validation; not part of CI): trains a SentencePiece BPE model
# with Debian's spm_train on the first 90% of tinyshakespeare, tokenises that part (pretraining)
# and the last 10% (held apart: seen by nothing before fine-tuning) with `data_prep text
# --tokenizer`, pretrains a small Llama on the first under dp 2, exports it with `ckpt_tool
# export-hf`, imports it back with `import-hf` (the tensors must be bit-identical: h5diff), then
# under tp 2 fine-tunes the imported model with `gpt_train --init-from` on the held-apart part and,
# for comparison, trains the same model from scratch there with the same options and steps. It draws
# the loss curves in curves.png and writes results.md (plot.py).
#
# usage: validation/finetune/run.sh [--data PATH/tinyshakespeare.txt] [--out DIR] [--build DIR]
#            [--vocab N] [--pretrain-steps N] [--finetune-steps N] [--finetune-lr LR]
#   --out    each run writes a new folder DIR/run-<UTC time>.XXXX (default DIR /tmp/tessera-finetune);
#            nothing earlier is overwritten
#   defaults: vocab 1000, 500 pretraining steps, 200 fine-tuning steps at lr 1e-3 (about 12 minutes
#   on 2 busy cores)
# Needs spm_train (Debian: sentencepiece), a build with libsentencepiece (libsentencepiece-dev),
# h5diff (hdf5-tools), mpirun and /usr/bin/python3 with matplotlib (python3-matplotlib):
# jobscripts/install_deps.sh test installs them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/validation/finetune
data=$root/../shared/data/tinyshakespeare.txt
out=/tmp/tessera-finetune
build=$root/build
vocab=1000
pretrain_steps=500
finetune_steps=200
finetune_lr=1e-3
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --pretrain-steps) pretrain_steps=$2; shift 2 ;;
    --finetune-steps) finetune_steps=$2; shift 2 ;;
    --finetune-lr) finetune_lr=$2; shift 2 ;;
    *) echo "error: unknown option $1" >&2; exit 2 ;;
  esac
done
# need_apps, need_debian_python: fail (never skip) naming what to build or install.
source "$root/tests/tools/script_prelude.sh"
[ -f "$data" ] || { echo "error: $data not found (pass --data PATH/tinyshakespeare.txt)" >&2; exit 1; }
command -v spm_train >/dev/null || {
  echo "error: spm_train not found: it trains the SentencePiece model (Debian: apt-get install sentencepiece," \
    "or jobscripts/install_deps.sh test)" >&2
  exit 1
}
command -v h5diff >/dev/null || { echo "error: h5diff not found (Debian: apt-get install hdf5-tools)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "error: mpirun not found (Debian: apt-get install openmpi-bin)" >&2; exit 1; }
need_apps data_prep gpt_train ckpt_tool generate
need_debian_python matplotlib:python3-matplotlib
export OMP_NUM_THREADS=1
mkdir -p "$out"
dir=$(mktemp -d "$out/run-$(date -u +%Y%m%dT%H%M%SZ).XXXX")
echo "results in $dir"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
logged() {  # NAME COMMAND...: runs it with its output in $dir/NAME.log; on failure shows its end and stops
  "${@:2}" >"$dir/$1.log" 2>&1 || { tail -n 20 "$dir/$1.log" >&2; echo "error: $1 failed (log: $dir/$1.log)" >&2; exit 1; }
}
apps=$build/apps
mpi=(mpirun --oversubscribe -np 2)
# The model and the batch: pretraining, fine-tuning and the from-scratch run all use them.
model=(--arch llama --layers 4 --hidden 128 --heads 4 --kv-heads 2 --ffn-hidden 384 --seq-len 128)
batch=(--global-batch 16 --seed 1234)

log "split $data: the first 90% of its lines to pretrain on, the last 10% held apart"
lines=$(wc -l <"$data")
head -n $((lines * 9 / 10)) "$data" >"$dir/pretrain.txt"
tail -n +$((lines * 9 / 10 + 1)) "$data" >"$dir/heldapart.txt"

log "spm_train: a BPE model of $vocab pieces on the pretraining part"
logged spm_train spm_train --input="$dir/pretrain.txt" --model_prefix="$dir/spm" --vocab_size="$vocab" \
  --model_type=bpe --character_coverage=1.0 --num_threads=1

log "data_prep text --tokenizer: each part with its own eval split (its last 5% and 10%)"
logged data_prep_pretrain "$apps/data_prep" text --input "$dir/pretrain.txt" --tokenizer "$dir/spm.model" \
  --val-fraction 0.05 --output "$dir/pretrain.h5"
logged data_prep_heldapart "$apps/data_prep" text --input "$dir/heldapart.txt" --tokenizer "$dir/spm.model" \
  --val-fraction 0.1 --output "$dir/heldapart.h5"
cat "$dir/data_prep_pretrain.log" "$dir/data_prep_heldapart.log"

log "pretrain: $pretrain_steps steps, dp 2"
logged pretrain "${mpi[@]}" "$apps/gpt_train" "${model[@]}" "${batch[@]}" --dp 2 --input "$dir/pretrain.h5" \
  --steps "$pretrain_steps" --lr 3e-3 --min-lr 3e-4 --warmup 50 --weight-decay 0.1 --eval-every 50 --eval-batches 8 \
  --log-every 5 --checkpoint-dir "$dir/pretrain" --metrics "$dir/pretrain.jsonl"
pretrained=$dir/pretrain/step_$pretrain_steps.h5

log "export-hf, import-hf, and the tensors compared bit for bit"
logged export "$apps/ckpt_tool" export-hf "$pretrained" --output "$dir/hf"
logged import "$apps/ckpt_tool" import-hf "$dir/hf" --output "$dir/imported.h5"
logged verify "$apps/ckpt_tool" verify "$dir/imported.h5"
# h5diff without a tolerance compares every value exactly (and each tensor's checksum attribute); a
# tensor in only one file is a difference too.
if h5diff -r "$pretrained" "$dir/imported.h5" /params /params >"$dir/roundtrip.log" 2>&1; then
  tensors=$(grep -c '^dataset: ' "$dir/roundtrip.log")
  echo "export-hf then import-hf: all $tensors tensors of /params bit-identical (h5diff)" | tee "$dir/roundtrip.txt"
else
  grep -v '^0 differences found' "$dir/roundtrip.log" | head -n 20 >&2
  echo "error: the imported checkpoint's tensors differ from $pretrained (log: $dir/roundtrip.log)" >&2
  exit 1
fi
ls -l "$dir/hf" | tee -a "$dir/export.log"

# generate --score: the windows and batches of gpt_train's evaluation (the same eval_loss).
score() {  # NAME CHECKPOINT DATA EVAL_BATCHES: writes NAME.score, prints its loss
  "$apps/generate" --checkpoint "$2" --score "$3" --seq-len 128 --global-batch 16 --eval-batches "$4" \
    --max-batch 16 >"$dir/$1.score" 2>&1 ||
    { cat "$dir/$1.score" >&2; echo "error: generate --score $2 failed (log: $dir/$1.score)" >&2; exit 1; }
  grep -o '^loss [-0-9.e+]*' "$dir/$1.score" | cut -d' ' -f2
}
log "score the pretrained and the imported model on the held-apart eval split"
pre_eval=$(score pretrained_pre "$pretrained" "$dir/pretrain.h5" 8)
held_eval=$(score pretrained_held "$pretrained" "$dir/heldapart.h5" 2)
imported_eval=$(score imported_held "$dir/imported.h5" "$dir/heldapart.h5" 2)
printf '%s %s\n' pretrained_on_pretrain_eval "$pre_eval" pretrained_on_heldapart_eval "$held_eval" \
  imported_on_heldapart_eval "$imported_eval" | tee "$dir/scores.txt"
[ "$held_eval" = "$imported_eval" ] ||
  { echo "error: the imported model scores $imported_eval on the held-apart part, the pretrained one $held_eval" >&2; exit 1; }

tune=(--input "$dir/heldapart.h5" --steps "$finetune_steps" --lr "$finetune_lr" --min-lr 1e-4 --warmup 20
      --weight-decay 0.1 --eval-every 20 --eval-batches 2 --log-every 2 --tp 2)
log "fine-tune the imported model: $finetune_steps steps, tp 2"
logged finetune "${mpi[@]}" "$apps/gpt_train" --init-from "$dir/imported.h5" --seq-len 128 "${batch[@]}" "${tune[@]}" \
  --checkpoint-dir "$dir/finetune" --metrics "$dir/finetune.jsonl"
log "the same model from scratch on the held-apart part: $finetune_steps steps, tp 2"
logged scratch "${mpi[@]}" "$apps/gpt_train" "${model[@]}" "${batch[@]}" "${tune[@]}" \
  --checkpoint-dir "$dir/scratch" --metrics "$dir/scratch.jsonl"

log "plot"
"$py" "$here/plot.py" "$dir"
cat "$dir/results.md"
log "done: $dir/curves.png, $dir/results.md"

# Shared by the parity scripts (sourced, not run): train the same small model under a layout and
# under one rank, and compare. Needs $build, $src and $tmp set, and the common options in
# the array `common`; $app (default gpt_train) and $data_option (default --input) choose the app.
#   parity_reference NAME DATA [options...]   one rank, a checkpoint after every step
#   parity_case NAME RANKS REF DATA [options...]
#     runs the layout and compares with reference REF: the 10-step losses and the evaluation after
#     step 10 (gpt_train and moe_train: two global batches of the validation split; relative 1e-5), the
#     step-1 gradients of every parameter in full shape (a checkpoint's exp_avg after one step is
#     0.1 x the clipped gradient) and the parameters and optimizer states after 10 steps (relative
#     1e-5, or within ${state_atol:-1e-5} for tensors whose exact gradient is zero: see
#     compare_checkpoints.py).
#   same_as_plain NAME PLAIN
#     run NAME equals run PLAIN to a relative 1e-6 (losses, evaluation, step-1 gradients, step-10 state): for
#     options that must change nothing but memory or speed.
#   checkpointed_like_plain NAME RANKS DATA [options...]
#     the layout's plain run NAME, then --activation-checkpointing full and selective, every block
#     and every 2nd, each the same as plain (same_as_plain).
#   short_documents OUT.h5
#     600 documents of 1 to 3 words (data_prep text, 20% held out): most training windows of 16
#     bytes span several; for the --document-mask scripts.
#   resume_case NAME REF DATA CHECKPOINT RANKS [options...]
#     resumes CHECKPOINT (.../step_K.h5) under the layout and trains to run REF's last step; REF's
#     first K steps followed by the resumed ones equal REF's losses (relative 1e-5).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
compare_losses="python3 $src/tests/tools/compare_losses.py"
compare_checkpoints="/usr/bin/python3 $src/tests/tools/compare_checkpoints.py"

parity_train() {  # NAME RANKS DATA options...
  local name=$1 ranks=$2 data=$3; shift 3
  # The language models evaluate after the last step (vit_train's scripts choose their own).
  local evaluation=(--eval-every 10 --eval-batches 2)
  [ "${app:-gpt_train}" = vit_train ] && evaluation=()
  mpirun -np "$ranks" "$build/apps/${app:-gpt_train}" "${data_option:---input}" "$data" "${common[@]}" --steps 10 \
    --checkpoint-dir "$tmp/$name" --checkpoint-every 1 --metrics "$tmp/$name.jsonl" "${evaluation[@]}" "$@" >/dev/null
}

compare_evaluations() {  # REF NAME RTOL: the eval_loss lines, where the reference has any
  grep -q '"eval_loss"' "$tmp/$1.jsonl" || return 0
  echo -n "    evaluation: "
  $compare_losses "$tmp/$1.jsonl" "$tmp/$2.jsonl" --key eval_loss --rtol "$3"
}

parity_reference() { parity_train "$1" 1 "$2" "${@:3}"; }

parity_case() {
  local name=$1 ranks=$2 ref=$3 data=$4; shift 4
  echo -n "$name: "
  parity_train "$name" "$ranks" "$data" "$@"
  $compare_losses "$tmp/$ref.jsonl" "$tmp/$name.jsonl" --rtol 1e-5
  compare_evaluations "$ref" "$name" 1e-5
  echo -n "    step-1 gradients (exp_avg): "
  $compare_checkpoints "$tmp/$ref/step_1.h5" "$tmp/$name/step_1.h5" --rtol 1e-5 --atol 1e-6 --only 'exp_avg$'
  echo -n "    parameters and states after 10 steps: "
  $compare_checkpoints "$tmp/$ref/step_10.h5" "$tmp/$name/step_10.h5" --rtol 1e-5 --atol "${state_atol:-1e-5}"
}

same_as_plain() {
  echo -n "$1: "
  $compare_losses "$tmp/$2.jsonl" "$tmp/$1.jsonl" --rtol 1e-6
  compare_evaluations "$2" "$1" 1e-6
  echo -n "    step-1 gradients (exp_avg): "
  $compare_checkpoints "$tmp/$2/step_1.h5" "$tmp/$1/step_1.h5" --rtol 1e-6 --only 'exp_avg$'
  echo -n "    parameters and states after 10 steps: "
  $compare_checkpoints "$tmp/$2/step_10.h5" "$tmp/$1/step_10.h5" --rtol 1e-6
}

checkpointed_like_plain() {
  local name=$1 ranks=$2 data=$3; shift 3
  parity_train "$name" "$ranks" "$data" "$@"
  for mode in full selective; do
    for k in 1 2; do
      parity_train "$name-$mode-k$k" "$ranks" "$data" "$@" --activation-checkpointing $mode --recompute-every-k-blocks $k
      same_as_plain "$name-$mode-k$k" "$name"
    done
  done
}

resume_case() {
  local name=$1 ref=$2 data=$3 ck=$4 ranks=$5; shift 5
  local k=${ck##*step_}
  k=${k%.h5}
  grep '"loss"' "$tmp/$ref.jsonl" > "$tmp/$ref.train.jsonl"  # training lines only (no evaluations)
  local steps
  steps=$(wc -l < "$tmp/$ref.train.jsonl")
  echo -n "resume $name: "
  mpirun -np "$ranks" "$build/apps/${app:-gpt_train}" "${data_option:---input}" "$data" "${common[@]}" --steps "$steps" \
    --resume "$ck" "$@" --metrics "$tmp/$name.jsonl" >/dev/null
  head -n "$k" "$tmp/$ref.train.jsonl" | cat - "$tmp/$name.jsonl" > "$tmp/$name.all.jsonl"
  $compare_losses "$tmp/$ref.train.jsonl" "$tmp/$name.all.jsonl" --rtol 1e-5
}

short_documents() {  # OUT.h5
  /usr/bin/python3 - "$tmp/short_documents.jsonl" <<'PY'
import json, sys
words = "the cat sat on a mat while dogs ran far away from home and back again".split()
with open(sys.argv[1], "w") as f:
    for i in range(600):
        n = 1 + (i * 7) % 3
        f.write(json.dumps({"text": " ".join(words[(i + j) % len(words)] for j in range(n))}) + "\n")
PY
  "$build/apps/data_prep" text --input "$tmp/short_documents.jsonl" --output "$1" --val-fraction 0.2 >/dev/null
}

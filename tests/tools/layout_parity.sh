# Shared by the parity scripts (sourced, not run): train the same small model under a layout and
# under one rank, and compare. Needs $build, $src and $tmp set, and the common options in
# the array `common`; $app (default gpt_train) and $data_option (default --input) choose the app.
#   parity_reference NAME DATA [options...]   one rank, a checkpoint after every step
#   parity_case NAME RANKS REF DATA [options...]
#     runs the layout and compares with reference REF: the 10-step losses (relative 1e-5), the
#     step-1 gradients of every parameter in full shape (a checkpoint's exp_avg after one step is
#     0.1 x the clipped gradient) and the parameters and optimizer states after 10 steps (relative
#     1e-5, or within ${state_atol:-1e-5} for tensors whose exact gradient is zero: see
#     compare_checkpoints.py).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
compare_losses="python3 $src/tests/tools/compare_losses.py"
compare_checkpoints="/usr/bin/python3 $src/tests/tools/compare_checkpoints.py"

parity_train() {  # NAME RANKS DATA options...
  local name=$1 ranks=$2 data=$3; shift 3
  mpirun -np "$ranks" "$build/apps/${app:-gpt_train}" "${data_option:---input}" "$data" "${common[@]}" --steps 10 \
    --checkpoint-dir "$tmp/$name" --checkpoint-every 1 --metrics "$tmp/$name.jsonl" "$@" >/dev/null
}

parity_reference() { parity_train "$1" 1 "$2" "${@:3}"; }

parity_case() {
  local name=$1 ranks=$2 ref=$3 data=$4; shift 4
  echo -n "$name: "
  parity_train "$name" "$ranks" "$data" "$@"
  $compare_losses "$tmp/$ref.jsonl" "$tmp/$name.jsonl" --rtol 1e-5
  echo -n "    step-1 gradients (exp_avg): "
  $compare_checkpoints "$tmp/$ref/step_1.h5" "$tmp/$name/step_1.h5" --rtol 1e-5 --atol 1e-6 --only 'exp_avg$'
  echo -n "    parameters and states after 10 steps: "
  $compare_checkpoints "$tmp/$ref/step_10.h5" "$tmp/$name/step_10.h5" --rtol 1e-5 --atol "${state_atol:-1e-5}"
}

#!/usr/bin/env bash
# Parity: generate under --tp 2 (heads, their KV cache and MLP features split over 2 ranks), --pp 2
# (3 blocks as 2 + 1 stages, the slots as micro-batches) and tp 2 x pp 2 gives exactly the one-rank
# tokens, greedy and seeded sampling (8 prompts of mixed lengths in 3 slots, so slots are
# refilled), log-probabilities within 1e-5, and the one-rank --score within relative 1e-6, for
# gpt2 and for Llama with 2 kv heads (tp 2 splits them) and 1 (multi-query: each tp rank holds it),
# for moe_train's mixture-of-experts models (tp 2 splits every expert's hidden features, the
# router whole on each rank; gpt2 top-1 and Llama top-2 with a shared expert), and for quantised
# checkpoints of them (int4 with the head, int8), and for gpt2, Llama and the int4 gpt2 under
# --weights bf16 (the same tokens; log-probabilities and score within the looser bounds said at
# check_bf16), and the int8 Llama under --activations int8 (likewise); tp 3, which divides no head
# count here,
# more stages than blocks, and quantisation groups a tp rank's columns would cut are refused by name.
# Data parallelism: --dp 2 and dp 2 x tp 2 write the one-rank completions (greedy and sampled),
# --score under dp 2 the one-rank score within relative 1e-6; --dp not fitting the ranks
# and --interactive across ranks are refused.
# usage: generate_parallel.sh <build_dir> <source_dir>
set -euo pipefail
source "$(dirname "$0")/../tools/script_prelude.sh"
script_args "$@"
launcher=${TESSERA_MPIEXEC:-mpirun}
need_apps data_prep gpt_train moe_train generate
command -v "$launcher" >/dev/null || { echo "FAIL: $launcher not found (an MPI launcher is needed)" >&2; exit 1; }
make_scratch generate-tp
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {
  local rc=0
  "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [[ $rc -eq 0 ]] || { cat "$tmp/out" "$tmp/err"; fail "command exited with status $rc: $*"; }
}
np() { local n=$1; shift; run "$launcher" --oversubscribe -np "$n" "$@"; }

# Independent launches run side by side in rounds (tests/tools/cases_side_by_side.sh), all of a round
# at once, each its stdout and stderr in $tmp/LABEL.out and .err: a launch here mostly waits (MPI
# start-up, 4 oversubscribed ranks taking turns on 2 cores), so a round takes about its slowest
# launch's time instead of the sum (this script: 96 s one after another). Every launch and every
# check on its output is the same as when they ran one after another.
max_jobs=0 stderr_apart=1 quiet_cases=1
source "$(dirname "$0")/../tools/cases_side_by_side.sh"
# RANKS COMMAND...: the command alone on 1 rank, else under the launcher.
on_ranks() {
  local ranks=$1
  shift
  if [[ $ranks == 1 ]]; then "$@"; else "$launcher" --oversubscribe -np "$ranks" "$@"; fi
}

run "$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5"
: >"$tmp/prompts.jsonl"
for i in $(seq 1 8); do
  printf '{"ids": [%s]}\n' "$(seq -s ', ' $((i * 3)) $((i * 3 + i * 2)))" >>"$tmp/prompts.jsonl"
done

# The five trainings start side by side (train_case), then each checkpoint is checked (check_case).
train_case() {
  local name=$1 trainer=gpt_train
  shift
  [[ $name != moe_* ]] || trainer=moe_train
  run_case "train-$name" on_ranks 1 "$build/apps/$trainer" --input "$tmp/data.h5" --layers 3 --hidden 32 --heads 4 \
      --seq-len 48 --global-batch 8 --steps 10 --lr 1e-2 --warmup 2 --seed 3 --checkpoint-dir "$tmp/$name" \
      --checkpoint-every 10 "$@"
}
check_case() { check_checkpoint "$1" "$tmp/$1/step_10.h5"; }

# Quantised weights (ckpt_tool quantize): their row and column slices under tp, whole groups each.
check_quantized() {
  local name=$1 from=$2
  shift 2
  run "$build/apps/ckpt_tool" quantize "$tmp/$from/step_10.h5" --output "$tmp/$name.h5" "$@"
  check_checkpoint "$name" "$tmp/$name.h5"
}

# Flags every generate of check_checkpoint takes (--weights), and its bounds on log-probabilities
# (absolute) and the score (relative) between layouts.
extra=()
logprob_tol=1e-5
score_tol=1e-6

# ONE OTHER WHAT TOL: two output files hold the same 8 completions in the same order (index, prompt,
# text, token ids, finish reason), their log-probabilities within TOL (absolute).
same_completions() {
  python3 - "$@" <<'PY'
import json, sys
one, other = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
what, tol = sys.argv[3], float(sys.argv[4])
assert len(one) == len(other) == 8, f"{what}: {len(one)} and {len(other)} completions"
for a, b in zip(one, other):
    for key in ("index", "prompt", "completion", "completion_ids", "finish_reason"):
        assert a[key] == b[key], f"{what} prompt {a['index']}: {key} {a[key]!r} vs {b[key]!r}"
    worst = max(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"]))
    assert worst <= tol, f"{what} prompt {a['index']}: logprobs differ by {worst} (bound {tol})"
print(f"{what}: the one-rank tokens for 8 prompts")
PY
}

check_checkpoint() {
  local name=$1 ck=$2 mode label layout
  local layouts=("tp2 2 --tp 2" "pp2 2 --pp 2" "tp2-pp2 4 --tp 2 --pp 2")
  for mode in greedy sampled; do
    local flags=(--max-new-tokens 20 --max-batch 3 --max-len 48 --logprobs "${extra[@]}")
    [[ $mode == greedy ]] || flags+=(--temperature 0.8 --top-k 20 --top-p 0.9 --repetition-penalty 1.2 --seed 4)
    run_case "$name-$mode-1" on_ranks 1 "$build/apps/generate" --checkpoint "$ck" --prompts "$tmp/prompts.jsonl" \
        "${flags[@]}" --output "$tmp/$name-$mode-1.jsonl"
    for layout in "${layouts[@]}"; do
      set -- $layout
      label=$1
      local ranks=$2
      shift 2
      run_case "$name-$mode-$label" on_ranks "$ranks" "$build/apps/generate" --checkpoint "$ck" \
          --prompts "$tmp/prompts.jsonl" "${flags[@]}" "$@" --output "$tmp/$name-$mode-$label.jsonl"
    done
  done
  run_case "$name-score-1" on_ranks 1 "$build/apps/generate" --checkpoint "$ck" --score "$tmp/data.h5" --seq-len 32 \
      --eval-batches 4 --max-batch 3 "${extra[@]}"
  run_case "$name-score-tp2-pp2" on_ranks 4 "$build/apps/generate" --checkpoint "$ck" --score "$tmp/data.h5" \
      --seq-len 32 --eval-batches 4 --max-batch 3 --tp 2 --pp 2 "${extra[@]}"
  finish_cases
  for mode in greedy sampled; do
    for label in tp2 pp2 tp2-pp2; do
      same_completions "$tmp/$name-$mode-1.jsonl" "$tmp/$name-$mode-$label.jsonl" "$name $mode $label" "$logprob_tol"
    done
  done
  local one; one=$(grep -o '^loss [-0-9.e+]*' "$tmp/$name-score-1.out" | cut -d' ' -f2)
  local four; four=$(grep -o '^loss [-0-9.e+]*' "$tmp/$name-score-tp2-pp2.out" | cut -d' ' -f2)
  python3 -c "import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= t * abs(a) else 1)" "$one" "$four" "$score_tol" ||
    fail "$name: --score $one on one rank, $four under tp2 x pp2"
  echo "$name: --score $one on one rank, $four under tp2 x pp2"
}

train_case gpt2
train_case llama --arch llama --kv-heads 2 --ffn-hidden 64
train_case llama_mqa --arch llama --kv-heads 1 --ffn-hidden 64
train_case moe_gpt2 --experts 4 --moe-every 2 --top-k 1 --expert-hidden 32 --capacity-factor 0
train_case moe_llama --arch llama --kv-heads 2 --ffn-hidden 64 --experts 4 --moe-every 1 --top-k 2 \
  --router-norm softmax_topk --expert-hidden 32 --shared-experts 1 --capacity-factor 0
finish_cases
for name in gpt2 llama llama_mqa moe_gpt2 moe_llama; do
  check_case "$name"
done
check_quantized gpt2_int4_head gpt2 --bits 4 --group-size 8 --quantize-head
check_quantized llama_int8 llama --bits 8 --group-size 16

# bf16 weights (generate --weights bf16, rounded after each rank takes its slice: the one-rank
# values). The activations are rounded to bf16 before every product (kernels/cpu/bf16_matmul_paths.h),
# so where a layout's f32 summation order moves an activation across a bf16 rounding boundary it
# moves by 2^-8 of itself: the tokens must match, the log-probabilities within 2e-3 and the score
# within relative 1e-4 (what such moves can do to this model; f32 summation order alone: 1e-5 / 1e-6).
# A quantised checkpoint under --weights bf16: its matrices' products in bf16 (quant_bf16_matmul).
check_bf16() {
  local name=$1 ck=$2
  extra=(--weights bf16) logprob_tol=2e-3 score_tol=1e-4
  check_checkpoint "$name" "$ck"
  extra=() logprob_tol=1e-5 score_tol=1e-6
}
check_bf16 gpt2_bf16 "$tmp/gpt2/step_10.h5"
check_bf16 llama_bf16 "$tmp/llama/step_10.h5"
check_bf16 gpt2_int4_head_bf16 "$tmp/gpt2_int4_head.h5"

# int8 activations (generate --activations int8) on a quantised checkpoint: products of 4 or more
# rows (the prefills, the score's batches) quantise the activations per row and group, each rank
# its own groups (the same as one rank's); as under bf16, a difference of f32 summation order can
# move an activation across a rounding boundary (here by a step of 1/254 of its group's largest):
# the same tokens, log-probabilities within 2e-3, the score within relative 1e-4.
extra=(--activations int8) logprob_tol=2e-3 score_tol=1e-4
check_checkpoint llama_int8_a8 "$tmp/llama_int8.h5"
extra=() logprob_tol=1e-5 score_tol=1e-6

# Data parallelism (--dp 2: two replicas, prompt i to replica i % 2, each batching its own 4 prompts
# in 3 slots): the one-rank completions in the one-rank order (texts, tokens, finish reasons), greedy
# and seeded sampling, and so under dp 2 x tp 2 (ranks as the trainers lay them: tp fastest); the
# log-probabilities within 1e-5, as a replica may decode a row alone (the f32 GEMV, another order of
# summation than a batch's GEMM); --score under dp 2 splits the windows and adds the sums.
for mode in greedy sampled; do
  flags=(--max-new-tokens 20 --max-batch 3 --max-len 48 --logprobs)
  [[ $mode == greedy ]] || flags+=(--temperature 0.8 --top-k 20 --top-p 0.9 --repetition-penalty 1.2 --seed 4)
  run_case "gpt2-$mode-dp2" on_ranks 2 "$build/apps/generate" --checkpoint "$tmp/gpt2/step_10.h5" \
     --prompts "$tmp/prompts.jsonl" "${flags[@]}" --dp 2 --output "$tmp/gpt2-$mode-dp2.jsonl"
  run_case "gpt2-$mode-dp2-tp2" on_ranks 4 "$build/apps/generate" --checkpoint "$tmp/gpt2/step_10.h5" \
     --prompts "$tmp/prompts.jsonl" "${flags[@]}" --dp 2 --tp 2 --output "$tmp/gpt2-$mode-dp2-tp2.jsonl"
done
run_case gpt2-dp-score-1 on_ranks 1 "$build/apps/generate" --checkpoint "$tmp/gpt2/step_10.h5" --score "$tmp/data.h5" \
    --seq-len 32 --eval-batches 3 --global-batch 5 --max-batch 4
run_case gpt2-dp-score-dp2 on_ranks 2 "$build/apps/generate" --checkpoint "$tmp/gpt2/step_10.h5" \
   --score "$tmp/data.h5" --seq-len 32 --eval-batches 3 --global-batch 5 --max-batch 4 --dp 2
finish_cases
for mode in greedy sampled; do
  grep -q "2 replicas of 1 rank(s) each" "$tmp/gpt2-$mode-dp2.err" ||
    fail "dp2 $mode: no replicas reported: $(cat "$tmp/gpt2-$mode-dp2.err")"
  same_completions "$tmp/gpt2-$mode-1.jsonl" "$tmp/gpt2-$mode-dp2.jsonl" "gpt2 $mode dp2" "$logprob_tol"
  same_completions "$tmp/gpt2-$mode-1.jsonl" "$tmp/gpt2-$mode-dp2-tp2.jsonl" "gpt2 $mode dp2 x tp2" "$logprob_tol"
done
one=$(grep -o '^loss [-0-9.e+]*' "$tmp/gpt2-dp-score-1.out" | cut -d' ' -f2)
two=$(grep -o '^loss [-0-9.e+]*' "$tmp/gpt2-dp-score-dp2.out" | cut -d' ' -f2)
grep -q "15 windows of 32 tokens in 3 batches of 5, shared by 2 replicas" "$tmp/gpt2-dp-score-dp2.out" ||
  fail "dp2 --score: $(cat "$tmp/gpt2-dp-score-dp2.out")"
python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= 1e-6 * abs(a) else 1)" "$one" "$two" ||
  fail "gpt2: --score $one on one rank, $two under dp2"
echo "gpt2: --score $one on one rank, $two under dp2 (15 windows: 8 and 7)"

# --dp not fitting the ranks, --interactive (one reader of standard input) across ranks, a group
# that a tp rank's columns would cut in two, tp 3 and pp 4: each refused by name (side by side).
run "$build/apps/ckpt_tool" quantize "$tmp/gpt2/step_10.h5" --output "$tmp/g32.h5" --bits 8 --group-size 32
run_case refused-dp on_ranks 3 "$build/apps/generate" --checkpoint "$tmp/gpt2/step_10.h5" --prompt x --dp 2
run_case refused-interactive on_ranks 2 "$build/apps/generate" --checkpoint "$tmp/gpt2/step_10.h5" --interactive
run_case refused-g32 on_ranks 2 "$build/apps/generate" --checkpoint "$tmp/g32.h5" --prompt x --tp 2
run_case refused-tp3 on_ranks 3 "$build/apps/generate" --checkpoint "$tmp/gpt2/step_10.h5" --prompt x --tp 3
run_case refused-pp4 on_ranks 4 "$build/apps/generate" --checkpoint "$tmp/gpt2/step_10.h5" --prompt x --pp 4
wait_cases
refused() {
  local label=$1 says=$2
  [[ ${case_status[$label]} -ne 0 ]] && grep -qF -- "$says" "$tmp/$label.err" ||
    fail "$label: exit ${case_status[$label]}, $(cat "$tmp/$label.err")"
}
refused refused-dp "--dp 2 x --tp 1 x --pp 1 = 2 ranks, but the job has 3"
refused refused-interactive "--interactive reads standard input on one rank"
echo "--dp 2 on 3 ranks and --interactive on 2 ranks: refused"
refused refused-g32 "do not fall on whole groups of 32"
echo "a quantised checkpoint whose groups a tp rank would cut: refused"
refused refused-tp3 "--tp 3 must divide the 4 heads"
refused refused-pp4 "--pp 4 is more stages than the 3 blocks"
echo "generate_parallel: tp2, pp2, tp2 x pp2, dp2 and dp2 x tp2 give the one-rank tokens and score; tp 3 and pp 4 refused"
keep=0

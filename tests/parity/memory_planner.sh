#!/usr/bin/env bash
# The memory planner (`--dry-run`, lib/plan/memory_plan.h) against the tracked memory of real runs:
# on one rank, at tp 2 x dp 2 with ZeRO-1, at pp 2 with full activation checkpointing (and at pp 2 with uneven stages, 3 + 1 blocks, interleaved pp 2 with uneven chunks, and, beyond
# the three the issue asks for, dp 2 with ZeRO-3, moe_train at ep 2 (gpt2, and llama with a shared
# expert; and both at pp 2 zb, where the plan must not fall below the run), bf16 at dp 2 with ZeRO-2, optimizer states offloaded to files at dp 2 with ZeRO-1, a
# Llama with grouped-query attention and an untied head on one rank, a multi-query Llama at tp 2,
# grid tensor parallelism: 2d at tp 4, 2.5d and 3d at tp 8, dp 2 x 2d, a Llama at 2d and 3d),
# the predicted total of the rank that writes the metrics (pipeline stage 0) is within 10% of its
# measured step-2 peak (the Llama cases and all grid cases but pp 2: equal to it), and its parameters + gradients + optimizer
# states equal the run's state_bytes exactly. A dry run plans any layout from one process and reads
# nothing of the data set but its vocab_size.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
data="$tmp/long.h5"
"$build/apps/data_prep" synth --vocab 61 --tokens 100000 --seed 5 --output "$data" >/dev/null
model=(--layers 4 --hidden 32 --heads 4 --seq-len 1024 --global-batch 4 --steps 2 --threads 1)

# NAME APP RANKS DP options...: the dry run (one process, planning dp x ... ranks), then the run;
# `tol=0 planned_like_measured ...` asks for the measured peak to the byte, `at_least=1 ...` for a
# plan no lower than it.
measure_case() {
  local name=$1 app=$2 ranks=$3 dp=$4; shift 4
  local within=${tol:-0.1} bound=${at_least:-0}
  "$build/apps/$app" --input "$data" "${model[@]}" "$@" --dp "$dp" --dry-run >"$tmp/$name.plan" &&
  mpirun -np "$ranks" "$build/apps/$app" --input "$data" "${model[@]}" "$@" --metrics "$tmp/$name.jsonl" >/dev/null &&
  echo -n "$name: " &&
  /usr/bin/python3 - "$tmp/$name.plan" "$tmp/$name.jsonl" "$within" "$bound" <<'PY'
import json, re, sys
plan = open(sys.argv[1]).read()
stage0 = re.search(r"^\s+total\s+(\d+) bytes .*\(state (\d+) bytes\)", plan, re.M)  # the first stage's
predicted, state = int(stage0.group(1)), int(stage0.group(2))
step2 = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l][1]
measured = step2["peak_mem_bytes"]
if state != step2["state_bytes"]:
    sys.exit(f"error: planned state {state} bytes, the run's state_bytes {step2['state_bytes']}")
tol = float(sys.argv[3])
if abs(predicted - measured) > tol * measured:
    sys.exit(f"error: predicted {predicted} bytes, measured peak {measured}: off by more than {tol:.0%}\n{plan}")
if sys.argv[4] == "1" and predicted < measured:
    sys.exit(f"error: predicted {predicted} bytes, below the measured peak {measured}\n{plan}")
print(f"predicted {predicted} bytes, measured {measured} ({predicted / measured:.4f}x); state {state} exactly")
PY
}

# The cases run side by side, at most $max_jobs at a time (a case's run mostly waits on MPI start-up
# and on its ranks taking turns on 2 cores; the peaks compared are the tracked allocator bytes, not
# the machine's, so a neighbour changes nothing); each case's dry run, run and check are as before,
# its lines printed in order at the end (finish_cases), which fails if any case failed.
source "$(dirname "$0")/../tools/cases_side_by_side.sh"
planned_like_measured() { run_case "$1" measure_case "$@"; }

planned_like_measured one-rank gpt_train 1 1
planned_like_measured tp2-dp2-zero1 gpt_train 4 2 --tp 2 --zero 1
planned_like_measured pp2-full gpt_train 2 1 --pp 2 --micro-batch 1 --activation-checkpointing full
planned_like_measured pp2-uneven-3-1 gpt_train 2 1 --pp 2 --micro-batch 1 --pp-layers 3,1
planned_like_measured dp2-zero3-selective gpt_train 2 2 --zero 3 --activation-checkpointing selective
# interleaved with uneven chunks (8 blocks in 6 virtual stages): a chunk's slot is taken when the
# step before its recv_fwd posts that receive, one micro-batch earlier than its forward; within 1%
shared_model=("${model[@]}")
model=(--layers 8 --hidden 32 --heads 4 --seq-len 1024 --global-batch 8 --steps 2 --threads 1)
tol=0.01 planned_like_measured pp2-interleaved-v3 gpt_train 2 1 --pp 2 --pp-schedule interleaved --virtual-stages 3 \
  --micro-batch 1
model=("${shared_model[@]}")
planned_like_measured moe-ep2 moe_train 2 1 --ep 2 --experts 4
# llama MoE: SwiGLU experts and a shared expert at ep 2; to the byte
tol=0 planned_like_measured moe-llama-shared-ep2 moe_train 2 1 --ep 2 --experts 4 --arch llama --kv-heads 2 \
  --ffn-hidden 64 --shared-experts 1
# moe zero-bubble: the experts' and the router's W operands kept per micro-batch in flight; a bound
at_least=1 planned_like_measured moe-pp2-zb moe_train 2 1 --pp 2 --micro-batch 1 --pp-schedule zb --experts 4
at_least=1 planned_like_measured moe-llama-shared-pp2-zb moe_train 2 1 --pp 2 --micro-batch 1 --pp-schedule zb \
  --experts 4 --arch llama --kv-heads 2 --ffn-hidden 64 --shared-experts 1 --moe-every 1
planned_like_measured dp2-zero2-bf16 gpt_train 2 2 --zero 2 --precision bf16
# Llama: grouped-query attention (2 kv heads for 4 query heads), SwiGLU, untied head; to the byte
tol=0 planned_like_measured llama-gqa gpt_train 1 1 --arch llama --kv-heads 2 --ffn-hidden 80
# multi-query at tp 2: the one kv head replicated, its k and v gradients summed over tp (packed)
tol=0 planned_like_measured llama-mqa-tp2 gpt_train 2 1 --arch llama --kv-heads 1 --ffn-hidden 80 --tp 2
mkdir -p "$tmp/offload"
planned_like_measured dp2-zero1-nvme gpt_train 2 2 --zero 1 --offload nvme --offload-dir "$tmp/offload"
# Grid tensor parallelism on a shorter sequence (the grid's rows and layers split the batch like dp,
# so each rank's micro-batch is global / (dp x the grid's batch shares)): 2d at tp 4, 2.5d at tp 8
# depth 2, 3d at tp 8 and dp 2 x 2d with ZeRO-1 to the byte; 2d at pp 2 with full checkpointing never
# below the run; a Llama (RMSNorm, SwiGLU, grouped-query, untied head) at 2d and at 3d to the byte (its
# k and v projections [N, kv/q x head] in the scratch; 3d: k's, v's and up's dx reduce-scattered into
# a block of their own before they are added to q's and gate's)
model=(--layers 2 --hidden 32 --heads 4 --seq-len 128 --global-batch 4 --steps 2 --threads 1)
tol=0 planned_like_measured grid-2d-tp4 gpt_train 4 1 --tp 4 --tp-mode 2d
tol=0 planned_like_measured grid-25d-tp8 gpt_train 8 1 --tp 8 --tp-mode 2.5d --tp-depth 2
tol=0 planned_like_measured grid-3d-tp8 gpt_train 8 1 --tp 8 --tp-mode 3d
tol=0 planned_like_measured grid-2d-tp4-dp2-zero1 gpt_train 8 2 --tp 4 --tp-mode 2d --zero 1
at_least=1 planned_like_measured grid-2d-tp4-pp2-full gpt_train 8 1 --tp 4 --tp-mode 2d --pp 2 --micro-batch 1 \
  --activation-checkpointing full
tol=0 planned_like_measured grid-2d-tp4-llama gpt_train 4 1 --tp 4 --tp-mode 2d --arch llama --kv-heads 2 \
  --ffn-hidden 64
tol=0 planned_like_measured grid-3d-tp8-llama gpt_train 8 1 --tp 8 --tp-mode 3d --arch llama --kv-heads 2 \
  --ffn-hidden 64
model=("${shared_model[@]}")
finish_cases

# One process plans 64 ranks, per pipeline stage, from a file holding nothing but vocab_size.
/usr/bin/python3 -c "import h5py, sys; h5py.File(sys.argv[1], 'w').attrs['vocab_size'] = 50257" "$tmp/vocab.h5"
"$build/apps/gpt_train" --input "$tmp/vocab.h5" --layers 24 --hidden 1024 --heads 16 --seq-len 1024 --global-batch 64 \
  --micro-batch 1 --dp 4 --tp 4 --pp 4 --zero 1 --activation-checkpointing full --dry-run >"$tmp/big.plan"
for want in "pp=4 dp=4 ep=1 sp=1 tp=4" "pipeline stage 3: blocks 18-23, head" "predicted peak per rank"; do
  grep -qF "$want" "$tmp/big.plan" || { echo "error: '$want' not in the plan:"; cat "$tmp/big.plan"; exit 1; }
done
echo "dry run of 64 ranks from one process: $(grep -F 'predicted peak' "$tmp/big.plan")"

#!/usr/bin/env bash
# ZeRO bookkeeping at dp=4: per-step dp payload bytes (comm_bytes) and the bytes a rank holds
# (state_bytes) equal what each ZeRO stage implies for this model's flat parameter count N.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
for zero in 0 1 2 3; do
  mpirun -np 4 "$build/apps/gpt_train" --input "$tmp/data.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 \
    --global-batch 8 --steps 2 --threads 1 --zero $zero --metrics "$tmp/z$zero.jsonl" >/dev/null
done
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
rows = {z: [r for r in map(json.loads, open(f"{tmp}/z{z}.jsonl")) if "loss" in r] for z in range(4)}  # step lines
# The model: vocab 61 padded to 64 rows, hidden 32, seq 16, 2 layers (flat order: embedding, blocks, ln_f).
C, T, L, Vp, dp = 32, 16, 2, 64, 4
embed = Vp * C + T * C
block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C)
ln_f = 2 * C
N = embed + L * block + ln_f
chunk = -(-N // dp); S = -(-chunk // 16) * 16            # rank 0's shard (FlatShards)
f = 4
expect_state = {0: f * 4 * N, 1: f * (2 * N + 2 * S), 2: f * (2 * N + 3 * S), 3: f * 4 * S}
# All-reduced doubles: the loss; the step's figures (trainer.cpp: a max of the preemption flag and the
# largest resident memory, a sum of the data bytes read); and under ZeRO 2 and 3 the shard norm.
loss, norm = 8 + 8 * 2 + 8, 8
expect_comm = {
    0: f * N + loss,                                       # all-reduce of the gradients
    1: f * N + loss + f * N,                               # + all-gather of the parameters
    2: f * N + norm + f * N + loss,                        # reduce-scatter, all-gather
    3: f * (N + (N - embed - ln_f)) + f * N + norm + loss, # gathers in forward and backward, reduce-scatters
}
bad = False
for z in range(4):
    for r in rows[z]:
        got_s, got_c = r["state_bytes"], r["comm_bytes"]
        ok = got_s == expect_state[z] and got_c == expect_comm[z]
        bad |= not ok
        print(f"zero {z} step {r['step']}: state_bytes {got_s} (expected {expect_state[z]}), "
              f"comm_bytes {got_c} (expected {expect_comm[z]}){'' if ok else '  <-- MISMATCH'}")
sys.exit("error: ZeRO accounting differs from the formulas" if bad else 0)
PY

#!/usr/bin/env bash
# Watchdog: rank 2 drops out of collectives at step 2's gradient all-reduce
# (TESSERA_FAULT_SKIP_COLLECTIVE); its peers must abort the job within --comm-timeout naming the
# operation, the group, its members and the step. `timeout 60` turns a real hang into a failure.
set -uo pipefail
build=$1; src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
help=$("$build/apps/gpt_train" --help 2>&1); grep -q -- --comm-timeout <<<"$help" \
  || { echo "error: $build/apps/gpt_train has no --comm-timeout option"; exit 1; }
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/D.h5" >/dev/null || exit 1
# Collectives per step on dp=4, ZeRO 0, one bucket: the gradient all-reduce, the loss's, and the
# step figures' two (a max of the preemption flag and largest resident memory, a sum of the data
# bytes read). The 5th collective is step 2's gradient all-reduce.
start=$SECONDS
TESSERA_FAULT_SKIP_COLLECTIVE=2:5 timeout -k 10 60 mpirun --oversubscribe -np 4 "$build/apps/gpt_train" \
  --input "$tmp/D.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 10 \
  --threads 1 --comm-timeout 5 >"$tmp/out" 2>"$tmp/err"
rc=$?
elapsed=$((SECONDS - start))
echo "exit code $rc after ${elapsed} s; stderr:"; cat "$tmp/err"
fail() { echo "error: $*"; exit 1; }
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung: killed by timeout 60"
[ "$rc" -ne 0 ] || fail "the job succeeded although rank 2 skipped a collective"
[ "$elapsed" -le 25 ] || fail "the job took ${elapsed} s to end; expected within 5 s + 20 s"
grep -Eq 'error: rank [0-9]+: i?all_reduce_sum\(dp\) \[peers: world ranks 0,1,2,3\] did not complete within 5 s at step 2, micro-batch 1; aborting the job' "$tmp/err" \
  || fail "stderr lacks the watchdog line naming all_reduce(dp), its peers, 'within 5 s' and 'step 2'"
grep -q 'error: rank 2:' "$tmp/err" && fail "rank 2 (the rank that dropped out) reported the timeout"
echo "ok: the watchdog ended the job in ${elapsed} s"

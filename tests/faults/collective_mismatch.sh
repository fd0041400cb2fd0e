#!/usr/bin/env bash
# Collective fingerprints: rank 1 announces a wrong element count for step 2's gradient all-reduce
# (TESSERA_FAULT_MISMATCH_COLLECTIVE) under --check-collectives; the job must end at once, non-zero,
# with an error naming the group, the step and both sides.
set -uo pipefail
build=$1; src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
help=$("$build/apps/gpt_train" --help 2>&1); grep -q -- --check-collectives <<<"$help" \
  || { echo "error: $build/apps/gpt_train has no --check-collectives option"; exit 1; }
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/D.h5" >/dev/null || exit 1
common=(--input "$tmp/D.h5" --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8
        --steps 10 --threads 1 --comm-timeout 5)
fail() { echo "error: $*"; exit 1; }
# Normal traffic passes the check.
timeout -k 10 60 mpirun --oversubscribe -np 4 "$build/apps/gpt_train" "${common[@]}" --check-collectives \
  >"$tmp/ok.out" 2>"$tmp/ok.err" || { cat "$tmp/ok.err"; fail "a clean run failed under --check-collectives"; }
# The 5th collective is step 2's gradient all-reduce (per step: one bucket, the loss's all-reduce,
# and the step figures' two: a max of the preemption flag and largest resident memory, a sum of the
# data bytes read).
start=$SECONDS
TESSERA_FAULT_MISMATCH_COLLECTIVE=1:5 timeout -k 10 60 mpirun --oversubscribe -np 4 \
  "$build/apps/gpt_train" "${common[@]}" --check-collectives >"$tmp/out" 2>"$tmp/err"
rc=$?
elapsed=$((SECONDS - start))
echo "exit code $rc after ${elapsed} s; stderr:"; cat "$tmp/err"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung: killed by timeout 60"
[ "$rc" -ne 0 ] || fail "the job succeeded despite the mismatch"
[ "$elapsed" -le 15 ] || fail "the job took ${elapsed} s to end; a mismatch should end it at once"
grep -Eq 'error: collective mismatch in group dp at step 2, micro-batch 1: rank 0 calls all_reduce_sum f32 x ([0-9]+), rank 1 calls all_reduce_sum f32 x ([0-9]+)$' "$tmp/err" \
  || fail "stderr lacks the mismatch line naming group dp, step 2 and both sides"
line=$(grep -m1 'collective mismatch' "$tmp/err")
a=$(sed -E 's/.*rank 0 calls [a-z_]+ f32 x ([0-9]+),.*/\1/' <<<"$line")
b=$(sed -E 's/.*rank 1 calls [a-z_]+ f32 x ([0-9]+)$/\1/' <<<"$line")
[ "$b" -eq $((a + 1)) ] || fail "expected rank 1's count one above rank 0's: $line"
grep -q 'did not complete within' "$tmp/err" && fail "the watchdog fired: the mismatch was not caught first"
echo "ok: the mismatch ended the job in ${elapsed} s"

#!/usr/bin/env bash
# A checkpoint folder one rank cannot write (each rank in its own folder, a relative
# --checkpoint-dir that is a plain file on rank 1's side, as a node without the shared mount would
# see it): the job stops before step 1, naming the rank and its reason, and writes no metrics.
set -uo pipefail
build=$1; src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "error: $*"; exit 1; }
mkdir "$tmp/a" "$tmp/b"
"$build/apps/data_prep" synth --vocab 20 --tokens 3000 --seed 1 --output "$tmp/d.h5" >/dev/null || exit 1
echo "not a folder" >"$tmp/b/ck"
gpt=("$build/apps/gpt_train" --input "$tmp/d.h5" --layers 1 --hidden 16 --heads 2 --seq-len 8 --global-batch 4
     --steps 2 --threads 1 --checkpoint-dir ck --metrics "$tmp/m.jsonl")
timeout -k 10 120 mpirun -np 1 -wdir "$tmp/a" "${gpt[@]}" : -np 1 -wdir "$tmp/b" "${gpt[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung (killed by timeout 120)"
[ "$rc" -ne 0 ] || fail "the job trained although rank 1 cannot write its checkpoints"
grep -qF "cannot write checkpoints to --checkpoint-dir ck (rank 1: not a directory)" "$tmp/err" ||
  { cat "$tmp/err"; fail "stderr does not name rank 1 and its reason"; }
[ ! -s "$tmp/m.jsonl" ] || fail "metrics were written"
[ "$(cat "$tmp/b/ck")" = "not a folder" ] || fail "rank 1's file was changed"
echo "refused before step 1 (exit $rc): $(grep -m1 -o 'cannot write.*' "$tmp/err")"

#!/usr/bin/env bash
# Ranks started differently (mpirun's `a : b` form, as a broken job script does): the job stops
# before its first step, non-zero and at once, naming the option or the data file that differs and
# the ranks holding each value; no metrics or checkpoint are written. Ranks started alike train.
set -uo pipefail
build=$1; src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "error: $*"; exit 1; }
mkdir "$tmp/a" "$tmp/b"
"$build/apps/data_prep" synth --vocab 20 --tokens 3000 --seed 1 --output "$tmp/a/d.h5" >/dev/null || exit 1
"$build/apps/data_prep" synth --vocab 20 --tokens 3000 --seed 2 --output "$tmp/b/d.h5" >/dev/null || exit 1
gpt=("$build/apps/gpt_train" --layers 1 --hidden 16 --heads 2 --seq-len 8 --global-batch 4 --threads 1)

# expect_refused NAME WORDS mpirun-arguments...: a non-zero exit within the time limit (not the
# timeout's), WORDS on stderr, nothing written.
expect_refused() {
  local name=$1 words=$2; shift 2
  echo -n "$name: "
  timeout -k 10 120 mpirun "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung (killed by timeout 120)"
  [ "$rc" -ne 0 ] || fail "the job ran"
  grep -qF -- "$words" "$tmp/err" || { cat "$tmp/err"; fail "stderr lacks '$words'"; }
  [ ! -e "$tmp/m.jsonl" ] && [ ! -e "$tmp/ck" ] || fail "a refused job wrote metrics or checkpoints"
  echo "refused (exit $rc): $(grep -m1 -o 'started with different.*' "$tmp/err" | cut -c1-150)"
}

# One option differs, between one rank and two.
expect_refused "--steps differs" "--steps: 2 on rank 0, 3 on ranks 1-2" \
  -np 1 "${gpt[@]}" --input "$tmp/a/d.h5" --steps 2 --metrics "$tmp/m.jsonl" --checkpoint-dir "$tmp/ck" : \
  -np 2 "${gpt[@]}" --input "$tmp/a/d.h5" --steps 3 --metrics "$tmp/m.jsonl" --checkpoint-dir "$tmp/ck"
# An option only some ranks were given, and a layout option (which would split the mesh apart).
expect_refused "--tp given to one rank" "--tp: 1 on rank 0, 2 on rank 1" \
  -np 1 "${gpt[@]}" --input "$tmp/a/d.h5" --steps 2 : -np 1 "${gpt[@]}" --input "$tmp/a/d.h5" --steps 2 --tp 2
# The same path naming different files (each rank in another folder): the file's identity differs.
expect_refused "different data under one path" "the file of --input: " \
  -np 1 -wdir "$tmp/a" "${gpt[@]}" --input d.h5 --steps 2 : -np 1 -wdir "$tmp/b" "${gpt[@]}" --input d.h5 --steps 2
# A config file read differently (each rank's folder holds its own cfg.ini).
printf 'lr = 0.001\n' >"$tmp/a/cfg.ini"
printf 'lr = 0.002\n' >"$tmp/b/cfg.ini"
expect_refused "config files differ" "--lr: 0.001 on rank 0, 0.002 on rank 1" \
  -np 1 -wdir "$tmp/a" "${gpt[@]}" --input "$tmp/a/d.h5" --steps 2 --config cfg.ini : \
  -np 1 -wdir "$tmp/b" "${gpt[@]}" --input "$tmp/a/d.h5" --steps 2 --config cfg.ini
# vit_train compares its --input the same way.
"$build/apps/data_prep" synth-images --train 16 --test 8 --size 8 --classes 2 --seed 1 --output "$tmp/a/i.h5" >/dev/null || exit 1
"$build/apps/data_prep" synth-images --train 16 --test 8 --size 8 --classes 2 --seed 2 --output "$tmp/b/i.h5" >/dev/null || exit 1
vit=("$build/apps/vit_train" --input i.h5 --layers 1 --hidden 16 --heads 2 --patch 4 --global-batch 4 --steps 2 --threads 1)
expect_refused "vit_train: different data under one path" "the file of --input: " \
  -np 1 -wdir "$tmp/a" "${vit[@]}" : -np 1 -wdir "$tmp/b" "${vit[@]}"

# Started alike (the same `a : b` form): it trains.
echo -n "ranks started alike: "
timeout -k 10 120 mpirun -np 1 "${gpt[@]}" --input "$tmp/a/d.h5" --steps 2 : -np 1 "${gpt[@]}" --input "$tmp/a/d.h5" \
  --steps 2 >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; fail "a job whose ranks agree failed"; }
echo "trained"

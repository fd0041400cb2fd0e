#!/usr/bin/env bash
# --quiet and --log-level: --quiet drops the info lines (progress, the summary) but keeps warnings
# and errors; --log-level error drops the warnings too; an error is printed under every level,
# also from several ranks; --quiet with --log-level and an unknown level are refused.
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/data_prep" synth --vocab 61 --tokens 20000 --seed 5 --output "$tmp/data.h5" >/dev/null
common=(--input "$tmp/data.h5" --layers 1 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 --steps 3 --threads 1)
fail() { cat "$tmp/out.log" "$tmp/err.log"; echo "error: $*"; exit 1; }
gpt() { timeout -k 10 60 "$@" >"$tmp/out.log" 2>"$tmp/err.log"; }

# The default prints info lines; OMP_WAIT_POLICY=PASSIVE makes the run print a warning.
OMP_WAIT_POLICY=PASSIVE gpt "$build/apps/gpt_train" "${common[@]}" || fail "the default run failed"
grep -q "info: step 3/3 100%" "$tmp/out.log" || fail "no 'info: step 3/3 100%' line by default"
grep -q "warn: OMP_WAIT_POLICY=PASSIVE" "$tmp/err.log" || fail "no warning by default"

OMP_WAIT_POLICY=PASSIVE gpt "$build/apps/gpt_train" "${common[@]}" --quiet --metrics "$tmp/m.jsonl" ||
  fail "--quiet: the run failed"
! grep -q "info:" "$tmp/out.log" "$tmp/err.log" || fail "--quiet printed info lines"
grep -q "warn: OMP_WAIT_POLICY=PASSIVE" "$tmp/err.log" || fail "--quiet dropped the warning"
[ "$(grep -c '"loss"' "$tmp/m.jsonl")" = 3 ] || fail "--quiet: the metrics file lacks the 3 steps"

OMP_WAIT_POLICY=PASSIVE gpt "$build/apps/gpt_train" "${common[@]}" --log-level error || fail "--log-level error failed"
[ ! -s "$tmp/out.log" ] && [ ! -s "$tmp/err.log" ] || fail "--log-level error printed lines of a good run"

# Errors are printed under --quiet and --log-level error: one rank and two.
for level in --quiet "--log-level error"; do
  for launcher in "" "mpirun -np 2"; do
    if TESSERA_FAULT_NAN_STEP=2 gpt $launcher "$build/apps/gpt_train" "${common[@]}" $level; then
      fail "$level ${launcher:-one rank}: a NaN gradient did not stop the run"
    fi
    grep -q "error: step 2" "$tmp/err.log" || fail "$level ${launcher:-one rank}: the error was not printed"
    ! grep -q "info:" "$tmp/out.log" "$tmp/err.log" || fail "$level ${launcher:-one rank}: info lines printed"
  done
done

# Refused: --quiet with --log-level, an unknown level (usage errors, exit 2).
for args in "--quiet --log-level info" "--log-level verbose"; do
  code=0; gpt "$build/apps/gpt_train" "${common[@]}" $args || code=$?
  [ "$code" != 0 ] || fail "$args: accepted"
  grep -q "error:.*log-level" "$tmp/err.log" || fail "$args: no error naming --log-level"
done
echo "--quiet: warnings and errors only; --log-level error: errors only; bad combinations refused"

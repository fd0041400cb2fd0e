#!/usr/bin/env bash
# Runs every fuzz target of a TESSERA_FUZZ build for a fixed time on fresh seeds; fails on a crash.
# usage: tests/fuzz/run_fuzz_ci.sh BUILD_DIR SRC_DIR [SECONDS_PER_TARGET=60] [RUNS_PER_TARGET]
# With RUNS_PER_TARGET (what CI passes) libFuzzer runs exactly that many inputs from a fixed seed
# (-seed=1), so a CI run is reproducible; the seconds are then only a safety limit.
# Output under BUILD_DIR/fuzz/: seeds/, corpus/ (what the run found), artifacts/<target>/ (crashes),
# logs/<target>.log. Exit 1 naming each reproducer when any target crashed, leaked, hung or ran out
# of memory; validation/fuzz/README.md says how to turn a reproducer into a regression test.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR SRC_DIR [SECONDS_PER_TARGET]" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
src=$(cd "$2" && pwd) || exit 2
secs=${3:-60}
runs=${4:-}
work="$build/fuzz"
# target name -> seed folder
declare -A seeds=([fuzz_token_dataset]=token_dataset [fuzz_checkpoint_reader]=checkpoint [fuzz_config_file]=config
                   [fuzz_safetensors_reader]=safetensors [fuzz_tokenizer_json]=tokenizer_json)

for t in "${!seeds[@]}"; do
  [ -x "$build/tests/fuzz/$t" ] || { echo "error: $build/tests/fuzz/$t not built (configure with CC=clang CXX=clang++ -DTESSERA_FUZZ=ON -DTESSERA_SANITIZE=ON and build target tessera_fuzz)" >&2; exit 1; }
done
"$src/tests/fuzz/make_seeds.sh" "$build" "$src" "$work/seeds" || { echo "error: making the fuzz seeds failed" >&2; exit 1; }

export OMP_NUM_THREADS=1
# Leaks count as findings (LeakSanitizer inside libFuzzer); third-party leaks only are suppressed.
# allocator_may_return_null: a C malloc() of an absurd size (HDF5 sizes its metadata cache entries
# from header fields) returns NULL, as glibc's does, and HDF5 reports an error that the reader
# turns into a clear message; without it ASan aborts inside libhdf5 on sizes above 1 TiB. C++
# operator new still aborts on any failed allocation, so tessera's own code stays checked.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$src/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=()
for t in fuzz_token_dataset fuzz_checkpoint_reader fuzz_config_file fuzz_safetensors_reader fuzz_tokenizer_json; do
  corpus="$work/corpus/$t"; art="$work/artifacts/$t"; log="$work/logs/$t.log"
  rm -rf "$corpus" "$art"; mkdir -p "$corpus" "$art" "$(dirname "$log")"
  start=$(date +%s)
  # -timeout: one input over 20 s is a hang; -rss_limit_mb: memory actually used; single mallocs up
  # to 8 GiB are allowed (HDF5 sizes buffers from header fields, then fails cleanly on a short file).
  "$build/tests/fuzz/$t" "$corpus" "$work/seeds/${seeds[$t]}" -max_total_time="$secs" \
      ${runs:+-runs=$runs -seed=1} -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=8192 -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  repro=$(ls "$art" 2>/dev/null | sed "s|^|$art/|")
  stats=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  echo "fuzz: $t: exit $rc after $(( $(date +%s) - start )) s, ${stats:-?} inputs, corpus $(ls "$corpus" | wc -l) files"
  if [ $rc -ne 0 ] || [ -n "$repro" ]; then
    failed+=("$t")
    echo "FUZZ FAILURE in $t (log: $log); last lines:" >&2
    grep -E 'ERROR|SUMMARY|unexpected exception|==[0-9]+==' "$log" | head -20 >&2
    tail -n 15 "$log" >&2
    for r in $repro; do
      echo "  reproducer: $r   (rerun: $build/tests/fuzz/$t $r)" >&2
    done
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "error: fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: every target ran ${runs:-for $secs s} ${runs:+inputs} without a finding"

#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test (all labels), then
# the one-rank tests again under ASan+UBSan (<build>-asan) and each fuzz target for 30000 inputs
# from a fixed seed (<build>-fuzz).
# usage: tests/run_all.sh [ctest arguments for the main part, e.g. -L unit]
#   TESSERA_CI_PARTS="main sanitize fuzz" picks the parts to run (default: all three).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
parts=" ${TESSERA_CI_PARTS:-main sanitize fuzz} "
build=${BUILD_DIR:-$root/build}
"$root/jobscripts/install_deps.sh" test
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ $parts == *" main "* ]]; then
  "$root/jobscripts/build.sh"
  (cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@")
fi

# Sanitizers: the one-rank tests (unit, badinput) on an ASan+UBSan build, CUDA off. Leaks count;
# tests/sanitizers/lsan.supp lists the third-party libraries whose own leaks are ignored.
if [[ $parts == *" sanitize "* ]]; then
  t0=$(date +%s)
  BUILD_DIR="$build-asan" "$root/jobscripts/build.sh" -DTESSERA_SANITIZE=ON -DTESSERA_CUDA=OFF
  # Full malloc stacks and no dlclose of Open MPI's components, so lsan.supp can name libraries.
  # badinput runs the apps, i.e. MPI singleton init: LeakSanitizer's tracer then crashes now and
  # then at exit (signal 11 among Open MPI's ORTE/PMIx threads), so leaks are checked in unit only.
  (cd "$build-asan" &&
   export OMPI_MCA_mca_base_component_disable_dlclose=1 \
     LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0" \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 &&
   ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0 \
     ctest --output-on-failure -j "$(nproc)" --timeout 900 -L unit &&
   ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
     ctest --output-on-failure -j "$(nproc)" --timeout 900 -L badinput)
  echo "run_all: sanitizer build + tests took $(( $(date +%s) - t0 )) s"
fi

# Fuzzing: libFuzzer targets (clang) on fresh seeds made by the project's tools; a fixed number of
# inputs from a fixed seed, so the run is reproducible (validation/fuzz/run.sh runs for longer).
if [[ $parts == *" fuzz "* ]]; then
  t0=$(date +%s)
  mkdir -p "$build-fuzz"
  CC=clang CXX=clang++ cmake -S "$root" -B "$build-fuzz" -DCMAKE_BUILD_TYPE=Release -DTESSERA_FUZZ=ON \
    -DTESSERA_SANITIZE=ON -DTESSERA_CUDA=OFF >"$build-fuzz/configure.log" 2>&1 ||
    { cat "$build-fuzz/configure.log"; echo "error: cmake configure of the fuzz tree failed" >&2; exit 1; }
  cmake --build "$build-fuzz" -j "$(nproc)" --target tessera_fuzz
  "$root/tests/fuzz/run_fuzz_ci.sh" "$build-fuzz" "$root" 300 30000
  echo "run_all: fuzz build + runs took $(( $(date +%s) - t0 )) s"
fi

#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test (all labels), then
# the one-rank tests again under ASan+UBSan (<build>-asan) and each fuzz target for 60 s (<build>-fuzz).
# usage: tests/run_all.sh [ctest arguments, e.g. -L unit]
#   TESSERA_CI_PARTS="main sanitize fuzz" (default: all three) picks the parts to run.
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
  (cd "$build-asan" &&
   ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
   LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0" \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j "$(nproc)" --timeout 900 -L 'unit|badinput')
  echo "run_all: sanitizer build + tests took $(( $(date +%s) - t0 )) s"
fi

# Fuzzing: libFuzzer targets (clang) on fresh seeds made by the project's tools, 60 s each.
if [[ $parts == *" fuzz "* ]]; then
  t0=$(date +%s)
  mkdir -p "$build-fuzz"
  CC=clang CXX=clang++ cmake -S "$root" -B "$build-fuzz" -DCMAKE_BUILD_TYPE=Release -DTESSERA_FUZZ=ON \
    -DTESSERA_SANITIZE=ON -DTESSERA_CUDA=OFF >"$build-fuzz/configure.log" 2>&1 ||
    { cat "$build-fuzz/configure.log"; echo "error: cmake configure of the fuzz tree failed" >&2; exit 1; }
  cmake --build "$build-fuzz" -j "$(nproc)" --target tessera_fuzz
  "$root/tests/fuzz/run_fuzz_ci.sh" "$build-fuzz" "$root" 60
  echo "run_all: fuzz build + runs took $(( $(date +%s) - t0 )) s"
fi

#!/usr/bin/env bash
# A long fuzz campaign (kept out of CI): builds the fuzz tree and runs every target for a while.
# usage: validation/fuzz/run.sh [MINUTES_PER_TARGET=15] [BUILD_DIR=<repo>/build-fuzz]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
minutes=${1:-15}
build=${2:-$root/build-fuzz}
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_FUZZ=ON \
  -DTESSERA_SANITIZE=ON -DTESSERA_CUDA=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; echo "error: cmake configure of the fuzz tree failed" >&2; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target tessera_fuzz
exec "$root/tests/fuzz/run_fuzz_ci.sh" "$build" "$root" $((minutes * 60))

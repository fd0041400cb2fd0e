#!/usr/bin/env bash
# Configures and builds tessera into $BUILD_DIR (default: build/ in the repository).
# Extra arguments go to cmake's configure step, e.g. -DTESSERA_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
mkdir -p "$build"
# Where ccache is installed, C and C++ compile through it, with paths taken relative to the
# repository, so a second checkout (a CI clone) reuses the first one's objects.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$root
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; echo "error: cmake configure failed (log above)" >&2; exit 1; }
cmake --build "$build" -j "$jobs"

#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every CTest test (all labels).
# usage: tests/run_all.sh [ctest arguments, e.g. -L unit]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/jobscripts/install_deps.sh" test
"$root/jobscripts/build.sh"
cd "${BUILD_DIR:-$root/build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@"

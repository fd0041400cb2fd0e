#!/usr/bin/env bash
# Decode GEMV with quantised weights (issue 34): y = W x for a 768x3072 and a 3072x768 matrix in f32,
# int8 and int4 (each path this CPU runs), in GEMV/s against the limit the copy bandwidth measured
# in the same run sets (bytes read / bandwidth), then the batched product (f32 sgemm, quantised
# register tiles, quantised panels), on 1 and 2 threads. Not a test.
#
# usage: quant_gemv.sh [--build DIR] [--reps N] [--group G] [--batch M]
#   --build: default <repo>/build; it needs kernels/bench_quant_gemv (built with the library).
#   --batch M: the batched products' activation rows (default 32; 0 leaves them out).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --reps|--group|--batch) args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
bench=$build/kernels/bench_quant_gemv
[[ -x $bench ]] || { echo "error: $bench not found (cmake --build DIR --target bench_quant_gemv)" >&2; exit 1; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
for threads in 1 2; do
  echo
  echo "== OMP_NUM_THREADS=$threads, 1-minute load average $(cut -d' ' -f1 /proc/loadavg)"
  OMP_NUM_THREADS=$threads OMP_PROC_BIND=false "$bench" ${args[@]+"${args[@]}"}
done

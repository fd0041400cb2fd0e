#!/usr/bin/env bash
# CPU AdamW benchmark: each code path (scalar, AVX2, AVX-512; those this CPU runs) in GB/s against
# the memory bandwidth measured in the same run (copy, triad, and a loop with AdamW's own traffic),
# for 10M-100M parameters, on 1 and 2 threads. Not a test: never registered with CTest.
#
# usage: adamw_cpu.sh [--build DIR] [--sizes M1,M2,...] [--reps N]
#   --build: default <repo>/build; it needs kernels/bench_adamw_cpu (built with the library).
#   --sizes: millions of parameters, default 10,30,100 (at 100M the program holds 2.4 GB).
#   --reps:  rounds, each running every kernel once; each kernel keeps its best. Default 7.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build
sizes=10,30,100
reps=7
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
bench=$build/kernels/bench_adamw_cpu
[[ -x $bench ]] || { echo "error: $bench not found (cmake --build DIR --target bench_adamw_cpu)" >&2; exit 1; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
for threads in 1 2; do
  echo
  echo "== OMP_NUM_THREADS=$threads, 1-minute load average $(cut -d' ' -f1 /proc/loadavg)"
  OMP_NUM_THREADS=$threads OMP_PROC_BIND=false "$bench" --sizes "$sizes" --reps "$reps"
done
echo
echo "GB/s counts 28 bytes per parameter for AdamW (reads p, g, m, v; writes p, m, v), 8 for copy,"
echo "12 for triad, 28 for the ceiling loop (p,m,v += g), without write-allocate traffic as STREAM does."

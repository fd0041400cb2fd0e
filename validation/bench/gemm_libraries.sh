#!/usr/bin/env bash
# Which sgemm library serves tessera's CPU GEMMs: OpenBLAS (OpenMP build), BLIS (OpenMP build) and
# oneDNN from Debian, each on the GEMMs of a GPT-2 124M step (gemm_libraries_bench.cpp), 2
# threads, in the environment as found. Not a test: never registered with CTest.
#
# usage: gemm_libraries.sh [--threads N]
# Needs libopenblas-dev + libopenblas0-openmp, libdnnl-dev and libblis-openmp-dev (Debian); a
# library that is missing is reported and left out.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
threads=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
src=$here/gemm_libraries_bench.cpp
arch=/usr/lib/x86_64-linux-gnu
built=()
cblas_dir=""  # any OpenBLAS cblas.h declares what the OpenMP build exports
for d in /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas; do
  [[ -e $d/cblas.h ]] && { cblas_dir=$d; break; }
done
if [[ -e $arch/openblas-openmp/libopenblas.so.0 && -n $cblas_dir ]]; then
  g++ -O2 -I"$cblas_dir" "$src" -o "$work/openblas" "$arch/openblas-openmp/libopenblas.so.0" && built+=(openblas)
else
  echo "OpenBLAS (OpenMP build) not found: left out (Debian: libopenblas-dev libopenblas0-openmp)"
fi
if [[ -e $arch/blis-openmp/libblis.a ]]; then
  g++ -O2 -DUSE_BLIS -I/usr/include/x86_64-linux-gnu/blis-openmp "$src" -o "$work/blis" "$arch/blis-openmp/libblis.a" \
    -fopenmp -lpthread -lm && built+=(blis)
else
  echo "BLIS (OpenMP build) not found: left out (Debian: libblis-openmp-dev)"
fi
if [[ -e /usr/include/dnnl.h ]]; then
  g++ -O2 -DUSE_ONEDNN "$src" -o "$work/onednn" -ldnnl && built+=(onednn)
else
  echo "oneDNN not found: left out (Debian: libdnnl-dev)"
fi
(( ${#built[@]} > 0 )) || { echo "error: no sgemm library to measure" >&2; exit 1; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus; $threads threads;" \
  "load $(cut -d' ' -f1 /proc/loadavg); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>}"
for lib in "${built[@]}"; do
  echo
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads BLIS_NUM_THREADS=$threads "$work/$lib"
done

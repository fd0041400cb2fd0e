#!/usr/bin/env bash
# Benchmark of the tensor-parallel modes on 8 ranks (not a test: never registered with CTest): one
# GPT trained for a few steps under 1D tp (tp 8, and tp 4 x dp 2), 2D SUMMA (tp 4 = 2 x 2, dp 2),
# 2.5D (tp 8 = depth 2 x 2 x 2) and 3D (tp 8 = 2 x 2 x 2), with one rank as the baseline; prints a
# markdown table of median tokens/s, communication bytes per step (rank 0's, as the metrics count
# them), peak memory and state memory (parameters, gradients, optimizer states) per rank, and the
# loss at the last step, which every layout should reproduce from the one-rank run (nearly equal).
# The 8 ranks share this machine's cores (oversubscribed): tokens/s is relative only; the bytes and
# the memory are exact.
#
# usage: tensor_modes.sh [--build DIR] [--steps N] [--threads T]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
steps=6
threads=1
source "$here/layout_table.sh"
layout_bench_setup 11 "$@"
# The grid modes need: global batch divisible by dp x the batch split (2d: q = 2; 2.5d: d q = 4;
# 3d: q^2 = 4), heads and hidden by q (3d: hidden by q^2). 16, 8 and 256 satisfy all of them.
batch=16
model=(--input "$tmp/data.h5" --layers 4 --hidden 256 --heads 8 --seq-len 256 --global-batch "$batch"
       --steps "$steps" --warmup 1 --threads "$threads")
echo "model: 4 layers, hidden 256, 8 heads, seq 256, global batch $batch, vocab 8192; $steps steps, $threads thread(s) per rank, $(nproc) cores"
echo
layout_table_header
layout_row "one rank" 1 --micro-batch "$batch"
layout_row "1d: tp 8" 8 --tp 8
layout_row "1d: tp 4 x dp 2" 8 --tp 4
layout_row "2d: tp 4 (2 x 2) x dp 2" 8 --tp 4 --tp-mode 2d
layout_row "2.5d: tp 8 (depth 2, 2 x 2)" 8 --tp 8 --tp-mode 2.5d --tp-depth 2
layout_row "3d: tp 8 (2 x 2 x 2)" 8 --tp 8 --tp-mode 3d
exit $status

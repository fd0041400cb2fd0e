#!/usr/bin/env bash
# Benchmark of the parallel layouts on 4 ranks (not a test: never registered with CTest): one GPT
# trained for a few steps under dp, 1D tp, tp with split_gather, Ulysses and ring sequence
# parallelism and a tp x sp mix, with one rank as the baseline; prints a markdown table of median
# tokens/s, communication bytes per step (rank 0's, as the metrics count them) and peak memory per
# rank. On a machine with fewer cores than ranks the ranks share cores (oversubscribed): compare
# bytes and memory freely, tokens/s only with that in mind.
#
# usage: parallel_modes.sh [--build DIR] [--steps N] [--threads T]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
steps=8
threads=1
source "$here/layout_table.sh"
layout_bench_setup 9 "$@"
model=(--input "$tmp/data.h5" --layers 4 --hidden 256 --heads 8 --seq-len 512 --global-batch 8 --steps "$steps"
       --warmup 1 --threads "$threads")
echo "model: 4 layers, hidden 256, 8 heads, seq 512, global batch 8, vocab 8192; $steps steps, $threads thread(s) per rank, $(nproc) cores"
echo
layout_table_header
layout_row "one rank" 1
layout_row "dp 4" 4
layout_row "dp 4, ZeRO-3" 4 --zero 3
layout_row "tp 4 (1d)" 4 --tp 4
layout_row "tp 4, split_gather" 4 --tp 4 --sp-mode split_gather
layout_row "sp 4, all_to_all" 4 --sp 4 --sp-mode all_to_all
layout_row "sp 4, ring" 4 --sp 4 --sp-mode ring
layout_row "tp 2 x sp 2 (ring)" 4 --tp 2 --sp 2 --sp-mode ring
layout_row "tp 2 x dp 2" 4 --tp 2
exit $status

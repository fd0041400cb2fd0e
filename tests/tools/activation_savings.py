#!/usr/bin/env python3
"""Checks that activation checkpointing saves exactly what docs/memory.md's formulas give.

usage: activation_savings.py FOLDER C H M CASE...
  C hidden size, H heads, M the MLP's width; each CASE is NAME,PLAIN,BLOCKS,MODE,ROWS,TP: run NAME
  (FOLDER/mem-NAME.jsonl) against run PLAIN, BLOCKS checkpointed blocks x micro-batches in flight,
  MODE full or selective, ROWS token rows per micro-batch, TP the tensor-parallel ranks.
The activation bytes of a run are its last training step's peak_mem_bytes - state_bytes; one shared
recompute buffer replaces the BLOCKS kept sets, so the saving is (BLOCKS - 1) x a block's bytes.
"""
import json
import sys


def activations(folder, name):
    last = [json.loads(line) for line in open(f"{folder}/mem-{name}.jsonl") if '"loss"' in line][-1]
    return last["peak_mem_bytes"] - last["state_bytes"]


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    folder, c, h, m = sys.argv[1], *map(int, sys.argv[2:5])
    for case in sys.argv[5:]:
        name, plain, blocks, mode, rows, tp = case.split(",")
        blocks, n, tp = int(blocks), int(rows), int(tp)
        if mode == "full":  # a block's saved tensors per micro-batch (docs/memory.md)
            per_block = 4 * n * (3 * c + (4 * c + 2 * m) // tp + 4 + h // tp)
        else:  # the attention core's output and log-sum-exp: what selective recomputes
            per_block = 4 * n * (c + h) // tp
        want = (blocks - 1) * per_block
        before, after = activations(folder, plain), activations(folder, name)
        if before - after != want:
            sys.exit(f"error: {name}: activations {after} bytes against {before} plain: saved {before - after},"
                     f" the formula gives {want}")
        print(f"activation bytes {name}: {after} against {before} plain ({after / before:.3f}x), saving {want}"
              " as the formula gives")


if __name__ == "__main__":
    main()

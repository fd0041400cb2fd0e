#!/usr/bin/env python3
"""Compares the last evaluation (eval_loss, eval_acc) of runs against a reference run's.

usage: compare_evals.py FOLDER REF NAME... [-- REF NAME...]...
Each group: a reference run, then the runs that must evaluate as it does (FOLDER/<run>.jsonl metrics
files): eval_loss to a relative 1e-5, eval_acc exactly. Exits 1 naming the first run that differs.
"""
import json
import sys


def last_eval(folder, name):
    rows = [json.loads(line) for line in open(f"{folder}/{name}.jsonl") if "eval_loss" in line]
    if not rows:
        sys.exit(f"error: {folder}/{name}.jsonl has no evaluation")
    return rows[-1]


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    folder, groups = sys.argv[1], " ".join(sys.argv[2:]).split(" -- ")
    said = []
    for group in groups:
        ref_name, *names = group.split()
        ref = last_eval(folder, ref_name)
        for name in names:
            e = last_eval(folder, name)
            if abs(e["eval_loss"] - ref["eval_loss"]) > 1e-5 * abs(ref["eval_loss"]) or e["eval_acc"] != ref["eval_acc"]:
                sys.exit(f"error: {name}: eval_loss {e['eval_loss']}, eval_acc {e['eval_acc']} vs {ref_name}'s "
                         f"{ref['eval_loss']}, {ref['eval_acc']}")
        said.append(f"{ref_name} {ref['eval_loss']:.6f} / {ref['eval_acc']:.4f} under {len(names)} layouts")
    print("eval_loss / eval_acc:", "; ".join(said))


if __name__ == "__main__":
    main()

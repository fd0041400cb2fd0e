#!/usr/bin/env python3
"""Compares the per-step training losses of two metrics files (JSON lines) to a relative tolerance.

usage: compare_losses.py REFERENCE.jsonl CANDIDATE.jsonl [--rtol 1e-5] [--key loss]
Exits 1 naming the first step that differs, 0 when every step matches (and there is at least one).
"""
import argparse
import json
import sys


def losses(path, key):
    out = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if "step" in row and key in row:
                out[row["step"]] = row[key]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("candidate")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--key", default="loss")
    a = ap.parse_args()
    ref, cand = losses(a.reference, a.key), losses(a.candidate, a.key)
    if not ref:
        sys.exit(f"error: no '{a.key}' lines in {a.reference}")
    if sorted(ref) != sorted(cand):
        sys.exit(f"error: steps differ: {sorted(ref)} vs {sorted(cand)}")
    worst = 0.0
    for step in sorted(ref):
        r, c = ref[step], cand[step]
        rel = abs(r - c) / max(abs(r), 1e-30)
        worst = max(worst, rel)
        if rel > a.rtol:
            sys.exit(f"error: step {step}: {a.key} {c!r} vs reference {r!r} (relative {rel:.2e} > {a.rtol:.0e})")
    print(f"{len(ref)} steps match: worst relative difference {worst:.2e} (tolerance {a.rtol:.0e})")


if __name__ == "__main__":
    main()

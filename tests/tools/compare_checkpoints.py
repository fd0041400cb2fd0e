#!/usr/bin/python3
"""Compares the parameters (and optimizer states) of two tessera checkpoints tensor by tensor.

usage: compare_checkpoints.py REFERENCE.h5 CANDIDATE.h5 [--rtol 1e-5] [--atol 0] [--only REGEX]
A tensor matches when ||a - b|| / ||b|| <= rtol, or when every element is within atol. The second
test is for tensors whose gradient is zero in exact arithmetic, such as the key part of the QKV
bias (softmax ignores a shift shared by a query's scores): AdamW turns the rounding noise of that
gradient into lr-sized steps, so its relative difference means nothing while its absolute one
stays far below a step. --only compares the tensors whose path matches REGEX (e.g. 'exp_avg$':
after one step, 0.1 x the clipped gradient). Exits 1 naming the worst tensor, or when the files hold different tensors.
"""
import argparse
import re
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    sys.exit(f"error: {e}: install Debian's python3-h5py and python3-numpy")


def tensors(f):
    out = {}
    f.visititems(lambda name, obj: out.__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("candidate")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=0.0)
    ap.add_argument("--only", default=None, help="compare only tensors whose path matches this regex")
    a = ap.parse_args()
    with h5py.File(a.reference, "r") as fr, h5py.File(a.candidate, "r") as fc:
        ref, cand = tensors(fr), tensors(fc)
    if sorted(ref) != sorted(cand):
        sys.exit(f"error: the checkpoints hold different tensors: {sorted(set(ref) ^ set(cand))[:5]}")
    if a.only:
        ref = {k: v for k, v in ref.items() if re.search(a.only, k)}
        if not ref:
            sys.exit(f"error: no tensor matches --only {a.only!r}")
    worst, worst_name, by_atol = 0.0, None, []
    for name, r in ref.items():
        c = cand[name]
        if r.shape != c.shape:
            sys.exit(f"error: {name}: shape {c.shape} vs reference {r.shape}")
        rel = float(np.linalg.norm((c - r).ravel()) / max(np.linalg.norm(r.ravel()), 1e-30))
        if rel <= a.rtol:
            if rel > worst:
                worst, worst_name = rel, name
            continue
        diff = float(np.max(np.abs(c - r))) if r.size else 0.0
        if diff > a.atol:
            sys.exit(f"error: {name} differs by {rel:.2e} (relative) > {a.rtol:.0e}, max |a-b| {diff:.2e} > {a.atol:.0e}")
        by_atol.append(f"{name} (max |a-b| {diff:.1e})")
    print(f"{len(ref)} tensors match: worst relative difference {worst:.2e} ({worst_name}), tolerance {a.rtol:.0e}"
          + (f"; within atol {a.atol:.0e}: {', '.join(by_atol)}" if by_atol else ""))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
# The table of llama_cpu.sh: per precision and program, the timed steps pooled over the rounds
# (tessera's metrics lines, torch_gpt_bench.py's JSON), tokens/s, MFU (model FLOPs per token as
# gpt_train counts them, the same for every program, over the peak gpt_train reports for that
# precision: kernels/peak_flops.h, measured on this machine) and tessera's ratio to the fastest
# PyTorch.
# usage: llama_cpu_report.py WORK_DIR WARMUP BATCH SEQ
import glob
import json
import os
import statistics
import sys

work, warmup, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tokens = batch * seq
sgemm = json.load(open(os.path.join(work, "sgemm.json")))["gflops"]
programs = ("tessera", "torch113", "torch-current", "torch-compile")
print(f"sgemm 2048^3 float32 (current PyTorch, 2 threads): {sgemm:.1f} GFLOP/s (for reference)")
hdr = f"{'precision':<9} {'program':<14} {'steps':>5} {'min ms':>9} {'median ms':>10} {'tok/s':>8} {'MFU':>6} {'tessera x':>9}"
print(hdr)
print("-" * len(hdr))
flops = None
for precision in ("fp32", "bf16"):
    rows = {}
    peak = None  # GFLOP/s, gpt_train's for this precision (tflops / mfu)
    for prog in programs:
        times = []
        for path in sorted(glob.glob(os.path.join(work, f"{precision}_r*_{prog}.json*"))):
            if path.endswith(".jsonl"):
                for line in open(path):
                    o = json.loads(line)
                    if "tflops" in o and flops is None:  # gpt_train's model FLOPs per token
                        flops = o["tflops"] * 1e12 * (o["step_ms"] / 1e3) / tokens
                    if o.get("mfu") and peak is None:
                        peak = o["tflops"] / o["mfu"] * 1e3
                    if "step_ms" in o and "loss" in o and int(o["step"]) > warmup:
                        times.append(float(o["step_ms"]))
            else:
                r = json.load(open(path))
                times += [float(x) for x in r["step_ms"][int(r["warmup"]):]]
        if times:
            rows[prog] = (len(times), min(times), statistics.median(times))
    if not rows:
        continue
    fastest_torch = min((v[2] for k, v in rows.items() if k != "tessera"), default=None)
    for prog in programs:
        if prog not in rows:
            print(f"{precision:<9} {prog:<14} {'(no result)':>5}")
            continue
        n, mn, md = rows[prog]
        tps = tokens / (md / 1e3)
        mfu = f"{100 * tps * flops / 1e9 / peak:5.1f}%" if flops and peak else ""
        ratio = f"{fastest_torch / md:9.2f}" if prog == "tessera" and fastest_torch else ""
        print(f"{precision:<9} {prog:<14} {n:>5} {mn:>9.1f} {md:>10.1f} {tps:>8.1f} {mfu:>6} {ratio:>9}")
    if peak:
        print(f"{'':<9} ({precision} peak as gpt_train measures it: {peak:.1f} GFLOP/s)")
print("tok/s and MFU of the median step; tessera x = the fastest PyTorch's median step / tessera's (>1: tessera faster)")

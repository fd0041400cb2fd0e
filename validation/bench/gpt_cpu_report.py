#!/usr/bin/python3
# Reads the runs of gpt_cpu.sh (tessera metrics JSON lines, PyTorch JSON, sgemm JSON) from its
# work folder and prints the table of the CPU GPT benchmark.
# usage: gpt_cpu_report.py <work_dir> <configs...>   (config = name:L:C:H:T:B:V)
import json
import os
import statistics
import sys

ENVS = ("inherited", "tuned")


def n_params(L, C, T, V):
    # tied head: wte [V, C], wpe [T, C]; per block 12 C^2 + 13 C; ln_f 2 C
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def tessera_times(path, warmup):
    steps = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            obj = json.loads(line)
            if "step" in obj and "loss" in obj and "step_ms" in obj:
                steps.append((int(obj["step"]), float(obj["step_ms"])))
    steps.sort()
    return [ms for s, ms in steps if s > warmup]


def load(path):
    with open(path) as f:
        return json.loads(f.read())


def main():
    work, configs = sys.argv[1], sys.argv[2:]
    warmup = 3
    lines = []
    out = lines.append

    sg = {}
    for env in ENVS:
        for kind in ("cblas", "torch"):
            p = os.path.join(work, f"sgemm_{kind}_{env}.json")
            if os.path.exists(p):
                sg[(kind, env)] = load(p)
    out("sgemm 2048^3 float32, 2 threads (best of 5), GFLOP/s:")
    for (kind, env), r in sorted(sg.items()):
        out(f"  {env:<10} {r['what']:<62} {r['gflops']:8.1f}")
    out("  tessera's GFLOP/s is compared with the cblas_sgemm figure (the BLAS gpt_train links) of"
        " the same environment.")
    out("")

    hdr = (f"{'config':<7} {'env':<10} {'program':<8} {'steps':>5} {'min ms':>9} {'median ms':>10} "
           f"{'tok/s(min)':>11} {'tok/s(med)':>11} {'ratio t/p':>9} {'GFLOP/s':>8} {'% sgemm':>8} {'load':>5}")
    out(hdr)
    out("-" * len(hdr))
    for spec in configs:
        name, L, C, H, T, B, V = spec.split(":")
        L, C, H, T, B, V = (int(x) for x in (L, C, H, T, B, V))
        flop_per_token = 6 * n_params(L, C, T, V) + 6 * L * T * C
        tokens = B * T
        for env in ENVS:
            res = {}
            tp = os.path.join(work, f"{name}_{env}_tessera.jsonl")
            if os.path.exists(tp):
                t = tessera_times(tp, warmup)
                if t:
                    res["tessera"] = (len(t), min(t), statistics.median(t))
            pp = os.path.join(work, f"{name}_{env}_pytorch.json")
            if os.path.exists(pp):
                r = load(pp)
                res["pytorch"] = (r["timed_steps"], r["min_ms"], r["median_ms"])
            for prog in ("tessera", "pytorch"):
                if prog not in res:
                    out(f"{name:<7} {env:<10} {prog:<8} {'(no result)':>5}")
                    continue
                n, mn, md = res[prog]
                tps_min, tps_med = tokens / (mn / 1e3), tokens / (md / 1e3)
                ratio = gf = pct = ""
                if prog == "tessera" and "pytorch" in res:
                    ratio = f"{res['pytorch'][2] / md:9.2f}"  # tokens/s ratio, medians
                g = tps_med * flop_per_token / 1e9
                gf = f"{g:8.1f}"
                if ("cblas", env) in sg:
                    pct = f"{100 * g / sg[('cblas', env)]['gflops']:7.1f}%"
                lp = os.path.join(work, f"{name}_{env}_{prog}.load")
                load_avg = open(lp).read().strip() if os.path.exists(lp) else ""
                out(f"{name:<7} {env:<10} {prog:<8} {n:>5} {mn:>9.1f} {md:>10.1f} {tps_min:>11.1f} "
                    f"{tps_med:>11.1f} {ratio:>9} {gf:>8} {pct:>8} {load_avg:>5}")
        out(f"{'':<7} ({name}: L={L} C={C} H={H} T={T} B={B} V={V}; "
            f"{n_params(L, C, T, V) / 1e6:.2f}M params; {flop_per_token / 1e9:.3f} GFLOP/token)")
    out("ratio t/p = tessera tokens/s / PyTorch tokens/s (medians); GFLOP/s = tokens/s (median) "
        "* (6 N + 6 L T C) / 1e9;\n% sgemm = GFLOP/s / cblas_sgemm GFLOP/s of that environment; load = 1-minute load "
        "average when the run started.")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

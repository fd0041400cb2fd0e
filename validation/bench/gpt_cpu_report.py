#!/usr/bin/python3
# Reads the runs of gpt_cpu.sh (tessera metrics JSON lines, PyTorch JSON, sgemm JSON) from its
# work folder and prints the table of the CPU GPT benchmark: each program's timed steps pooled over
# the rounds (files <config>_<env>_r<round>_<program>.*).
# usage: gpt_cpu_report.py <work_dir> <configs...>   (config = name:L:C:H:T:B:V)
import glob
import json
import os
import statistics
import sys

ENVS = ("inherited", "tuned")


def n_params(L, C, T, V):
    # tied head: wte [V, C], wpe [T, C]; per block 12 C^2 + 13 C; ln_f 2 C
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


# The step's time split in gpt_train's metrics (kernels/kernel_timing.h, comm_ms), in report order.
SPLIT = (("gemm_ms", "GEMM"), ("attention_ms", "attention"), ("other_kernels_ms", "other kernels"),
         ("optimizer_ms", "optimizer"), ("comm_ms", "communication"), ("data_ms", "data"))


def tessera_steps(path, warmup):
    """The timed steps' metrics lines, in step order."""
    steps = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            obj = json.loads(line)
            if "step" in obj and "loss" in obj and "step_ms" in obj and int(obj["step"]) > warmup:
                steps.append(obj)
    return sorted(steps, key=lambda o: int(o["step"]))


def split_line(name, env, steps):
    """Median ms of each part of the step, and what no part covers, with its share of the step."""
    step = statistics.median(float(o["step_ms"]) for o in steps)
    parts = []
    covered = 0.0
    for key, label in SPLIT:
        if all(key in o for o in steps):
            ms = statistics.median(float(o[key]) for o in steps)
            covered += ms
            parts.append(f"{label} {ms:.1f} ({100 * ms / step:.0f}%)")
    if not parts:
        return None
    rest = step - covered
    parts.append(f"rest {rest:.1f} ({100 * rest / step:.0f}%)")
    return f"  {name:<3} {env:<10} step {step:.1f} ms = " + ", ".join(parts)


def load(path):
    with open(path) as f:
        return json.loads(f.read())


def round_files(work, name, env, prog, ext):
    return sorted(glob.glob(os.path.join(work, f"{name}_{env}_r*_{prog}.{ext}")))


def pooled_steps(work, name, env, warmup):
    """tessera's timed steps over every round (metrics lines)."""
    return [o for p in round_files(work, name, env, "tessera", "jsonl") for o in tessera_steps(p, warmup)]


def pooled_pytorch_ms(work, name, env):
    """PyTorch's timed step times over every round."""
    times = []
    for p in round_files(work, name, env, "pytorch", "json"):
        r = load(p)
        times += [float(x) for x in r["step_ms"][len(r["step_ms"]) - int(r["timed_steps"]):]]
    return times


def main():
    work, configs = sys.argv[1], sys.argv[2:]
    warmup = 3
    lines = []
    out = lines.append

    sg = {}
    for env in ENVS:
        for kind in ("cblas", "onednn", "torch"):
            p = os.path.join(work, f"sgemm_{kind}_{env}.json")
            if os.path.exists(p):
                sg[(kind, env)] = load(p)
    out("sgemm 2048^3 float32, 2 threads (best of 5), GFLOP/s:")
    for (kind, env), r in sorted(sg.items()):
        out(f"  {env:<10} {r['what']:<62} {r['gflops']:8.1f}")
    out("  tessera's GFLOP/s is compared with the best sgemm figure of the same environment (the"
        " library gpt_train runs its GEMMs on, or OpenBLAS, whichever is faster).")
    out("")

    def limit(env):  # the best sgemm rate measured in this environment by tessera's libraries
        rates = [sg[(k, env)]["gflops"] for k in ("cblas", "onednn") if (k, env) in sg]
        return max(rates) if rates else None

    splits = []
    hdr = (f"{'config':<7} {'env':<10} {'program':<8} {'steps':>5} {'min ms':>9} {'median ms':>10} "
           f"{'tok/s(min)':>11} {'tok/s(med)':>11} {'ratio min':>9} {'ratio med':>9} {'GFLOP/s':>8} "
           f"{'% sgemm':>8} {'load':>5}")
    out(hdr)
    out("-" * len(hdr))
    for spec in configs:
        name, L, C, H, T, B, V = spec.split(":")
        L, C, H, T, B, V = (int(x) for x in (L, C, H, T, B, V))
        flop_per_token = 6 * n_params(L, C, T, V) + 6 * L * T * C
        tokens = B * T
        for env in ENVS:
            res = {}
            steps = pooled_steps(work, name, env, warmup)
            if steps:
                t = [float(o["step_ms"]) for o in steps]
                res["tessera"] = (len(t), min(t), statistics.median(t))
                line = split_line(name, env, steps)
                if line:
                    splits.append(line)
            t = pooled_pytorch_ms(work, name, env)
            if t:
                res["pytorch"] = (len(t), min(t), statistics.median(t))
            for prog in ("tessera", "pytorch"):
                if prog not in res:
                    out(f"{name:<7} {env:<10} {prog:<8} {'(no result)':>5}")
                    continue
                n, mn, md = res[prog]
                tps_min, tps_med = tokens / (mn / 1e3), tokens / (md / 1e3)
                ratio_min = ratio_med = pct = ""
                if prog == "tessera" and "pytorch" in res:  # tokens/s ratios, of the minima and of the medians
                    ratio_min = f"{res['pytorch'][1] / mn:9.2f}"
                    ratio_med = f"{res['pytorch'][2] / md:9.2f}"
                g = tps_med * flop_per_token / 1e9
                gf = f"{g:8.1f}"
                if limit(env):
                    pct = f"{100 * g / limit(env):7.1f}%"
                loads = []
                for lp in round_files(work, name, env, prog, "load"):
                    with open(lp) as f:
                        loads.append(float(f.read()))
                load_avg = f"{max(loads):.2f}" if loads else ""
                out(f"{name:<7} {env:<10} {prog:<8} {n:>5} {mn:>9.1f} {md:>10.1f} {tps_min:>11.1f} "
                    f"{tps_med:>11.1f} {ratio_min:>9} {ratio_med:>9} {gf:>8} {pct:>8} {load_avg:>5}")
        out(f"{'':<7} ({name}: L={L} C={C} H={H} T={T} B={B} V={V}; "
            f"{n_params(L, C, T, V) / 1e6:.2f}M params; {flop_per_token / 1e9:.3f} GFLOP/token)")
    out("ratio = tessera tokens/s / PyTorch tokens/s (of the fastest steps, of the medians); GFLOP/s = tokens/s "
        "(median) * (6 N + 6 L T C) / 1e9;\n% sgemm = GFLOP/s / the best sgemm GFLOP/s of that environment; "
        "load = 1-minute load average when the run started (the highest over the rounds); steps = timed steps "
        "pooled over the rounds.")
    if splits:
        out("")
        out("tessera's step, median ms of the timed steps (gpt_train's metrics: kernels timed on the training thread, "
            "comm_ms, the wait for data; rest = bookkeeping):")
        lines.extend(splits)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

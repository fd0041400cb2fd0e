#!/usr/bin/python3
"""The pipeline bubble measured from gpt_train's --trace, beside the theory of docs/pipeline.md.

usage: pipeline_bubble_report.py --stages P --micro M --steps N --baseline ONE_RANK.jsonl
                                 RUN... [--out FILE.md]
each RUN is NAME:SCHEDULE:V:TRACE.json:METRICS.jsonl. Per run and per step after the first (the
warm-up), from the trace's compute slices:
  measured bubble  = 1 - (compute time of all ranks) / (stages x step span), the span running from
                     the step's first slice on any rank to its last;
  idle per rank    = 1 - (the rank's compute time) / (step span);
  simulated        = the same ratio for the step's own instruction order and compute times with
                     free, instant messages: what the schedule costs with these unequal stages;
  theory           = docs/pipeline.md's bubble for (p, m, v) under F = 1, B = 2 on equal stages;
  work ratio       = the compute time of all ranks / the one-rank run's step time: near 1 unless
                     the ranks or the baseline shared their cores with other work (warned).
Medians over the steps are printed as a markdown table (and written to --out).
"""
import argparse
import json
import re
import statistics
import sys

SLICE = re.compile(r"(\w+) mb (\d+)(?: chunk (\d+))?$")


def theory(schedule, p, m, v):
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if schedule == "interleaved":
        return (p - 1) / (v * m + p - 1)
    if schedule == "zb":
        return (p - 1) / (3 * m + p - 1) if m >= p else (2 * p - m - 1) / (2 * m + 2 * p - 1)
    sys.exit(f"error: no theory for schedule '{schedule}'")


def steps_of(trace_path, p, steps):
    """Per step, per rank: the (op, micro-batch, chunk, category, start ms, end ms) in program order."""
    events = json.load(open(trace_path))["traceEvents"]
    per_rank = {r: [] for r in range(p)}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") == "step":  # the pipeline's slices, not the whole steps
            continue
        match = SLICE.match(e["name"])
        if not match:
            sys.exit(f"error: {trace_path}: unexpected slice name '{e['name']}'")
        op, mb, chunk = match.group(1), int(match.group(2)), int(match.group(3) or 0)
        per_rank[e["pid"]].append((op, mb, chunk, e["cat"], e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3))
    out = [dict() for _ in range(steps)]
    for r, slices in per_rank.items():
        if not slices or len(slices) % steps:
            sys.exit(f"error: {trace_path}: rank {r} has {len(slices)} slices, not a multiple of {steps} steps")
        n = len(slices) // steps
        for k in range(steps):
            out[k][r] = slices[k * n:(k + 1) * n]
    return out


def simulate(step, p):
    """Makespan of the step's programs with their compute times and instant messages."""
    def virtual(rank, chunk):
        return chunk * p + rank
    sent, pc, clock = {}, [0] * p, [0.0] * p
    while any(pc[r] < len(step[r]) for r in range(p)):
        moved = False
        for r in range(p):
            while pc[r] < len(step[r]):
                op, mb, chunk, _, start, end = step[r][pc[r]]
                v = virtual(r, chunk)
                if op in ("recv_fwd", "recv_bwd"):
                    key = (op[-3:], mb, v)
                    if key not in sent:
                        break
                    clock[r] = max(clock[r], sent[key])
                elif op in ("send_fwd", "send_bwd"):
                    sent[(op[-3:], mb, v + 1 if op == "send_fwd" else v - 1)] = clock[r]
                else:
                    clock[r] += end - start
                pc[r] += 1
                moved = True
        if not moved:
            sys.exit("error: the traced programs deadlock in simulation")
    return max(clock)


def analyse(trace_path, p, steps):
    rows = []
    for step in steps_of(trace_path, p, steps)[1:]:  # the first step warms up
        begin = min(s[4] for r in step for s in step[r])
        span = max(s[5] for r in step for s in step[r]) - begin
        compute = {r: sum(s[5] - s[4] for s in step[r] if s[3] == "compute") for r in range(p)}
        total = sum(compute.values())

        def mean_ms(r, op):
            d = [s[5] - s[4] for s in step[r] if s[0] == op]
            return statistics.mean(d) if d else 0.0
        rows.append({
            "measured": 1 - total / (p * span),
            "compute": total,
            "simulated": 1 - total / (p * simulate(step, p)),
            "idle": [1 - compute[r] / span for r in range(p)],
            "forward": [mean_ms(r, "forward") for r in range(p)],
            "backward": [mean_ms(r, "backward") for r in range(p)],
            "backward_w": [mean_ms(r, "backward_w") for r in range(p)],
        })
    med = lambda key: statistics.median(row[key] for row in rows)
    per_rank = lambda key: [statistics.median(row[key][r] for row in rows) for r in range(p)]
    return {"measured": med("measured"), "simulated": med("simulated"), "compute": med("compute"),
            "idle": per_rank("idle"),
            "forward": per_rank("forward"), "backward": per_rank("backward"), "backward_w": per_rank("backward_w")}


def median_step_ms(metrics_path):
    steps = [json.loads(line) for line in open(metrics_path) if '"loss"' in line][1:]
    return statistics.median(s["step_ms"] for s in steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", type=int, required=True)
    ap.add_argument("--micro", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--baseline", required=True, help="the one-rank run's metrics")
    ap.add_argument("--out")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    p, m = a.stages, a.micro
    one_rank_ms = median_step_ms(a.baseline)
    slash = lambda values, fmt: " / ".join(fmt.format(x) for x in values)
    lines = [
        "| schedule | p | m | v | theory | simulated (traced compute, free messages) | measured | idle per rank"
        " | forward ms per rank | backward ms per rank | W ms per rank | work ratio | step ms | speed-up vs one rank |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    disturbed = []
    for run in a.runs:
        name, schedule, v, trace_path, metrics_path = run.split(":")
        v = int(v)
        r = analyse(trace_path, p, a.steps)
        step_ms = median_step_ms(metrics_path)
        if abs(r["compute"] / one_rank_ms - 1) > 0.2:
            disturbed.append(name)
        lines.append(
            f"| {name} | {p} | {m} | {v} | {theory(schedule, p, m, v):.3f} | {r['simulated']:.3f} | {r['measured']:.3f}"
            f" | {slash(r['idle'], '{:.3f}')} | {slash(r['forward'], '{:.1f}')} | {slash(r['backward'], '{:.1f}')}"
            f" | {slash(r['backward_w'], '{:.1f}')} | {r['compute'] / one_rank_ms:.2f} | {step_ms:.0f}"
            f" | {one_rank_ms / step_ms:.2f}x |")
    lines.append(f"| one rank (baseline) | 1 | {m} | 1 | 0 | - | - | - | - | - | - | 1 | {one_rank_ms:.0f} | 1.00x |")
    table = "\n".join(lines) + "\n"
    if disturbed:
        table += (f"\nwarning: {', '.join(disturbed)}: the ranks' compute differs from the one-rank step by over 20%"
                  " (other work on the cores?): run again on a quiet machine\n")
    sys.stdout.write(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()

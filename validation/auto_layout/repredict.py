#!/usr/bin/env python3
"""Re-predicts every layout of campaign.sh runs with the current build's time model, without timing
anything: for each record of RUN_DIR/records.jsonl, parallel_plan search --explain (the run's own machine
file, model flags and --device-memory, from its search_<model>_<ranks>.json) predicts the step
again. Prints, per (model, ranks) group, campaign_report.py's figures for the recorded predictions
(before) and the new ones (after): Spearman of predicted against measured, the share predicted
within 25% of measured, and the spread of measured / predicted (min, median, max).
usage: repredict.py [--cores-per-node N] [--machine-dir DIR] RUN_DIR... BUILD_DIR
  --cores-per-node N: for machine files calibrated before the field existed, the node's cores
  (written into a temporary copy; the run's files are only read). A file that records it keeps its own.
  --machine-dir DIR: machine_<ranks>.json from DIR instead of each run's own (a new calibration
  judged on recorded measurements)."""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign_report import spearman  # noqa: E402  (the campaign's own figure)


def fail(message):
    sys.exit(f"repredict.py: {message}")


def machine_file(run, ranks, cores, tmp, machine_dir):
    path = os.path.join(machine_dir or run, f"machine_{ranks}.json")
    if not os.path.isfile(path):
        fail(f"{path} is missing (not a campaign.sh run, or no calibration for {ranks} ranks)")
    m = json.load(open(path))
    if "cores_per_node" in m["machine"] or cores is None:
        return path
    m["machine"]["cores_per_node"] = cores
    copy = os.path.join(tmp, f"{os.path.basename(os.path.normpath(run))}_machine_{ranks}.json")
    with open(copy, "w") as out:
        json.dump(m, out)
    return copy


def repredict(run, build, cores, tmp, machine_dir):
    """(record, new predicted ms) for every record of one run."""
    records_path = os.path.join(run, "records.jsonl")
    if not os.path.isfile(records_path):
        fail(f"{records_path} is missing (not a campaign.sh run?)")
    records = [json.loads(line) for line in open(records_path) if line.strip()]
    out = []
    searches = {}
    for r in records:
        key = (r["model"], r["ranks"])
        if key not in searches:
            search_path = os.path.join(run, f"search_{r['model']}_{r['ranks']}.json")
            if not os.path.isfile(search_path):
                fail(f"{search_path} is missing: the model flags and device memory come from it")
            searches[key] = json.load(open(search_path))
        old = searches[key]
        command = [os.path.join(build, "apps", "parallel_plan"), "search", "--ranks", str(r["ranks"]),
                   "--device-memory", str(old["device_memory"]), "--machine",
                   machine_file(run, r["ranks"], cores, tmp, machine_dir)] + old["trainer_args"] + ["--explain", r["args"]]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            fail(f"{' '.join(command)} failed:\n{done.stderr}")
        found = re.search(r"^predicted step: ([0-9.]+) ms", done.stdout, re.M)
        if not found:
            fail(f"{' '.join(command)}: no 'predicted step' line in its output")
        out.append((r, float(found.group(1))))
    return out


def figures(pairs):
    pred = [p for p, _ in pairs]
    meas = [m for _, m in pairs]
    ratios = sorted(m / p for p, m in pairs)
    within = sum(abs(p - m) <= 0.25 * m for p, m in pairs)
    return spearman(pred, meas), within, ratios


def main():
    args = sys.argv[1:]
    cores = machine_dir = None
    while args[:1] in (["--cores-per-node"], ["--machine-dir"]):
        if len(args) < 2:
            fail(f"{args[0]} needs a value")
        if args[0] == "--cores-per-node":
            if not args[1].isdigit() or int(args[1]) < 1:
                fail("--cores-per-node needs a whole number >= 1")
            cores = int(args[1])
        else:
            if not os.path.isdir(args[1]):
                fail(f"--machine-dir {args[1]}: not a folder")
            machine_dir = args[1]
        args = args[2:]
    if len(args) < 2:
        fail("usage: repredict.py [--cores-per-node N] [--machine-dir DIR] RUN_DIR... BUILD_DIR")
    runs, build = args[:-1], args[-1]
    if not os.access(os.path.join(build, "apps", "parallel_plan"), os.X_OK):
        fail(f"{build}/apps/parallel_plan is not there: build it first")
    groups = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            for r, predicted in repredict(run, build, cores, tmp, machine_dir):
                groups.setdefault((r["model"], r["ranks"], os.path.basename(os.path.normpath(run))), []).append(
                    (r, predicted))
    print("| model | ranks | run | layouts | Spearman before | after | within 25% before | after |"
          " measured/predicted before (min, median, max) | after |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    totals = [0, 0, 0]
    met = True
    for (model, ranks, run), rows in sorted(groups.items()):
        b_rho, b_in, b_r = figures([(r["predicted_ms"], r["measured_ms"]) for r, _ in rows])
        a_rho, a_in, a_r = figures([(p, r["measured_ms"]) for r, p in rows])
        n = len(rows)
        totals = [totals[0] + n, totals[1] + b_in, totals[2] + a_in]
        met &= a_rho >= 0.8 and a_in >= 0.8 * n
        spread = lambda x: f"{x[0]:.2f}, {statistics.median(x):.2f}, {x[-1]:.2f}"
        print(f"| {model} | {ranks} | {run} | {n} | {b_rho:.2f} | {a_rho:.2f} | {b_in}/{n} | {a_in}/{n} |"
              f" {spread(b_r)} | {spread(a_r)} |")
    print(f"\nall groups: within 25% before {totals[1]}/{totals[0]}, after {totals[2]}/{totals[0]}")
    print(f"targets (Spearman >= 0.8 and >= 80% within 25% in every group): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()

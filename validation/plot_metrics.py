#!/usr/bin/python3
"""Draws one or several tessera metrics files (--metrics, JSON lines) into one PNG.

usage: validation/plot_metrics.py [-o plot.png] [--label NAME ...] FILE.jsonl [FILE.jsonl ...]

Five panels over the step: training loss, evaluation (eval_loss, and eval_acc on a second axis
when present), learning rate, throughput (tokens_per_s or samples_per_s) and peak memory
(peak_mem_bytes, and host_peak_bytes when offloading), one colour per file. The run and resume
lines are skipped; a resumed file's step lines already hold each step once.
Needs matplotlib (Debian: python3-matplotlib; jobscripts/install_deps.sh test installs it).
"""
import argparse
import json
import os
import sys


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def read_metrics(path):
    """The step lines and the evaluation lines of a metrics file, each a list of dicts."""
    steps, evals = [], []
    try:
        with open(path, encoding="utf-8") as f:
            for number, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as e:
                    fail(f"{path}:{number}: not a JSON line ({e.msg})")
                if not isinstance(row, dict) or "run" in row or "resume" in row or "step" not in row:
                    continue
                if "eval_loss" in row:
                    evals.append(row)
                elif "loss" in row:
                    steps.append(row)
    except OSError as e:
        fail(f"cannot read metrics file {path}: {e.strerror}")
    if not steps and not evals:
        fail(f"{path}: no step or evaluation lines (is it a tessera --metrics file?)")
    return steps, evals


def series(rows, key, scale=1.0):
    pts = [(r["step"], r[key] * scale) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="FILE.jsonl")
    parser.add_argument("-o", "--output", default="metrics.png", help="the PNG to write (default: metrics.png)")
    parser.add_argument("--label", action="append", default=[], help="legend name of each file, in order (default: file name)")
    args = parser.parse_args()
    if args.label and len(args.label) != len(args.files):
        fail(f"--label given {len(args.label)} times for {len(args.files)} files: give it once per file or not at all")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("validation/plot_metrics.py needs matplotlib: install the Debian package python3-matplotlib "
             "(jobscripts/install_deps.sh test)")

    runs = [read_metrics(path) for path in args.files]
    labels = args.label or [os.path.basename(p) for p in args.files]
    fig, axes = plt.subplots(5, 1, figsize=(9, 15), sharex=True)
    ax_loss, ax_eval, ax_lr, ax_rate, ax_mem = axes
    ax_acc = None
    rate_names = set()
    for (steps, evals), label, colour in zip(runs, labels, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10):
        ax_loss.plot(*series(steps, "loss"), color=colour, label=label)
        x, y = series(evals, "eval_loss")
        if x:
            ax_eval.plot(x, y, "o-", color=colour, label=f"{label} eval_loss")
        x, y = series(evals, "eval_acc")
        if x:
            ax_acc = ax_acc or ax_eval.twinx()
            ax_acc.plot(x, y, "s--", color=colour, label=f"{label} eval_acc")
        ax_lr.plot(*series(steps, "lr"), color=colour, label=label)
        for key in ("tokens_per_s", "samples_per_s"):
            x, y = series(steps, key)
            if x:
                rate_names.add(key)
                ax_rate.plot(x, y, color=colour, label=f"{label} {key}")
        ax_mem.plot(*series(steps, "peak_mem_bytes", 1 / 2**20), color=colour, label=f"{label} device peak")
        x, y = series(steps, "host_peak_bytes", 1 / 2**20)
        if x:
            ax_mem.plot(x, y, "--", color=colour, label=f"{label} host peak")

    ax_loss.set_ylabel("training loss")
    ax_eval.set_ylabel("eval_loss")
    if ax_acc:
        ax_acc.set_ylabel("eval_acc")
        ax_acc.legend(loc="upper right", fontsize="small")
    if not ax_eval.lines:
        ax_eval.text(0.5, 0.5, "no evaluation lines (--eval-every)", ha="center", va="center",
                     transform=ax_eval.transAxes)
    ax_lr.set_ylabel("learning rate")
    ax_rate.set_ylabel(" / ".join(sorted(rate_names)) or "throughput")
    ax_mem.set_ylabel("peak memory (MiB)")
    ax_mem.set_xlabel("step")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(loc="upper left", fontsize="small")
    fig.suptitle("tessera metrics: " + ", ".join(labels))
    fig.tight_layout()
    try:
        fig.savefig(args.output, dpi=100)
    except OSError as e:
        fail(f"cannot write {args.output}: {e.strerror}")
    print(f"wrote {args.output}: {len(runs)} metrics file(s), {sum(len(s) for s, _ in runs)} step lines")


if __name__ == "__main__":
    main()

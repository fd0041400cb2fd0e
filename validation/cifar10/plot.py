#!/usr/bin/python3
"""Draws the test accuracy and loss of each layout's run (metrics JSON lines) in one PNG and
writes a markdown table of the final accuracy per layout.

usage: plot.py OUT_DIR NAME... (reads OUT_DIR/NAME.jsonl; writes OUT_DIR/curves.png, OUT_DIR/table.md)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    out, names = sys.argv[1], sys.argv[2:]
    runs = {}
    for name in names:
        lines = [json.loads(line) for line in open(f"{out}/{name}.jsonl")]
        runs[name] = {"train": [(l["step"], l["loss"]) for l in lines if "loss" in l],
                      "eval": [(l["step"], l["eval_loss"], l["eval_acc"]) for l in lines if "eval_acc" in l]}
    fig, (acc, loss) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, r in runs.items():
        if r["eval"]:
            steps, _, accs = zip(*r["eval"])
            acc.plot(steps, [100 * a for a in accs], marker="o", label=name)
        steps, losses = zip(*r["train"])
        loss.plot(steps, losses, label=f"{name} (train)", linewidth=0.8)
        if r["eval"]:
            steps, evals, _ = zip(*r["eval"])
            loss.plot(steps, evals, marker="o", linestyle="--", label=f"{name} (test)")
    acc.set_xlabel("step"), acc.set_ylabel("test top-1 accuracy (%)"), acc.grid(alpha=0.3), acc.legend()
    loss.set_xlabel("step"), loss.set_ylabel("loss"), loss.grid(alpha=0.3), loss.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}/curves.png", dpi=120)
    rows = ["| layout | steps | final train loss | final test loss | final test accuracy |",
            "| --- | --- | --- | --- | --- |"]
    for name, r in runs.items():
        last = r["eval"][-1] if r["eval"] else (None, float("nan"), float("nan"))
        rows.append(f"| {name} | {r['train'][-1][0]} | {r['train'][-1][1]:.4f} | {last[1]:.4f} | {100 * last[2]:.2f}% |")
    open(f"{out}/table.md", "w").write("\n".join(rows) + "\n")
    print("\n".join(rows))
    print(f"curves: {out}/curves.png")


if __name__ == "__main__":
    main()

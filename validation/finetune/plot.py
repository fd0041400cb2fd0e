#!/usr/bin/python3
"""Draws validation/finetune/run.sh's loss curves in one PNG and writes its results table.

Left: pretraining (training loss, eval loss on the pretraining part's eval split). Right: the
held-apart part, fine-tuned from the pretrained model against trained from scratch (training loss,
eval loss on the held-apart eval split; the fine-tuned curve's step 0 is the pretrained model's
score there, from generate --score).

usage: plot.py RUN_DIR (reads pretrain.jsonl, finetune.jsonl, scratch.jsonl, scores.txt and
roundtrip.txt there; writes curves.png and results.md)
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_run(path):
    """(train, eval, run header) of a metrics file: lists of (step, loss)."""
    train, evals, header = [], [], {}
    for line in open(path):
        r = json.loads(line)
        if "run" in r:
            header = r["run"]
        elif "eval_loss" in r:
            evals.append((r["step"], r["eval_loss"]))
        elif "loss" in r:
            train.append((r["step"], r["loss"]))
    if not train or not evals:
        sys.exit(f"error: {path} holds no training or no eval lines (did the run finish?)")
    return train, evals, header


def mean_last(points, n=10):
    """The mean loss of the last n logged steps (one step's loss is noisy)."""
    tail = [loss for _, loss in points[-n:]]
    return sum(tail) / len(tail)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    pre = read_run(f"{d}/pretrain.jsonl")
    ft = read_run(f"{d}/finetune.jsonl")
    sc = read_run(f"{d}/scratch.jsonl")
    scores = dict(line.split() for line in open(f"{d}/scores.txt"))
    start = float(scores["pretrained_on_heldapart_eval"])
    roundtrip = open(f"{d}/roundtrip.txt").read().strip()

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    steps, losses = zip(*pre[0])
    left.plot(steps, losses, linewidth=0.8, color="tab:gray", label="train")
    steps, losses = zip(*pre[1])
    left.plot(steps, losses, marker="o", markersize=3, color="black", label="eval (pretraining part)")
    left.set_title("pretraining on the first 90% (dp 2)")
    for name, (train, evals, _), color in (("fine-tuned", ft, "tab:blue"), ("from scratch", sc, "tab:orange")):
        steps, losses = zip(*train)
        right.plot(steps, losses, linewidth=0.8, alpha=0.6, color=color, label=f"{name}: train")
        points = ([(0, start)] if name == "fine-tuned" else []) + evals
        steps, losses = zip(*points)
        right.plot(steps, losses, marker="o", markersize=3, color=color, label=f"{name}: eval (held-apart part)")
    right.set_title("the held-apart last 10% (tp 2)")
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{d}/curves.png", dpi=80)

    rows = []
    for name, (train, evals, _) in (("pretrain", pre), ("fine-tuned", ft), ("from scratch", sc)):
        best = min(evals, key=lambda p: p[1])
        rows.append(f"| {name} | {train[-1][0]} | {train[0][1]:.3f} | {mean_last(train):.3f} | {evals[0][1]:.3f} "
                    f"(step {evals[0][0]}) | {evals[-1][1]:.3f} | {best[1]:.3f} (step {best[0]}) |")
    with open(f"{d}/results.md", "w") as f:
        f.write("| run | steps | first loss | last loss (mean of last 10 logged) | first eval | final eval "
                "| best eval |\n| --- | --- | --- | --- | --- | --- | --- |\n")
        f.write("\n".join(rows) + "\n\n")
        f.write(f"- {roundtrip}\n")
        f.write(f"- generate --score of the pretrained model: {float(scores['pretrained_on_pretrain_eval']):.4f} on "
                f"the pretraining eval split (its last eval_loss: {pre[1][-1][1]:.4f}), {start:.4f} on the "
                f"held-apart eval split (perplexity {math.exp(start):.1f}); the imported model: "
                f"{float(scores['imported_on_heldapart_eval']):.4f}\n")
        f.write(f"- the final eval loss on the held-apart part: fine-tuned {ft[1][-1][1]:.4f}, from scratch "
                f"{sc[1][-1][1]:.4f}\n")


if __name__ == "__main__":
    main()

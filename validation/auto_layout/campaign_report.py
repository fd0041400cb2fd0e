#!/usr/bin/env python3
"""Issue 35's campaign figures from campaign.sh's records.jsonl: for each (model, rank count) the
Spearman rank correlation of predicted and measured step time, the chosen layout (the search's
first) against the fastest measured, the share of layouts predicted within 25%, and whether every
measured peak stayed within the planned one; a markdown table per group; predicted_vs_measured.png.
usage: campaign_report.py RECORDS.jsonl OUT_DIR"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ranks_of(values):
    """Average ranks (1-based), ties sharing the mean of their positions."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x, y):
    rx, ry = ranks_of(x), ranks_of(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5 if vx > 0 and vy > 0 else float("nan")


def main():
    records = [json.loads(line) for line in open(sys.argv[1])]
    out = sys.argv[2]
    groups = {}
    for r in records:
        groups.setdefault((r["model"], r["ranks"]), []).append(r)
    summary = []
    print("| model | ranks | layouts | Spearman | chosen / fastest measured | within 25% | measured peak <= planned |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (model, ranks), rs in sorted(groups.items()):
        pred = [r["predicted_ms"] for r in rs]
        meas = [r["measured_ms"] for r in rs]
        rho = spearman(pred, meas)
        chosen = min(rs, key=lambda r: r["search_rank"])
        fastest = min(meas)
        within = sum(abs(p - m) <= 0.25 * m for p, m in zip(pred, meas))
        memory_ok = sum(r["measured_peak_bytes"] <= r["planned_peak_bytes"] for r in rs)
        summary.append((model, ranks, rho, chosen["measured_ms"] / fastest, within / len(rs), memory_ok == len(rs)))
        print(f"| {model} | {ranks} | {len(rs)} | {rho:.2f} | {chosen['measured_ms'] / fastest:.3f} | "
              f"{within}/{len(rs)} | {memory_ok}/{len(rs)} |")
    for (model, ranks), rs in sorted(groups.items()):
        print(f"\n### model {model}, {ranks} ranks\n")
        print("| search rank | predicted ms | measured ms (median) | measured / predicted | planned MiB | measured MiB | layout |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in sorted(rs, key=lambda r: r["search_rank"]):
            print(f"| {r['search_rank']} | {r['predicted_ms']:.1f} | {r['measured_ms']:.1f} | "
                  f"{r['measured_ms'] / r['predicted_ms']:.2f} | {r['planned_peak_bytes'] / 2**20:.2f} | "
                  f"{r['measured_peak_bytes'] / 2**20:.2f} | `{r['args']}` |")

    fig, ax = plt.subplots(figsize=(6.5, 6))
    markers = {"A": "o", "B": "s"}
    colours = {4: "tab:blue", 8: "tab:red"}
    for (model, ranks), rs in sorted(groups.items()):
        ax.scatter([r["predicted_ms"] for r in rs], [r["measured_ms"] for r in rs], marker=markers.get(model, "^"),
                   color=colours.get(ranks, "tab:gray"), label=f"model {model}, {ranks} ranks", alpha=0.8)
    lo = min(min(r["predicted_ms"], r["measured_ms"]) for r in records) * 0.8
    hi = max(max(r["predicted_ms"], r["measured_ms"]) for r in records) * 1.25
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="measured = predicted")
    # |predicted - measured| <= 25% of measured: measured between predicted / 1.25 and predicted / 0.75
    ax.fill_between([lo, hi], [lo / 1.25, hi / 1.25], [lo / 0.75, hi / 0.75],
                    color="gray", alpha=0.15, label="within 25%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted step time (ms)")
    ax.set_ylabel("measured step time, median of steps 3+ (ms)")
    ax.set_title("parallel_plan search: predicted against measured")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}/predicted_vs_measured.png", dpi=110)
    ok = all(rho >= 0.8 and ratio <= 1.10 and share >= 0.8 and mem for _, _, rho, ratio, share, mem in summary)
    print(f"\ntargets (Spearman >= 0.8, chosen within 10% of the fastest, >= 80% within 25%, memory): "
          f"{'all met' if ok else 'NOT all met'}")


if __name__ == "__main__":
    main()

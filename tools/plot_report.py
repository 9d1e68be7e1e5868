#!/usr/bin/env python3
"""Draws rn50 report's plots from its tables (rn50 report --plot DIR runs this).

usage: plot_report.py TABLES_JSON OUT_DIR

TABLES_JSON is `rn50 report --format json` output: {"tables": [{"name", "title", "columns",
"rows": [{column: value}]}]}. Writes, for whichever tables are present, PNG and SVG files:
  throughput_vs_devices  median img/s per device count per configuration, with the ideal line
                         (1-device median x devices) and the min-max range of the runs
  training_curve         train/val loss and top-1 per epoch, one line per report file
  latency                inference latency avg/p90/p95/p99 per batch size, per precision
and prints "wrote PATH" for each file. Uses Debian's python3-matplotlib (Agg backend, no display).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 100
SIZE = (8, 5)  # inches: 800 x 500 pixels at DPI


def save(fig, out_dir, stem):
    for ext in ("png", "svg"):
        path = os.path.join(out_dir, f"{stem}.{ext}")
        fig.savefig(path, dpi=DPI)
        print(f"wrote {path}")
    plt.close(fig)


def tables_named(tables, name):
    return [t for t in tables if t["name"] == name]


def plot_throughput(t, out_dir):
    series = {}
    for r in t["rows"]:
        key = f'{r["arch"]} {r["precision"]} b{r["batch/device"]} ({r["hardware"]})'
        series.setdefault(key, []).append(r)
    fig, ax = plt.subplots(figsize=SIZE)
    max_dev = 1
    for key, rows in sorted(series.items()):
        rows.sort(key=lambda r: r["devices"])
        dev = [r["devices"] for r in rows]
        med = [r["img/s median"] for r in rows]
        lo = [m - r["min"] for m, r in zip(med, rows)]
        hi = [r["max"] - m for m, r in zip(med, rows)]
        line = ax.errorbar(dev, med, yerr=[lo, hi], marker="o", capsize=4, label=key)
        one = [r for r in rows if r["devices"] == 1]
        if one:
            top = max(dev)
            ax.plot([1, top], [one[0]["img/s median"], one[0]["img/s median"] * top], "--",
                    color=line[0].get_color(), alpha=0.6, label=f"{key}: ideal")
        max_dev = max(max_dev, max(dev))
    ax.set_xlabel("devices (processes)")
    ax.set_ylabel("images/s (median of runs)")
    ax.set_title("Training throughput vs devices")
    ax.set_xticks(range(1, max_dev + 1))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, out_dir, "throughput_vs_devices")


def plot_curves(curves, out_dir):
    fig, (ax_loss, ax_top1) = plt.subplots(1, 2, figsize=SIZE)
    for i, t in enumerate(curves):
        color = f"C{i}"  # one colour per report file; train solid, val dashed, in both panels
        label = t["title"].replace("Training curve: ", "")
        ep = [r["epoch"] for r in t["rows"]]
        ax_loss.plot(ep, [r["train loss"] for r in t["rows"]], "-o", color=color,
                     label=f"{label} train")
        ax_top1.plot(ep, [r["train top1 %"] for r in t["rows"]], "-o", color=color,
                     label=f"{label} train")
        val = [(r["epoch"], r["val loss"], r["val top1 %"]) for r in t["rows"]
               if r["val top1 %"] is not None]
        if val:
            ax_loss.plot([v[0] for v in val], [v[1] for v in val], "--s", color=color,
                         label=f"{label} val")
            ax_top1.plot([v[0] for v in val], [v[2] for v in val], "--s", color=color,
                         label=f"{label} val")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("loss (label-smoothed CE)")
    ax_top1.set_xlabel("epoch")
    ax_top1.set_ylabel("top-1 %")
    for ax in (ax_loss, ax_top1):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Training curves")
    fig.tight_layout()
    save(fig, out_dir, "training_curve")


def plot_latency(t, out_dir):
    series = {}
    for r in t["rows"]:
        series.setdefault(f'{r["arch"]} {r["precision"]} {r["device"]}', []).append(r)
    fig, ax = plt.subplots(figsize=SIZE)
    for key, rows in sorted(series.items()):
        rows.sort(key=lambda r: r["batch"])
        b = [r["batch"] for r in rows]
        for col, style in (("avg ms", "-o"), ("p90 ms", "--^"), ("p95 ms", ":v"),
                           ("p99 ms", "-.s")):
            ax.plot(b, [r[col] for r in rows], style, label=f"{key} {col.split()[0]}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("latency per call, ms")
    ax.set_title("Inference latency percentiles")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, out_dir, "latency")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        tables = json.load(f)["tables"]
    out_dir = sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    for t in tables_named(tables, "throughput"):
        plot_throughput(t, out_dir)
    curves = tables_named(tables, "training_curve")
    if curves:
        plot_curves(curves, out_dir)
    for t in tables_named(tables, "latency"):
        plot_latency(t, out_dir)


if __name__ == "__main__":
    main()

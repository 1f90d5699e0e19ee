#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Plot bench/gpu_iops.sh output: IOPS against queue pairs, one line per
submission mode and emulator worker count, CPU perf as markers.
Usage: plot_gpu_iops.py CSV PNG   (Debian: apt-get install python3-matplotlib)"""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if not l.startswith("#"))]
head, data = rows[0], rows[1:]
ix = {k: i for i, k in enumerate(head)}
fig, ax = plt.subplots(figsize=(8, 5))
series = {}
for r in data:
    if len(r) <= ix["iops"] or not r[ix["iops"]]:
        continue
    key = (r[ix["path"]], r[ix["mode"]], int(r[ix["workers"]]))
    series.setdefault(key, []).append((int(r[ix["queues"]]), float(r[ix["iops"]]) / 1e6))
for (path, mode, w), pts in sorted(series.items()):
    pts.sort()
    xs, ys = zip(*pts)
    if path == "cpu":
        ax.plot(xs, ys, "k^", label="CPU gpunvme perf (N w = emulator workers)" if w == 1 else None)
        ax.annotate(f"{w}w", (xs[0], ys[0]), fontsize=7)
    else:
        ax.plot(xs, ys, "-o" if mode == "warp" else "--s", label=f"GPU {mode}, {w} workers", markersize=4)
ax.set_xscale("log", base=2)
ax.set_xlabel("queue pairs")
ax.set_ylabel("million 4 KiB reads per second")
ax.set_title("GPU-initiated random reads, emulator null namespace (H100)")
ax.grid(True, alpha=0.3)
ax.legend(fontsize=7, ncol=2)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)

#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Bar charts for the bandwidth benchmarks.
  plot_bw.py gpu_bw CSV PNG       bench/gpu_bw.sh's gpu_bw.csv: best median GB/s
                                  per method and chunk size
  plot_bw.py model_load CSV PNG   bench/model_load.sh's CSV: GB/s per method
(Debian: apt-get install python3-matplotlib)"""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def rows(path):
    return [r for r in csv.DictReader(l for l in open(path) if not l.startswith("#"))]


def gpu_bw(src, dst):
    best = {}
    for r in rows(src):
        if not r.get("gb_per_s"):
            continue
        key = (r["method"], int(r["chunk_bytes"]))
        best[key] = max(best.get(key, 0.0), float(r["gb_per_s"]))
    methods = sorted({m for m, _ in best}, key=lambda m: ("cudaMemcpy" not in m, m))
    chunks = sorted({c for _, c in best})
    fig, ax = plt.subplots(figsize=(9, 5))
    w = 0.8 / len(chunks)
    for i, c in enumerate(chunks):
        ys = [best.get((m, c), 0) for m in methods]
        ax.bar([k + i * w for k in range(len(methods))], ys, w, label=f"{c >> 10} KiB" if c < 1 << 20 else f"{c >> 20} MiB")
    ax.set_xticks([k + 0.4 - w / 2 for k in range(len(methods))], methods, rotation=15)
    ax.set_ylabel("GB/s into GPU memory (best configuration, median of 3)")
    ax.set_title("8 GiB sequential into H100 memory, same run")
    ax.legend(title="chunk / command size")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


def model_load(src, dst):
    pts = []
    for r in rows(src):
        if not r.get("gbps"):
            continue
        pts.append((f'{r["method"]}\n{r["config"]}', float(r["gbps"])))
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.bar(range(len(pts)), [p[1] for p in pts], color=["tab:green" if p[0].startswith("ours") else "tab:gray" for p in pts])
    ax.set_xticks(range(len(pts)), [p[0] for p in pts], rotation=30, fontsize=7, ha="right")
    ax.set_ylabel("GB/s (8 GiB safetensors model into H100 memory)")
    ax.set_title("Model load: gpunvme load vs safetensors vs cuFile, same run")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    {"gpu_bw": gpu_bw, "model_load": model_load}[sys.argv[1]](sys.argv[2], sys.argv[3])

#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 32, acceptance 4, on a machine with two GPUs: a save_pretrained
checkpoint in an image file (bench/hf_models.py make; the pyload phase of
bench/coherence_gpu_run.sh), page cache warm, every row in one process.

  multi_gpu.py URI DIR_IN_FS HOST_DIR [--repeat N]

Rows (one JSON object per run; the best of each row is in the summary, and
each round's ratios under "by_round"). Every row runs once to warm up, then
the rows run in turn, --repeat rounds.
  one          load_pretrained onto cuda:0 alone: the one-GPU rate
  own_ctrls    load_pretrained([vol_a, vol_b], device=["cuda:0", "cuda:1"]):
               replicas, two volumes on the same image (each its own
               emulated controller), GPU k reading through volume k,
               placement "layers": the aggregate when each GPU is fed by its
               own controller
  layers       load_pretrained(device=["cuda:0", "cuda:1"], placement="layers")
  split        the same with placement="split" (a StateDict per GPU)
  own_split    own_ctrls with placement="split": each GPU its rows of every
               tensor, through its own volume
  st_one       safetensors.torch.load_file per shard onto cuda:0 (baseline)
  st_two       the same, one thread per GPU, every other shard each
The summary line: own_ctrls / one (asked: >= 1.8) and split / layers
(asked: >= 0.90) on one volume and on their own volumes, with the
baselines' aggregate beside them.

--rows: the rows to run (default: all). --profile ROW: one more run of ROW
under cProfile, its top functions on stderr (where the host's time goes).
"""
import argparse
import glob
import json
import os
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("fs_dir")
    ap.add_argument("host_dir")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", default="one,own_ctrls,layers,split,own_split,st_one,st_two")
    ap.add_argument("--profile", default=None)
    a = ap.parse_args()

    import torch
    import gpunvme
    from safetensors.torch import load_file as st_load
    if torch.cuda.device_count() < 2:
        print(json.dumps({"error": "needs two CUDA GPUs, found %d" % torch.cuda.device_count()}))
        return 2
    for d in (0, 1):
        torch.zeros(1, device="cuda:%d" % d)  # both contexts made before any clock
    shards = sorted(glob.glob(os.path.join(a.host_dir, "*.safetensors")))
    names = [os.path.basename(s) for s in shards]
    fbytes = sum(os.path.getsize(s) for s in shards)

    def nbytes(out):
        sds = out if isinstance(out, list) else [out]
        return sum(v.numel() * v.element_size() for sd in sds for v in sd.values())

    def sync():
        for d in (0, 1):
            torch.cuda.synchronize(d)

    best = {}
    runs = {}  # row -> GB/s of each round (not the warm-up)
    rows = a.rows.split(",")

    def once(row, fn, note, r):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        s = time.perf_counter() - t
        n = nbytes(out)
        gbps = n / s / 1e9
        if r != "warm-up":
            best[row] = max(best.get(row, 0.0), gbps)
            runs.setdefault(row, []).append(gbps)
        print(json.dumps({"row": row, "run": r, "seconds": round(s, 3), "tensor_bytes": n, "file_bytes": fbytes,
                          "gbps": round(gbps, 2), "note": note}), flush=True)
        del out
        for d in (0, 1):
            with torch.cuda.device(d):
                torch.cuda.empty_cache()

    def profile(row, fn):
        import cProfile
        import pstats
        import sys
        pr = cProfile.Profile()
        sync()
        pr.enable()
        out = fn()
        sync()
        pr.disable()
        del out
        print("profile of row %s:" % row, file=sys.stderr)
        pstats.Stats(pr, stream=sys.stderr).sort_stats("cumulative").print_stats(18)

    def two_threads(load_one):
        """every other shard on each GPU, one thread per GPU; the first
        exception in a thread is raised here"""
        outs, errs = [{}, {}], []

        def work(d):
            try:
                for k in range(d, len(names), 2):
                    outs[d].update(load_one(d, k))
            except BaseException as e:  # re-raised in the caller
                errs.append(e)

        th = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        if errs:
            raise errs[0]
        return outs

    vol = gpunvme.Volume(a.uri)
    vols = [vol, gpunvme.Volume(a.uri)]
    table = [
        ("one", lambda: gpunvme.load_pretrained(vol, a.fs_dir, device="cuda:0"), "load_pretrained onto cuda:0"),
        ("own_ctrls", lambda: gpunvme.load_pretrained(vols, a.fs_dir, device=["cuda:0", "cuda:1"], placement="layers"),
         "replicas: two volumes on the image (own emulated controllers), GPU k through volume k"),
        ("layers", lambda: gpunvme.load_pretrained(vol, a.fs_dir, device=["cuda:0", "cuda:1"], placement="layers"),
         "one volume, placement layers"),
        ("split", lambda: gpunvme.load_pretrained(vol, a.fs_dir, device=["cuda:0", "cuda:1"], placement="split"),
         "one volume, placement split"),
        ("own_split", lambda: gpunvme.load_pretrained(vols, a.fs_dir, device=["cuda:0", "cuda:1"], placement="split"),
         "replicas: two volumes on the image, GPU k its rows of every tensor through volume k"),
        ("st_one", lambda: {k: v for s in shards for k, v in st_load(s, device="cuda:0").items()},
         "safetensors load_file per shard onto cuda:0"),
        ("st_two", lambda: two_threads(lambda d, k: st_load(shards[k], device="cuda:%d" % d)),
         "safetensors load_file, a thread per GPU, every other shard"),
    ]
    table = [t for t in table if t[0] in rows]
    # a warm-up of every row first (a process's first load starts the DMA
    # process, creates the queues and maps the memory), then the rows in
    # turn, round after round: a ratio compares neighbours in time, not a
    # row measured early against one measured late (session 23's one-GPU
    # row moved from 30.5 to 35.6 GB/s between two calls)
    for row, fn, note in table:
        once(row, fn, note, "warm-up")
    for r in range(a.repeat):
        for row, fn, note in table:
            once(row, fn, note, r)
    for row, fn, _ in table:
        if a.profile == row:
            profile(row, fn)
    for v in vols:
        v.close()

    def ratio(x, y):
        return round(best[x] / best[y], 3) if best.get(x) and best.get(y) else None

    def per_round(x, y):
        """the ratio in each round (neighbours in time)"""
        if x not in runs or y not in runs:
            return None
        return [round(p / q, 3) for p, q in zip(runs[x], runs[y])]

    print(json.dumps({"summary": {k: round(v, 2) for k, v in best.items()},
                      "own_ctrls_over_one": ratio("own_ctrls", "one"),
                      "split_over_layers": ratio("split", "layers"),
                      "own_split_over_own_ctrls": ratio("own_split", "own_ctrls"),
                      "st_two_over_st_one": ratio("st_two", "st_one"),
                      "by_round": {"own_ctrls_over_one": per_round("own_ctrls", "one"),
                                   "split_over_layers": per_round("split", "layers"),
                                   "own_split_over_own_ctrls": per_round("own_split", "own_ctrls")},
                      "asked": {"own_ctrls_over_one": 1.8, "split_over_layers": 0.9}}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

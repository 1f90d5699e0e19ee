#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 32, acceptance 4 on one GPU: what placement "split" costs beyond
"layers" on the host, per GPU, without a second GPU. One GPU's share of a
two-GPU load is selected and loaded on cuda:0, as gpunvme's own
_load_multi does it (the library's internals: this is a probe, not an API):

  split   GPU 0's rows of every tensor, select_parts(parts, gap=0)
  layers  GPU 0's transformer blocks (placement "layers"), select()

  split_select.py URI DIR_IN_FS [--repeat N] [--device cuda:0]

One JSON line per run: the bytes its runs read, the ms to select (place:
allocate and register loader memory) and to load, GB/s of the load alone and
of both. Session 23 on two GPUs: split's select_parts took 41 ms a GPU
against a load of 0.27 s, the whole of split's gap to layers.
"""
import argparse
import json
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("fs_dir")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gap", type=int, default=0,
                    help="split's select_parts gap (0, as _load_multi; -1: the library's default)")
    ap.add_argument("--shrink", action="store_true",
                    help="a diagnosis: split's parts shrunk inward to 4 KiB file boundaries (no edge block, so "
                         "no bounce read; a few bytes of each part are not read)")
    ap.add_argument("--device", default="cuda:0", help="the one device (cpu: a smoke test without a GPU)")
    a = ap.parse_args()

    import torch
    import gpunvme
    from gpunvme import _loading, _parse, _placement

    gpu = a.device != "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if gpu:
        torch.zeros(1, device=a.device)
    vol = gpunvme.Volume(a.uri)
    model = vol.open_model(a.fs_dir)
    t, idx, _ = _parse._device(a.device, None)
    t = _parse._tier(vol, t)
    sel = list(_loading._index(model).values())
    where = _placement._place(sel, 2, "layers")
    rows = [(info, _placement._split_rows(info, 2)) for info in sel if info.nbytes]
    by_index = {info.index: info for info in sel}

    def split_sel(ld):
        parts = []
        for i, start, length in _placement._split_parts(rows, 0)[0]:
            if a.shrink:
                off = by_index[i].offset
                lo = -(-(off + start) // 4096) * 4096 - off
                hi = (off + start + length) // 4096 * 4096 - off
                if hi <= lo:
                    continue
                start, length = lo, hi - lo
            parts.append((i, start, length))
        return ld.select_parts(parts, gap=None if a.gap < 0 else a.gap)

    def layers_sel(ld):
        return ld.select([info.index for info, w in zip(sel, where) if w == 0])

    for r in range(a.repeat):
        for name, fn in (("split", split_sel), ("layers", layers_sel)):
            ld = _loading._loader(model, t, idx, 0, 0)
            sync()
            t0 = time.perf_counter()
            bufs = fn(ld)
            t1 = time.perf_counter()
            bufs.load()
            sync()
            t2 = time.perf_counter()
            print(json.dumps({"row": name, "run": r, "run_bytes": bufs.run_bytes, "select_ms": round(1e3 * (t1 - t0), 2),
                              "load_ms": round(1e3 * (t2 - t1), 2),
                              "load_gbps": round(bufs.run_bytes / (t2 - t1) / 1e9, 2),
                              "both_gbps": round(bufs.run_bytes / (t2 - t0) / 1e9, 2)}), flush=True)
            del bufs, ld
    vol.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 32, acceptance 2: where `load_file` per shard loses against the
modeled SSD. Every shard of DIR is loaded the way gpunvme.load_file does it
(open_model, index, the volume's shared Loader, select, load, wrap), each
stage timed, three rounds in one process; the ideal is the bytes at the
model's rate. Run it with GPUNVME_EMU_DMA=inproc beside the default (the
DMA process) and GPUNVME_LOAD_PROFILE=1 to split the load into queueing
and waiting.

  python3 bench/shard_stages.py IMG DIR [MBPS]     (MBPS: the modeled rate, 7000;
                                                   0: the image, no model)
One JSON line per round: seconds per stage summed over the shards, the
first shard's stages, GB/s and the percentage of the model.
"""
import json
import os
import sys
import time

import torch

import gpunvme
from gpunvme import _gpunvme
from gpunvme._loading import _index, _loader, _queue_opts


def main(img, d, mbps):
    q = "?latency_us=80&read_mbps=%d&iops=1000000" % mbps if mbps else ""
    torch.zeros(1, device="cuda")
    vol = gpunvme.Volume("emu:" + img + q)
    shards = sorted(os.path.join(d, n) for n in vol.listdir(d) if n.endswith(".safetensors"))
    qq, dd = _queue_opts(None, None)
    for r in range(3):
        keep = []
        tot, first, n = {}, {}, 0
        torch.cuda.synchronize()
        t_all = time.perf_counter()
        for s in shards:
            st = {}
            t = time.perf_counter()

            def stage(name):
                nonlocal t
                now = time.perf_counter()
                st[name] = now - t
                t = now

            m = vol.open_model(s)
            stage("open")
            infos = list(_index(m).values())
            stage("index")
            ld = _loader(m, 2, 0, qq, dd)
            stage("loader")
            b = ld.select([i.index for i in infos])
            stage("select")
            b.load()
            torch.cuda.synchronize()
            stage("load")
            keep.append([gpunvme._wrap(_gpunvme.Tensor(b, k), i, "pt") for k, i in enumerate(infos)])
            stage("wrap")
            n += b.run_bytes
            for k, v in st.items():
                tot[k] = tot.get(k, 0.0) + v
            if not first:
                first = {k: round(v, 4) for k, v in st.items()}
        wall = time.perf_counter() - t_all
        out = {"round": r, "mbps": mbps, "copies": os.environ.get("GPUNVME_EMU_DMA", "default"),
               "shards": len(shards), "bytes": n, "s": round(wall, 4), "gbps": round(n / wall / 1e9, 3),
               "stages": {k: round(v, 4) for k, v in tot.items()}, "first_shard": first,
               "load_gbps": round(n / tot["load"] / 1e9, 3)}
        if mbps:
            ideal = n / (mbps * 1e6)
            out["ideal_s"] = round(ideal, 4)
            out["pct"] = round(100 * ideal / wall, 1)
            out["load_pct"] = round(100 * ideal / tot["load"], 1)
        print(json.dumps(out), flush=True)
        # every result freed outside the clock (the last shard's Buffers
        # too: the runs of 2026-11-28 freed them in the next round's first
        # select, 14-17 ms with the DMA process). The last Loader is kept,
        # so later rounds show no loader set-up either way
        del keep, b
        torch.cuda.empty_cache()
    vol.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else 7000))

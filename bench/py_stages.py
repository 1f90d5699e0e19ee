#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 32, acceptance 1: where one process's gpunvme.load_pretrained time
goes, stage by stage, in a fresh process: import, CUDA context, volume open,
model index, loader (queues, the DMA process's lanes), select (GPU memory),
load (the reads), wrap (DLPack), free; twice, so the second round shows what
the first paid once. `e2e` times load_pretrained alone from import on, as a
user sees it (the CLI's start-to-exit time is its counterpart).

  python3 bench/py_stages.py emu:/tmp/pyload/ext4.img /big stages
  python3 bench/py_stages.py emu:/tmp/pyload/ext4.img /big e2e

Run it with GPUNVME_EMU_DMA=inproc and CUDA_MODULE_LOADING=LAZY beside the
defaults to see what the DMA process and the module loading cost. One JSON
line per run.
"""
import json
import sys
import time

t_start = time.perf_counter()
import torch  # noqa: E402

import gpunvme  # noqa: E402
from gpunvme import _gpunvme  # noqa: E402


def main(uri, fs_dir, mode):
    r = {"mode": mode}
    last = [t_start]

    def stage(name):
        now = time.perf_counter()
        r[name] = round(now - last[0], 4)
        last[0] = now

    stage("import")
    if mode == "e2e":
        sd = gpunvme.load_pretrained(uri, fs_dir, device="cuda")
        torch.cuda.synchronize()
        stage("load_pretrained")
        n = sum(v.numel() * v.element_size() for v in sd.values())
        r["GBps_from_import"] = round(n / (time.perf_counter() - t_start) / 1e9, 2)
        r["GBps_call"] = round(n / r["load_pretrained"] / 1e9, 2)
        print(json.dumps(r), flush=True)
        return 0
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    stage("cuda_context")
    vol = gpunvme.Volume(uri)
    stage("volume")
    for i in (1, 2):
        m = vol.open_model(fs_dir)
        infos = list(gpunvme._index(m).values())
        stage("index%d" % i)
        ld = _gpunvme.Loader(m, 2, 0, 0, 0)
        stage("loader%d" % i)
        b = ld.select([x.index for x in infos])
        stage("select%d" % i)
        b.load()
        torch.cuda.synchronize()
        stage("load%d" % i)
        ts = [gpunvme._wrap(_gpunvme.Tensor(b, k), x, "pt") for k, x in enumerate(infos)]
        stage("wrap%d" % i)
        n = sum(x.nbytes for x in infos)
        r["GBps_load%d" % i] = round(n / r["load%d" % i] / 1e9, 2)
        del ts, b, ld, m
        stage("free%d" % i)
    vol.close()
    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ("stages", "e2e"):
        sys.exit("usage: py_stages.py URI DIR stages|e2e")
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))

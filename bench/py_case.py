# SPDX-License-Identifier: BSD-2-Clause
"""One load case in a process of its own (a CUDA error such as an illegal
address ends the process's context, so cases must not share one):
    py_case.py IMG DIR modeled|plain load_file|load_pretrained|runs [DEVICE]
load_file of every shard of DIR, or load_pretrained of DIR, from the image
IMG (modeled: behind a modeled 7 GB/s SSD), onto DEVICE (cuda), three times
in a row through one Volume; a JSON line per run, or the error and exit
status 1. "runs": the first half of every tensor's rows, a run each
(select_parts, gap=0: what placement "split" has one GPU read), against
every tensor whole with the default gaps (a few runs per shard),
alternating, on one device: from the two rates and the run counts, what a
run costs."""
import json
import os
import sys
import time
import traceback

import gpunvme

torch = None  # imported for a CUDA device (the CPU runs need no torch)


def main(argv):
    if len(argv) not in (5, 6) or argv[3] not in ("modeled", "plain") or \
            argv[4] not in ("load_file", "load_pretrained", "runs"):
        print(__doc__, file=sys.stderr)
        return 2
    img, d, mode, entry = argv[1:5]
    device = argv[5] if len(argv) == 6 else "cuda"
    global torch
    if device != "cpu" or entry != "runs":
        import torch
    q = ["latency_us=80&read_mbps=7000&iops=1000000"] if mode == "modeled" else []
    # CASE_URI_EXTRA: more emulator options (e.g. idle_us=10) for an A/B
    q += [os.environ["CASE_URI_EXTRA"]] if os.environ.get("CASE_URI_EXTRA") else []
    uri = "emu:" + img + ("?" + "&".join(q) if q else "")
    if device != "cpu":
        torch.zeros(1, device=device)
    vol = gpunvme.Volume(uri)
    shards = sorted(os.path.join(d, n) for n in vol.listdir(d) if n.endswith(".safetensors"))
    say = {"pkg": os.path.dirname(gpunvme.__file__), "mode": mode, "entry": entry,
           "extra": os.environ.get("CASE_URI_EXTRA", "")}
    if entry == "runs":
        return runs(vol, shards, device, say)
    for r in range(3):
        sync(device)
        t = time.perf_counter()
        try:
            if entry == "load_file":
                sd = {k: v for s in shards for k, v in gpunvme.load_file(vol, s, device=device).items()}
            else:
                sd = gpunvme.load_pretrained(vol, d, device=device)
            sync(device)
        except Exception as e:  # reported, then the process ends
            print(json.dumps({**say, "run": r, "error": str(e)[:300]}), flush=True)
            traceback.print_exc()
            return 1
        s = time.perf_counter() - t
        n = sum(v.numel() * v.element_size() for v in sd.values())
        del sd
        if device != "cpu":
            torch.cuda.empty_cache()
        print(json.dumps({**say, "run": r, "s": round(s, 3), "gbps": round(n / s / 1e9, 2)}), flush=True)
    vol.close()
    return 0


def sync(device):
    if device != "cpu":
        torch.cuda.synchronize(device)


def runs(vol, shards, device, say):
    """every tensor's first half of rows, a run each, against the whole
    tensors in a few runs"""
    from gpunvme._loading import _index
    from gpunvme._parse import _device
    tier, idx, _ = _device(device, None)
    models = [vol.open_model(s) for s in shards]
    infos = [[i for i in _index(m).values() if i.nbytes] for m in models]
    # (index, bytes of the first half of the rows): a tensor of one row
    # is read whole
    halves = [[(i.index, max(1, i.shape[0] // 2) * (i.nbytes // i.shape[0]) if i.shape else i.nbytes)
               for i in inf] for inf in infos]
    for r in range(3):
        for how in ("whole", "halves"):
            sync(device)
            t = time.perf_counter()
            keep, n, nruns = [], 0, 0
            for m, inf, half in zip(models, infos, halves):
                ld = gpunvme._gpunvme.Loader(m, tier, idx, 0, 0)
                if how == "whole":
                    b = ld.select([i.index for i in inf])
                else:
                    b = ld.select_parts([(k, 0, h) for k, h in half], gap=0)
                b.load()
                keep.append(b)
                n += b.run_bytes
                nruns += b.n_runs
            sync(device)
            s = time.perf_counter() - t
            del keep
            print(json.dumps({**say, "run": r, "how": how, "runs": nruns, "s": round(s, 3),
                              "gbps": round(n / s / 1e9, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

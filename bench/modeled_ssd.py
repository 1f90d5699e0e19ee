#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 32, acceptance 2: every entry point with its defaults against a
modeled SSD, as a share of the model's rate.

  modeled_ssd.py IMG DIR_IN_FS [--mbps 7000] [--repeat 2] [--cli PATH]

IMG is an ext4 image holding a Hugging Face checkpoint at DIR_IN_FS (the
`pyload` phase of coherence_gpu_run.sh makes one). The device string is
emu:IMG?latency_us=80&read_mbps=MBPS&iops=1000000 (the issue's modeled 7 GB/s
SSD). Measured, each after one unclocked run: `gpunvme load` (start to exit,
and its own load time), gpunvme.load_file of every shard through one Volume,
gpunvme.load_pretrained of the directory. One JSON line per run, with the
share of MBPS * 1e6 bytes/s. Page cache warm: the image is read first.
"""
import json
import os
import re
import subprocess
import sys
import time


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    img, fs_dir = argv[1], argv[2]
    opt = {"--mbps": "7000", "--repeat": "2", "--cli": "build-gpu/bin/gpunvme"}
    for k in opt:
        if k in argv:
            opt[k] = argv[argv.index(k) + 1]
    rate = int(opt["--mbps"]) * 1e6
    repeat = int(opt["--repeat"])
    uri = "emu:%s?latency_us=80&read_mbps=%s&iops=1000000" % (img, opt["--mbps"])
    with open(img, "rb") as f:  # page cache warm
        while f.read(64 << 20):
            pass

    def say(name, run, seconds, nbytes, **more):
        print(json.dumps({"entry": name, "run": run, "seconds": round(seconds, 3), "bytes": nbytes,
                          "gbps": round(nbytes / seconds / 1e9, 3),
                          "share_of_model": round(nbytes / seconds / rate, 4), **more}), flush=True)

    # the CLI: its own load time (the figure it prints) and start to exit
    for r in range(repeat + 1):
        t = time.perf_counter()
        p = subprocess.run([opt["--cli"], "load", uri, fs_dir, "--no-progress"], capture_output=True, text=True,
                           timeout=300)
        wall = time.perf_counter() - t
        m = re.search(r"([0-9.]+) [KMG]iB .* in ([0-9.]+) s, ([0-9.]+) GB/s", p.stdout + p.stderr)
        if p.returncode or not m:
            print(json.dumps({"entry": "cli", "error": (p.stdout + p.stderr)[-400:]}), flush=True)
            return 1
        if r:
            gb = float(m.group(3)) * float(m.group(2)) * 1e9
            say("gpunvme load (CLI)", r - 1, float(m.group(2)), int(gb), start_to_exit_s=round(wall, 3))

    import torch
    import gpunvme
    torch.zeros(1, device="cuda")
    vol = gpunvme.Volume(uri)
    shards = sorted(os.path.join(fs_dir, n) for n in vol.listdir(fs_dir) if n.endswith(".safetensors"))
    for name, fn in (("gpunvme.load_file per shard",
                      lambda: {k: v for s in shards for k, v in gpunvme.load_file(vol, s, device="cuda").items()}),
                     ("gpunvme.load_pretrained", lambda: gpunvme.load_pretrained(vol, fs_dir, device="cuda"))):
        for r in range(repeat + 1):
            torch.cuda.synchronize()
            t = time.perf_counter()
            sd = fn()
            torch.cuda.synchronize()
            s = time.perf_counter() - t
            n = sum(v.numel() * v.element_size() for v in sd.values())
            del sd
            torch.cuda.empty_cache()
            if r:
                say(name, r - 1, s, n, shards=len(shards))
    vol.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

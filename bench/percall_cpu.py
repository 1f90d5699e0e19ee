#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 32, acceptance 2 on any machine: what each entry point pays per call
against a modeled SSD, on the CPU tier (no GPU, numpy).

  percall_cpu.py WORKDIR [--mbps 300] [--repeat 3] [--cli build/bin/gpunvme]

Writes a Hugging Face-style checkpoint (5 shards of 4 F16 tensors, 126 MB,
model.safetensors.index.json) into an ext4 image under WORKDIR (mkfs.ext4 -d),
then, on emu:IMG?latency_us=80&read_mbps=MBPS&iops=1000000:
  - `gpunvme load --tier cpu` of the directory (its own load time);
  - gpunvme.load_pretrained(vol, "/big", device="cpu");
  - gpunvme.load_file per shard;
  - one shard's steps: open_model, Loader, select, load, free (one Loader).
Each as a share of MBPS * 1e6 bytes/s. Pick MBPS well below what the CPU
tier reaches here, so that the machine is not the limit (a 2-core guest:
about 1 GB/s). One JSON line per result.
"""
import json
import os
import re
import struct
import subprocess
import sys
import time


def make(work):
    import numpy as np
    root = os.path.join(work, "root", "big")
    img = os.path.join(work, "e.img")
    if os.path.exists(img):
        return img
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(1)
    wm, total, n = {}, 0, 5
    for s in range(n):
        hdr, blobs, off = {}, [], 0
        for layer in range(4):
            name = "model.layers.%d.mlp.weight" % (s * 4 + layer)
            b = rng.integers(0, 255, size=1024 * 6144, dtype=np.uint8).tobytes()
            hdr[name] = {"dtype": "F16", "shape": [1024, 3072], "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
            wm[name] = "model-%05d-of-%05d.safetensors" % (s + 1, n)
        h = json.dumps(hdr).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        with open(os.path.join(root, "model-%05d-of-%05d.safetensors" % (s + 1, n)), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
        total += off
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f)
    subprocess.run(["truncate", "-s", "400M", img], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", os.path.join(work, "root"), img], check=True)
    return img


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    opt = {"--mbps": "300", "--repeat": "3", "--cli": "build/bin/gpunvme"}
    for k in opt:
        if k in argv:
            opt[k] = argv[argv.index(k) + 1]
    rate, rep = int(opt["--mbps"]) * 1e6, int(opt["--repeat"])
    img = make(argv[1])
    uri = "emu:%s?latency_us=80&read_mbps=%s&iops=1000000" % (img, opt["--mbps"])

    def say(entry, seconds, nbytes, **more):
        print(json.dumps({"entry": entry, "seconds": round(seconds, 4), "bytes": nbytes,
                          "share_of_model": round(nbytes / seconds / rate, 3), **more}), flush=True)

    for _ in range(rep):
        p = subprocess.run([opt["--cli"], "load", uri, "/big", "--tier", "cpu", "--no-progress"], capture_output=True,
                           text=True, timeout=120)
        m = re.search(r"in ([0-9.]+) s, ([0-9.]+) GB/s", p.stdout + p.stderr)
        if p.returncode or not m:
            print(json.dumps({"entry": "cli", "error": (p.stdout + p.stderr)[-300:]}))
            return 1
        say("gpunvme load --tier cpu (its load time)", float(m.group(1)), int(float(m.group(1)) * float(m.group(2)) * 1e9))

    import gpunvme
    from gpunvme import _gpunvme
    vol = gpunvme.Volume(uri)
    shards = sorted("/big/" + n for n in vol.listdir("/big") if n.endswith(".safetensors"))
    for entry, fn in (("load_pretrained", lambda: gpunvme.load_pretrained(vol, "/big", framework="numpy")),
                      ("load_file per shard", lambda: {k: v for s in shards
                                                       for k, v in gpunvme.load_file(vol, s, framework="numpy").items()})):
        for r in range(rep + 1):
            t = time.perf_counter()
            sd = fn()
            s = time.perf_counter() - t
            n = sum(v.nbytes for v in sd.values())
            del sd
            if r:
                say(entry, s, n)
    for r in range(rep + 1):
        t = [time.perf_counter()]
        m = vol.open_model(shards[0])
        infos = gpunvme._index(m)
        t.append(time.perf_counter())
        ld = _gpunvme.Loader(m, 0, 0, 0, 0)
        t.append(time.perf_counter())
        b = ld.select([i.index for i in infos.values()])
        t.append(time.perf_counter())
        b.load()
        t.append(time.perf_counter())
        del b, ld, m
        t.append(time.perf_counter())
        if r:
            names = ["open+index", "Loader", "select", "load", "free"]
            print(json.dumps({"shard steps": {k: round(t[i + 1] - t[i], 4) for i, k in enumerate(names)},
                              "ideal_load_s": round(sum(i.nbytes for i in infos.values()) / rate, 4)}), flush=True)
    vol.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

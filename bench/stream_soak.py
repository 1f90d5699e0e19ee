#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 32, acceptance 3: the layer stream at Tier 2 on the emulator, in a
loop for a given time inside a torch process, with other CUDA work running
alongside, must never stall.

The model is gpunvme-mkmodel's (Llama-shaped names, `model.layers.N.`) in an
ext4 image, read through the emulator with a modeled 7 GB/s SSD by default.
The main thread iterates the stream pass after pass and compares every
streamed tensor, byte for byte on the GPU, with a reference copy read from
the file once. Meanwhile a second thread keeps the GPU busy, as a training or
serving process would: matmuls on its own stream, and every few of them a
`.cpu()` of the result (a copy into pageable memory: the call that used to
hold up the emulator's copies in the same CUDA context; that is why the
emulator copies from a process of its own under Python).

A stall is an acquire (the time to get the next layer) longer than
--stall-s. The run fails (exit 1) on any stall, any byte that differs, or
any error; it prints one JSON line either way (also into --out).

  python3 bench/stream_soak.py --build build-gpu --work /tmp/soak --seconds 600 --out $OUT/soak.json

The device's calls are 10 minutes at most: start it in the background in one
call (`nohup ... &`), collect --out in a later one on the warm machine.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import torch

import gpunvme

SSD = "latency_us=80&read_mbps=7000&iops=1000000"


def make(args):
    """the model and its ext4 image under --work (kept: a second run reuses them)"""
    root = os.path.join(args.work, "root")
    img = os.path.join(args.work, "ext4.img")
    model = os.path.join(root, "model.safetensors")
    if os.path.exists(img) and os.path.exists(model):
        return img, model
    os.makedirs(root, exist_ok=True)
    subprocess.run([os.path.join(args.build, "bin", "gpunvme-mkmodel"), "--format", "safetensors", "--size",
                    args.size, "--seed", "7", "-o", model], check=True, stdout=subprocess.DEVNULL)
    size = os.path.getsize(model)
    with open(img, "wb") as f:
        f.truncate((size + size // 8 + (256 << 20)) // (1 << 20) * (1 << 20))
    subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-d", root, img], check=True)
    subprocess.run(["cat", img], check=True, stdout=subprocess.DEVNULL)  # page cache warm
    return img, model


def references(model, names):
    """each streamed tensor's file bytes, on the GPU (uint8)"""
    with open(model, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    data = np.memmap(model, dtype=np.uint8, mode="r", offset=8 + n)
    ref = {}
    for name in names:
        a, b = hdr[name]["data_offsets"]
        ref[name] = torch.from_numpy(np.array(data[a:b])).to("cuda")
    return ref


def busy(stop, out):
    """other CUDA work: matmuls on a stream of its own, a pageable copy every 8"""
    s = torch.cuda.Stream()
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    n = copies = 0
    with torch.cuda.stream(s):
        while not stop.is_set():
            y = x @ x
            n += 1
            if n % 8 == 0:
                y[:64, :64].float().cpu()  # waits in CUDA, into pageable memory
                copies += 1
    out.update(matmuls=n, pageable_copies=copies)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-gpu", help="build directory with bin/gpunvme-mkmodel")
    ap.add_argument("--work", default="/tmp/stream-soak")
    ap.add_argument("--size", default="4G", help="model size for gpunvme-mkmodel")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--stall-s", type=float, default=2.0, help="an acquire longer than this is a stall")
    ap.add_argument("--media", choices=["ssd", "image"], default="ssd",
                    help="ssd: the modeled 7 GB/s SSD; image: the image file at full speed")
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--out", help="also write the JSON line here")
    args = ap.parse_args()
    if not torch.cuda.is_available() or not gpunvme.cuda_available():
        sys.exit("stream_soak: needs torch with CUDA, a GPU and gpunvme built with CUDA")
    img, model = make(args)
    uri = "emu:" + img + ("?" + SSD if args.media == "ssd" else "")
    res = dict(bench="stream_soak", gpu=torch.cuda.get_device_name(0), date=time.strftime("%Y-%m-%d %H:%M"),
               command=" ".join(sys.argv), uri=uri, seconds=args.seconds, stall_s=args.stall_s,
               emu_dma=os.environ.get("GPUNVME_EMU_DMA", "(python default: process)"))
    s = gpunvme.stream(uri, "/model.safetensors", window=args.window, device="cuda", tier=2, no_fallback=True)
    res["tier"] = s.tier
    res["layers"] = s.n_layers
    stop, other = threading.Event(), {}
    worker = threading.Thread(target=busy, args=(stop, other), daemon=True)
    streamed = [x.name for x in s._infos if x.name.startswith("model.layers.")]
    ref = references(model, streamed)
    res["bytes_per_pass"] = int(sum(r.numel() for r in ref.values()))
    waits, passes, compared, bad, err, stats = [], 0, 0, [], None, None
    try:
        worker.start()
        t_end = time.monotonic() + args.seconds
        while time.monotonic() < t_end and not bad:
            t0 = time.monotonic()
            for i, layer in s:
                waits.append(time.monotonic() - t0)
                for n, t in layer.items():
                    if t.numel() and not torch.equal(t.contiguous().view(torch.uint8).flatten(), ref[n]):
                        bad.append("pass %d layer %d %s" % (passes, i, n))
                compared += len(layer)
                t0 = time.monotonic()
            passes += 1
        torch.cuda.synchronize()
        stats = s.stats()
    except Exception as e:  # an error is a result: reported, and the run fails
        err = "%s: %s" % (type(e).__name__, e)
    finally:
        stop.set()
        worker.join(timeout=30)
        s.close()
    w = sorted(waits)
    res.update(passes=passes, compared_tensors=compared, mismatches=bad[:10], n_mismatches=len(bad), error=err,
               acquires=len(w), wait_max_s=w[-1] if w else None, wait_p99_s=w[int(0.99 * (len(w) - 1))] if w else None,
               wait_median_s=w[len(w) // 2] if w else None, stalls=sum(1 for x in w if x > args.stall_s),
               stats=stats, other=other)
    res["ok"] = not err and not bad and res["stalls"] == 0 and passes >= 2
    line = json.dumps(res, default=str)
    print(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    sys.exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()

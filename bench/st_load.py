#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Baseline for bench/model_load.sh: load a safetensors file into GPU memory
the way PyTorch users do, from a page-cached copy of the file.

Prefers the `safetensors` package (load_file(path, device="cuda")); without it
falls back to the same work by hand (mmap, torch.frombuffer, .to("cuda")) and
says so in the output. Prints one JSON line.
"""
import json
import mmap
import os
import struct
import sys
import time

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def by_hand(path):
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    n = struct.unpack("<Q", mm[:8])[0]
    hdr = json.loads(mm[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        if b == a:
            out[name] = torch.empty(t["shape"], dtype=DTYPES[t["dtype"]], device="cuda")
            continue
        cpu = torch.frombuffer(mm, dtype=torch.uint8, count=b - a, offset=base + a)
        out[name] = cpu.to("cuda").view(DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def main():
    path = sys.argv[1]
    # page cache: read the whole file once, as the other methods get it
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    try:
        from safetensors.torch import load_file
        how = "safetensors %s load_file(device='cuda')" % __import__("safetensors").__version__
        fn = lambda: load_file(path, device="cuda")
    except ImportError:
        how = "safetensors package missing: mmap + torch.frombuffer + .to('cuda') by hand"
        fn = lambda: by_hand(path)
    t0 = time.perf_counter()
    d = fn()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    total = sum(v.numel() * v.element_size() for v in d.values())
    print(json.dumps({"method": how, "torch": torch.__version__, "tensors": len(d), "bytes": total,
                      "seconds": round(dt, 4), "gbps": round(total / dt / 1e9, 3)}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Model layouts as other tools write them, for the model-set tests.

Written from the formats' specifications, not with the project's writer:
  - safetensors (huggingface/safetensors README "Format"): 8-byte header
    length, JSON header padded with spaces to a multiple of 8 (as the
    reference serializer does), data;
  - Hugging Face sharded checkpoints as transformers' save_pretrained
    writes them: model-0000k-of-0000n.safetensors and
    model.safetensors.index.json {"metadata": {"total_size": N},
    "weight_map": {tensor: shard}};
  - GGUF v3 (ggml docs/gguf.md) and llama.cpp gguf-split shards:
    <prefix>-0000k-of-0000n.gguf with split.no (u16), split.count (u16)
    and split.tensors.count (i32) in every shard.

  mkset.py DIR LAYOUT [options]  writes the layout under DIR and prints a
  manifest line per tensor: name <TAB> sha256 of its bytes.
Layouts: hf-sharded hf-single gguf-split, and the broken variants the
tests expect to be refused (see LAYOUTS).
"""
import hashlib
import json
import os
import random
import struct
import sys

GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q8_0": (8, 32, 34)}  # type, block, bytes/block
ST_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "I64": 8}


def tensors(n, seed, prefix="model.layers"):
    """n tensors with names, dtypes, shapes and random bytes."""
    rnd = random.Random(seed)
    out = []
    dts = ["F32", "F16", "BF16", "I8", "I64"]
    for i in range(n):
        dt = dts[i % len(dts)]
        shape = [rnd.randint(1, 40), rnd.randint(1, 300)]
        if i % 7 == 3:
            shape = []  # a scalar
        if i % 11 == 5:
            shape = [0, 4]  # zero-size
        nb = ST_BYTES[dt]
        for d in shape:
            nb *= d
        out.append(("%s.%d.w%s" % (prefix, i // 3, "qkv"[i % 3]), dt, shape, rnd.randbytes(nb)))
    return out


def st_bytes(ts, metadata=None):
    hdr = {}
    if metadata is not None:
        hdr["__metadata__"] = metadata
    off = 0
    for name, dt, shape, data in ts:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in ts)


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_bytes(ts, kv, align=32):
    """ts: (name, ggml type name, ne list (ne[0] first), data)"""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kv))
    for k, (t, v) in kv.items():
        out += gguf_str(k) + struct.pack("<I", t)
        if t == 8:
            out += gguf_str(v)
        else:
            out += struct.pack({2: "<H", 4: "<I", 5: "<i", 10: "<Q"}[t], v)
    off = 0
    info = b""
    for name, ty, ne, data in ts:
        info += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        info += struct.pack("<IQ", GGML[ty][0], off)
        off += len(data) + (-len(data) % align)
    out += info
    out += b"\0" * (-len(out) % align)
    for _, _, _, data in ts:
        out += data + b"\0" * (-len(data) % align)
    return out


def gguf_tensors(n, seed):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        ty = ["F32", "F16", "Q8_0"][i % 3]
        _, blk, bpb = GGML[ty]
        ne = [32 * rnd.randint(1, 8), rnd.randint(1, 20)]
        nb = ne[0] // blk * bpb * ne[1]
        out.append(("blk.%d.w%d" % (i // 4, i % 4), ty, ne, rnd.randbytes(nb)))
    return out


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def hf_sharded(d, n_shards=3, n=24, seed=1, index_name="model.safetensors.index.json", mutate=None):
    ts = tensors(n, seed)
    per = (n + n_shards - 1) // n_shards
    wm, total = {}, 0
    shards = []
    for k in range(n_shards):
        part = ts[k * per:(k + 1) * per]
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, n_shards)
        shards.append((fn, part))
        for t in part:
            wm[t[0]] = fn
            total += len(t[3])
    if mutate:
        mutate(shards, wm)
    for fn, part in shards:
        if part is not None:
            write(os.path.join(d, fn), st_bytes(part, {"format": "pt"}))
    idx = {"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}
    write(os.path.join(d, index_name), json.dumps(idx, indent=2).encode())
    return ts


def hf_stream(d, n_shards=4, layers=7, seed=5):
    """A decoder as save_pretrained shards it: embeddings, layers of four
    tensors (model.layers.{i}.*, some layers split across two shards), the
    final norm and head; the layer stream test's model."""
    rnd = random.Random(seed)
    ts = []

    def t(name, dt, shape):
        nb = ST_BYTES[dt]
        for x in shape:
            nb *= x
        ts.append((name, dt, shape, rnd.randbytes(nb)))
    t("model.embed_tokens.weight", "BF16", [97, 64])
    for i in range(layers):
        for part, shape in (("self_attn.q_proj.weight", [64, 64 + 8 * i]), ("mlp.up_proj.weight", [300, 64]),
                            ("input_layernorm.weight", [64]), ("mlp.down_proj.weight", [64, 300])):
            t("model.layers.%d.%s" % (i, part), "BF16" if i % 2 else "F32", shape)
    t("model.norm.weight", "BF16", [64])
    t("lm_head.weight", "BF16", [97, 64])
    per = (len(ts) + n_shards - 1) // n_shards
    wm, total = {}, 0
    for k in range(n_shards):
        part = ts[k * per:(k + 1) * per]
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, n_shards)
        for x in part:
            wm[x[0]] = fn
            total += len(x[3])
        write(os.path.join(d, fn), st_bytes(part, {"format": "pt"}))
    idx = {"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}
    write(os.path.join(d, "model.safetensors.index.json"), json.dumps(idx, indent=2).encode())
    return ts


def gguf_split(d, prefix="model", n_shards=3, n=12, seed=2, mutate=None):
    ts = gguf_tensors(n, seed)
    per = (n + n_shards - 1) // n_shards
    files = []
    for k in range(n_shards):
        part = ts[k * per:(k + 1) * per]
        kv = {}
        if k == 0:
            kv["general.architecture"] = (8, "llama")
        kv["split.no"] = (2, k)
        kv["split.count"] = (2, n_shards)
        kv["split.tensors.count"] = (5, n)
        files.append(["%s-%05d-of-%05d.gguf" % (prefix, k + 1, n_shards), part, kv])
    if mutate:
        mutate(files)
    for fn, part, kv in files:
        if part is not None:
            write(os.path.join(d, fn), gguf_bytes(part, kv))
    return ts


def drop_shard(shards, wm):
    shards[1] = (shards[1][0], None)


def extra_in_map(shards, wm):
    wm["model.ghost.weight"] = shards[0][0]


def missing_in_map(shards, wm):
    del wm[shards[2][1][0][0]]


def wrong_shard_in_map(shards, wm):
    wm[shards[0][1][0][0]] = shards[1][0]


def dup_across(shards, wm):
    shards[1][1].append(shards[0][1][0])


def gguf_drop(files):
    files[1][1] = None


def gguf_count(files):
    files[2][2]["split.count"] = (2, 4)


def gguf_dup(files):
    files[1][1] = files[1][1] + [files[0][1][0]]
    for f in files:
        f[2]["split.tensors.count"] = (5, 13)


def gguf_tcount(files):
    for f in files:
        f[2]["split.tensors.count"] = (5, 99)


def hf_cache(d):
    """The Hugging Face hub cache: snapshots/<rev>/<file> are relative
    symlinks into blobs/<sha256> (huggingface_hub's layout), and an absolute
    link to the snapshot directory beside it."""
    repo = os.path.join(d, "models--org--tiny")
    tmp = os.path.join(repo, ".tmp")
    ts = hf_sharded(tmp)
    snap = os.path.join(repo, "snapshots", "0123abcd")
    os.makedirs(snap, exist_ok=True)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    for fn in sorted(os.listdir(tmp)):
        data = open(os.path.join(tmp, fn), "rb").read()
        blob = hashlib.sha256(data).hexdigest()
        os.rename(os.path.join(tmp, fn), os.path.join(repo, "blobs", blob))
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, fn))
    os.rmdir(tmp)
    os.symlink("/" + os.path.relpath(snap, os.path.dirname(d.rstrip("/"))), os.path.join(d, "current"))
    return ts


LAYOUTS = {
    "hf-cache": hf_cache,
    "hf-sharded": lambda d: hf_sharded(d),
    "hf-stream": hf_stream,
    "hf-single": lambda d: [write(os.path.join(d, "model.safetensors"), st_bytes(t := tensors(9, 3), {"format": "pt"})), t][1],
    "gguf-split": lambda d: gguf_split(d),
    "bad-missing-shard": lambda d: hf_sharded(d, mutate=drop_shard),
    "bad-extra-in-map": lambda d: hf_sharded(d, mutate=extra_in_map),
    "bad-missing-in-map": lambda d: hf_sharded(d, mutate=missing_in_map),
    "bad-wrong-shard": lambda d: hf_sharded(d, mutate=wrong_shard_in_map),
    "bad-dup": lambda d: hf_sharded(d, mutate=dup_across),
    "bad-gguf-missing": lambda d: gguf_split(d, mutate=gguf_drop),
    "bad-gguf-count": lambda d: gguf_split(d, mutate=gguf_count),
    "bad-gguf-tcount": lambda d: gguf_split(d, mutate=gguf_tcount),
    "bad-gguf-dup": lambda d: gguf_split(d, mutate=gguf_dup),
}


def main(argv):
    if len(argv) != 3 or argv[2] not in LAYOUTS:
        print("usage: mkset.py DIR {%s}" % ",".join(LAYOUTS), file=sys.stderr)
        return 2
    ts = LAYOUTS[argv[2]](argv[1])
    for t in ts:
        print("%s\t%s" % (t[0], hashlib.sha256(t[-1]).hexdigest()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

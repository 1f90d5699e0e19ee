#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
# Seeds for fuzz_md: gen_corpus_md.py DIR. Each seed: a member-count byte,
# then the members (equal sizes), each with an md superblock laid out as
# md_p.h says (version 1 at sector 8 / 0 / the end, 0.90 in the last
# 64 KiB-aligned 64 KiB).
import os, struct, sys


def csum1(sb, length):
    s = sum(struct.unpack_from("<I", sb, i)[0] for i in range(0, length - length % 4, 4))
    if length % 4:
        s += struct.unpack_from("<H", sb, length - 2)[0]
    return ((s & 0xffffffff) + (s >> 32)) & 0xffffffff


def v1(size, minor, level, chunk_sectors, n, slot, doff, dsize, layout=0, feat=0):
    m = bytearray(size)
    sec = {2: 8, 1: 0, 0: ((size // 512 - 16) & ~7)}[minor]
    sb = bytearray(512)
    struct.pack_into("<III", sb, 0, 0xa92b4efc, 1, feat)
    sb[16:32] = bytes(range(16))
    struct.pack_into("<iIQII", sb, 72, level, layout, dsize, chunk_sectors, n)
    struct.pack_into("<QQQ", sb, 128, doff, dsize, sec)
    struct.pack_into("<I", sb, 160, slot)
    struct.pack_into("<Q", sb, 200, 3)
    struct.pack_into("<I", sb, 220, 4)
    for j in range(4):
        struct.pack_into("<H", sb, 256 + 2 * j, j if j < n else 0xffff)
    struct.pack_into("<I", sb, 216, csum1(sb, 256 + 8))
    m[sec * 512:sec * 512 + 512] = sb
    return m


def v0(size, level, chunk, n, slot):
    m = bytearray(size)
    sec = ((size // 512) & ~127) - 128
    w = [0] * 1024
    w[0], w[1], w[2], w[5], w[7], w[10], w[13] = 0xa92b4efc, 0, 90, 0x1234, level, n, 0x5678
    w[65] = chunk
    w[992 + 3], w[992 + 4] = slot, 6
    w[38] = 0
    s = sum(w)
    w[38] = ((s & 0xffffffff) + (s >> 32)) & 0xffffffff
    m[sec * 512:sec * 512 + 4096] = struct.pack("<1024I", *w)
    return m


def seed(name, members):
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(bytes([len(members) - 1]))
        for m in members:
            f.write(m)


os.makedirs(sys.argv[1], exist_ok=True)
S = 24 * 1024
seed("r0-v12", [v1(S, 2, 0, 8, 2, k, 16, 32) for k in range(2)])
seed("r0-v11-3", [v1(S, 1, 0, 8, 3, k, 8, 40) for k in range(3)])
seed("linear-v10", [v1(S, 0, -1, 0, 2, k, 0, 24 + 4 * k) for k in range(2)])
seed("r0-zones-alt", [v1(S, 2, 0, 8, 3, k, 16, 8 * (1 + 2 * (k > 0)), 2, 0x1000) for k in range(3)])
seed("r0-zones-nolayout", [v1(S, 2, 0, 8, 3, k, 16, 8 * (1 + 2 * (k > 0))) for k in range(3)])
seed("r0-zones-orig", [v1(S, 2, 0, 8, 3, k, 16, 8 * (1 + 2 * (k > 0)), 1, 0x1000) for k in range(3)])
seed("r0-v090", [v0(128 * 1024, 0, 4096, 2, k) for k in range(2)])

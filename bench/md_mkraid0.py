#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
# Split an array image into the N member images of an md RAID0 with metadata
# 1.2 (superblock at 4 KiB, data from 1 MiB), as mdadm --create --level=0
# --metadata=1.2 --chunk=CHUNK_KIB lays them out (md_p.h mdp_superblock_1):
#   md_mkraid0.py ARRAY_IMAGE N CHUNK_KIB PREFIX   -> PREFIX0.img .. PREFIX{N-1}.img
# The array image size must be a multiple of N chunks.
import os, struct, sys, uuid

img, n, chunk_kib, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
C = chunk_kib * 1024
size = os.path.getsize(img)
rows = size // (C * n)
if rows * C * n != size:
    size = rows * C * n
    print("array image truncated to %d bytes (whole stripes)" % size)
DOFF = 2048  # sectors
set_uuid = uuid.UUID("6770756e-766d-6500-6d64-000000000001").bytes
outs = [open("%s%d.img" % (prefix, k), "wb") for k in range(n)]
for k, f in enumerate(outs):
    sb = bytearray(4096)
    struct.pack_into("<III", sb, 0, 0xa92b4efc, 1, 0)
    sb[16:32] = set_uuid
    sb[32:32 + 9] = b"bench:md0"
    struct.pack_into("<iIQII", sb, 72, 0, 0, rows * C // 512, C // 512, n)
    struct.pack_into("<QQQ", sb, 128, DOFF, rows * C // 512, 8)
    struct.pack_into("<I", sb, 160, k)
    sb[168:184] = uuid.uuid4().bytes
    struct.pack_into("<QQQ", sb, 192, 0, 1, 0xffffffffffffffff)
    struct.pack_into("<I", sb, 220, n)
    for j in range(n):
        struct.pack_into("<H", sb, 256 + 2 * j, j)
    length = 256 + 2 * n
    s = sum(struct.unpack_from("<I", sb, i)[0] for i in range(0, length - length % 4, 4))
    if length % 4:
        s += struct.unpack_from("<H", sb, length - 2)[0]
    struct.pack_into("<I", sb, 216, ((s & 0xffffffff) + (s >> 32)) & 0xffffffff)
    f.write(bytes(4096 * 2))  # sectors 0-7 empty, superblock at sector 8
    f.seek(4096)
    f.write(sb)
    f.seek(DOFF * 512)
for f in outs:
    f.flush()
# chunk r*n+k of the array is chunk r of member k; copied in the kernel
# (copy_file_range) when it can, by read/write when it cannot
with open(img, "rb") as src:
    fds = [f.fileno() for f in outs]
    for r in range(rows):
        for k in range(n):
            so, do, left = (r * n + k) * C, DOFF * 512 + r * C, C
            while left:
                try:
                    w = os.copy_file_range(src.fileno(), fds[k], left, so, do)
                except OSError:
                    w = os.pwrite(fds[k], os.pread(src.fileno(), left, so), do)
                if w <= 0:
                    raise SystemExit("%s: short copy at byte %d" % (img, so))
                so, do, left = so + w, do + w, left - w
for f in outs:
    f.truncate(DOFF * 512 + rows * C + 1024 * 1024)  # room after the data, as mdadm leaves
    f.close()
print("%d members, %d rows of %d KiB chunks" % (n, rows, chunk_kib))

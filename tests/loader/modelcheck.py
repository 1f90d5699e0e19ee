#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Independent reader of safetensors and GGUF files, for the loader's tests
and fixture scripts (standard library only; no code shared with the C
parsers or with gpunvme-mkmodel).

  modelcheck.py FILE [--manifest M] [--data SEED MODE] [--print]

Checks the file against the format rules as the reference readers apply them:
  safetensors: 8-byte little-endian header length, a JSON object (trailing
    spaces allowed) whose tensors have known dtypes, shape products that
    match data_offsets, and data ranges that tile the data section exactly
    up to the end of the file (no hole, no overlap);
  GGUF: magic, version 2/3, every metadata value type, tensor infos with
    known ggml types, ne[0] a multiple of the block size, offsets that are
    consecutive and padded to general.alignment, data section aligned, file
    long enough for the padded data.
--manifest M compares with gpunvme-mkmodel's manifest (name, dtype, shape,
  absolute offset, bytes per line, in header order).
--data SEED random|compressible regenerates sampled bytes of every tensor
  from mkmodel's documented generator and compares.
--print writes the reader's own manifest to stdout (same format).
Exit 0 when everything holds, 1 with one line per problem otherwise.
"""
import json
import struct
import sys

ST_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
             "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
             "F64": 8, "I64": 8, "U64": 8}
# ggml type id -> (name, elements per block, bytes per block); ggml.h / ggml-common.h
GGML = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
        6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
        10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
        13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
        24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
        28: ("F64", 1, 8), 30: ("BF16", 1, 2)}

M64 = (1 << 64) - 1


class Bad(Exception):
    pass


def prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def read_safetensors(data):
    if len(data) < 8:
        raise Bad("shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", data, 0)
    if 8 + n > len(data):
        raise Bad("header length %d past the end of the file" % n)
    raw = data[8:8 + n]
    if raw[:1] != b"{":
        raise Bad("header does not start with '{'")
    if raw.rstrip(b" ") != raw.rstrip():
        raise Bad("header padded with something other than spaces")
    hdr = json.loads(raw.decode("utf-8"))
    if not isinstance(hdr, dict):
        raise Bad("header is not a JSON object")
    base = 8 + n
    tensors = []
    for name, v in hdr.items():
        if name == "__metadata__":
            if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
                raise Bad("__metadata__ is not a string map")
            continue
        dt, shape, (a, b) = v["dtype"], v["shape"], v["data_offsets"]
        if dt not in ST_DTYPES:
            raise Bad("%s: unknown dtype %s" % (name, dt))
        if b < a or (b - a) != prod(shape) * ST_DTYPES[dt]:
            raise Bad("%s: data_offsets [%d,%d] do not match %s%s" % (name, a, b, dt, shape))
        tensors.append((name, dt, list(shape), base + a, b - a))
    # the data ranges must tile [base, end of file)
    pos = base
    for t in sorted(tensors, key=lambda t: (t[3], t[4])):
        if t[3] != pos:
            raise Bad("%s: data at %d, expected %d (hole or overlap)" % (t[0], t[3], pos))
        pos += t[4]
    if pos != len(data):
        raise Bad("data ends at %d, file at %d" % (pos, len(data)))
    return tensors, {"data_offset": base}


class R:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, n):
        if self.o + n > len(self.d):
            raise Bad("truncated at offset %d" % self.o)
        b = self.d[self.o:self.o + n]
        self.o += n
        return b

    def u(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def s(self):
        return self.take(self.u("Q")).decode("utf-8")


GV = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_value(r, t, depth=0):
    if t in GV:
        return r.u(GV[t])
    if t == 8:
        return r.s()
    if t == 9:
        if depth > 4:
            raise Bad("arrays nested too deep")
        et, n = r.u("I"), r.u("Q")
        return [gguf_value(r, et, depth + 1) for _ in range(n)]
    raise Bad("unknown metadata value type %d" % t)


def read_gguf(data):
    r = R(data)
    if r.take(4) != b"GGUF":
        raise Bad("no GGUF magic")
    ver = r.u("I")
    if ver not in (2, 3):
        raise Bad("GGUF version %d" % ver)
    nt, nkv = r.u("Q"), r.u("Q")
    kv = {}
    for _ in range(nkv):
        k = r.s()
        kv[k] = gguf_value(r, r.u("I"))
    align = kv.get("general.alignment", 32)
    if align <= 0 or align & (align - 1):
        raise Bad("alignment %d is not a power of two" % align)
    infos = []
    for _ in range(nt):
        name = r.s()
        nd = r.u("I")
        ne = [r.u("Q") for _ in range(nd)]
        ty = r.u("I")
        off = r.u("Q")
        if ty not in GGML:
            raise Bad("%s: unknown ggml type %d" % (name, ty))
        tn, blck, size = GGML[ty]
        if nd == 0 or ne[0] % blck:
            raise Bad("%s: ne[0] not a multiple of the %s block" % (name, tn))
        if len(name.encode()) >= 64:
            raise Bad("%s: name longer than 63 bytes" % name)
        infos.append((name, tn, ne, off, prod(ne) // blck * size))
    base = (r.o + align - 1) // align * align
    if any(data[r.o:base]):
        raise Bad("non-zero padding before the data section")
    expect = 0
    tensors = []
    for name, tn, ne, off, nbytes in infos:
        if off != expect:
            raise Bad("%s: offset %d, expected %d" % (name, off, expect))
        expect += (nbytes + align - 1) // align * align
        tensors.append((name, tn, ne, base + off, nbytes))
    if base + expect > len(data):
        raise Bad("data section needs %d bytes, file has %d" % (base + expect, len(data)))
    return tensors, {"data_offset": base, "alignment": align, "kv": kv, "version": ver}


def read_model(data):
    if data[:4] == b"GGUF":
        return "gguf", read_gguf(data)
    return "safetensors", read_safetensors(data)


def mix64(x):
    x = (x + 0x9e3779b97f4a7c15) & M64
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def word_at(seed, k):
    return mix64((seed * 0xd1342543de82ef95 + k) & M64)


def gen_byte(seed, mode, o):
    if mode == "random":
        return (word_at(seed, o >> 3) >> (8 * (o & 7))) & 255
    w = o & 511
    if w < 8:
        return (word_at(seed ^ 0x5ec7042, o >> 9) >> (8 * w)) & 255
    return (seed + o * 7) & 255


def shape_str(s):
    return ",".join(str(x) for x in s)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path, manifest, seed, mode, do_print = argv[1], None, None, None, False
    i = 2
    while i < len(argv):
        if argv[i] == "--manifest":
            manifest, i = argv[i + 1], i + 2
        elif argv[i] == "--data":
            seed, mode, i = int(argv[i + 1], 0), argv[i + 2], i + 3
        elif argv[i] == "--print":
            do_print, i = True, i + 1
        else:
            print("modelcheck: unknown argument %s" % argv[i], file=sys.stderr)
            return 2
    data = open(path, "rb").read()
    problems = []
    try:
        fmt, (tensors, info) = read_model(data)
    except (Bad, ValueError, KeyError, TypeError, UnicodeDecodeError, struct.error) as e:
        print("modelcheck: %s: %s" % (path, e))
        return 1
    if manifest:
        want = [l.rstrip("\n").split("\t") for l in open(manifest, encoding="utf-8") if l.strip()]
        got = [[t[0], t[1], shape_str(t[2]), str(t[3]), str(t[4])] for t in tensors]
        if len(want) != len(got):
            problems.append("%d tensors, manifest has %d" % (len(got), len(want)))
        for w, g in zip(want, got):
            if w != g:
                problems.append("reader %s != manifest %s" % (g, w))
                if len(problems) > 10:
                    break
    if seed is not None:
        for t in tensors:
            off, n = t[3], t[4]
            # both ends and a few points inside, each tensor
            for o in sorted({off, off + n // 3, off + n // 2, off + n - 1} if n else set()):
                for k in range(o, min(o + 24, off + n)):
                    if data[k] != gen_byte(seed, mode, k):
                        problems.append("%s: byte at %d is %d, generator says %d" %
                                        (t[0], k, data[k], gen_byte(seed, mode, k)))
                        break
    if do_print:
        for t in tensors:
            sys.stdout.write("%s\t%s\t%s\t%d\t%d\n" % (t[0], t[1], shape_str(t[2]), t[3], t[4]))
    for p in problems[:20]:
        print("modelcheck: %s: %s" % (path, p))
    if not problems and not do_print:
        print("modelcheck: %s: %s, %d tensors, data at %d, %d bytes: ok" %
              (path, fmt, len(tensors), info["data_offset"], len(data)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

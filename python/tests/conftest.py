# SPDX-License-Identifier: BSD-2-Clause
"""Test models written here from the format specs (not with the code under
test), put into ext4 images with mkfs.ext4 -d, loaded through emu:IMAGE.

Every writer returns the exact bytes of each tensor, so a loaded tensor is
compared byte for byte with what the file holds."""
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

# ---- safetensors (github.com/huggingface/safetensors, "Format") ---------------

# dtype -> bits per element
ST_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
           "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16,
           "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64}


def st_bytes(tensors, metadata=None, align=8):
    """tensors: [(name, dtype, shape, data bytes)] -> (file bytes, {name: data})"""
    hdr = {}
    if metadata is not None:
        hdr["__metadata__"] = metadata
    off = 0
    blobs = []
    for name, dtype, shape, data in tensors:
        n = 1
        for d in shape:
            n *= d
        assert len(data) * 8 == n * ST_BITS[dtype], name
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(hdr).encode()
    h += b" " * ((-(8 + len(h))) % align)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs), {t[0]: t[3] for t in tensors}


def rand_bytes(rng, n):
    return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()


# ---- GGUF (ggml docs/gguf.md) -----------------------------------------------------

# ggml type -> (id, block size, type size)
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144),
        "Q6_K": (14, 256, 210), "I8": (24, 1, 1), "I32": (26, 1, 4), "BF16": (30, 1, 2)}


def _gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_bytes(tensors, kv=None, align=32):
    """tensors: [(name, ggml type, ne (ne[0] first), data)] -> (file, {name: data})"""
    kv = dict(kv or {})
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kv) + 1)]
    out.append(_gstr("general.alignment") + struct.pack("<II", 4, align))  # UINT32
    for k, v in kv.items():
        if isinstance(v, str):
            out.append(_gstr(k) + struct.pack("<I", 8) + _gstr(v))  # STRING
        else:  # (gguf value type, struct format, value): UINT16 = 2, INT32 = 5
            out.append(_gstr(k) + struct.pack("<I", v[0]) + struct.pack("<" + v[1], v[2]))
    off = 0
    datas = []
    for name, ty, ne, data in tensors:
        tid, blck, size = GGML[ty]
        nelem = 1
        for d in ne:
            nelem *= d
        assert ne[0] % blck == 0 and len(data) == nelem // blck * size, name
        out.append(_gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
                   + struct.pack("<IQ", tid, off))
        pad = (-len(data)) % align
        datas.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"".join(out)
    head += b"\0" * ((-len(head)) % align)
    return head + b"".join(datas), {t[0]: t[3] for t in tensors}


# ---- images ---------------------------------------------------------------------------

def make_image(tmp_path, files, name="img.ext4"):
    """files: {path in the fs: bytes} -> emu: URI of an ext4 image holding them"""
    if not shutil.which("mkfs.ext4"):
        pytest.skip("mkfs.ext4 (e2fsprogs) is not installed")
    root = tmp_path / (name + ".root")
    total = 0
    for p, data in files.items():
        f = root / p.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):  # a symlink target
            os.symlink(data, f)
            continue
        f.write_bytes(data)
        total += len(data)
    img = tmp_path / name
    mb = max(8, (total * 2) // (1 << 20) + 8)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-d", str(root), str(img), "%dM" % mb],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return "emu:" + str(img)


def gpt_disk(tmp_path, fs_img, parts, first=2048):
    """a disk image with a GPT made by sfdisk; fs_img copied into each
    partition index listed in `parts` (1-based), the others left empty;
    the first partition starts at sector `first` (512 B)"""
    if not shutil.which("sfdisk"):
        pytest.skip("sfdisk (util-linux fdisk) is not installed")
    size = os.path.getsize(fs_img)
    sectors = size // 512
    disk = tmp_path / "disk.img"
    starts = [first + k * (sectors + 2048) for k in range(2)]
    with open(disk, "wb") as f:
        f.truncate((starts[-1] + sectors + 2048) * 512)
    table = "label: gpt\n" + "".join("start=%d, size=%d\n" % (s, sectors) for s in starts)
    subprocess.run(["sfdisk", "-q", str(disk)], input=table.encode(), check=True, stdout=subprocess.DEVNULL)
    data = open(fs_img, "rb").read()
    with open(disk, "r+b") as f:
        for p in parts:
            f.seek(starts[p - 1] * 512)
            f.write(data)
    return "emu:" + str(disk), starts


NP_OF = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16, "F16": np.float16,
         "I32": np.int32, "U32": np.uint32, "F32": np.float32, "F64": np.float64, "I64": np.int64,
         "U64": np.uint64, "C64": np.complex64, "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
         "F8_E8M0": np.uint8, "F8_E4M3FNUZ": np.uint8, "F8_E5M2FNUZ": np.uint8}


def every_dtype_model(rng):
    """one tensor per safetensors dtype, shape (4, 6), plus odd cases"""
    ts = []
    for dt, bits in ST_BITS.items():
        n = 24 * bits // 8
        data = rand_bytes(rng, n)
        if dt == "BOOL":
            data = bytes(b & 1 for b in data)
        ts.append(("dtype." + dt, dt, (4, 6), data))
    ts.append(("scalar", "F32", (), struct.pack("<f", 1.5)))
    ts.append(("empty", "F16", (0, 3), b""))
    ts.append(("weird*,[name]", "I32", (2,), struct.pack("<ii", 7, -7)))
    return ts


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """one image with every model the tests read; returns a namespace"""
    tmp = tmp_path_factory.mktemp("models")
    rng = np.random.default_rng(13)
    st, st_data = st_bytes(every_dtype_model(rng), metadata={"format": "pt", "who": "test"})
    # a bigger one: several runs, rows to slice
    big_t = [("layer.%d.w" % i, "F32", (64, 1024), rand_bytes(rng, 64 * 1024 * 4)) for i in range(6)]
    big, big_data = st_bytes(big_t)
    gg_t = [
        ("tok.weight", "F32", (8, 3), rand_bytes(rng, 8 * 3 * 4)),
        ("half", "F16", (16, 2, 2), rand_bytes(rng, 64 * 2)),
        ("bf", "BF16", (4,), rand_bytes(rng, 8)),
        ("q4", "Q4_0", (64, 3), rand_bytes(rng, 2 * 18 * 3)),
        ("q8", "Q8_0", (32, 2, 2), rand_bytes(rng, 34 * 4)),
        ("qk", "Q4_K", (512, 2), rand_bytes(rng, 2 * 144 * 2)),
        ("q6", "Q6_K", (256,), rand_bytes(rng, 210)),
        ("i8", "I8", (5,), rand_bytes(rng, 5)),
    ]
    gg, gg_data = gguf_bytes(gg_t, kv={"general.name": "t"})
    # Hugging Face directory: an index over two shards
    s1, d1 = st_bytes([("a.w", "F32", (3, 5), rand_bytes(rng, 60)), ("a.b", "F16", (5,), rand_bytes(rng, 10))])
    s2, d2 = st_bytes([("b.w", "BF16", (2, 8), rand_bytes(rng, 32))])
    index = json.dumps({"metadata": {"total_size": 102},
                        "weight_map": {"a.w": "model-00001-of-00002.safetensors",
                                       "a.b": "model-00001-of-00002.safetensors",
                                       "b.w": "model-00002-of-00002.safetensors"}}).encode()
    # llama.cpp gguf-split: split.no (u16), split.count (u16), split.tensors.count (i32)
    sp_t = [("s.%d" % i, "F32", (4, 2), rand_bytes(rng, 32)) for i in range(3)]
    sp_kv = lambda no: {"split.no": (2, "H", no), "split.count": (2, "H", 2), "split.tensors.count": (5, "i", 3)}
    sp1, _ = gguf_bytes(sp_t[:2], kv=sp_kv(0))
    sp2, _ = gguf_bytes(sp_t[2:], kv=sp_kv(1))
    single, single_data = st_bytes([("x", "I64", (2, 2), rand_bytes(rng, 32))])
    files = {
        "/m/every.safetensors": st,
        "/m/big.safetensors": big,
        "/m/q.gguf": gg,
        "/hf/model-00001-of-00002.safetensors": s1,
        "/hf/model-00002-of-00002.safetensors": s2,
        "/hf/model.safetensors.index.json": index,
        "/hf1/model.safetensors": single,
        "/split/m-00001-of-00002.gguf": sp1,
        "/split/m-00002-of-00002.gguf": sp2,
        "/hf1/config.json": b"{}",
        "/bad/notamodel.safetensors": b"hello, this is not a model file at all" * 10,
        "/bad/trunc.safetensors": big[:len(big) // 2],
        "/bad/torch/pytorch_model.bin": b"PK\x03\x04" + b"\0" * 100,
        "/bad/empty/.keep": b"",
        "/bad/empty.safetensors": b"",
        # the Hugging Face hub cache: snapshot files are relative links into
        # blobs/; an absolute link to the snapshot; a link loop; a dangling link
        "/hub/models--o--m/blobs/aaa": s1,
        "/hub/models--o--m/blobs/bbb": s2,
        "/hub/models--o--m/blobs/ccc": index,
        "/hub/models--o--m/snapshots/rev/model-00001-of-00002.safetensors": "../../blobs/aaa",
        "/hub/models--o--m/snapshots/rev/model-00002-of-00002.safetensors": "../../blobs/bbb",
        "/hub/models--o--m/snapshots/rev/model.safetensors.index.json": "../../blobs/ccc",
        "/latest": "/hub/models--o--m/snapshots/rev",
        "/loop/a": "b",
        "/loop/b": "a",
        "/loop/dangling": "../nowhere/model.safetensors",
    }
    uri = make_image(tmp, files)

    class M:
        pass
    m = M()
    m.uri = uri
    m.img = uri[4:]
    m.st_data, m.st_tensors = st_data, every_dtype_model(np.random.default_rng(13))
    m.big_data, m.gg_data, m.gg_t = big_data, gg_data, gg_t
    m.hf_data = dict(d1, **d2)
    m.single_data = single_data
    m.split_t = sp_t
    return m


def tiny_llama_cfg(transformers):
    """the tiny Llama the stream_decoder tests save and stream (4 layers)"""
    return transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                    tie_word_embeddings=False)


# ---- the combination matrix (test_matrix.py) ----------------------------------------

# (entry, volume, tier) -> ("passed" | "refused" | "FAILED", reason or error)
MATRIX = {}


def pytest_terminal_summary(terminalreporter):
    """the matrix as one grid per tier: pass, FAIL, or a refusal's number"""
    if not MATRIX:
        return
    tr = terminalreporter
    counts = {}
    for r in MATRIX.values():
        counts[r[0]] = counts.get(r[0], 0) + 1
    tr.write_sep("=", "combination matrix (issue 31): %d cells: %s" % (
        len(MATRIX), ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items()))))
    entries, volumes, tiers = [], [], []
    for e, v, t in MATRIX:
        for lst, x in ((entries, e), (volumes, v), (tiers, t)):
            if x not in lst:
                lst.append(x)
    reasons = []
    w0 = max(len(e) for e in entries)
    ws = [max(len(v), 8) for v in volumes]
    for t in tiers:
        tr.write_line("")
        tr.write_line("tier %-*s  %s" % (w0 - 5, t, "  ".join(v.ljust(w) for v, w in zip(volumes, ws))))
        for e in entries:
            row = []
            for v, w in zip(volumes, ws):
                res, why = MATRIX.get((e, v, t), ("-", ""))
                if res == "refused":
                    if why not in reasons:
                        reasons.append(why)
                    txt = "ref %d" % (reasons.index(why) + 1)
                else:
                    txt = {"passed": "pass", "FAILED": "FAIL", "xfail": "XFAIL"}.get(res, res)
                row.append(txt.ljust(w))
            tr.write_line("%-*s  %s" % (w0, e, "  ".join(row)))
    tr.write_line("")
    tr.write_line("refused, with the reason (each checked against the expected one):")
    for k, why in enumerate(reasons):
        n = sum(1 for r in MATRIX.values() if r == ("refused", why))
        tr.write_line("  ref %d (%d cells): %s" % (k + 1, n, why))
    for res, title in (("xfail", "failing through a known bug (KNOWN_BUGS):"), ("FAILED", "failed:")):
        bad = [(k, why) for k, (r, why) in MATRIX.items() if r == res]
        if bad:
            tr.write_line(title)
            for k, why in bad:
                tr.write_line("  %s | %s | %s: %s" % (k + (why,)))
